"""Shared fixtures: the dataset mirror, live mock servers on loopback, pytester helpers."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.tools.simulator.config import MockConfig
from pytest_orbench.tools.simulator.server import MockServer

try:
    # litellm imports the importlib_metadata backport, which deletes the stdlib
    # PathFinder.find_distributions and adds its own finder to sys.meta_path. pytester restores
    # sys.meta_path after each in-process run, which would leave no finder at all and every later
    # run without entry-point plugins. Importing it first puts its finder in the snapshot.
    import importlib_metadata  # noqa: F401
except ImportError:  # pragma: no cover - litellm without the backport
    pass

from pytest_orbench.calls.litellm_api import _import_litellm

# pytester also deletes modules first imported during an in-process run. A real pytest process
# imports litellm once; importing it here keeps it that way across the many in-process runs
# (a re-imported litellm would leave the old one's HTTP sessions to the garbage collector).
_import_litellm()
import scipy.stats  # noqa: E402,F401  (numpy refuses a second import in one process, for the same reason)

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: ten seconds or more; started first, so that under `-n 2 --dist "
                                       "worksteal` no worker is left with a long test at the end")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: otherwise in file order


def _data_dir() -> Path:
    env = os.environ.get("ORBENCH_DATA_DIR")
    path = Path(env) if env else REPO.parent / "shared" / "datasets"
    return path.resolve()


DATA_DIR = _data_dir()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "or-bench-hard-1k.csv").is_file():
        pytest.fail(f"dataset mirror not found at {DATA_DIR}: set ORBENCH_DATA_DIR to a folder with the OR-Bench files")
    return DATA_DIR


def load(path: Path) -> dict[str, Any]:
    """A JSON document the run wrote (results, baseline)."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.rsplit("/v1", 1)[0] + "/stats") as resp:
        data: dict[str, Any] = json.load(resp)
    return data


@pytest.fixture
def mock_factory() -> Iterator[Callable[..., MockServer]]:
    """Start real loopback simulators with a given configuration; stopped after the test."""
    servers: list[MockServer] = []

    def start(**kwargs: Any) -> MockServer:
        server = MockServer(MockConfig(**kwargs)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def mock(mock_factory: Callable[..., MockServer]) -> MockServer:
    return mock_factory()


@pytest.fixture(scope="module")
def shared_mock() -> Iterator[MockServer]:
    """One simulator for a module's tests, with `shared_store`: what one test fetched, the next finds stored
    (same endpoint, same keys), so the module pays each reply, and each fetch process's litellm import, once.
    Its /stats are the module's, not a test's."""
    server = MockServer(MockConfig()).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


@pytest.fixture
def orbench_env(monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path) -> None:
    """Offline data, a throwaway key and cache: what CI and the demo set."""
    monkeypatch.setenv("ORBENCH_DATA_DIR", str(data_dir))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("ORBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def mock_args(server: MockServer, *extra: str) -> list[str]:
    return ["--orbench", "--orbench-model", "openai/orbench-mock", "--orbench-api-base", server.url,
            "-p", "no:cacheprovider", "-p", "no:randomly", *extra]


def raise_at_call(n: int, exc: str = 'RuntimeError("boom")') -> str:
    """A pytester conftest that raises `exc` from the n-th test call: a failure (for -x), or Ctrl-C."""
    return f"""
        SEEN = []
        def pytest_runtest_call(item):
            SEEN.append(item)
            if len(SEEN) == {n}:
                raise {exc}
    """
