"""The Markdown report's sections (--orbench-markdown, the Action's PR comment and job summary, `orbench compare`),
each cut to what a Fit shows; markdown_escape escapes the untrusted text, markdown_fit fits it within a limit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from pytest_orbench.analysis.wording import error_shown, pct, pp
from pytest_orbench.core.records import NOT_REQUESTED, ResultsDocument, RunMeta, against_live_base
from pytest_orbench.render.chart import mermaid, our_points, paper_points
from pytest_orbench.render.markdown_escape import md_code, md_escape, md_message, md_text
from pytest_orbench.render.terminal import P_EXPLAINED, drift_lines, rerun_command, verification_summary

ICON = {"pass": "✅", "fail": "❌", "inconclusive": "⚠️", "ungated": "⚪"}
MARKER = "<!-- pytest-orbench report -->"


@dataclass(frozen=True)
class Fit:
    """How much of each part of the report is shown (None: all of it); render_markdown_within tightens
    these until the report fits, the largest parts first."""

    lists: int | None = None  # prompts per newly refused / answered / flaky list
    categories: int | None = None  # rows of the per-category table
    datasets: int | None = None  # rows of the dataset table (and their checks and warnings)
    checks: int | None = None  # gate checks and warnings listed
    chart: bool = True


FULL_REPORT = "the full report is in the results file (`--orbench-json`; in the Action, the `results-path` output)"


def _more(count: int, what: str) -> str:
    return f"_… and {count:,} more {what}, left out to fit: {FULL_REPORT}._"


def _p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "<0.0001" if p < 0.0001 else f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


def _ci_pp(ci: list[float]) -> str:
    return f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}] pp"


def _against(results: ResultsDocument) -> str:
    """The compared column's heading: the live base asked in this run, or the baseline file."""
    return "live base" if against_live_base(results["run"]) else "baseline"


def _shown_datasets(results: ResultsDocument, limit: int | None) -> list[str]:
    """The datasets the report shows: all, or the `limit` that matter most (failed or inconclusive checks first,
    then the largest)."""
    names = list(results["datasets"])
    if limit is None or len(names) <= limit:
        return names
    gate = results.get("gate")
    flagged = {c["dataset"] for c in (gate["checks"] if gate else []) if c["outcome"] != "pass"}
    ranked = sorted(names, key=lambda n: (n not in flagged, -results["datasets"][n]["total"]))
    keep = set(ranked[:limit])
    return [n for n in names if n in keep]


def _dataset_rows(results: ResultsDocument, limit: int | None = None) -> list[str]:
    has_baseline = any(s.get("comparison") for s in results["datasets"].values())
    shown = _shown_datasets(results, limit)
    if has_baseline:
        rows = [f"| dataset | expect | n | {_against(results)} | current | Δ | 95% CI | p | p adj. | newly refused | newly answered |",
                "|---|---|--:|--:|--:|--:|---|--:|--:|--:|--:|"]
    else:
        rows = ["| dataset | expect | n | refused | rejection | 95% CI | filtered | empty | errors |",
                "|---|---|--:|--:|--:|---|--:|--:|--:|"]
    for name, s in results["datasets"].items():
        if name not in shown:
            continue
        c = s.get("comparison")
        if has_baseline and c and c["n"]:
            rows.append(f"| {md_escape(name)} | {s['expected']} | {c['n']} | {pct(c['baseline_rate'])} | {pct(c['rate'])} | "
                        f"{pp(c['delta'])} | {_ci_pp(c['delta_ci95'])} | {_p(c['p_value'])} | {_p(c.get('p_adjusted'))} | "
                        f"{c['newly_refused']} | {c['newly_answered']} |")
        elif has_baseline and c:  # no paired prompt (all errored): a delta of +0.0 pp would be made up
            rows.append(f"| {md_escape(name)} | {s['expected']} | 0 | n/a | {pct(s['rejection_rate'])} | nothing compared "
                        "| | | | | |")
        elif has_baseline:
            rows.append(f"| {md_escape(name)} | {s['expected']} | {s['n']} | not compared | {pct(s['rejection_rate'])} "
                        "| | | | | | |")
        else:
            lo, hi = s["ci95"]
            rows.append(f"| {md_escape(name)} | {s['expected']} | {s['n']} | {s['refused']} | {pct(s['rejection_rate'])} | "
                        f"[{pct(lo)}, {pct(hi)}] | {s['filtered']} | {s['empty']} | {s['errors']} |")
    if len(shown) < len(results["datasets"]):
        rows += ["", _more(len(results["datasets"]) - len(shown), "datasets (those with a failed or inconclusive "
                                                                   "check are shown first)")]
    if has_baseline:
        rows += ["", f"<sub>{md_text(P_EXPLAINED)}</sub>"]
    return rows


