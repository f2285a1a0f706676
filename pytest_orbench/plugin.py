"""pytest hooks only: options, and the enabled run's hooks object registered at configure."""

from __future__ import annotations

import gc
import os
import shlex
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from pytest_orbench.run.options import OPTIONS, register_options

if TYPE_CHECKING:
    from pytest_orbench.run.session import OrbenchPlugin

PLUGIN_KEY: pytest.StashKey[OrbenchPlugin] = pytest.StashKey()


class _ImportAsPython:
    """Imports this package's other modules as Python does, ahead of pytest's assertion rewriting.

    pytest rewrites the asserts of every module of an installed plugin's package, so that the fixtures
    and helpers a plugin gives you report the values in a failed assert. This package gives you none:
    its asserts are its own invariants. And where bytecode is not written (PYTHONDONTWRITEBYTECODE, set
    by many CI images) pytest cannot cache what it rewrote, nor use the files pip compiled at install: it
    parsed, rewrote and compiled ~25 modules again on every run, ~0.1 s of a 1 s warm re-run."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if not name.startswith(f"{__package__}."):
            return None  # every other module: the next finder's (pytest's, for your test files and conftests)
        return PathFinder.find_spec(name, path, target)


# Once per process, even when this module is imported again (pytester's in-process runs restore sys.modules).
if not any(type(finder).__qualname__ == _ImportAsPython.__qualname__ for finder in sys.meta_path):
    sys.meta_path.insert(0, _ImportAsPython())

NODE_PREFIX = "orbench/"  # prompt tests are `orbench/<dataset>::<category>-<id>`: no file behind them


def pytest_addoption(parser: pytest.Parser) -> None:
    register_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "orbench: an OR-Bench prompt test supplied by pytest-orbench")
    # Node ids as pytest prints them select prompt tests: `pytest --orbench orbench/toxic::deception-001`.
    # They name no file, so they leave the file arguments (pytest would report "file not found"); the
    # paths and node ids of your own tests named beside them are collected, as pytest would.
    selected = [arg for arg in config.args if arg.replace("\\", "/").startswith(NODE_PREFIX)]
    yours = [arg for arg in config.args if arg not in selected]
    if selected:
        config.args[:] = yours
        config.option.orbench = True
    if config.getoption("orbench_only", False) or (selected and not yours):
        config.args[:] = []  # nothing of yours is collected, so none of your test files is imported
        config.option.orbench = True
    if not config.getoption("orbench", False):
        return  # installed but not enabled: no settings, no datasets, no litellm
    if config.option.help:
        return  # `pytest --orbench --help` shows the help, even while orbench.yaml or a key is wrong
    _check_rootdir(config)
    from pytest_orbench.core.dependencies import compromised_problem

    problem = compromised_problem("litellm")  # before anything runs: the run would hand it the provider keys
    if problem:
        raise pytest.UsageError(f"pytest-orbench: {problem}")
    # Imported only when enabled: settings bring yaml, the gate, the store and the baseline. The import
    # allocates only what lives as long as the process (modules, classes, compiled rules): the collector,
    # which would rescan pytest's whole heap several times meanwhile (~50 ms), waits until it is done.
    # (Never gc.freeze() at exit to skip the last collections: your objects in reference cycles, a file
    # kept on the config or in a conftest, would never be finalized, their buffered writes lost.)
    collecting = gc.isenabled()
    gc.disable()
    try:
        from pytest_orbench.run.session import OrbenchPlugin
        from pytest_orbench.run.setting_build import build_settings
    finally:
        if collecting:
            gc.enable()

    settings = build_settings(config)
    if settings.estimate and not hasattr(config, "workerinput"):
        # An estimate reads the store and counts tokens in this process: no xdist workers to start.
        config.option.dist, config.option.tx = "no", []
    plugin = OrbenchPlugin(config, settings, selected=selected)
    config.stash[PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, "orbench-session")


def _check_rootdir(config: pytest.Config) -> None:
    """`--orbench-baseline /abs/b.json` (space form): pytest reads the value as a test path while it
    picks the rootdir, before any plugin's options are known, and may move the rootdir (then
    orbench.yaml and relative paths are looked up in the wrong place). Say so, with the fix."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker runs in the controller's rootdir, which the controller has checked
    spaced = []
    # PYTEST_ADDOPTS is read before the rootdir is chosen, so its values can move it too (ini addopts: after).
    from_env = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    flags = {o.flag for o in OPTIONS if o.flag and o.kind in ("path", "str", "list")} | {"--orbench-config"}
    for where, invocation in (("PYTEST_ADDOPTS", from_env), ("", list(config.invocation_params.args))):
        for i, arg in enumerate(invocation[:-1]):
            value = invocation[i + 1]
            # Only values that exist on disk can move the rootdir (pytest ignores other "paths").
            if arg in flags and not value.startswith("-") and (config.invocation_params.dir / value).exists():
                spaced.append((arg, value, where))
    if not spaced:
        return
    try:
        from _pytest.config.findpaths import determine_setup

        intended, *_ = determine_setup(inifile=config.option.inifilename, override_ini=config.option.override_ini,
                                       args=list(config.option.file_or_dir or []),
                                       rootdir_cmd_arg=config.option.rootdir or None,
                                       invocation_dir=config.invocation_params.dir)
    except Exception:  # pytest's internals moved: skip the check rather than guess
        return
    if Path(intended) != config.rootpath:
        flag, value, where = spaced[0]
        raise pytest.UsageError(
            f"pytest-orbench: {flag} {value}{f' (in {where})' if where else ''}: pytest took the value for a test "
            f"path when it chose the rootdir ({config.rootpath} instead of {intended}), so orbench.yaml and relative "
            f"paths would be read from there. Write it as {flag}={value}"
        )
