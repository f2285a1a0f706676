"""The sticky PR comment: its body from the shared renderer, found by marker and author, updated in place."""

from __future__ import annotations

from typing import Any

from action.github import GitHub, GitHubError
from pytest_orbench.markdown import render_markdown_within
from pytest_orbench.records import ResultsDocument

GITHUB_LIMIT = 65536  # characters in an issue comment body


def marker(config_id: str) -> str:
    return f"<!-- pytest-orbench comment: {config_id} -->"


def build_body(results: ResultsDocument, config_id: str, max_chars: int = GITHUB_LIMIT) -> str:
    head = marker(config_id) + "\n"
    return head + render_markdown_within(results, max_chars - len(head))


def notice_body(config_id: str, text: str) -> str:
    """The comment when there are no results to show (the run failed before writing them); `text` is
    Markdown, with anything from the pull request already escaped."""
    return f"{marker(config_id)}\n### OR-Bench over-refusal check: ⚠️ **inconclusive**: {text}\n"


def changed(results: ResultsDocument) -> bool:
    """For comment: on-change: anything a reviewer should see (the live base's own note is not a change)."""
    gate = results.get("gate")
    changes = [c for c in results.get("changes", []) if c.get("what") != "live base"]
    if gate is None or gate["verdict"] != "pass" or changes:
        return True
    blocks = [s["comparison"] for s in results["datasets"].values() if "comparison" in s]
    return any(b["newly_refused"] or b["newly_answered"] for b in blocks)


def find(comments: list[dict[str, Any]], config_id: str, login: str) -> dict[str, Any] | None:
    """Ours: carries this configuration's marker and was written by the same account."""
    tag = marker(config_id)
    for comment in comments:
        if tag in (comment.get("body") or "") and (comment.get("user") or {}).get("login") == login:
            return comment
    return None


def upsert(github: GitHub, number: int, results: ResultsDocument | None, config_id: str, mode: str,
           notice: str = "no results") -> tuple[str, str | None]:
    """('created' | 'updated' | 'skipped', comment URL). Raises GitHubError when GitHub refuses.
    Without results, the comment says `notice` (and replaces whatever verdict it showed before)."""
    if mode == "never":
        return "skipped", None
    login = github.viewer_login()
    existing = find(github.comments(number), config_id, login)
    if existing is None and mode == "on-change" and results is not None and not changed(results):
        return "skipped", None
    limit = GITHUB_LIMIT
    while True:
        body = build_body(results, config_id, limit) if results is not None else notice_body(config_id, notice)
        try:
            if existing is not None:
                comment = github.update_comment(int(existing["id"]), body)
                return "updated", comment.get("html_url")
            comment = github.create_comment(number, body, lambda comments: find(comments, config_id, login))
            return "created", comment.get("html_url")
        except GitHubError as exc:
            # 422: the body was still too long for GitHub (it counts differently); shorten by
            # dropping list items again, down to a floor, never by cutting Markdown.
            if exc.status != 422 or limit < 4000:
                raise
            limit //= 2
