"""What a Python will see once it starts: refuse a known-compromised release before it can run with a key.

`python -S -P path/to/action/site_scan.py` (the run's environment, at the install step) or
`python -I -S path/to/action/site_scan.py --runner` (setup-python's interpreter: a warning only).

A `.pth` file in a site-packages folder is executed by `site` at every start of Python, before any
code of ours: litellm 1.82.8's `litellm_init.pth` ran its credential stealer so, litellm imported or not,
while the plugin's own version check read the clean litellm of the virtual environment. So this runs
without `site` (-S: no `.pth` runs, no sitecustomize) and works out, as `site.main()` would, every folder
that Python's path will hold: the virtual environment's site-packages, the base interpreter's and the user
site when the environment includes them, the folders the `.pth` files there add, and PYTHONPATH. A
release of `dependencies.COMPROMISED` installed in any of them (its dist-info / egg-info metadata), or a
startup file such a release installs, stops the install step before pip (or anything else) starts that
Python. Standard library only.
"""

from __future__ import annotations

import os
import re
import site
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from action.settings import ActionSettingsError, _bool  # noqa: E402
from pytest_orbench.core.dependencies import COMPROMISED, Incident, exclusions  # noqa: E402
from pytest_orbench.render.markdown_escape import md_code  # noqa: E402

_INFO = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+?)(?:-py\d[^-]*)?\.(?:dist-info|egg-info|egg)$", re.IGNORECASE)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Finding:
    """A known-compromised release (or a startup file of one) that the interpreter will see."""

    incident: Incident
    path: Path


@dataclass(frozen=True)
class View:
    """The folders of an interpreter's path, as `site` will make it: `sites` are where `.pth` files run."""

    sites: tuple[Path, ...]
    path: tuple[Path, ...]


