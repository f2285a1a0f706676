"""The terminal text: the header line, the summary tables, drift, changes, the gate's verdict, xfails."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from pytest_orbench.analysis.wording import count, pct, pp
from pytest_orbench.core.records import DatasetSummary, PairedBlock, ResultsDocument, RunMeta, against_live_base

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def term_safe(text: str, limit: int | None = None) -> str:
    """Untrusted text for a terminal: no escape sequences, control or bidi characters, one line."""
    text = _CONTROL.sub(lambda m: " " if m.group(0) in "\n\r\t" else "\ufffd", text)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def xfail_line(results: ResultsDocument, strict: bool = False, runxfail: bool = False) -> str | None:
    """What the xfailed tests are: "612 xfailed = 450 over-refusals (hard-1k) + 162 toxic answers (toxic)".
    Under --orbench-strict the mismatches new since the baseline fail instead, so the line counts both;
    under pytest's --runxfail every mismatch fails."""
    parts = []
    for name, summary in results["datasets"].items():
        if summary["expected"] == "refuse":
            count, what = summary["n"] - summary["refused"], "toxic answers"
        else:
            count, what = summary["refused"], "over-refusals"
        if count:
            parts.append((count, f"{count} {what} ({term_safe(name, 40)})"))
    if not parts:
        return None
    label = ("failed (--runxfail)" if runxfail else
             "mismatches (xfailed, or failed under --orbench-strict)" if strict else "xfailed")
    return f"orbench: {sum(c for c, _ in parts)} {label} = " + " + ".join(text for _, text in parts)


def header_line(run: RunMeta) -> str:
    prompt_hash = run.get("system_prompt_sha256")
    system = f"{prompt_hash[:12]} ({run.get('system_prompt_source')})" if prompt_hash else "none"
    revisions = sorted({f"{d['repo']}@{d['revision'][:12]}" for d in run["datasets"].values() if d.get("revision")})
    # The seed matters only when sampling: printed then, so a sampled run can be reproduced.
    sample = f" | sample {run['sample']}/dataset, seed {run['seed']}{_all_used(run)}" if run.get("sample") else ""
    revision = f" | revision {run['revision']}" if run.get("revision") else ""
    asked = f" | {run['trials']} trials per prompt" if (run.get("trials") or 1) > 1 else ""
    base = run.get("base")
    if base:
        base_prompt = f"{base['system_prompt_sha256'][:12]}" if base.get("system_prompt_sha256") else "none"
        asked += f" | live base {base['endpoint']}, system prompt {base_prompt}"
        if run.get("calls_to") and base.get("calls_to"):
            # Two configurations, perhaps two endpoints: where each side's calls go, before any is made.
            asked += f" | calls to {run['calls_to']} (run), {base['calls_to']} (live base)"
    return term_safe(
        f"orbench: {run['endpoint']}{revision} | system prompt {system} | judge {run['judge']['id']} v{run['judge']['version']}"
        f"{sample}{asked} | data {', '.join(revisions) or 'custom'}"
    )


def _all_used(run: RunMeta) -> str:
    """`--orbench-sample` larger than a dataset takes all of it: say so instead of implying a sample."""
    whole = [f"{name}: all {d['total']}" for name, d in run["datasets"].items()
             if run.get("sample") and d.get("total") is not None and d["total"] <= run["sample"]]
    return f" ({'; '.join(whole)})" if whole else ""


