"""A job starts: mark the PR comment as being updated. `python -I -S path/to/action/mark_updating.py`

Until this job ends, the comment shows the verdict of an earlier run (an earlier commit, perhaps); a job
still running, or cancelled by the next push, would leave it looking current. So the first step puts a
banner on it naming the commit and the run now under way; the Report step replaces the whole comment.
Runs on the runner's Python as setup-python left it, without site (no .pth file of an earlier step's
packages runs) and with the standard library only, before anything is installed; a failure here is a
warning, never the job's failure.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from action.comment import find, mark_updating  # noqa: E402
from action.github import GitHub, GitHubError  # noqa: E402
from action.settings import ActionSettingsError, from_env  # noqa: E402


def main() -> int:
    try:
        settings = from_env(os.environ)
    except ActionSettingsError as exc:
        print(f"::warning title=pytest-orbench::the PR comment was not marked as updating: {exc}", file=sys.stderr)
        return 0  # the Run step checks the inputs and says what is wrong
    if settings.pr_number is None or settings.comment == "never":
        return 0
    github = GitHub(settings.api_url, settings.token, settings.repository)
    try:
        existing = find(github.comments(settings.pr_number), settings.config_id, github.viewer_login())
        if existing is None:
            return 0  # nothing on the pull request yet: nothing to mistake for this run's verdict
        github.update_comment(int(existing["id"]), mark_updating(str(existing.get("body") or ""), settings.head_sha,
                                                                 settings.run_url))
    except GitHubError as exc:
        print(f"::warning title=pytest-orbench::could not mark the PR comment as updating ({exc})", file=sys.stderr)
        return 0
    print(f"pytest-orbench: PR comment marked as updating: {existing.get('html_url', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
