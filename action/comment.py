"""The sticky PR comment: its body from the shared renderer, found by marker and author, updated in place.
Nothing but the standard library and `action.github` at import: install_failed.py posts with it before
anything is installed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from action.github import GitHub, GitHubError

if TYPE_CHECKING:
    from pytest_orbench.core.records import ResultsDocument

GITHUB_LIMIT = 65536  # characters in an issue comment body


def marker(config_id: str) -> str:
    return f"<!-- pytest-orbench comment: {config_id} -->"


def build_body(results: ResultsDocument, config_id: str, max_chars: int = GITHUB_LIMIT) -> str:
    # Imported here: without results (install_failed.py) this module runs on the runner's bare Python.
    from pytest_orbench.render.markdown_fit import render_markdown_within

    head = marker(config_id) + "\n"
    return head + render_markdown_within(results, max_chars - len(head))


def verdict_body(results: ResultsDocument, config_id: str, why: str) -> str:
    """This run's verdict alone, for when GitHub refused the full report."""
    from pytest_orbench.render.markdown_fit import minimal_markdown

    head = marker(config_id) + "\n"
    return head + minimal_markdown(results, 4000 - len(head), why)


UPDATING = "<!-- pytest-orbench updating -->"


def provenance(head_sha: str, run_url: str, when: datetime | None = None, review_url: str = "") -> str:
    """Which commit and which run a comment's verdict is for, and when: a reviewer tells a stale comment. With the
    review page's link: every flipped prompt with both sides' replies."""
    when = when or datetime.now(UTC)
    commit = f"commit `{head_sha[:12]}`" if head_sha else "this commit"
    run = f" in [workflow run {run_url.rstrip('/').split('/runs/')[-1].split('/')[0]}]({run_url})" if run_url else ""
    review = (f" **[Review page]({review_url})** (HTML, in the run's artifacts: every flipped prompt with both "
              "replies)." if review_url else "")
    return f"<sub>Judged {commit}{run}, {when:%Y-%m-%d %H:%M} UTC.</sub>{review}"


def mark_updating(body: str, head_sha: str, run_url: str, when: datetime | None = None) -> str:
    """The comment's body with a banner on top: a new run has started (for a newer commit, perhaps), so the
    verdict below may no longer hold. The final update replaces the whole body, banner and all."""
    when = when or datetime.now(UTC)
    lines = body.split("\n")
    head, rest = lines[0], [line for line in lines[1:] if UPDATING not in line]
    commit = f"commit `{head_sha[:12]}`" if head_sha else "a new commit"
    run = f" ([workflow run]({run_url}))" if run_url else ""
    banner = (f"> ⏳ **Updating:** a run for {commit} started {when:%Y-%m-%d %H:%M} UTC{run}; the verdict below is "
              f"from an earlier run and may no longer hold. {UPDATING}")
    return "\n".join([head, banner, *rest])


def notice_body(config_id: str, text: str) -> str:
    """The comment when there are no results to show (the run failed before writing them); `text` is
    Markdown, with anything from the pull request already escaped."""
    return f"{marker(config_id)}\n### OR-Bench over-refusal check: ⚠️ **inconclusive**: {text}\n"


def notice_summary(text: str) -> str:
    """The job summary when there are no results to show; `text` as for `notice_body`."""
    return f"### OR-Bench over-refusal check: ⚠️ **inconclusive**\n\n{text}\n"


def changed(results: ResultsDocument) -> bool:
    """For comment: on-change: anything a reviewer should see (the live base's own note is not a change)."""
    gate = results.get("gate")
    changes = [c for c in results.get("changes", []) if c.get("what") != "live base"]
    if gate is None or gate["verdict"] != "pass" or changes:
        return True
    blocks = [s["comparison"] for s in results["datasets"].values() if "comparison" in s]
    return any(b["newly_refused"] or b["newly_answered"] for b in blocks)


def find(comments: list[dict[str, Any]], config_id: str, login: str | None) -> dict[str, Any] | None:
    """Ours: carries this configuration's marker and was written by the same account (`login`), or by a bot
    account when the token is an installation token (None: a GitHub App's bot is named after the app, which
    the token cannot look up). Never a person's comment that quotes the marker."""
    tag = marker(config_id)
    for comment in comments:
        user = comment.get("user") or {}
        if tag in (comment.get("body") or "") and (user.get("login") == login if login else user.get("type") == "Bot"):
            return comment
    return None


def use_marker(run: str, use: str) -> str:
    return f"<!-- pytest-orbench use: {run} {use} -->"


SHARED = ("> ⚠️ Another job or step of this workflow run wrote this comment too (a matrix entry, or a second use "
          "of the action in one job), so it shows whichever finished last. Give each its own comment with the "
          "`comment-key` input, e.g. `comment-key: ${{ matrix.model }}`.")


def shared_with_sibling(existing: dict[str, Any] | None, run: str, use: str) -> bool:
    """The comment was last written in this same workflow run attempt by another use of the action."""
    body = (existing or {}).get("body") or ""
    return bool(run) and f"<!-- pytest-orbench use: {run} " in body and use_marker(run, use) not in body


def upsert(github: GitHub, number: int, results: ResultsDocument | None, config_id: str, mode: str,
           notice: str = "no results", run: str = "", use: str = "", stamp: str = "") -> tuple[str, str | None]:
    """('created' | 'updated' | 'shared' | 'skipped', comment URL). Raises GitHubError when GitHub refuses.
    Without results, the comment says `notice` (and replaces whatever verdict it showed before).
    `run` (run id and attempt) and `use` (this use of the action) tell a sibling job's comment from an
    earlier push's: 'shared' is an update of a comment another job of this run had written."""
    if mode == "never":
        return "skipped", None
    login = github.viewer_login()
    existing = find(github.comments(number), config_id, login)
    if existing is None and mode == "on-change" and results is not None and not changed(results):
        return "skipped", None
    shared = shared_with_sibling(existing, run, use)
    limit = GITHUB_LIMIT
    refused: str | None = None  # why GitHub refused the full report: then the verdict alone is posted
    while True:
        # (each time: an edit that finds the comment deleted posts this use's own, without the shared note)
        tail = (f"\n{SHARED}\n" if shared else "") + (f"\n{stamp}\n" if stamp else "") + \
            (f"\n{use_marker(run, use)}\n" if run else "")
        if results is None:
            body = notice_body(config_id, notice) + tail
        elif refused is not None:
            body = verdict_body(results, config_id, refused) + tail
        else:
            body = build_body(results, config_id, limit - len(tail)) + tail
        try:
            if existing is not None:
                comment = github.update_comment(int(existing["id"]), body)
                action = "shared" if shared else "updated"
            else:
                comment = github.create_comment(number, body, lambda comments: find(comments, config_id, login))
                action = "created"
            return (f"{action} (verdict only: {refused})" if refused else action), comment.get("html_url")
        except GitHubError as exc:
            if exc.status == 404 and existing is not None:
                existing, shared = None, False  # deleted since it was listed (by a person, or a re-run): post anew
                continue
            # 422: the body was still too long for GitHub (it counts differently); shorten by
            # dropping parts again, down to a floor, never by cutting Markdown.
            if exc.status == 422 and limit >= 4000 and refused is None:
                limit //= 2
                continue
            if results is not None and refused is None and exc.status in (400, 413, 422):
                # The full report was refused (too long, a validation error): an earlier verdict must not stand
                # on the pull request, so the comment states this run's verdict alone. (A token that cannot
                # write, or an outage, refuses any body: those are said as they are.)
                refused = f"GitHub refused the full report ({exc})"
                continue
            raise
