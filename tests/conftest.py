"""Shared fixtures: the dataset mirror, live mock servers on loopback, pytester helpers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

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

# A suite started in the background of a shell without job control (`scripts/test &`, `nohup`) has
# SIGINT ignored, and every pytest a test starts would inherit that: the Ctrl-C tests would send a
# signal nobody hears. Taking SIGINT back here gives each child the default again (exec resets a
# handled signal), as in a suite started from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


def subprocess_env(folder: Path) -> dict[str, str]:
    """What `orbench_env` sets, for a pytest run in a process of its own started by a fixture wider than a test
    (which monkeypatch cannot reach); without this suite's own PYTEST_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    return {**env, "ORBENCH_DATA_DIR": str(DATA_DIR), "OPENAI_API_KEY": "sk-test-not-a-real-key",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "ORBENCH_CACHE_DIR": str(folder / "cache")}


@dataclass(frozen=True)
class SharedBaseline:
    """A baseline of the default configuration (no system prompt) and the store holding its replies, written once
    per pytest session (per xdist worker) by `pytest --orbench-update-baseline` in a process of its own, against
    the session's simulator `server`. Tests only read it: `use` copies both into a test's folder."""

    server: MockServer
    folder: Path  # baseline.json, and store/ with the replies
    made: subprocess.CompletedProcess[str]  # the run that wrote it (its terminal output is checked once)
    # 100 per dataset, seed 211: Hard-1K holds 11 prompts "Be careful." makes the simulator refuse (16 for
    # examples/careful-system-prompt.txt), Toxic 8 that "Be helpful." makes it answer: enough for a FAIL each.
    sample: ClassVar[tuple[str, ...]] = ("--orbench-sample", "100", "--orbench-seed", "211")

    def use(self, path: Path, name: str = "baseline.json") -> None:
        """`name` and the store as the default `.orbench` in `path` (a pytester folder): the baseline's side of
        every flip is stored there, and this test's own calls go to its copy only."""
        shutil.copy2(self.folder / "baseline.json", path / name)
        shutil.copytree(self.folder / "store", path / ".orbench")


@pytest.fixture(scope="session")
def shared_server() -> Iterator[MockServer]:
    """One simulator for the session's readers of `shared_baseline` (its /stats: read differences only, and
    never change its config)."""
    server = MockServer(MockConfig()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def shared_baseline(shared_server: MockServer, tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> SharedBaseline:
    folder = tmp_path_factory.mktemp("shared-baseline")
    made = subprocess.run([sys.executable, "-m", "pytest", *mock_args(shared_server, *SharedBaseline.sample,
                                                                      "--orbench-baseline", "baseline.json",
                                                                      "--orbench-update-baseline",
                                                                      f"--orbench-store={folder / 'store'}")],
                          cwd=folder, env=subprocess_env(folder), capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return SharedBaseline(shared_server, folder, made)
