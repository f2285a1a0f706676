"""The install step failed: mark the PR comment inconclusive. `python -I -S path/to/action/install_failed.py`

No other step ran, so an earlier verdict on the pull request (perhaps a pass) would stand for a run that
checked nothing while the job is red. This runs on the runner's Python as setup-python left it, without
site (no .pth file of an earlier step's packages runs) and with the standard library only: what failed to
install (github-action-utils, the lock) is not needed here. Like the Report step after a run without
results, it sets `verdict: inconclusive` and writes the job summary; when the install step refused to run
(a known-compromised release in view, action/site_scan.py), the comment says why instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from action.comment import notice_summary, provenance, upsert  # noqa: E402
from action.github import GitHub, GitHubError  # noqa: E402
from action.settings import ActionSettingsError, from_env  # noqa: E402

NOTICE = ("the action could not install its pinned dependencies (see the install step's log: a package index "
          "outage, or a file whose hash no longer matches the lock), so nothing was run or compared")


def _append(variable: str, text: str) -> None:
    """To the file the runner names in `variable` (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY), when it names one."""
    if os.environ.get(variable):
        with open(os.environ[variable], "a", encoding="utf-8") as file:
            file.write(text)


def main() -> int:
    # Why the install step stopped, when it refused (site_scan.py: a known-compromised release in view).
    notice = " ".join(os.environ.get("ORBENCH_INSTALL_REFUSAL", "").split()) or NOTICE
    print(f"::error title=pytest-orbench::{notice.replace('%', '%25')}", file=sys.stderr)
    _append("GITHUB_STEP_SUMMARY", notice_summary(notice))
    _append("GITHUB_OUTPUT", "verdict=inconclusive\n")
    try:
        settings = from_env(os.environ)
    except ActionSettingsError as exc:
        print(f"::warning title=pytest-orbench::the PR comment was not marked inconclusive: {exc}", file=sys.stderr)
        return 1
    if settings.pr_number is None or settings.comment == "never":
        return 1
    github = GitHub(settings.api_url, settings.token, settings.repository)
    try:
        action, url = upsert(github, settings.pr_number, None, settings.config_id, settings.comment, notice,
                             run=settings.run, use=settings.results_path.parent.name,
                             stamp=provenance(settings.head_sha, settings.run_url))
    except GitHubError as exc:
        print(f"::warning title=pytest-orbench::could not mark the PR comment inconclusive ({exc})", file=sys.stderr)
        return 1
    if url:
        _append("GITHUB_OUTPUT", f"comment-url={url}\n")
    print(f"pytest-orbench: PR comment {action}{': ' + url if url else ''}")
    return 1  # the job stays failed: the install step's own failure is what it reports


if __name__ == "__main__":
    sys.exit(main())