def _venv_config(executable: Path) -> tuple[Path, bool] | None:
    """(the environment's prefix, include-system-site-packages) when `executable` is a virtual environment's
    Python, as site.venv() reads pyvenv.cfg (beside the executable or one folder up; absent key: true)."""
    exe_dir = executable.parent
    config = next((d / "pyvenv.cfg" for d in (exe_dir, exe_dir.parent) if (d / "pyvenv.cfg").is_file()), None)
    if config is None:
        return None
    system = "true"
    for line in config.read_text(encoding="utf-8", errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "include-system-site-packages":
            system = value.strip().lower()
    return exe_dir.parent, system == "true"


def _pth_folders(site_dir: Path) -> list[Path]:
    """The folders a site dir's `.pth` files add to the path (read, never executed: import lines are skipped)."""
    added = []
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth") and not n.startswith("."))
    except OSError:
        return []
    for name in names:
        try:
            lines = (site_dir / name).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if not line.strip() or line.startswith("#") or line.startswith(("import ", "import\t")):
                continue
            folder = site_dir / line.rstrip()
            if folder.is_dir():
                added.append(folder)
    return added


def user_site(environ: Mapping[str, str]) -> Path:
    """The user site-packages (PYTHONUSERBASE, else ~/.local or the platform's), as site.getusersitepackages()."""
    base = environ.get("PYTHONUSERBASE") or str(sysconfig.get_config_var("userbase"))
    return Path(sysconfig.get_path("purelib", sysconfig.get_preferred_scheme("user"), vars={"userbase": base}))


def view(executable: Path, environ: Mapping[str, str], base_prefixes: tuple[str, ...]) -> View:
    """What `executable`'s path will hold when it starts with `site` in `environ`. `base_prefixes` are its base
    installation's prefixes (sys.prefix and sys.exec_prefix of a -S interpreter). A superset where unsure: the
    user site counts unless PYTHONNOUSERSITE says otherwise, whatever -s a later command may add."""
    venv = _venv_config(executable)
    prefixes = [str(venv[0])] if venv else []
    if venv is None or venv[1]:
        prefixes += base_prefixes
    prefixes = list(dict.fromkeys(prefixes))
    sites = [Path(p) for p in site.getsitepackages(prefixes)]
    # CPython's own layout too: Debian's Python names only dist-packages in getsitepackages, while a virtual
    # environment made from it (and the venv's site module) uses lib/pythonX.Y/site-packages.
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    sites += [Path(p) / lib / version / "site-packages" for p in prefixes for lib in ("lib", "lib64")]
    if (venv is None or venv[1]) and not environ.get("PYTHONNOUSERSITE"):
        sites.append(user_site(environ))
    sites = [s for s in dict.fromkeys(sites) if s.is_dir()]
    path = [Path(p).absolute() for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path += sites
    for site_dir in sites:
        path += _pth_folders(site_dir)
    return View(tuple(sites), tuple(p for p in dict.fromkeys(path) if p.exists()))


def _metadata_version(info: Path) -> str | None:
    """The Version: header of a dist-info's METADATA, an egg-info's PKG-INFO (or the egg-info file itself)."""
    candidates = [info / "METADATA", info / "PKG-INFO", info / "EGG-INFO" / "PKG-INFO", info]
    for candidate in candidates:
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            found = re.search(r"^Version:\s*(\S+)", text, re.M)
            return found.group(1) if found else None
    return None


def findings(seen: View) -> list[Finding]:
    """Every known-compromised release installed in a folder of the path (by its metadata, and by the name of
    its metadata folder: a METADATA that says otherwise is no alibi), and every startup file of one in a site
    dir, where `site` executes it."""
    packages = {canonical(i.package) for i in COMPROMISED}
    found: list[Finding] = []
    for folder in seen.path:
        entries = [folder] if _INFO.match(folder.name) else []  # an .egg put on the path by easy-install.pth
        try:
            entries += [folder / n for n in sorted(os.listdir(folder)) if _INFO.match(n)]
        except OSError:
            pass
        for entry in entries:
            match = _INFO.match(entry.name)
            if match is None or canonical(match["name"]) not in packages:
                continue
            versions = {match["version"], _metadata_version(entry)}
            found += [Finding(i, entry) for i in COMPROMISED
                      if canonical(i.package) == canonical(match["name"]) and i.version in versions]
    for site_dir in seen.sites:
        for incident in COMPROMISED:
            found += [Finding(incident, site_dir / name) for name in incident.files if (site_dir / name).is_file()]
    return list(dict.fromkeys(found))


def message(found: list[Finding], runner: bool, system: bool) -> str:
    """One line of Markdown (a step output, the PR comment): the releases, where they are, and what to do."""
    incidents = list(dict.fromkeys(f.incident for f in found))
    releases = "; ".join(f"{i.package} {i.version} (pushed compromised to PyPI on {i.published}: {i.what})"
                         for i in incidents)
    where = ", ".join(md_code(str(f.path)) for f in found)
    startup = list(dict.fromkeys(f.path.name for f in found if f.path.suffix == ".pth"))
    packages = list(dict.fromkeys(i.package for i in incidents))
    cure = ", ".join([*(f"pip uninstall {package}" for package in packages),
                      *(f"delete {md_code(name)}" for name in startup),
                      *(f"pin {md_code(package + exclusions(package))} where the workflow installs it" for package in packages)])
    exposed = ("any step of this job that started that Python ran it with the secrets that step held: treat them as "
               "exposed and rotate them")
    if runner:
        return (f"the job's Python (setup-python's, of python-version) holds a known-compromised release: {releases} "
                f"at {where}. The run does not see it (system-site-packages is false) and this action starts that "
                f"Python only without site, but {exposed}. Then remove it ({cure}).")
    away = ("or set system-site-packages: false (the default), so that the run sees only the action's pinned packages"
            if system else "or take its folder off PYTHONPATH")
    return (f"refused to run: a known-compromised release is installed where the run's Python would see it: "
            f"{releases} at {where}. This action stopped before starting that Python with its site-packages, so "
            f"nothing ran here with your keys; {exposed}. Then remove it from the runner's Python ({cure}), {away}.")


def _output(name: str, value: str) -> None:
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as file:
            file.write(f"{name}={' '.join(value.split())}\n")


def _annotation(kind: str, text: str) -> str:
    text = " ".join(text.split()).replace("%", "%25")
    return f"::{kind} title=pytest-orbench::{text}"


def main(argv: list[str]) -> int:
    runner = argv == ["--runner"]
    try:  # the install step chose the environment by this input; a value that is neither stops here
        system = _bool("system-site-packages", os.environ.get("ORBENCH_SYSTEM_SITE_PACKAGES", "false") or "false")
    except ActionSettingsError as exc:
        if runner:
            return 0  # said by the environment's own scan, next
        _output("refusal", f"an input is invalid, so nothing was run or compared: {md_code(str(exc))}")
        print(f"pytest-orbench: {exc}", file=sys.stderr)
        return 1
    if runner and system:
        return 0  # the environment sees the runner's packages: its own scan, next, refuses what this would warn of
    found = findings(view(Path(sys.executable), os.environ, (sys.prefix, sys.exec_prefix)))
    if not found:
        return 0
    text = message(found, runner, system)
    if runner:
        print(_annotation("warning", text), file=sys.stderr)
        return 0
    _output("refusal", text)
    print(f"pytest-orbench: {text}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    if not sys.flags.no_site:
        sys.exit("pytest-orbench: site_scan.py runs with python -S: a .pth file it looks for would already have run")
    sys.exit(main(sys.argv[1:]))
