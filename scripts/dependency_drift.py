"""What scripts/test-latest reports: the installed versions that differ from a lock, and which of those
packages each failed test went through.

    python scripts/dependency_drift.py versions LOCK
    python scripts/dependency_drift.py failures LOCK JUNIT_XML
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from importlib.metadata import distributions, packages_distributions
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(lock: Path) -> dict[str, set[str]]:
    """Every version the lock names per package (a universal lock may name two, under markers)."""
    pins: dict[str, set[str]] = defaultdict(set)
    for name, version in re.findall(r"^([A-Za-z0-9._-]+)==([^\s\\;]+)", lock.read_text(encoding="utf-8"), re.M):
        pins[canonical(name)].add(version)
    return pins


def drift(lock: Path) -> dict[str, tuple[str, str]]:
    """Installed packages whose version is not the lock's: name -> (locked, installed); 'not locked'."""
    pins = locked_versions(lock)
    changed = {}
    for dist in distributions():
        name = canonical(dist.metadata["Name"] or "")
        if not name or name in ("pytest-orbench", "pip"):
            continue
        locked = pins.get(name)
        if locked is None:
            changed[name] = ("not locked", dist.version)
        elif dist.version not in locked:
            changed[name] = (" / ".join(sorted(locked)), dist.version)
    return dict(sorted(changed.items()))


def print_versions(lock: Path) -> None:
    changed = drift(lock)
    if not changed:
        print(f"dependency drift: every installed version is the one {lock} names")
        return
    print(f"dependency drift: {len(changed)} installed versions differ from {lock}:")
    for name, (locked, installed) in changed.items():
        print(f"  {name:28} {locked:>18} -> {installed}")


def failures(junit: Path) -> list[tuple[str, str]]:
    """(test id, failure text) of each failed or erroring test case."""
    if not junit.is_file():
        return []
    found = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        for outcome in case:
            if outcome.tag in ("failure", "error"):
                test = f"{case.get('classname', '')}::{case.get('name', '')}"
                found.append((test, f"{outcome.get('message', '')}\n{outcome.text or ''}"))
    return found


def first_line(text: str) -> str:
    """The error itself: the last 'E   ' line of pytest's traceback, else the message."""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    line = errors[-1] if errors else text.strip().splitlines()[0] if text.strip() else "(no message)"
    return line[:200]


def print_failures(lock: Path, junit: Path) -> None:
    failed = failures(junit)
    if not failed:
        print("dependency drift: no test failed" if junit.is_file() else "dependency drift: no test report")
        return
    changed = drift(lock)
    owners = packages_distributions()  # top-level module -> distributions
    by_package: dict[str, list[str]] = defaultdict(list)
    for test, text in failed:
        modules = set(re.findall(r"site-packages/([A-Za-z0-9_]+)", text))
        # pytest-orbench's own warning filter names them too: "... in pydantic._internal ..."
        modules |= {m.split(".")[0] for m in re.findall(r"\b([a-z_][a-z0-9_]*)\.[a-z_]+\b", text) if m in owners}
        through = sorted({canonical(dist) for module in modules for dist in owners.get(module, [])} & changed.keys())
        key = ", ".join(f"{name} {changed[name][0]} -> {changed[name][1]}" for name in through) or \
            "no changed package in its traceback"
        by_package[key].append(f"{test}: {first_line(text)}")
    print(f"dependency drift: {len(failed)} tests failed; by the changed packages their tracebacks went through:")
    for key, tests in sorted(by_package.items(), key=lambda item: -len(item[1])):
        print(f"  {key} ({len(tests)}):")
        for line in tests[:10]:
            print(f"    {line}")
        if len(tests) > 10:
            print(f"    ... and {len(tests) - 10} more")


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "versions":
        print_versions(Path(argv[1]))
        return 0
    if len(argv) >= 3 and argv[0] == "failures":
        print_failures(Path(argv[1]), Path(argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
