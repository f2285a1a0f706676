"""The Action's settings, from the environment the runner and action.yml set."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMMENT_MODES = ("always", "on-change", "never")
COMPARE_MODES = ("baseline", "base-branch")
# What the Run step reports instead of pytest's exit code when it stopped before pytest ran.
RUN_FAILURES = {"input": "an input is invalid", "base-branch": "the base branch could not be read"}


class ActionSettingsError(ValueError):
    """An input that cannot be used; the message names the input."""


@dataclass(frozen=True)
class ActionSettings:
    results_path: Path
    api_url: str
    repository: str
    pr_number: int | None
    comment: str
    fail_on_regression: bool
    config_id: str
    system_prompt_file: str | None
    pytest_exit_code: int | None
    from_fork: bool = False
    token: str | None = field(default=None, repr=False)
    run_failure: str | None = None  # why the Run step stopped before pytest (RUN_FAILURES), if it did
    run: str = ""  # the workflow run id and attempt: tells a sibling matrix job's comment from an earlier push's
    head_sha: str = ""  # the commit this job judges: the pull request's head
    review_url: str = ""  # the uploaded review page (--orbench-html), linked from the comment
    run_url: str = ""  # the workflow run (its attempt), on GitHub


def head_sha(event: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """The commit judged: the pull request's head (GITHUB_SHA is the test merge commit there), else GITHUB_SHA."""
    sha = str(((event.get("pull_request") or {}).get("head") or {}).get("sha") or env.get("GITHUB_SHA") or "")
    return sha if len(sha) in (40, 64) and all(c in "0123456789abcdef" for c in sha.lower()) else ""


def review_url(url: str) -> str:
    """upload-artifact's artifact-url, if it is one of GitHub's (the comment links it)."""
    url = url.strip()
    return url if url.startswith("https://") and " " not in url and ")" not in url else ""


def run_url(env: Mapping[str, str]) -> str:
    run_id, repository = env.get("GITHUB_RUN_ID", ""), env.get("GITHUB_REPOSITORY", "")
    if not run_id.isdigit() or repository.count("/") != 1:
        return ""
    server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    attempt = env.get("GITHUB_RUN_ATTEMPT", "1")
    return f"{server}/{repository}/actions/runs/{run_id}" + (f"/attempts/{attempt}" if attempt.isdigit() and attempt != "1" else "")


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ActionSettingsError(f"input {name} must be true or false, got {value!r}")


def read_event(event_path: str | None) -> dict[str, Any]:
    """The event payload the runner wrote ({} when there is none)."""
    if not event_path or not Path(event_path).is_file():
        return {}
    event = json.loads(Path(event_path).read_text(encoding="utf-8"))
    return event if isinstance(event, dict) else {}


def pull_request_number(event: Mapping[str, Any]) -> int | None:
    """The PR number from the event payload (pull_request, pull_request_target, issue_comment)."""
    number = (event.get("pull_request") or {}).get("number")
    if number is None and (event.get("issue") or {}).get("pull_request"):
        number = event["issue"].get("number")
    return int(number) if number is not None else None


def from_fork(event: Mapping[str, Any]) -> bool:
    """Whether the pull request's head is in another repository (its token is read-only there)."""
    pull = event.get("pull_request") or {}
    # Not head.repo.fork: a branch of a repository that is itself a fork has a writable token.
    head, base = ((pull.get(side) or {}).get("repo") or {} for side in ("head", "base"))
    return bool(head.get("full_name") and base.get("full_name") and head["full_name"] != base["full_name"])


def _comment_mode(env: Mapping[str, str]) -> str:
    comment = env.get("ORBENCH_COMMENT", "always").strip() or "always"
    if comment not in COMMENT_MODES:
        raise ActionSettingsError(f"input comment must be one of {', '.join(COMMENT_MODES)}, got {comment!r}")
    return comment


def check_inputs(env: Mapping[str, str]) -> bool:
    """The Run step's check, before any endpoint call: every input the Action reads itself is valid.
    Returns use-conftest."""
    _comment_mode(env)
    _bool("fail-on-regression", env.get("ORBENCH_FAIL_ON_REGRESSION", "true"))
    _bool("verify-flips", env.get("ORBENCH_VERIFY_FLIPS", "false") or "false")
    _bool("review-page", env.get("ORBENCH_REVIEW_PAGE", "true") or "true")
    compare = env.get("ORBENCH_COMPARE_WITH", "baseline").strip() or "baseline"
    if compare not in COMPARE_MODES:
        raise ActionSettingsError(f"input compare-with must be one of {', '.join(COMPARE_MODES)}, got {compare!r}")
    # Split on whitespace, as the Run step splits pytest-args. A later --orbench-json wins over the Action's
    # own, and the Report step then found no results: the run was paid for and the comment inconclusive.
    if any(w == "--orbench-json" or w.startswith("--orbench-json=") for w in env.get("ORBENCH_PYTEST_ARGS", "").split()):
        raise ActionSettingsError("input pytest-args sets --orbench-json, which the Action sets itself (its Report step "
                                  "reads the results there, and the results-path output names that file): remove it "
                                  "from pytest-args")
    _check_checkout(env)
    return _bool("use-conftest", env.get("ORBENCH_USE_CONFTEST", "false"))