def _table(rows: list[list[str]], indent: str = "") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def terminal_lines(run: RunMeta, summaries: dict[str, DatasetSummary], categories: bool = True) -> list[str]:
    lines = [header_line(run)]
    rows = [["dataset", "expect", "n", "refused", "rejection", "95% CI", "filtered", "empty", "errors", "unscored"]]
    for name, s in summaries.items():
        lo, hi = s["ci95"]
        rows.append([term_safe(name, 40), s["expected"], str(s["n"]), str(s["refused"]), pct(s["rejection_rate"]),
                     f"[{pct(lo)}, {pct(hi)}]", str(s["filtered"]), str(s["empty"]), str(s["errors"]), str(s["unscored"])])
    lines += _table(rows)
    for name, s in summaries.items():
        if s.get("flaky"):
            shown = ", ".join(term_safe(i, 60) for i in s["flaky_prompts"][:10])
            more = f" and {s['flaky'] - 10} more" if s["flaky"] > 10 else ""
            lines.append(f"flaky prompts ({term_safe(name, 40)}): {s['flaky']} of {s['n']} prompts' {run.get('trials')} "
                         f"trials disagree: {shown}{more}")
    compared = [(name, s["comparison"]) for name, s in summaries.items() if s.get("comparison")]
    if compared:
        lines.append("")
        against = "vs live base" if against_live_base(run) else "vs baseline"
        rows = [[against, "n", "base" if against == "vs live base" else "baseline", "current", "delta", "95% CI", "p", "p adj.", "newly refused",
                 "newly answered"]]
        for name, c in compared:
            if not c["n"]:  # no paired prompt (every reply errored on one side): a delta of +0.0 pp would be made up
                rows.append([term_safe(name, 40), "0", "n/a", pct(summaries[name]["rejection_rate"]), "nothing compared",
                             "", "", "", "", ""])
                continue
            lo, hi = c["delta_ci95"]
            rows.append([term_safe(name, 40), str(c["n"]), pct(c["baseline_rate"]), pct(c["rate"]), pp(c["delta"]),
                         f"[{100 * lo:+.1f}, {100 * hi:+.1f}] pp", f"{c['p_value']:.3g}", _adjusted(c),
                         str(c["newly_refused"]), str(c["newly_answered"])])
        lines += _table(rows)
        lines.append(P_EXPLAINED)

    if categories:
        for name, s in summaries.items():
            if not s["categories"]:
                continue
            lines.append("")
            lines.append(f"{term_safe(name, 40)} by category:")
            rows = [["category", "n", "refused", "rejection", "95% CI", "errors"]]
            for category, block in s["categories"].items():
                lo, hi = block["ci95"]
                rows.append([term_safe(category, 40), str(block["n"]), str(block["refused"]),
                             pct(block["rejection_rate"]), f"[{pct(lo)}, {pct(hi)}]", str(block["errors"])])
            lines += _table(rows, "  ")
    calls = run.get("calls")
    if calls:
        lines.append("")
        lines.append(
            f"calls: {calls['made']} made this run, {count(calls['stored'], 'reply', 'replies')} from the store, "
            f"{count(calls['errors'] - calls.get('not_requested', 0), 'error', 'errors')} after retries"
            + (f", {count(calls['not_requested'], 'prompt', 'prompts')} not asked (the calls had stopped)"
               if calls.get("not_requested") else "")
            + _shared_text(calls) + _spend_text(run.get("spend", {}).get("endpoint"))
            + (f"; {calls['fetched_not_run']} more fetched for prompts that did not run (stored; not counted here)"
               if calls.get("fetched_not_run") else "")
        )
    judged = run.get("judge_calls")
    if judged:
        lines.append(
            f"judge: {count(judged['sent_to_llm'], 'reply', 'replies')} went to the LLM judge "
            f"({term_safe(str(run['judge'].get('model')), 60)}), {judged['decided_without_llm']} decided without it; "
            f"{count(judged['made'], 'judge call', 'judge calls')} made this run"
            + (f", {count(judged['errors'], 'reply', 'replies')} left without a judgement (judge errors)"
               if judged.get("errors") else "")
            + _spend_text(run.get("spend", {}).get("judge"))
        )
    return lines


def drift_lines(drift: dict[str, Any] | None) -> list[str]:
    """The live base now vs the committed baseline: what changed without the pull request."""
    if not drift:
        return []
    if not drift.get("comparable"):
        return [f"drift: the baseline file is not comparable with the live base ({term_safe(drift.get('reason', ''), 200)})"]
    parts = [f"{term_safe(name, 40)} {pp(d['delta'])} (p = {d['p_value']:.3g}, {d['newly_refused']} newly refused, "
             f"{d['newly_answered']} newly answered of {d['n']})" for name, d in drift["datasets"].items()]
    changed = "; ".join(term_safe(str(c.get("message") or f"{c['what']}: {c['baseline']} → {c['current']}"), 160)
                        for c in drift.get("changes", []))
    return [f"drift (base configuration now vs the baseline file, not gated): {', '.join(parts) or 'nothing compared'}"
            + (f"; changed: {changed}" if changed else "")]


P_EXPLAINED = ("p: one-sided p that the change is a regression (exact McNemar with one trial per prompt, a paired "
               "sign-flip permutation test on refusal shares with repeated trials; p = 1: no change in the regression "
               "direction); p adj.: Holm-adjusted across the run's regression checks, which the gate decides on")


def _adjusted(comparison: PairedBlock) -> str:
    value = comparison.get("p_adjusted")
    return "n/a" if value is None else f"{value:.3g}"


def _shared_text(calls: dict[str, int]) -> str:
    """How many prompts shared a reply (identical text: one call), when any did."""
    shared = calls.get("shared") or 0
    return (f", for {calls['prompts']} prompts ({shared} shared a reply with an identical prompt)"
            if shared and "prompts" in calls else "")


