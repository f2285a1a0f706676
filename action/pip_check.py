"""`pip check`, limited to the packages of the Action's lock: the run's environment may see the runner's own
packages too (system-site-packages: true, so that a `target:` imports your application; PYTHONPATH), and their
conflicts with each other (awscli's pins on a hosted runner) are neither ours nor a reason to warn on every run.
Run by action.yml's install step with the environment's Python; standard library only."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def ours(lock: Path) -> set[str]:
    names = re.findall(r"^([A-Za-z0-9._-]+)==", lock.read_text(encoding="utf-8"), re.M)
    return {canonical(name) for name in names} | {"pytest-orbench"}


def conflicts(report: str, packages: set[str]) -> list[str]:
    """The lines of pip check's report about a package of ours ('X 1.0 has requirement Y..., but you have
    ...', 'X 1.0 requires Y, which is not installed.'): each names the package at fault first."""
    return [line for line in report.splitlines() if line.split() and canonical(line.split()[0]) in packages]


def main(argv: list[str]) -> int:
    lock = Path(argv[0])
    proc = subprocess.run([sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
                          capture_output=True, text=True)
    found = conflicts(proc.stdout, ours(lock))
    for line in found:
        print(f"::warning title=pytest-orbench::pip check: {line.replace('%', '%25').replace(chr(10), ' ')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
