"""The Action's Python against a real loopback HTTP server standing in for the GitHub API."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from action.comment import marker
from action.github import GitHub, GitHubError
from action.main import main
from action.settings import ActionSettings, from_env
from pytest_orbench.analysis.baseline import baseline_document
from pytest_orbench.analysis.document import assess
from pytest_orbench.analysis.gate import parse_gate
from tests.action.github_api import FakeGitHub
from tests.analysis.test_gate import make_results


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


def test_a_github_app_token_edits_its_own_comment_on_the_next_push(env: dict[str, str], github: FakeGitHub) -> None:
    # github-token from a GitHub App (actions/create-github-app-token): its comments are by acme-gate[bot], and
    # like GITHUB_TOKEN it cannot read /user. Looking for github-actions[bot]'s comment, every push added one.
    github.author = "acme-gate[bot]"
    config_id = from_env(env).config_id
    quoted = github.add_comment(7, f"as the bot said: {marker(config_id)}", "mallory")
    write(env, regressed())
    assert main() == 1
    write(env, unchanged())
    assert main() == 0
    ours = [c for c in github.comments.values() if c["user"]["login"] == "acme-gate[bot]"]
    assert len(ours) == 1 and "✅ **pass**" in ours[0]["body"] and outputs(env)["comment-url"] == ours[0]["html_url"]
    assert github.comments[quoted["id"]]["body"].startswith("as the bot said")  # a person's comment is never ours


def test_read_only_token_is_a_warning_not_a_failure(env: dict[str, str], github: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    github.read_only = True
    write(env, unchanged())
    assert main() == 0
    stdout = capsys.readouterr().out
    assert "::warning title=pytest-orbench::could not post the PR comment (GitHub API 403" in stdout
    assert "For fork PRs, see docs/action.md" in stdout
    assert [m for m, _, _ in github.requests].count("POST") == 1  # a refusal, not retried
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


def stopped_with_usage_error(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, stderr: str) -> None:
    """What action.yml's Run step leaves in the work dir when pytest stops with a usage error (exit code 4)."""
    monkeypatch.setenv("ORBENCH_PYTEST_EXIT_CODE", "4")
    Path(env["ORBENCH_RESULTS_PATH"]).with_name("orbench-stderr").write_text(stderr, encoding="utf-8")


def test_the_run_steps_usage_error_is_named_in_the_comment(env: dict[str, str], github: FakeGitHub,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The dataset name comes from the pull request's orbench.yaml, and a gateway key may be quoted.
    monkeypatch.setenv("GATEWAY_API_KEY", "gw-secret-value-123")
    stopped_with_usage_error(env, monkeypatch, "some warning\nERROR: pytest-orbench: --orbench-datasets: unknown "
                             "dataset '[x](http://e.example) @admin <img src=x> gw-secret-value-123': use one of hard-1k, "
                             "toxic\n")
    assert main() == 1
    (comment,) = github.comments.values()
    body = comment["body"]
    assert ("**inconclusive**: pytest --orbench stopped with a usage error before any result, so nothing was "
            "compared: `pytest-orbench: --orbench-datasets: unknown dataset '[x](http://e.example) @admin <img src=x> "
            "***': use one of hard-1k, toxic`") in body  # a code span: no link, mention or HTML
    stdout = capsys.readouterr().out
    assert "::error title=pytest-orbench::pytest --orbench stopped with a usage error" in stdout
    assert "gw-secret-value-123" not in body + stdout + Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    # An input the Run step refused (here fail-on-regression) still replaces the comment's earlier verdict.
    monkeypatch.setenv("ORBENCH_PYTEST_EXIT_CODE", "input")
    monkeypatch.setenv("ORBENCH_FAIL_ON_REGRESSION", "maybe")
    Path(env["ORBENCH_RESULTS_PATH"]).with_name("orbench-run-error").write_text(
        "input fail-on-regression must be true or false, got 'maybe'", encoding="utf-8")
    assert main() == 1 and len(github.comments) == 1
    assert ("**inconclusive**: an input is invalid, so nothing was run or compared: `input fail-on-regression must "
            "be true or false, got 'maybe'`") in github.comments[comment["id"]]["body"]
    assert outputs(env)["verdict"] == "inconclusive"


@pytest.mark.parametrize("fork", [True, False])
def test_a_missing_key_on_a_fork_pull_request_says_forks_get_no_secrets(env: dict[str, str], github: FakeGitHub,
                                                                       monkeypatch: pytest.MonkeyPatch, fork: bool) -> None:
    repos = ("someone/bot", "acme/bot") if fork else ("acme/bot", "acme/bot")
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps({"pull_request": {
        "number": 7, "head": {"repo": {"full_name": repos[0]}}, "base": {"repo": {"full_name": repos[1]}}}}),
        encoding="utf-8")
    stopped_with_usage_error(env, monkeypatch, "ERROR: pytest-orbench: no API key for model 'openai/gpt-4o-mini': set "
                             "OPENAI_API_KEY, or name another variable with --orbench-api-key-env\n")
    assert main() == 1
    (comment,) = github.comments.values()
    assert "no API key for model" in comment["body"]
    assert ("a pull request from a fork gets no repository secrets" in comment["body"]) is fork


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