def _spend_text(spend: dict[str, Any] | None) -> str:
    if not spend or not (spend["prompt_tokens"] or spend["completion_tokens"]):
        return ""
    cost = f"${spend['cost_usd']:.4f}" if spend.get("cost_usd") is not None else "cost unknown (no litellm price for the model)"
    return f"; {spend['prompt_tokens']:,} prompt + {spend['completion_tokens']:,} completion tokens, {cost}"


def change_lines(results: ResultsDocument) -> list[str]:
    """What changed against the baseline, for the terminal (the provider's own changes included)."""
    lines = []
    for change in results.get("changes") or []:
        if change.get("message"):
            text = change["message"]
        else:
            old, new = change["baseline"], change["current"]
            if change["what"] == "system prompt sha256":
                old, new = (str(v)[:12] if v else "none" for v in (old, new))
            text = f"{old if old not in (None, '') else 'none'} → {new if new not in (None, '') else 'none'}"
        lines.append(f"  changed: {term_safe(change['what'], 40)}: {term_safe(str(text), 200)}")
    return lines



# -- the gate, for the terminal ----------------------------------------------------------------
def judge_audit_lines(results: ResultsDocument) -> list[str]:
    """How far to trust the judge on this model: the audit against your labels, or, without labels, once,
    that it is not checked (and how to check it)."""
    from pytest_orbench.judging.audit import NOT_CHECKED, summary_line

    judge = results["run"].get("judge") or {}
    name = f"{term_safe(str(judge.get('id', '?')), 60)} v{term_safe(str(judge.get('version', '?')), 60)}"
    block = results.get("judge_audit")
    if not block:
        return [f"judge {name}: {NOT_CHECKED}"]
    lines = [f"judge {name}: {term_safe(summary_line(block))}"]
    if block.get("min_agreement") is not None:
        lines[0] += f"; required: at least {100 * block['min_agreement']:.1f}%"
    for note in (block.get("other_model"), block.get("not_judged") and f"{block['not_judged']} {block['not_judged_reason']}"):
        if note:
            lines.append(f"  judge audit: {term_safe(str(note))}")
    return lines


def gate_reason(results: ResultsDocument, width: int | None = None) -> str:
    """Why the gate did not pass, for pytest's short summary line ("FAILED orbench gate - <this>"): the checks
    that did not pass, failed ones first, each named whole. Within `width` characters (None: no limit) as
    many as fit, then how many more the "orbench gate" section above lists; the first is named even if
    it alone is wider (a wrapped line, not a check's name cut mid-word)."""
    gate = results["gate"]
    checks = sorted((c for c in gate["checks"] if c["outcome"] != "pass"), key=lambda c: c["outcome"] != "fail")
    names = [f"{c['outcome'].upper()}: {term_safe(c['name'], 200)}" for c in checks] or [gate["verdict"].upper()]
    shown = names[0]
    for n in range(1, len(names)):
        longer = f"{shown}; {names[n]}"
        rest = len(names) - n - 1
        if width is not None and len(longer) + (len(f"; and {rest} more above") if rest else 0) > width:
            return f"{shown}; and {len(names) - n} more above"
        shown = longer
    return shown


def gate_lines(results: ResultsDocument, newly_limit: int = 20) -> list[str]:
    """The short verdict block: each failed check with numbers, then the newly refused prompts."""
    gate = results.get("gate")
    if not gate:
        return []
    if gate["verdict"] == "ungated":
        # A run writing the baseline has one set already: the hint would send the user in a circle.
        hint = "" if results["run"].get("baseline_update") else " (set --orbench-baseline or gate limits to gate a merge)"
        lines = [f"orbench gate: UNGATED: {gate.get('note', 'nothing was checked')}{hint}"]
    else:
        lines = [f"orbench gate: {gate['verdict'].upper()}"]
    lines += change_lines(results)
    if gate.get("not_compared"):
        lines.append(f"  not compared (not in the baseline): {', '.join(term_safe(n, 40) for n in gate['not_compared'])}")
    if gate.get("baseline_only"):
        lines.append(f"  in the baseline but not in this run: {', '.join(term_safe(n, 40) for n in gate['baseline_only'])}")
    for check in gate["checks"]:
        if check["outcome"] != "pass":
            lines.append(f"  {check['outcome'].upper()}: {term_safe(check['name'])}: {term_safe(check['message'])}")
    for warning in gate.get("warnings", []):
        lines.append(f"  warning: {term_safe(warning)}")
    by_id = {p["id"]: p for p in results["prompts"]}
    for name, summary in results["datasets"].items():
        comparison = summary.get("comparison")
        if not comparison:
            continue
        worse_ids = comparison["newly_refused_ids"] if summary["expected"] != "refuse" else comparison["newly_answered_ids"]
        if not worse_ids:
            continue
        what = "newly refused" if summary["expected"] != "refuse" else "newly answered (texts withheld)"
        better = comparison["newly_answered"] if summary["expected"] != "refuse" else comparison["newly_refused"]
        other = "newly answered" if summary["expected"] != "refuse" else "newly refused"
        regression = next((c for c in gate["checks"] if c["kind"] == "regression" and c["dataset"] == name), None)
        status = ""
        if regression is not None and regression["outcome"] == "pass":
            # A pass with flips in the regression direction says why they did not fail it.
            adjusted = regression.get("p_adjusted")
            alpha = regression.get("alpha")
            status = (f"; not significant (Holm-adjusted p = {adjusted:.3g}, alpha {alpha:g})"
                      if adjusted is not None and alpha is not None and adjusted >= alpha else "; within the tolerance")
        lines.append(f"  {term_safe(name, 40)}: {len(worse_ids)} {what}, {better} {other}{status}:")
        for prompt_id in worse_ids[:newly_limit]:
            prompt: Mapping[str, Any] = by_id.get(prompt_id) or {}
            text = "" if summary["expected"] == "refuse" else "  " + term_safe(str(prompt.get("prompt", "")), 100)
            lines.append(f"    {term_safe(prompt_id, 80)} [{term_safe(str(prompt.get('category', '')), 30)}]{text}")
        if len(worse_ids) > newly_limit:
            lines.append(f"    ... and {len(worse_ids) - newly_limit} more (see the results JSON)")
        command = rerun_command(worse_ids)
        if command:
            lines.append(f"    re-run them, with this run's options (model, endpoint, store): {command}")
    lines += verification_lines(results, newly_limit)
    return lines


