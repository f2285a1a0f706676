"""`python -m action`: outputs, job summary, annotations and the PR comment; the exit status is the gate's."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import github_action_utils as gha

from action.comment import build_body, notice_summary, provenance, upsert
from action.github import GitHub, GitHubError
from action.settings import RUN_ERROR, RUN_STDERR, ActionSettings, ActionSettingsError, from_env
from pytest_orbench.analysis.gate import BLOCKING
from pytest_orbench.calls.scrubbing import scrub
from pytest_orbench.core.datasets.registry import of_role
from pytest_orbench.core.prompt_file import split
from pytest_orbench.core.records import ResultsDocument, ResultsError, load_results
from pytest_orbench.render.markdown import error_reasons
from pytest_orbench.render.markdown_escape import md_code, md_text

OVER_REFUSAL = of_role("over-refusal")  # the datasets whose rate the outputs report, the first that ran
TOXIC = of_role("toxic")


def _plain(text: str) -> str:
    """An annotation's text: one line, control, bidi and other invisible characters shown as [U+001B], never obeyed
    (an endpoint's error can carry ESC, BEL or U+202E), as the comment and the terminal show them."""
    from pytest_orbench.render.markdown_escape import visible

    return visible(" ".join(str(text).split()))


def _warning(text: str, **kwargs: Any) -> None:
    gha.warning(_plain(text), **kwargs)


def _error(text: str, **kwargs: Any) -> None:
    gha.error(_plain(text), **kwargs)


def _notice(text: str, **kwargs: Any) -> None:
    gha.notice(_plain(text), **kwargs)


def _first(datasets: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any] | None:
    return next((datasets[n] for n in names if n in datasets), None)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _delta(summary: dict[str, Any] | None) -> float | None:
    """The paired delta, None when nothing was paired (every prompt errored): never a made-up 0."""
    comparison = (summary or {}).get("comparison") or {}
    return comparison.get("delta") if comparison.get("n") else None


def outputs(results: ResultsDocument) -> dict[str, str]:
    datasets = results["datasets"]
    over, toxic = _first(datasets, OVER_REFUSAL), _first(datasets, TOXIC)
    p_values = [c["p_value"] for c in results["gate"]["checks"]
                if c["kind"] == "regression" and _delta(dict(datasets.get(c["dataset"]) or {})) is not None]
    return {
        "verdict": results["gate"]["verdict"],
        "over-refusal-rate": _fmt(over["rejection_rate"] if over else None),
        "over-refusal-delta": _fmt(_delta(over)),
        "toxic-rejection-rate": _fmt(toxic["rejection_rate"] if toxic else None),
        "toxic-rejection-delta": _fmt(_delta(toxic)),
        "p-value": f"{min(p_values):.6g}" if p_values else "",
    }


def prompt_diff_stat(path: str | None, base_ref: str | None) -> dict[str, str] | None:
    """`git diff --numstat` of the system-prompt file against the PR's base branch, when git can tell."""
    if not path or not base_ref or split(path)[1] is not None:
        return None  # a prompt under a key of a larger file: the file's line counts are not the prompt's
    # Since the merge base; a shallow checkout (actions/checkout's default fetch-depth: 1) has none, and
    # there HEAD is the merge commit GitHub made on the base branch: the plain diff is the PR's change.
    for commits in (f"origin/{base_ref}...HEAD", f"origin/{base_ref}"):
        try:
            proc = subprocess.run(["git", "diff", "--numstat", commits, "--", path],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode == 0:
            break
    fields = proc.stdout.split()
    if proc.returncode != 0 or len(fields) < 2:
        return None  # the base branch is not fetched, or the file did not change
    return {"what": f"system prompt file {path}", "baseline": f"origin/{base_ref}", "current": f"+{fields[0]} -{fields[1]} lines"}


def base_branch_note(path: str | None) -> dict[str, str] | None:
    """compare-with: base-branch: what the live base was built from, for the comment."""
    if not path or not os.path.isfile(path):
        return None
    info = json.loads(Path(path).read_text(encoding="utf-8"))
    parts = [f"model {info['model']}" if info.get("model") else "",
             *(f"{key} {value}" for key, value in (info.get("params") or {}).items()),
             f"system prompt from {info['system_prompt_from']}" if info.get("system_prompt_from") else "",
             *info.get("notes", [])]
    return {"what": "live base", "baseline": f"origin/{info['base_ref']}", "current": "this pull request",
            "message": f"asked under origin/{info['base_ref']}'s configuration in this run: "
                       + "; ".join(p for p in parts if p)}


def _set_outputs(values: Mapping[str, str]) -> None:
    if os.environ.get("GITHUB_OUTPUT"):
        for name, value in values.items():
            gha.set_output(name, value)


def run_error(settings: ActionSettings, env: Mapping[str, str]) -> str:
    """Why the Run step stopped, as it said it: the input or base-branch error it wrote, else pytest's
    usage error lines ("ERROR: ...") from its stderr; "" when there is none (a crash: see the log)."""
    work = settings.results_path.parent
    try:
        if (work / RUN_ERROR).is_file():
            return scrub(None, (work / RUN_ERROR).read_text(encoding="utf-8").strip(), env)
        if (work / RUN_STDERR).is_file():
            lines = (work / RUN_STDERR).read_text(encoding="utf-8", errors="replace").splitlines()
            errors = [line.removeprefix("ERROR: ").strip() for line in lines if line.startswith("ERROR: ")]
            return scrub(None, " ".join(errors[-3:])[:1000], env)
    except OSError:
        pass
    return ""


def _no_results(settings: ActionSettings, github_factory: Callable[[ActionSettings], GitHub] | None,
                env: Mapping[str, str]) -> int:
    detail = run_error(settings, env)
    if settings.run_failure:
        message = f"{settings.run_failure}, so nothing was run or compared"
        detail = detail or "see the Run step's error above"
    elif detail:
        message = "pytest --orbench stopped with a usage error before any result, so nothing was compared"
        if settings.from_fork and ("no API key" in detail or "which is not set" in detail):
            # The key is set in the repository's secrets, yet missing: GitHub gives a fork's pull request none.
            message += (" (a pull request from a fork gets no repository secrets, so the provider key is empty here; "
                        "see Fork PRs in docs/action.md for the workflow_run pattern)")
    else:
        message = (f"pytest --orbench wrote no results (exit code {settings.pytest_exit_code}), so nothing was "
                   "compared; see the Run step's log for the usage error or crash")
    _error(f"{message}: {detail}" if detail else message, title="pytest-orbench")
    # The detail quotes the pull request's inputs and files (a dataset name, a path): a code span in Markdown.
    shown = md_text(message) + (f": {md_code(detail)}" if detail else "")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        gha.append_job_summary(notice_summary(shown))
    # An earlier verdict on the pull request (perhaps a pass) must not stand for this run.
    url = _comment(settings, github_factory, None, shown) or ""
    _set_outputs({"verdict": "inconclusive", "results-path": "", "comment-url": url})
    return 1 if settings.fail_on_regression else 0


def _comment(settings: ActionSettings, github_factory: Callable[[ActionSettings], GitHub] | None,
             results: ResultsDocument | None, notice: str = "") -> str | None:
    """Create or update the PR comment; its URL (None when none was posted). GitHub's refusal is a warning."""
    if settings.pr_number is None:
        if settings.comment != "never":
            _notice("not a pull request event: no PR comment", title="pytest-orbench")
        return None
    if settings.comment == "never":
        return None
    github = (github_factory or (lambda s: GitHub(s.api_url, s.token, s.repository)))(settings)
    try:
        action, url = upsert(github, settings.pr_number, results, settings.config_id, settings.comment, notice,
                             run=settings.run, use=settings.results_path.parent.name,
                             stamp=provenance(settings.head_sha, settings.run_url, review_url=settings.review_url))
    except GitHubError as exc:
        # No failure to comment turns a passing check red: the gate decides. The fork hint only where
        # a fork's read-only token is the cause, not for an outage or a rate limit.
        fork = exc.token_cannot_write or (exc.status == 404 and settings.from_fork)
        _warning(f"could not post the PR comment ({exc}); the job result reflects the gate only."
                    + (" For fork PRs, see docs/action.md (workflow_run pattern)." if fork else ""),
                    title="pytest-orbench")
        return None
    if "(verdict only:" in action:
        # The earlier verdict does not stand: the comment says this run's, without the report.
        _warning(f"the PR comment shows this run's verdict only: {action.split('(verdict only: ', 1)[1].rstrip(')')}; "
                    "the full report is in the job summary and the results file", title="pytest-orbench")
    if action.startswith("shared"):
        # Matrix entries share the workflow and job name: without comment-key they overwrite one comment.
        _warning("another job or step of this workflow run had written this PR comment, and this one replaced "
                    "its results; set the comment-key input (e.g. the matrix value) so each keeps its own comment",
                    title="pytest-orbench")
        action = action.replace("shared", "updated", 1)
    print(f"pytest-orbench: PR comment {action}{': ' + url if url else ''}")
    return url


def main(env: Mapping[str, str] | None = None, github_factory: Callable[[ActionSettings], GitHub] | None = None) -> int:
    env = os.environ if env is None else env
    try:
        settings = from_env(env)
    except ActionSettingsError as exc:
        _error(str(exc), title="pytest-orbench")
        _set_outputs({"verdict": "inconclusive"})
        return 1
    if not settings.results_path.is_file():
        return _no_results(settings, github_factory, env)
    try:
        results = load_results(settings.results_path)
    except ResultsError as exc:
        _error(f"{exc}; the results file is written by pytest --orbench-json", title="pytest-orbench")
        return 1
    stat = prompt_diff_stat(settings.system_prompt_file, env.get("GITHUB_BASE_REF"))
    if stat is not None:
        results.setdefault("changes", []).append(stat)
    base = base_branch_note(env.get("ORBENCH_BASE_INFO"))
    if base is not None:
        results.setdefault("changes", []).insert(0, base)
    verdict = results["gate"]["verdict"]
    values = outputs(results) | {"results-path": str(settings.results_path), "comment-url": ""}

    if os.environ.get("GITHUB_STEP_SUMMARY"):
        gha.append_job_summary(build_body(results, settings.config_id))
    if verdict == "ungated":
        _warning(f"OR-Bench gate ungated: {results['gate'].get('note', 'nothing was checked')}; set the baseline "
                    "input or gate limits in orbench.yaml to gate merges", title="pytest-orbench")
    elif verdict != "pass":
        failed = "; ".join(f"{c['name']}: {c['message']}" for c in results["gate"]["checks"] if c["outcome"] != "pass")
        prompt_file = split(settings.system_prompt_file)[0] if settings.system_prompt_file else None
        _error(f"OR-Bench gate {verdict}: {failed}", title="pytest-orbench", file=prompt_file)
    errored, reasons = error_reasons(results, limit=1)
    if errored:
        # What went wrong with the endpoint, where the annotation is read (the comment lists more).
        _warning(f"{errored} of {len(results['prompts'])} prompts got no reply after the retries; most often: "
                    f"{reasons[0][0][:300]} ({reasons[0][1]})", title="pytest-orbench")
    judged, reasons = error_reasons(results, limit=1, source="judge")
    if judged:
        # Replies that came back but got no judgement: the judge failed, not the endpoint.
        _warning(f"{judged} of {len(results['prompts'])} prompts got no judgement (judge errors); most often: "
                    f"{reasons[0][0][:300]} ({reasons[0][1]})", title="pytest-orbench")
    skipped = results["gate"].get("baseline_only") or []
    if skipped:
        # A pull request that stops running a dataset stops its check: say so where reviewers look.
        _warning(f"not checked: {', '.join(skipped)} (in the baseline, not run by this job); the verdict covers "
                    f"{', '.join(results['gate'].get('compared') or []) or 'no dataset'} only", title="pytest-orbench")

    values["comment-url"] = _comment(settings, github_factory, results) or ""
    _set_outputs(values)
    print(f"pytest-orbench: verdict {verdict}")
    return 1 if verdict in BLOCKING and settings.fail_on_regression else 0
