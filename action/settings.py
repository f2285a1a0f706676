"""The Action's settings, from the environment the runner and action.yml set."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

COMMENT_MODES = ("always", "on-change", "never")


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
    token: str | None = field(default=None, repr=False)


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ActionSettingsError(f"input {name} must be true or false, got {value!r}")


def pull_request_number(event_path: str | None) -> int | None:
    """The PR number from the event payload (pull_request, pull_request_target, issue_comment)."""
    if not event_path or not Path(event_path).is_file():
        return None
    event = json.loads(Path(event_path).read_text(encoding="utf-8"))
    number = (event.get("pull_request") or {}).get("number")
    if number is None and (event.get("issue") or {}).get("pull_request"):
        number = event["issue"].get("number")
    return int(number) if number is not None else None


def from_env(env: Mapping[str, str] = os.environ) -> ActionSettings:
    comment = env.get("ORBENCH_COMMENT", "always").strip() or "always"
    if comment not in COMMENT_MODES:
        raise ActionSettingsError(f"input comment must be one of {', '.join(COMMENT_MODES)}, got {comment!r}")
    results = env.get("ORBENCH_RESULTS_PATH", "")
    if not results:
        raise ActionSettingsError("ORBENCH_RESULTS_PATH is not set (action.yml sets it)")
    # One comment per pull request and job: the workflow and job (and comment-key, for matrix jobs) say
    # which comment is ours, never what was run, so a PR that tries another model on its next push
    # edits the same comment instead of leaving a stale one behind.
    identity = "|".join(env.get(k, "") for k in ("GITHUB_WORKFLOW", "GITHUB_JOB", "ORBENCH_COMMENT_KEY"))
    exit_code = env.get("ORBENCH_PYTEST_EXIT_CODE", "").strip()
    return ActionSettings(
        results_path=Path(results),
        api_url=env.get("GITHUB_API_URL", "https://api.github.com").rstrip("/"),
        repository=env.get("GITHUB_REPOSITORY", ""),
        pr_number=pull_request_number(env.get("GITHUB_EVENT_PATH")),
        comment=comment,
        fail_on_regression=_bool("fail-on-regression", env.get("ORBENCH_FAIL_ON_REGRESSION", "true")),
        config_id=hashlib.sha256(identity.encode()).hexdigest()[:12],
        system_prompt_file=env.get("ORBENCH_SYSTEM_PROMPT_FILE") or None,
        pytest_exit_code=int(exit_code) if exit_code.lstrip("-").isdigit() else None,
        token=env.get("GITHUB_TOKEN") or None,
    )
