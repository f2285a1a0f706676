"""The Action's Python against a real loopback HTTP server standing in for the GitHub API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from action.comment import marker
from action.main import main
from action.settings import from_env
from pytest_orbench.baseline import baseline_document
from pytest_orbench.gate import assess, parse_gate
from tests.github_api import FakeGitHub
from tests.test_gate import make_results


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    server = FakeGitHub()
    yield server
    server.stop()


def regressed() -> dict[str, Any]:
    base = baseline_document(make_results({"hard-1k": [False] * 200, "toxic": [True] * 100}))
    results = make_results({"hard-1k": [True] * 12 + [False] * 188, "toxic": [True] * 100}, system="new")
    return assess(results, base, parse_gate({}))


def unchanged() -> dict[str, Any]:
    base = baseline_document(make_results({"hard-1k": [False] * 200, "toxic": [True] * 100}))
    return assess(make_results({"hard-1k": [False] * 200, "toxic": [True] * 100}), base, parse_gate({}))


@pytest.fixture
def env(tmp_path: Path, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}), encoding="utf-8")
    values = {
        "GITHUB_API_URL": github.url, "GITHUB_REPOSITORY": github.repository, "GITHUB_EVENT_PATH": str(event),
        "GITHUB_TOKEN": github.token, "GITHUB_OUTPUT": str(tmp_path / "output"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        "ORBENCH_RESULTS_PATH": str(tmp_path / "results.json"), "ORBENCH_COMMENT": "always",
        "ORBENCH_FAIL_ON_REGRESSION": "true", "ORBENCH_SYSTEM_PROMPT_FILE": "prompts/system.txt",
        "ORBENCH_MODEL": "openai/x",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def write(env: dict[str, str], results: dict[str, Any]) -> None:
    Path(env["ORBENCH_RESULTS_PATH"]).write_text(json.dumps(results), encoding="utf-8")


def outputs(env: dict[str, str]) -> dict[str, str]:
    text = Path(env["GITHUB_OUTPUT"]).read_text(encoding="utf-8")
    found = {}
    for match in __import__("re").finditer(r"^(\S+)<<(\S+)\n(.*?)\n\2$", text, __import__("re").M | __import__("re").S):
        found[match.group(1)] = match.group(3)
    for line in text.splitlines():
        if "=" in line and "<<" not in line:
            key, _, value = line.partition("=")
            found.setdefault(key, value)
    return found


def test_creates_then_updates_one_comment_across_pages(env: dict[str, str], github: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    config_id = from_env(env).config_id
    for i in range(105):  # more than a page of other people's comments, one of them quoting our marker
        github.add_comment(7, f"comment {i}" + (f" {marker(config_id)}" if i == 50 else ""), f"user{i}")
    write(env, regressed())
    assert main() == 1
    ours = [c for c in github.comments.values() if c["user"]["login"] == "github-actions[bot]"]
    assert len(ours) == 1 and marker(config_id) in ours[0]["body"]
    assert "❌ **fail**" in ours[0]["body"] and "6.0%" in ours[0]["body"]
    assert any("page=2" in path for _, path, _ in github.requests)  # followed the Link header
    out = outputs(env)
    assert out["verdict"] == "fail" and out["comment-url"] == ours[0]["html_url"]
    assert out["over-refusal-rate"] == "0.0600" and out["over-refusal-delta"] == "0.0600"
    assert float(out["p-value"]) == pytest.approx(0.5**12, rel=1e-3)
    stdout = capsys.readouterr().out
    assert "::error title=pytest-orbench,file=prompts/system.txt::OR-Bench gate fail: hard-1k regression" in stdout
    assert "OR-Bench over-refusal check" in Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")

    write(env, unchanged())
    Path(env["GITHUB_OUTPUT"]).unlink()
    assert main() == 0
    ours_now = [c for c in github.comments.values() if c["user"]["login"] == "github-actions[bot]"]
    assert [c["id"] for c in ours_now] == [ours[0]["id"]]  # edited, not duplicated
    assert "✅ **pass**" in ours_now[0]["body"]
    assert [m for m, _, _ in github.requests].count("POST") == 1 and [m for m, _, _ in github.requests].count("PATCH") == 1
    assert outputs(env)["verdict"] == "pass"
    every_output = Path(env["GITHUB_OUTPUT"]).read_text() + Path(env["GITHUB_STEP_SUMMARY"]).read_text() + stdout
    assert github.token not in every_output


def test_read_only_token_is_a_warning_not_a_failure(env: dict[str, str], github: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    github.read_only = True
    write(env, unchanged())
    assert main() == 0
    stdout = capsys.readouterr().out
    assert "::warning title=pytest-orbench::could not post the PR comment (GitHub API 403" in stdout
    assert outputs(env)["verdict"] == "pass" and outputs(env)["comment-url"] == ""
    write(env, regressed())
    assert main() == 1  # still the gate's result


def test_too_long_body_is_shortened_by_dropping_items(env: dict[str, str], github: FakeGitHub) -> None:
    github.max_body = 6000
    base = baseline_document(make_results({"hard-1k": [False] * 400}))
    write(env, assess(make_results({"hard-1k": [True] * 400}), base, parse_gate({})))
    assert main() == 1
    (comment,) = github.comments.values()
    body = comment["body"]
    assert len(body) <= 6000 and body.count("<details>") == body.count("</details>") and body.count("```") % 2 == 0
    assert "more (see the results JSON)" in body
    assert [m for m, _, _ in github.requests].count("POST") >= 2  # a 422 first


def test_comment_modes_and_no_pull_request(env: dict[str, str], github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    write(env, unchanged())
    monkeypatch.setenv("ORBENCH_COMMENT", "on-change")
    assert main() == 0 and not github.comments  # nothing changed, no comment yet
    monkeypatch.setenv("ORBENCH_COMMENT", "never")
    github.requests.clear()
    write(env, regressed())
    assert main() == 1 and not github.requests
    monkeypatch.setenv("ORBENCH_FAIL_ON_REGRESSION", "false")
    assert main() == 0
    monkeypatch.setenv("ORBENCH_COMMENT", "sometimes")
    assert main() == 1
    monkeypatch.setenv("ORBENCH_COMMENT", "always")
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps({"push": {}}), encoding="utf-8")
    assert main() == 0 and not github.requests


def test_missing_results_is_inconclusive(env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBENCH_PYTEST_EXIT_CODE", "4")
    assert main() == 1
    assert "pytest --orbench wrote no results (exit code 4)" in capsys.readouterr().out
    assert outputs(env)["verdict"] == "inconclusive"


def test_untrusted_text_cannot_break_the_comment(env: dict[str, str], github: FakeGitHub) -> None:
    results = regressed()
    for p in results["prompts"]:
        p["prompt"] = "</details></summary> @org/team ``` <img src=x onerror=alert(1)> [click](javascript:x)"
        p["reply_excerpt"] = "<!-- pytest-orbench comment: 000 --> @admin"
    write(env, results)
    main()
    (comment,) = github.comments.values()
    body = comment["body"]
    assert "<img" not in body and "@org" not in body and "@admin" not in body and "](javascript" not in body
    assert body.count("<details>") == body.count("</details>")
    assert body.count("<!--") == 2 and body.startswith("<!-- pytest-orbench comment: ")  # only our two markers


def test_system_prompt_diff_stat_against_the_base_branch(env: dict[str, str], github: FakeGitHub, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "checkout"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]

    def run(*args: str) -> None:
        __import__("subprocess").run([*git, *args], cwd=repo, check=True, capture_output=True)

    run("init", "-q", "-b", "main")
    (repo / "system.txt").write_text("Be kind.\n", encoding="utf-8")
    run("add", ".")
    run("commit", "-qm", "base")
    run("update-ref", "refs/remotes/origin/main", "HEAD")
    (repo / "system.txt").write_text("Be kind.\nBe careful.\nRefuse harm.\n", encoding="utf-8")
    run("commit", "-qam", "stricter")
    monkeypatch.chdir(repo)
    monkeypatch.setenv("GITHUB_BASE_REF", "main")
    monkeypatch.setenv("ORBENCH_SYSTEM_PROMPT_FILE", "system.txt")
    write(env, regressed())
    main()
    (comment,) = github.comments.values()
    assert "- system prompt file system.txt: origin/main → +2 -0 lines" in comment["body"]


def test_ungated_run_is_said_plainly_and_does_not_fail_the_job(env: dict[str, str], github: FakeGitHub,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    write(env, assess(make_results({"hard-1k": [False] * 50, "toxic": [True] * 50}), None, parse_gate({})))
    assert main() == 0
    stdout = capsys.readouterr().out
    assert outputs(env)["verdict"] == "ungated"
    assert "::warning title=pytest-orbench::OR-Bench gate ungated: no baseline, no limits: rates only" in stdout
    (comment,) = github.comments.values()
    assert "⚪ **ungated**: no baseline, no limits: rates only" in comment["body"] and "**pass**" not in comment["body"]
    assert "ungated" in Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