def _check_checkout(env: Mapping[str, str]) -> None:
    """On pull_request_target, GITHUB_SHA (what actions/checkout checks out by default) is the base branch:
    the run would test the base branch's prompts and post the verdict on the pull request as its own."""
    sha = env.get("GITHUB_SHA", "").strip()
    if env.get("GITHUB_EVENT_NAME") != "pull_request_target" or not sha:
        return
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return  # no git: nothing to tell the checkout by
    if head.returncode == 0 and head.stdout.strip() == sha:
        raise ActionSettingsError(
            "on pull_request_target the checkout is the base branch (GITHUB_SHA), not the pull request, so this run "
            "would test the base branch's prompts and report them as the pull request's: run the gate on pull_request "
            "(a fork's pull request: see Fork PRs in docs/action.md)")


def _fails(env: Mapping[str, str]) -> bool:
    """fail-on-regression; a value that is neither (the Run step already stopped on it) fails the job, so
    the comment can still be marked inconclusive instead of keeping an earlier verdict."""
    try:
        return _bool("fail-on-regression", env.get("ORBENCH_FAIL_ON_REGRESSION", "true"))
    except ActionSettingsError:
        if env.get("ORBENCH_PYTEST_EXIT_CODE", "").strip() != "input":
            raise
        return True


def from_env(env: Mapping[str, str] = os.environ) -> ActionSettings:
    comment = _comment_mode(env)
    results = env.get("ORBENCH_RESULTS_PATH", "")
    if not results:
        raise ActionSettingsError("ORBENCH_RESULTS_PATH is not set (action.yml sets it)")
    # One comment per pull request and job: the workflow and job (and comment-key, for matrix jobs) say
    # which comment is ours, never what was run, so a PR that tries another model on its next push
    # edits the same comment instead of leaving a stale one behind.
    identity = "|".join(env.get(k, "") for k in ("GITHUB_WORKFLOW", "GITHUB_JOB", "ORBENCH_COMMENT_KEY"))
    exit_code = env.get("ORBENCH_PYTEST_EXIT_CODE", "").strip()
    event = read_event(env.get("GITHUB_EVENT_PATH"))
    return ActionSettings(
        results_path=Path(results),
        api_url=env.get("GITHUB_API_URL", "https://api.github.com").rstrip("/"),
        repository=env.get("GITHUB_REPOSITORY", ""),
        pr_number=pull_request_number(event),
        comment=comment,
        fail_on_regression=_fails(env),
        config_id=hashlib.sha256(identity.encode()).hexdigest()[:12],
        system_prompt_file=env.get("ORBENCH_SYSTEM_PROMPT_FILE") or None,
        pytest_exit_code=int(exit_code) if exit_code.lstrip("-").isdigit() else None,
        from_fork=from_fork(event),
        token=env.get("GITHUB_TOKEN") or None,
        run_failure=RUN_FAILURES.get(exit_code),
        run=f"{env['GITHUB_RUN_ID']}.{env.get('GITHUB_RUN_ATTEMPT', '1')}" if env.get("GITHUB_RUN_ID") else "",
        head_sha=head_sha(event, env),
        review_url=review_url(env.get("ORBENCH_REVIEW_URL", "")),
        run_url=run_url(env),
    )


RUN_ERROR = "orbench-run-error"  # in the work dir: why the Run step stopped, for the Report step's comment
RUN_STDERR = "orbench-stderr"  # in the work dir: pytest's stderr (its usage error), copied by the Run step


def report_run_error(message: str) -> None:
    """The Run step stops: an error annotation now, and the message kept for the Report step's comment."""
    text = " ".join(message.split())
    print(f"::error title=pytest-orbench::{text}", file=sys.stderr)
    if os.environ.get("ORBENCH_TEMP"):
        (Path(os.environ["ORBENCH_TEMP"]) / RUN_ERROR).write_text(text, encoding="utf-8")


if __name__ == "__main__":  # action.yml's Run step: python -P action/settings.py prints use-conftest
    try:
        print("true" if check_inputs(os.environ) else "false")
    except ActionSettingsError as exc:
        report_run_error(str(exc))
        sys.exit(1)