def error_reasons(results: ResultsDocument, limit: int = 3, source: str = "endpoint"
                  ) -> tuple[int, list[tuple[str, int]]]:
    """Prompts left without a verdict by `source`, and their most common errors (most frequent first):
    "endpoint", no reply after the retries (`run.calls.errors` counts these); "judge", a reply that came
    back but was left without a judgement (`run.judge_calls.errors`). An error that quotes a toxic
    prompt's text is withheld like the prompt itself."""
    counts: dict[str, int] = {}
    errored = 0
    for prompt in results["prompts"]:
        error = prompt.get("error")
        if prompt.get("verdict") != "error" or not error or prompt.get("error_from", "endpoint") != source:
            continue
        errored += 1
        text = error_shown(prompt, error)
        counts[text] = counts.get(text, 0) + 1
    # The cause before its consequence: "not requested: <the cause>" follows the errors it stopped calls for.
    return errored, sorted(counts.items(), key=lambda item: (item[0].startswith(NOT_REQUESTED), -item[1]))[:limit]


def _errors(results: ResultsDocument) -> list[str]:
    total = len(results["prompts"])
    lines = []
    errored, reasons = error_reasons(results)
    # Only when the gate compared with the live base (not `orbench compare` of such a run against a file).
    live = against_live_base(results["run"])
    base_errored = sum(1 for p in results["prompts"] if live and isinstance(p.get("base"), dict)
                       and p["base"].get("verdict") == "error" and p["base"].get("error_from", "endpoint") == "endpoint")
    base = f"; under the live base, no reply for {base_errored} prompts" if base_errored else ""
    if errored:
        listed = "; ".join(f"{md_code(text, 240)} ({count})" for text, count in reasons)
        lines += [f"**No reply for {errored} of {total} prompts** (endpoint errors after the retries, counted "
                  f"neither as answers nor as refusals): {listed}{base}", ""]
    elif base_errored:
        lines += [f"**Under the live base, no reply for {base_errored} of {total} prompts** (endpoint errors after "
                  "the retries; those prompts are not paired)", ""]
    judged, reasons = error_reasons(results, source="judge")
    if judged:
        listed = "; ".join(f"{md_code(text, 240)} ({count})" for text, count in reasons)
        lines += [f"**No judgement for {judged} of {total} prompts** (judge errors: the replies came back, the judge "
                  f"failed on them; counted neither as answers nor as refusals): {listed}", ""]
    return lines


def _changes(results: ResultsDocument) -> list[str]:
    changes = results.get("changes")
    if changes is None:
        return []
    live = against_live_base(results["run"])
    against = "the live base (the same prompts asked under the base configuration in this run)" if live \
        else "the baseline file"
    base = results["run"].get("base") or {}
    if live and base and not base.get("system_prompt_sha256"):
        against += "; the base has no system prompt"
    if not changes:
        return [f"**Compared with** {md_text(against)}. **What changed:** nothing in the configuration (same endpoint, "
                "system prompt and parameters)."]
    lines = [f"**Compared with** {md_text(against)}. **What changed:**"]
    for change in changes:
        old, new = change["baseline"], change["current"]
        if change.get("message"):
            lines.append(f"- {md_escape(change['what'])}: {md_message(change['message'], 300)}")
            continue
        if change["what"] == "system prompt sha256":
            old, new = (str(v)[:12] if v else "none" for v in (old, new))
        lines.append(f"- {md_escape(change['what'])}: {md_escape(str(old), 200)} → {md_escape(str(new), 200)}")
    return lines