_PLAIN_ID = re.compile(r"[\w.+-]+")


def rerun_command(ids: list[str], limit: int = 20) -> str | None:
    """The command that runs these prompts again (their ids select their tests with -k): the first `limit`;
    ids with characters a -k expression would read otherwise are left out."""
    plain = [i for i in ids if _PLAIN_ID.fullmatch(i)][:limit]
    if not plain:
        return None
    more = f"  (the first {limit} of {len(ids)})" if len(ids) > limit else ""
    return f'pytest --orbench-only -k "{" or ".join(plain)}"{more}'



def verification_summary(results: ResultsDocument) -> str | None:
    """--orbench-verify-flips in one line: per dataset, the flips found, verified, overturned, failed; the calls."""
    run_block = results["run"].get("verification")
    if not run_block:
        return None
    parts = []
    for name, summary in results["datasets"].items():
        v = cast(dict[str, Any], summary.get("comparison") or {}).get("verification")
        if v is None:
            continue
        both = f" ({v['both_sides']} on both sides)" if v["found"] else ""
        errors = (f", {v['errors']} not verified (kept as the offline judge counted them, and counted against the "
                  f"change in the gate's worst case: {v['first_error']})" if v["errors"] else "")
        parts.append(f"{name}: {v['found']} flips found, {v['verified']} verified{both}, {v['overturned']} overturned"
                     f"{errors}")
    cost = "" if run_block.get("cost_usd") in (None, 0) else f", ${run_block['cost_usd']:.4f}"
    calls = run_block["calls"]
    return (f"flips verified by {run_block['model']}: {'; '.join(parts) or 'nothing was compared'}; "
            f"{calls} judge call{'' if calls == 1 else 's'} made now{cost} (the rest from the store)")


def verification_lines(results: ResultsDocument, limit: int = 20) -> list[str]:
    """The verification's line, and the flips the LLM judge overturned (no longer counted), with its class."""
    line = verification_summary(results)
    if line is None:
        return []
    lines = [f"  {term_safe(line)}"]
    by_id = {p["id"]: p for p in results["prompts"]}
    for name, summary in results["datasets"].items():
        v = cast(dict[str, Any], summary.get("comparison") or {}).get("verification") or {}
        ids = v.get("overturned_ids") or []
        if not ids:
            continue
        lines.append(f"  {term_safe(name, 40)}: {len(ids)} flips overturned by the LLM judge (not counted):")
        for prompt_id in ids[:limit]:
            prompt: Mapping[str, Any] = by_id.get(prompt_id) or {}
            opinion: dict[str, Any] = dict(prompt.get("flip_verification") or {})
            said = f"offline {opinion.get('offline', {}).get('verdict')}, LLM {opinion.get('llm', {}).get('verdict')}"
            if opinion.get("compared_llm"):
                said += f", compared side LLM {opinion['compared_llm'].get('verdict')}"
            lines.append(f"    {term_safe(prompt_id, 80)} [{term_safe(str(prompt.get('category', '')), 30)}] {said}")
        if len(ids) > limit:
            lines.append(f"    ... and {len(ids) - limit} more (see the results JSON)")
    return lines
