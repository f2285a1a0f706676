"""pytest hooks only: options, and the enabled run's hooks object registered at configure."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_orbench.settings import build_settings, register_options

if TYPE_CHECKING:
    from pytest_orbench.session import OrbenchPlugin

PLUGIN_KEY = pytest.StashKey["OrbenchPlugin"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    register_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "orbench: an OR-Bench prompt test supplied by pytest-orbench")
    if not config.getoption("orbench", False):
        return  # installed but not enabled: no settings, no datasets, no litellm
    from pytest_orbench.session import OrbenchPlugin

    plugin = OrbenchPlugin(config, build_settings(config))
    config.stash[PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, "orbench-session")