def _prompt_list(results: ResultsDocument, name: str, ids: list[str], what: str, limit: int | None) -> list[str]:
    summary = results["datasets"][name]
    toxic = summary["expected"] == "refuse"
    by_id = {p["id"]: p for p in results["prompts"]}
    shown = ids if limit is None else ids[:limit]
    withheld = " (texts withheld)" if toxic else ""
    lines = ["<details>", f"<summary>{md_escape(name)}: {len(ids)} {what}{withheld}</summary>", ""]
    for prompt_id in shown:
        p: Mapping[str, Any] = by_id.get(prompt_id) or {}
        item = f"- {md_code(prompt_id, 120)} ({md_escape(str(p.get('category', '')))})"
        if not toxic:
            # Toxic prompts and replies to them are never posted; safe ones help reviewers judge.
            item += f": {md_escape(str(p.get('prompt', '')), 200)}"
            if p.get("reply_excerpt"):
                item += f" — reply: {md_escape(str(p['reply_excerpt']), 160)}"
        lines.append(item)
    if len(shown) < len(ids):
        lines.append(f"- … and {len(ids) - len(shown)} more (see the results JSON)")
    command = rerun_command(ids) if limit != 0 else None
    if command:
        lines += ["", f"Re-run them: {md_code(command, 2000)}"]
    lines += ["", "</details>"]
    return lines


def _judge_calls_md(run: RunMeta) -> str:
    judged = run.get("judge_calls")
    if not judged:
        return ""
    spend = (run.get("spend") or {}).get("judge") or {}
    cost = f", ${spend['cost_usd']:.4f}" if spend.get("cost_usd") is not None and judged["made"] else ""
    failed = f" ({judged['errors']} of them left without a judgement)" if judged.get("errors") else ""
    return f", {judged['sent_to_llm']} replies read by the LLM judge{failed}{cost}"


def _judge_audit_md(results: ResultsDocument) -> list[str]:
    """How far to trust the judge on this model: its agreement with your labels, or that it is unchecked."""
    from pytest_orbench.judging.audit import NOT_CHECKED, summary_line

    block = results.get("judge_audit")
    if "judge_audit" in results and not block:
        return [f"**Judge:** {md_message(NOT_CHECKED)}.", ""]
    if not block:
        return []  # a results file written before audits existed: nothing to say either way
    text = f"**Judge:** {md_message(summary_line(block))}"
    if block.get("min_agreement") is not None:
        text += f"; required: at least {100 * block['min_agreement']:.1f}%"
    notes = [block.get("other_model"), block.get("not_judged") and f"{block['not_judged']} {block['not_judged_reason']}"]
    return [text + ".", *[f"- ⚠️ {md_message(str(note))}" for note in notes if note], ""]


def headline(results: ResultsDocument) -> str:
    gate = results.get("gate")
    verdict = gate["verdict"] if gate else "ungated"
    failed = [c["name"] for c in (gate["checks"] if gate else []) if c["outcome"] != "pass"]
    named = "; ".join(failed[:3]) + (f"; and {len(failed) - 3} more checks" if len(failed) > 3 else "")
    headline = f"{ICON[verdict]} **{verdict}**" + (f": {md_escape(named, 600)}" if failed else "")
    if verdict == "ungated":
        headline += f": {md_text(gate.get('note', 'nothing was checked') if gate else 'nothing was checked')}"
    return headline


