"""A damaged response store: a usage error naming the file and the fix, before any call where a cheap check
finds it; found later, the run stops with the same message and an inconclusive verdict; never an
INTERNALERROR (the plugin, the CLI, the Action)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.tools.cli import main
from tests.action.test_action import env, github  # noqa: F401  (the Action's fixtures: its environment, a fake GitHub)
from tests.conftest import load, mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")
STORE = Path(".orbench") / "responses.sqlite3"


def damage(path: Path, page: int | None) -> None:
    """dd if=/dev/urandom of=PATH bs=4096 seek=PAGE count=1 conv=notrunc (the last page when None)."""
    for sidecar in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        sidecar.unlink(missing_ok=True)
    pages = path.stat().st_size // 4096
    with path.open("r+b") as fh:
        fh.seek(4096 * (pages - 1 if page is None else page))
        fh.write(os.urandom(4096))


def run(pytester: pytest.Pytester, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=pytester.path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})


GOOD = ("--orbench-sample", "5", "--orbench-seed", "1")  # the runs of good_store; 10 prompts fill a store of many pages


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory, shared_mock: Any, data_dir: Path) -> Path:
    """A folder holding a store with every reply of a run of GOOD, and that run's results (r.json), made once
    (copied into each test, then damaged)."""
    folder = tmp_path_factory.mktemp("good")
    environ = {**os.environ, "ORBENCH_DATA_DIR": str(data_dir), "OPENAI_API_KEY": "sk-test-not-a-real-key",
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-m", "pytest", *mock_args(shared_mock, *GOOD, "--orbench-json", "r.json")],
                          cwd=folder, capture_output=True, text=True, timeout=300, env=environ)
    assert done.returncode == 0, done.stdout[-2000:]
    assert (folder / STORE).stat().st_size // 4096 >= 4, "too few pages for an interior page and a last one"
    return folder


def damaged_copy(good_store: Path, where: Path, page: int | None) -> None:
    """good_store's store and results copied into `where`, one page of the store overwritten."""
    shutil.copytree(good_store / ".orbench", where / ".orbench")
    shutil.copy(good_store / "r.json", where / "r.json")
    damage(where / STORE, page)


@pytest.mark.parametrize(("page", "workers"), [(1, []), (None, []), (1, ["-n", "2"])],
                         ids=["interior-page", "last-page", "interior-page-xdist"])
def test_a_damaged_store_is_a_usage_error_before_any_call(pytester: pytest.Pytester, shared_mock: Any, good_store: Path,
                                                          page: int | None, workers: list[str]) -> None:
    mock = shared_mock
    args = mock_args(mock, *GOOD)
    damaged_copy(good_store, pytester.path, page)
    made = stats(mock.url)["requests"]
    result = run(pytester, *args, *workers)
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    assert "INTERNALERROR" not in result.stdout + result.stderr
    assert f"the response store {pytester.path / '.orbench'} is damaged" in result.stderr
    assert "it holds only replies that can be asked again: delete that file (or move it aside)" in result.stderr
    assert stats(mock.url)["requests"] == made  # not one call
    if page == 1 and not workers:  # (once: the same for any damage)
        # The fix, as said: moved aside, the next run asks again.
        (pytester.path / STORE).rename(pytester.path / "damaged.sqlite3")
        assert run(pytester, *args).returncode == 0


def test_damage_met_during_the_run_stops_it_inconclusive(pytester: pytest.Pytester, mock: Any) -> None:
    # A page damaged after the run's start (the opening's check passed): simulated where the run next reads the
    # store, as SQLite reports it.
    pytester.makeconftest("""
        import sqlite3
        from pytest_orbench.core import store, store_database
        def pytest_configure(config):
            def verdict(self, key):
                raise store_database.unusable(self.directory, sqlite3.DatabaseError("database disk image is malformed"))
            store.Store.verdict = verdict
    """)
    args = mock_args(mock, "--orbench-sample", "30", "--orbench-seed", "1", "--orbench-json", "r.json")
    result = run(pytester, *args)
    assert result.returncode not in (0, 3, 4), result.stdout[-3000:]
    assert "INTERNALERROR" not in result.stdout + result.stderr
    results = load(pytester.path / "r.json")
    assert results["gate"]["verdict"] == "inconclusive"
    (check,) = [c for c in results["gate"]["checks"] if c["name"] == "completeness"]
    assert "is damaged" in check["message"] and "delete that file (or move it aside)" in check["message"]
    assert "judge keyword failed" not in result.stdout  # the store's fault, not the judge's
    assert "2 failed" in result.stdout and "the run stopped early (pytest-orbench: the response store" in check["message"]


