"""Whether pytest runs no test in this session (--collect-only, --setup-plan, --fixtures, ...)."""

from __future__ import annotations

import pytest

# pytest options after which it only shows something (what would run, fixtures, markers) and runs no test.
# (--setup-plan sets setuponly in its own pytest_configure, after this plugin's: both are read. --help needs
# no entry: plugin.pytest_configure builds no session under it.)
DRY_RUN_OPTIONS = ("collectonly", "setuponly", "setupplan", "showfixtures", "show_fixtures_per_test", "markers")


def dry_run(config: pytest.Config) -> bool:
    """pytest runs no test in this session (--collect-only, --setup-plan, --fixtures, ...): no prompt is asked."""
    return any(getattr(config.option, name, False) for name in DRY_RUN_OPTIONS)
