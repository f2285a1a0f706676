"""The package's shape, as docs/ARCHITECTURE.md draws it: wings that import only downwards, no cycles,
pytest and litellm each behind their one wing, and no module too long to read whole."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_orbench"

# Lowest first. A module imports from its own wing or from lower ones; fetch and analysis stand side by side
# and import neither each other. `pytest_orbench` itself (its __init__: the version) is below every wing.
FLOORS: dict[str, int] = {"core": 1, "calls": 2, "judging": 3, "fetch": 4, "analysis": 4, "render": 5, "run": 6,
                          "tools": 7, "plugin": 8}
MAX_LINES = 400
# The only places that import these, by design (ARCHITECTURE.md): pytest in the pytest run's wing and the
# hooks module; litellm in the wing that makes calls (lazily, once).
ONLY_IN = {"pytest": ("run", "plugin"), "_pytest": ("run", "plugin"), "litellm": ("calls",)}


def modules() -> dict[str, Path]:
    """Dotted name (without the package) -> file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def wing(name: str) -> str:
    return name.split(".")[0] if name else ""


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """The package modules `name` imports, anywhere in the file (TYPE_CHECKING blocks and functions too),
    with their line numbers; `from pytest_orbench.x import y` names module x.y when y is a module."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: resolve against this module's package
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join([*base, *([module] if module else [])])
                full = f"pytest_orbench.{module}" if module else "pytest_orbench"
            else:
                full = module
            if full != "pytest_orbench" and not full.startswith("pytest_orbench."):
                continue
            inner = full.removeprefix("pytest_orbench").lstrip(".")
            for alias in node.names:
                sub = f"{inner}.{alias.name}" if inner else alias.name
                targets.append(sub if sub in known else inner)
        elif isinstance(node, ast.Import):
            targets = [a.name.removeprefix("pytest_orbench").lstrip(".") for a in node.names
                       if a.name == "pytest_orbench" or a.name.startswith("pytest_orbench.")]
        found.extend((t, node.lineno) for t in targets)
    return found


def third_party(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_every_module_stands_in_a_wing() -> None:
    loose = [name for name in modules() if name and wing(name) not in FLOORS]
    assert not loose, f"modules outside the wings (add them to a wing, or the wing to FLOORS and ARCHITECTURE.md): {loose}"


def test_wings_import_only_downwards() -> None:
    known = modules()
    upward = []
    for name, path in known.items():
        if not name:
            continue
        here = FLOORS[wing(name)]
        for target, line in imports(name, path, known):
            if not target or wing(target) == wing(name):
                continue
            there = FLOORS[wing(target)]
            if there > here or (there == here and wing(target) != wing(name)):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports pytest_orbench.{target}")
    assert not upward, "imports that point up (or sideways between fetch and analysis):\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    known = modules()
    graph = {name: {t for t, _ in imports(name, path, known) if t in known and t != name}
             for name, path in known.items() if name}
    for name in graph:  # a package's __init__ is imported with each of its modules: not an edge of its own
        graph[name] = {t for t in graph[name] if t}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*trail[trail.index(target):], target]) if target in trail else target)
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("library", sorted(ONLY_IN))
def test_heavy_libraries_stay_in_their_wing(library: str) -> None:
    outside = [str(path.relative_to(PACKAGE.parent)) for name, path in modules().items()
               if name and library in third_party(path) and wing(name) not in ONLY_IN[library]]
    assert not outside, f"{library} imported outside {ONLY_IN[library]}: {outside}"


def test_no_module_is_too_long_to_read_whole() -> None:
    long = {str(path.relative_to(PACKAGE.parent)): n for path in modules().values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"


def test_the_checks_above_can_fail(tmp_path: Path) -> None:
    """The import reader sees what the checks rely on: imports in functions, under TYPE_CHECKING, and
    `from pytest_orbench.wing import module`."""
    source = ("from typing import TYPE_CHECKING\nfrom pytest_orbench.run import settings\n"
              "if TYPE_CHECKING:\n    from pytest_orbench.tools.cli import main\n"
              "def f():\n    import pytest_orbench.render.chart\n")
    path = tmp_path / "probe.py"
    path.write_text(source)
    known = {"run.settings": path, "tools.cli": path, "render.chart": path}
    assert sorted(t for t, _ in imports("core.probe", path, known)) == ["render.chart", "run.settings", "tools.cli"]


def test_architecture_page_names_every_module_and_no_other() -> None:
    """docs/ARCHITECTURE.md's module tables match the package: each module is named with its wing
    (`run/settings.py`), and each name there is a module that exists."""
    page = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    # (a wing's __init__.py is its docstring alone, unless code lives there: tools/cli/__init__.py's main)
    files = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
             if path.name != "__init__.py" or (path.parent != PACKAGE and len(path.read_text().splitlines()) > 3)}
    named = set(re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", page))
    named = {name.removeprefix("pytest_orbench/") for name in named}
    ours = {name for name in named if name.split("/")[0] in FLOORS or name == "plugin.py"}
    assert not files - ours, f"modules ARCHITECTURE.md does not name: {sorted(files - ours)}"
    assert not ours - files, f"ARCHITECTURE.md names modules that do not exist: {sorted(ours - files)}"