def render_markdown(results: ResultsDocument, list_limit: int | None = None, fit: Fit | None = None) -> str:
    """The report: verdict, per-dataset table, checks, what changed, trade-off chart, prompt lists."""

    fit = fit or Fit(lists=list_limit)
    run = results["run"]
    gate = results.get("gate")
    shown_sets = set(_shown_datasets(results, fit.datasets))
    system = run.get("system_prompt_sha256")
    lines = [
        MARKER,
        f"### OR-Bench over-refusal check: {headline(results)}",
        "",
        f"{md_code(run['endpoint'], 120)} · system prompt {'`' + system[:12] + '`' if system else 'none'} · "
        f"judge {md_escape(run['judge']['id'])} v{md_escape(str(run['judge']['version']))}"
        + (f" ({md_escape(str(run['judge']['model']), 80)})" if run["judge"].get("model") else "")
        + _judge_calls_md(run) + (f" · sample {run['sample']}/dataset, seed {run['seed']}" if run.get("sample") else ""),
        "",
        *_dataset_rows(results, fit.datasets),
        "",
        *_judge_audit_md(results),
        *_errors(results),
    ]
    if gate:
        if gate.get("not_compared") or gate.get("baseline_only"):
            lines.append(f"Not compared: {md_escape(', '.join(gate.get('not_compared') or [])) or 'none'} "
                         f"(not in the baseline); in the baseline but not run: "
                         f"{md_escape(', '.join(gate.get('baseline_only') or [])) or 'none'}.")
            lines.append("")
        # The warnings qualify the verdict (prompts not compared, a sample too small to see a regression, a
        # limit its interval crosses): shown beside it, not folded away with the checks.
        warnings = gate.get("warnings", [])
        if warnings:
            lines += [f"**{'Warning' if len(warnings) == 1 else 'Warnings'}:**", ""]
            lines += [f"- ⚠️ {md_message(warning)}" for warning in warnings[:fit.checks]]
            if fit.checks is not None and len(warnings) > fit.checks:
                lines.append(f"- {_more(len(warnings) - fit.checks, 'warnings')}")
            lines.append("")
        lines.append("<details><summary>Gate checks</summary>")
        lines.append("")
        # The checks that did not pass first: when the list is cut, they are what stays.
        checks = sorted(gate["checks"], key=lambda c: c["outcome"] == "pass")
        for check in checks[:fit.checks]:
            # Checks and warnings quote untrusted text (dataset names, an endpoint's error, a served model's
            # name): escaped as such, so none of it can form a link, an image or formatting.
            lines.append(f"- {ICON[check['outcome']]} {md_escape(check['name'])}: {md_message(check['message'])}")
        if fit.checks is not None and len(checks) > fit.checks:
            lines.append(f"- {_more(len(checks) - fit.checks, 'checks (all of them passed)' if all(c['outcome'] == 'pass' for c in checks[fit.checks:]) else 'checks')}")
        lines += ["", "</details>", ""]
    lines += _changes(results)
    drift = drift_lines(results.get("drift"))
    if drift:
        lines += ["", md_message(drift[0]), ""]
    for name, summary in results["datasets"].items():
        if summary.get("flaky") and name in shown_sets:
            lines += _prompt_list(results, name, summary["flaky_prompts"],
                                  f"flaky prompts (their {run.get('trials')} trials disagree)", fit.lists)
    points = paper_points()
    ours = our_points(results["datasets"])
    if ours and fit.chart:
        lines += ["", "**Trade-off** (grey: the 32 models published in the OR-Bench paper; top left is best)", "",
                  mermaid(points + ours), ""]
    compared = [(n, block) for n, s in results["datasets"].items()
                if (block := s.get("comparison")) is not None and block["n"] and n in shown_sets]
    rows = [(name, category, c) for name, comparison in compared for category, c in comparison["categories"].items()]
    if rows and fit.categories != 0:
        if fit.categories is not None and len(rows) > fit.categories:
            # The categories that moved most in the regression direction (then most) stay.
            expected = {n: results["datasets"][n]["expected"] for n, _ in compared}
            worst = sorted(rows, key=lambda r: -(r[2]["delta"] if expected[r[0]] != "refuse" else -r[2]["delta"]))
            keep = {(r[0], r[1]) for r in worst[:fit.categories]}
            shown_rows = [r for r in rows if (r[0], r[1]) in keep]
        else:
            shown_rows = rows
        lines += ["<details><summary>Per category</summary>", "",
                  f"| dataset | category | n | {_against(results)} | current | Δ | p (one-sided, not adjusted) | newly refused | newly answered |",
                  "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
        for name, category, c in shown_rows:
            lines.append(f"| {md_escape(name)} | {md_escape(category)} | {c['n']} | {pct(c['baseline_rate'])} | "
                         f"{pct(c['rate'])} | {pp(c['delta'])} | {_p(c['p_value'])} | {c['newly_refused']} | "
                         f"{c['newly_answered']} |")
        if len(shown_rows) < len(rows):
            lines += ["", _more(len(rows) - len(shown_rows), "categories (the most regressed are shown)")]
        lines += ["", "</details>", ""]
    elif rows:
        lines += [_more(len(rows), "categories in the per-category table"), ""]
    verified = verification_summary(results)
    if verified:
        lines += ["", f"**Flip verification:** {md_message(verified)}.", ""]
    for name, summary in results["datasets"].items():
        block = summary.get("comparison")
        if block and name in shown_sets:
            overturned = (cast(dict[str, Any], block).get("verification") or {}).get("overturned_ids") or []
            for ids, what in ((block["newly_refused_ids"], "newly refused"), (block["newly_answered_ids"], "newly answered"),
                              (overturned, "flips overturned by the LLM judge (not counted)")):
                if ids:
                    lines += _prompt_list(results, name, ids, what, fit.lists)
    return "\n".join(lines).rstrip() + "\n"