@pytest.mark.parametrize("shallow", [False, True], ids=["full-history", "shallow-checkout"])
def test_system_prompt_diff_stat_against_the_base_branch(env: dict[str, str], github: FakeGitHub, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, shallow: bool) -> None:
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
    if shallow:
        # actions/checkout's default: the PR's head alone (fetch-depth: 1), then the base branch's tip fetched
        # at depth 1 (as compare-with: base-branch does): no merge base between them.
        pull = tmp_path / "shallow"
        __import__("subprocess").run([*git, "clone", "-q", "--depth", "1", f"file://{repo}", str(pull)], check=True)
        __import__("subprocess").run([*git, "fetch", "-q", "--depth", "1", "origin",
                                      "+refs/remotes/origin/main:refs/remotes/origin/main"], cwd=pull, check=True)
        repo = pull
    monkeypatch.chdir(repo)
    monkeypatch.setenv("GITHUB_BASE_REF", "main")
    monkeypatch.setenv("ORBENCH_SYSTEM_PROMPT_FILE", "system.txt")
    write(env, regressed())
    main()
    (comment,) = github.comments.values()
    assert "- system prompt file system.txt: origin/main → +2 -0 lines" in comment["body"]


def test_a_prompt_under_a_key_is_annotated_on_its_file(env: dict[str, str], github: FakeGitHub,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # config/bot.yaml#prompts.support: the annotation goes on the file (a path with the key is no file).
    monkeypatch.setenv("ORBENCH_SYSTEM_PROMPT_FILE", "config/bot.yaml#prompts.support")
    write(env, regressed())
    assert main() == 1
    assert "::error title=pytest-orbench,file=config/bot.yaml::OR-Bench gate fail" in capsys.readouterr().out


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


def test_a_dataset_the_baseline_has_but_the_job_skipped_is_a_warning(env: dict[str, str], github: FakeGitHub,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # A pull request that stops running hard-1k stops the over-refusal check: the pass covers toxic only.
    base = baseline_document(make_results({"hard-1k": [False] * 200, "toxic": [True] * 100}))
    write(env, assess(make_results({"toxic": [True] * 100}), base, parse_gate({})))
    assert main() == 0 and outputs(env)["verdict"] == "pass"
    assert ("::warning title=pytest-orbench::not checked: hard-1k (in the baseline, not run by this job); "
            "the verdict covers toxic only") in capsys.readouterr().out


def test_judge_errors_are_not_called_missing_replies(env: dict[str, str], github: FakeGitHub,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    results = make_results({"hard-1k": [None] * 3 + [False] * 197})
    for prompt in results["prompts"][:3]:
        prompt["error"], prompt["error_from"] = "judge call failed: HTTP 401 from j.x (the key was rejected)", "judge"
    write(env, assess(results, None, parse_gate({})))
    assert main() == 0
    stdout = capsys.readouterr().out
    assert "got no reply" not in stdout
    assert ("::warning title=pytest-orbench::3 of 200 prompts got no judgement (judge errors); most often: judge call "
            "failed: HTTP 401 from j.x (the key was rejected) (3)") in stdout
    (comment,) = github.comments.values()
    assert "No reply for" not in comment["body"] and "**No judgement for 3 of 200 prompts**" in comment["body"]


HTML_502 = "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"


def client(waits: list[float]) -> Callable[[ActionSettings], GitHub]:
    """The Action's own client with its waits recorded, not slept."""
    return lambda s: GitHub(s.api_url, s.token, s.repository, sleep=waits.append)


def methods(github: FakeGitHub) -> list[str]:
    return [m for m, _, _ in github.requests]


def test_a_server_error_is_retried_and_the_comment_still_updated(env: dict[str, str], github: FakeGitHub,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    write(env, regressed())
    assert main() == 1
    (comment,) = github.comments.values()
    github.requests.clear()
    github.fail_next(1, 500, {"message": "Server Error"}, method="PATCH")
    write(env, unchanged())
    waits: list[float] = []
    assert main(github_factory=client(waits)) == 0
    assert "✅ **pass**" in comment["body"] and len(github.comments) == 1  # not left with the old verdict
    assert methods(github).count("PATCH") == 2 and len(waits) == 1 and 0.5 <= waits[0] <= 1
    stdout = capsys.readouterr().out
    assert "PR comment updated" in stdout and "::warning" not in stdout


def test_a_comment_deleted_while_the_job_ran_is_posted_again(env: dict[str, str], github: FakeGitHub,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    write(env, regressed())
    assert main() == 1
    github.fail_next(1, 404, {"message": "Not Found"}, method="PATCH")  # deleted between the listing and the edit
    write(env, unchanged())
    assert main(github_factory=client([])) == 0
    assert methods(github).count("POST") == 2 and outputs(env)["comment-url"]
    assert "✅ **pass**" in github.comments[max(github.comments)]["body"]
    assert "PR comment created" in capsys.readouterr().out


def test_bad_gateway_pages_are_retried_and_one_comment_created(env: dict[str, str], github: FakeGitHub,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    github.fail_next(2, 502, HTML_502, method="POST")
    write(env, regressed())
    waits: list[float] = []
    assert main(github_factory=client(waits)) == 1
    (comment,) = github.comments.values()
    assert "❌ **fail**" in comment["body"] and outputs(env)["comment-url"] == comment["html_url"]
    # Each 502 was followed by a fresh look for our comment before posting again.
    assert methods(github).count("POST") == 3 and len(waits) == 2
    assert "PR comment created" in capsys.readouterr().out


def test_a_comment_created_behind_a_failure_is_not_posted_twice(env: dict[str, str], github: FakeGitHub,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    github.fail_next(1, 502, HTML_502, method="POST", after=True)  # created, then the proxy answered 502
    write(env, regressed())
    assert main(github_factory=client([])) == 1
    (comment,) = github.comments.values()
    assert methods(github).count("POST") == 1 and outputs(env)["comment-url"] == comment["html_url"]
    assert "PR comment created" in capsys.readouterr().out


def test_a_primary_rate_limit_is_waited_out(env: dict[str, str], github: FakeGitHub,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # GitHub's reset time, 50 s ahead (under the longest wait waited out, 60 s): the wait asked of `sleep`
    # (recorded, not slept) ends at it, however long the request took to get there.
    reset = int(time.time()) + 50
    github.fail_next(1, 403, {"message": "API rate limit exceeded for installation ID 1."}, method="POST",
                     headers={"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)})
    write(env, unchanged())
    waits: list[float] = []
    ends: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        ends.append(time.time() + seconds)

    assert main(github_factory=lambda s: GitHub(s.api_url, s.token, s.repository, sleep=sleep)) == 0
    assert len(waits) == 1 and 0 < waits[0] <= 50 and reset - 0.01 <= ends[0] < reset + 5
    assert len(github.comments) == 1 and methods(github).count("POST") == 2  # turned away, so safe to resend
    assert "::warning" not in capsys.readouterr().out


def test_a_lasting_outage_gives_up_and_says_so_without_blaming_forks(env: dict[str, str], github: FakeGitHub,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    github.fail_next(10, 500, {"message": f"Server Error (Bearer {github.token})"}, method="POST")
    write(env, unchanged())
    waits: list[float] = []
    assert main(github_factory=client(waits)) == 0  # the gate's result
    assert not github.comments and methods(github).count("POST") == 4 and len(waits) == 3
    stdout = capsys.readouterr().out
    assert "could not post the PR comment (GitHub API 500: Server Error (Bearer ***), after 4 attempts)" in stdout
    assert "fork" not in stdout.lower() and github.token not in stdout


@pytest.mark.parametrize("fork", [True, False])
def test_a_404_blames_forks_only_on_a_fork(env: dict[str, str], github: FakeGitHub, fork: bool,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    head = "someone/bot" if fork else github.repository
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps({"pull_request": {
        "number": 7, "head": {"repo": {"full_name": head}}, "base": {"repo": {"full_name": github.repository}}}}))
    github.fail_next(1, 404, {"message": "Not Found"}, method="POST")
    write(env, unchanged())
    assert main(github_factory=client([])) == 0
    stdout = capsys.readouterr().out
    assert "could not post the PR comment (GitHub API 404: Not Found)" in stdout
    assert ("For fork PRs, see docs/action.md" in stdout) is fork and methods(github).count("POST") == 1


@pytest.mark.parametrize(("status", "body", "headers", "waits"), [
    (401, {"message": "Bad credentials"}, {}, []),
    (404, {"message": "Not Found"}, {}, []),
    (422, {"message": "Validation Failed"}, {}, []),
    (403, {"message": "Resource not accessible by integration"}, {}, []),
    (403, {"message": "API rate limit exceeded"}, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "9999999999"}, []),
    (403, {"message": "You have exceeded a secondary rate limit."}, {"Retry-After": "3"}, [3.0]),
    (403, {"message": "You have exceeded a secondary rate limit."}, {"Retry-After": "600"}, []),
    (429, {"message": "Too Many Requests"}, {"Retry-After": "2"}, [2.0]),
])
def test_what_is_retried(github: FakeGitHub, status: int, body: dict[str, str], headers: dict[str, str],
                         waits: list[float]) -> None:
    slept: list[float] = []
    client = GitHub(github.url, github.token, github.repository, sleep=slept.append)
    github.fail_next(1, status, body, headers)
    if waits:
        assert client.request("GET", f"/repos/{github.repository}/issues/7/comments")[0] == []
    else:
        with pytest.raises(GitHubError) as caught:
            client.request("GET", f"/repos/{github.repository}/issues/7/comments")
        assert caught.value.status == status and caught.value.attempts == 1
        assert "resets in" in str(caught.value) or "X-RateLimit-Reset" not in headers
    assert slept == waits and len(github.requests) == 1 + len(waits)


@pytest.mark.usefixtures("orbench_env")
def test_an_endpoint_that_answers_nothing_is_named_not_compared_as_zero(
        env: dict[str, str], github: FakeGitHub, mock_factory: Callable[..., Any], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The real plugin against the simulator: a baseline from a healthy endpoint, then a PR run whose
    # endpoint rejects the job's key on every call. Nothing is compared, and the comment says why.
    def orbench(url: str, *extra: str) -> None:
        subprocess.run([sys.executable, "-m", "pytest", "--orbench-only", "--orbench-model=openai/orbench-mock",
                        f"--orbench-api-base={url}", "--orbench-sample=5", "--orbench-seed=1", "--orbench-retries=0",
                        f"--orbench-baseline={tmp_path / 'baseline.json'}", "-p", "no:cacheprovider", *extra],
                       cwd=tmp_path, capture_output=True, timeout=300)
    orbench(mock_factory().url, "--orbench-update-baseline")
    orbench(mock_factory(api_key="sk-the-endpoints-own-key").url, f"--orbench-json={env['ORBENCH_RESULTS_PATH']}")
    assert main() == 1
    out = outputs(env)
    assert out["verdict"] == "inconclusive" and out["over-refusal-delta"] == out["toxic-rejection-delta"] == ""
    assert out["p-value"] == ""  # no regression check compared anything
    (comment,) = github.comments.values()
    body = comment["body"]
    assert "**No reply for 10 of 10 prompts**" in body and "Incorrect API key provided: ***" in body
    assert "every prompt of this run errored or went unscored" in body
    assert "+0.0 pp" not in body and "in the baseline" not in body  # not a sampling mismatch, not "no change"
    stdout = capsys.readouterr().out
    assert "::warning title=pytest-orbench::10 of 10 prompts got no reply after the retries; most often: " in stdout
    assert "sk-test-not-a-real-key" not in body + stdout + Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")


def run_two_matrix_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           before_second: Callable[[], None] = lambda: None) -> None:
    """Two matrix entries (same workflow and job name, no comment-key) in one workflow run, each with its own
    work dir as action.yml makes one per use; the first regressed, the second passes."""
    monkeypatch.setenv("GITHUB_RUN_ID", "9001")
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", "1")
    for entry, results in (("model-a", regressed()), ("model-b", unchanged())):
        work = tmp_path / f"orbench-{entry}"
        work.mkdir()
        monkeypatch.setenv("ORBENCH_RESULTS_PATH", str(work / "orbench-results.json"))
        (work / "orbench-results.json").write_text(json.dumps(results), encoding="utf-8")
        if entry == "model-b":
            before_second()
        main(github_factory=client([]))


def test_matrix_jobs_without_comment_key_are_told_they_share_one_comment(
        env: dict[str, str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Two matrix entries (same workflow and job name, no comment-key) in one workflow run, each with its
    # own work dir as action.yml makes one per use: the second would silently replace the first's verdict.
    run_two_matrix_entries(tmp_path, monkeypatch)
    (comment,) = github.comments.values()
    assert "✅ **pass**" in comment["body"] and "Give each its own comment with the `comment-key` input" in comment["body"]
    assert ("::warning title=pytest-orbench::another job or step of this workflow run had written this PR comment"
            in capsys.readouterr().out)
    # The next push (another run) edits the comment as usual, without the note.
    monkeypatch.setenv("GITHUB_RUN_ID", "9002")
    main()
    assert "comment-key" not in github.comments[comment["id"]]["body"]
    assert "::warning" not in capsys.readouterr().out


@pytest.mark.parametrize("args", ["--orbench-json=mine.json", "-q\n--orbench-json mine.json"])
def test_pytest_args_that_move_the_results_file_are_an_input_error_before_any_call(args: str) -> None:
    from action.settings import ActionSettingsError, check_inputs

    # A later --orbench-json won over the Action's own: the run was paid for, then the Report step found no results.
    with pytest.raises(ActionSettingsError, match="pytest-args sets --orbench-json, which the Action sets itself.*remove it"):
        check_inputs({"ORBENCH_PYTEST_ARGS": args})
    assert check_inputs({"ORBENCH_PYTEST_ARGS": "--orbench-sample=30 --orbench-json-indent=2"}) is False


def test_pull_request_target_on_the_base_branch_checkout_stops_before_any_call(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from action.settings import ActionSettingsError, check_inputs

    # pull_request_target checks out the base branch: a verdict from its prompts was posted as the PR's.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty",
                    "-m", "base"], cwd=tmp_path, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    monkeypatch.chdir(tmp_path)
    env = {"GITHUB_EVENT_NAME": "pull_request_target", "GITHUB_SHA": sha}
    with pytest.raises(ActionSettingsError, match="on pull_request_target the checkout is the base branch.*run the gate "
                                                  "on pull_request"):
        check_inputs(env)
    assert check_inputs({**env, "GITHUB_SHA": "0" * 40}) is False  # the pull request's head was checked out
    assert check_inputs({**env, "GITHUB_EVENT_NAME": "pull_request"}) is False


def test_the_base_branch_file_is_asked_of_git_with_forward_slashes_whatever_the_os(monkeypatch: pytest.MonkeyPatch) -> None:
    # On a Windows runner os.path.relpath answers prompts\bot.txt, which `git show ref:./prompts\bot.txt`
    # does not find: the base branch would have been read as having no system prompt.
    from action import base_branch

    asked: list[str] = []

    def git(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        asked.append(args[-1])
        return subprocess.CompletedProcess(["git", *args], 0, "base prompt", "")

    monkeypatch.setattr(base_branch, "_git", git)
    monkeypatch.setattr(base_branch.os, "sep", "\\")
    assert base_branch.show("abc123", "prompts\\bot.txt") == "base prompt"
    assert asked == ["abc123:./prompts/bot.txt"]


def test_a_sibling_comment_deleted_before_the_edit_is_posted_anew_without_the_shared_note(
        env: dict[str, str], github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A matrix sibling of this run wrote the comment, then it was deleted before this use's edit (404): the new
    # comment is this use's alone, so it does not say another job of the run wrote it too.
    run_two_matrix_entries(tmp_path, monkeypatch,
                           before_second=lambda: github.fail_next(1, 404, {"message": "Not Found"}, method="PATCH"))
    posted = github.comments[max(github.comments)]
    assert "✅ **pass**" in posted["body"] and "comment-key" not in posted["body"]


def many_categories(categories: int, regressed: bool = True) -> dict[str, Any]:
    flags = [True] * categories if regressed else [False] * categories
    base = baseline_document(make_results({"hard-1k": [False] * categories}, categories=categories))
    return assess(make_results({"hard-1k": flags}, categories=categories, system="new"), base, parse_gate({}))


def test_a_failing_run_with_3000_categories_leaves_a_comment_that_says_fail_and_fits(
        env: dict[str, str], github: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    # The push before: a passing run's comment.
    write(env, many_categories(3000, regressed=False))
    assert main() == 0
    (comment,) = github.comments.values()
    assert "✅ **pass**" in comment["body"]
    # This push regressed: the per-category table alone would be ~300,000 characters.
    write(env, many_categories(3000))
    assert main() == 1
    (comment,) = github.comments.values()
    body = comment["body"]
    assert len(body) <= 65536 and "❌ **fail**" in body and "✅ **pass**" not in body
    assert "more categories (the most regressed are shown), left out to fit" in body or \
        "more categories in the per-category table, left out to fit" in body
    assert "results-path" in body and body.count("<details>") == body.count("</details>")


def test_a_refused_update_never_leaves_the_earlier_verdict(env: dict[str, str], github: FakeGitHub,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    write(env, unchanged())
    assert main() == 0
    (comment,) = github.comments.values()
    assert "✅ **pass**" in comment["body"]
    # GitHub refuses every body longer than a verdict (a smaller limit than ours, a validation rule).
    github.max_body = 1500
    write(env, regressed())
    assert main() == 1
    (comment,) = github.comments.values()
    assert "❌ **fail**" in comment["body"] and "✅" not in comment["body"]
    assert "Only the verdict is shown here: GitHub refused the full report" in comment["body"]
    assert "::warning title=pytest-orbench::the PR comment shows this run's verdict only" in capsys.readouterr().out


def test_four_hundred_datasets_fit_with_the_failed_ones_shown_first() -> None:
    from pytest_orbench.render.markdown_fit import render_markdown_within

    results = many_categories(10)
    # 400 datasets: copies of hard-1k under other names, one of them the regressed one.
    for i in range(400):
        results["datasets"][f"set-{i:03d}"] = dict(results["datasets"]["hard-1k"], comparison=None)
    body = render_markdown_within(results, 20000)
    assert len(body) <= 20000 and "❌ **fail**" in body and "| hard-1k |" in body
    assert "more datasets (those with a failed or inconclusive check are shown first), left out to fit" in body


def test_the_comment_names_its_commit_and_run_and_is_marked_updating_when_a_job_starts(
        env: dict[str, str], github: FakeGitHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from action.mark_updating import main as mark_updating

    head = "1234567890abcdef1234567890abcdef12345678"
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": head}}}))
    monkeypatch.setenv("GITHUB_SHA", "f" * 40)  # the test merge commit: not what the reviewer pushed
    monkeypatch.setenv("GITHUB_RUN_ID", "4242")
    monkeypatch.setenv("GITHUB_REPOSITORY", github.repository)
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    write(env, unchanged())
    assert main() == 0
    (comment,) = github.comments.values()
    assert "Judged commit `1234567890ab` in [workflow run 4242](https://github.com/acme/bot/actions/runs/4242), " \
           in comment["body"] and "fffffff" not in comment["body"]
    # The next push: its job starts, and the verdict on the pull request is marked as being updated.
    newer = "abcdefabcdefabcdefabcdefabcdefabcdefabcd"
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": newer}}}))
    monkeypatch.setenv("GITHUB_RUN_ID", "4243")
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", "2")
    assert mark_updating() == 0
    (marked,) = github.comments.values()
    assert marked["body"].startswith(comment["body"].split("\n")[0] + "\n> ⏳ **Updating:** a run for commit "
                                     "`abcdefabcdef` started ")
    assert "(https://github.com/acme/bot/actions/runs/4243/attempts/2)" in marked["body"]
    assert "✅ **pass**" in marked["body"]  # the earlier verdict is still there, marked
    assert mark_updating() == 0 and github.comments[marked["id"]]["body"].count("**Updating:**") == 1
    # The job ends: its own verdict replaces everything, banner included.
    write(env, regressed())
    assert main() == 1
    final = github.comments[marked["id"]]["body"]
    assert "**Updating:**" not in final and "❌ **fail**" in final and "commit `abcdefabcdef`" in final


def test_marking_a_comment_never_fails_the_job(env: dict[str, str], github: FakeGitHub,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from action.mark_updating import main as mark_updating

    assert mark_updating() == 0 and not github.comments  # no comment yet: nothing to mark, nothing created
    write(env, unchanged())
    assert main() == 0
    github.fail_next(10, 403, {"message": "Resource not accessible by integration"})
    assert mark_updating() == 0
    assert "could not mark the PR comment as updating" in capsys.readouterr().err
