"""The `target:` callable, imported before any call with the rootdir and orbench.yaml's folder importable."""

from __future__ import annotations

from pathlib import Path

from pytest_orbench.core.endpoint import TARGET_PARAMETERS, LoadError, load_callable
from pytest_orbench.run.setting_sources import fail


def importable(folders: list[Path]) -> str:
    """Put the rootdir and orbench.yaml's folder on sys.path, as pytest's `pythonpath` ini would, so that
    a `target:` or custom judge beside them imports; the hint that says so in an import error."""
    import sys

    for folder in reversed(folders):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    where = " and ".join(dict.fromkeys(str(f) for f in folders))
    return (f"{where} {'is' if len(set(folders)) < 2 else 'are'} on sys.path; for code elsewhere add its folder to "
            "pytest's `pythonpath` ini option")


def check_target(target: str, folders: list[Path]) -> None:
    """Import the target before any call (a usage error if it cannot be), with the rootdir and
    orbench.yaml's folder importable."""
    hint = importable(folders)
    try:
        load_callable(target, "target", TARGET_PARAMETERS)
    except LoadError as exc:
        raise fail(f"{exc}. The target's module must be importable: {hint}" if not exc.imported else str(exc)) from None