def test_orbench_commands_name_a_damaged_store(pytester: pytest.Pytester, shared_mock: Any, good_store: Path,
                                               capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    damaged_copy(good_store, pytester.path, 1)
    monkeypatch.chdir(pytester.path)
    (pytester.path / "labelled.csv").write_text("prompt,response,label\nhi,Sure.,compliance\n", encoding="utf-8")
    for argv in (["judge-eval", "labelled.csv", "--judge", "llm", "--judge-model", "openai/judge", "--judge-api-base",
                  shared_mock.url], ["label", "r.json", "--export", "s.csv"], ["batches"]):
        assert main(argv) == 2, argv
        assert "is damaged" in capsys.readouterr().err, argv


def test_the_action_comment_says_inconclusive_and_names_the_store(pytester: pytest.Pytester, shared_mock: Any,
                                                                 good_store: Path,
                                                                 env: dict[str, str], github: Any,  # noqa: F811
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from action.main import main as action_main
    from tests.action.test_action import outputs, stopped_with_usage_error

    damaged_copy(good_store, pytester.path, 1)
    result = run(pytester, *mock_args(shared_mock, *GOOD))
    assert result.returncode == 4
    stopped_with_usage_error(env, monkeypatch, result.stderr)  # what the Run step keeps of pytest's stderr
    assert action_main() == 1
    (comment,) = github.comments.values()
    assert "**inconclusive**: pytest --orbench stopped with a usage error before any result" in comment["body"]
    assert "is damaged" in comment["body"] and "responses.sqlite3" in comment["body"]
    assert outputs(env)["verdict"] == "inconclusive"


def test_damaged_records_in_an_intact_store_are_asked_again_and_said_once(pytester: pytest.Pytester, mock: Any) -> None:
    # Not JSON, a JSON list, a reply whose text is null: an INTERNALERROR at the plan (the first two), or an empty
    # reply counted as a refusal (the third). Each is missing: asked again, and said once.
    from tests.core.test_store_records import damage_records

    args = mock_args(mock, "--orbench-sample", "10", "--orbench-seed", "1", "--orbench-json", "r.json")
    first = pytester.runpytest(*args)
    before = {p["id"]: p["verdict"] for p in load(pytester.path / "r.json")["prompts"]}
    made = stats(mock.url)["requests"]
    damage_records(pytester.path / ".orbench", every=6)  # 4 of the 20 replies
    again = pytester.runpytest(*args)
    assert again.ret == first.ret and not any("INTERNALERROR" in line for line in again.outlines)
    assert stats(mock.url)["requests"] == made + 4  # exactly those, asked again
    said = [line for line in again.outlines if "stored records are damaged" in line]
    # (the first damaged record met names its damage: which one comes first follows the store's keys)
    assert len(said) == 1 and any(said[0] == "orbench: 20 prompts, 16 stored, 4 to fetch, 16 at a time (4 stored records "
                                  f"are damaged ({kind}; 3 more): asked again, never judged)"
                                  for kind in ("not JSON", "JSON list, not an object", "text is null, not a string")), said
    assert {p["id"]: p["verdict"] for p in load(pytester.path / "r.json")["prompts"]} == before
    damaged = damage_records(pytester.path / ".orbench", every=6)
    offline = pytester.runpytest(*args, "--orbench-offline")
    assert stats(mock.url)["requests"] == made + 4
    errors = [p["error"] for p in load(pytester.path / "r.json")["prompts"] if p["error"]]
    assert len(errors) == len(damaged) and all(" is damaged (" in e and "--orbench-offline is set" in e for e in errors)
    assert offline.ret == 1 and not any("INTERNALERROR" in line for line in offline.outlines)
