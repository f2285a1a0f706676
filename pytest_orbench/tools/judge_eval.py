"""`orbench judge-eval`: a judge's agreement with human labels, with intervals and the disagreements."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_orbench.calls.scrubbing import scrub
from pytest_orbench.core.datasets.custom import csv_records, decode_utf8
from pytest_orbench.core.datasets.prompts import DatasetError
from pytest_orbench.core.stats import bootstrap_kappa_ci, cohen_kappa, paired_diff_ci, wilson
from pytest_orbench.judging.judges import CLASSES, Judge, Judgement, Verdict

SCHEMA = "pytest-orbench/judge-eval/v1"
HUMAN = ("compliance", "refusal", "partial_refusal")
LABELS = {
    "compliance": "compliance", "1_full_compliance": "compliance", "full_compliance": "compliance",
    "refusal": "refusal", "2_full_refusal": "refusal", "full_refusal": "refusal",
    "partial_refusal": "partial_refusal", "3_partial_refusal": "partial_refusal",
}
# For 3-class agreement. The concepts differ a little: XSTest's partial refusal is a mix of refusal
# and compliance, OR-Bench's indirect refusal is deflection; the binary figure is the headline.
HUMAN_CLASS = {"compliance": Verdict.DIRECT_ANSWER, "refusal": Verdict.DIRECT_REFUSAL, "partial_refusal": Verdict.INDIRECT_REFUSAL}
COLUMNS = [v.value for v in Verdict]
RESPONSE_COLUMNS = ("response", "completion")  # XSTest's files call it completion
LABEL_COLUMNS = ("label", "final_label")


class LabeledError(Exception):
    """A labeled file that cannot be evaluated; the message names the file, row and fix."""


@dataclass(frozen=True)
class Example:
    row: int  # 1-based data row (the header is row 0)
    prompt: str
    response: str
    label: str  # compliance | refusal | partial_refusal
    note: str  # the `trap` / `type` column, if any
    source: str = ""  # the `source` column, if any: where the reply and its label come from


def load_labeled(path: Path) -> list[Example]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LabeledError(f"cannot read {path}: {exc.strerror}") from None
    # The dataset reader's strict CSV: an unclosed quote used to swallow the rest of the file and be reported
    # as a row without a label, a row with more fields than the header was read as if it had none, and a
    # reply holding U+2028 or a form feed was cut into two rows at it.
    try:
        fields, records = csv_records(path, decode_utf8(path, data))
    except DatasetError as exc:
        raise LabeledError(str(exc)) from None
    response_col = next((c for c in RESPONSE_COLUMNS if c in fields), None)
    label_col = next((c for c in LABEL_COLUMNS if c in fields), None)
    missing = [name for name, col in (("prompt", "prompt" if "prompt" in fields else None),
                                      ("response", response_col), ("label", label_col)) if col is None]
    if missing:
        raise LabeledError(f"{path} lacks column(s) {', '.join(missing)}; found {', '.join(fields) or 'none'}. "
                           "Expected a CSV with prompt,response,label")
    assert response_col and label_col
    note_col = next((c for c in ("trap", "type", "note") if c in fields), None)
    source_col = "source" if "source" in fields else None
    examples = []
    for number, (line, row) in enumerate(records, start=1):
        written = (row.get(label_col) or "").strip()
        raw = re.sub(r"[\s-]+", "_", written.lower())  # "Partial Refusal", "partial-refusal": partial_refusal
        if raw not in LABELS:
            where = f"{path} row {number} (line {line})"
            if not written:
                raise LabeledError(f"{where} has no {label_col}: label it compliance, refusal or partial_refusal, "
                                   "or remove the row")
            raise LabeledError(f"{where}: {label_col} {written!r} is not one of {', '.join(sorted(LABELS))} "
                               "(case, spaces and hyphens do not matter); correct it, or remove the row")
        examples.append(Example(number, row.get("prompt") or "", row.get(response_col) or "", LABELS[raw],
                                (row.get(note_col) or "") if note_col else "",
                                (row.get(source_col) or "").strip() if source_col else ""))
    if not examples:
        raise LabeledError(f"{path} has no labeled rows")
    return examples


def _rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson(k, n)
    return {"value": k / n if n else None, "ci95": [lo, hi], "k": k, "n": n}


def _figures(pairs: list[tuple[Example, Judgement]]) -> dict[str, Any]:
    """Agreement figures on scored (example, judgement) pairs: binary and 3-class, kappa, bias, confidence."""
    n = len(pairs)
    human_bin = ["refusal" if e.label != "compliance" else "answer" for e, _ in pairs]
    judge_bin = ["refusal" if j.verdict.refused else "answer" for _, j in pairs]
    human_3 = [HUMAN_CLASS[e.label].value for e, _ in pairs]
    judge_3 = [j.verdict.value if j.verdict in CLASSES else Verdict.DIRECT_REFUSAL.value for _, j in pairs]
    agree_bin = sum(1 for x, y in zip(human_bin, judge_bin) if x == y)
    agree_3 = sum(1 for x, y in zip(human_3, judge_3) if x == y)
    both = sum(1 for x, y in zip(human_bin, judge_bin) if x == y == "refusal")
    judge_only = sum(1 for x, y in zip(human_bin, judge_bin) if y == "refusal" and x == "answer")
    human_only = sum(1 for x, y in zip(human_bin, judge_bin) if x == "refusal" and y == "answer")
    neither = n - both - judge_only - human_only
    kappa: dict[str, Any] = {}
    for name, (a, b) in {"binary": (human_bin, judge_bin), "three_class": (human_3, judge_3)}.items():
        if not n:
            kappa[name] = None
            continue
        value, interval = cohen_kappa(a, b), bootstrap_kappa_ci(a, b)
        kappa[name] = {"value": value, "ci95": None if interval is None else list(interval)}
        if value is None:  # people and judge gave every row the same class: nothing to tell from chance
            kappa[name]["undefined"] = f"people and judge gave every row {a[0]}"
    # The judge's own confidence: what a hybrid judge would decide alone and what it would send to the LLM.
    confident = [(e, j) for e, j in pairs if j.confident]
    confident_right = sum(1 for e, j in confident if bool(j.verdict.refused) == (e.label != "compliance"))
    return {
        "scored": n,
        "binary_agreement": _rate(agree_bin, n),
        "three_class_agreement": _rate(agree_3, n),
        "kappa": kappa,
        "refusal_rate": {"judge": _rate(both + judge_only, n), "human": _rate(both + human_only, n)},
        "bias": {"value": (judge_only - human_only) / n if n else None,
                 "ci95": list(paired_diff_ci(both, judge_only, human_only, neither)),
                 "judge_only_refusals": judge_only, "human_only_refusals": human_only},
        "confidence": {"not_confident": n - len(confident), "not_confident_share": (n - len(confident)) / n if n else None,
                       "confident_agreement": _rate(confident_right, len(confident))},
    }


def evaluate(examples: list[Example], judgements: list[Judgement | str], judge_meta: dict[str, Any]) -> dict[str, Any]:
    """Agreement figures, overall and per source (when the file has a `source` column).

    A judgement may be an error message (str): counted, and excluded like unscored."""
    confusion = {h: {c: 0 for c in COLUMNS} for h in HUMAN}
    pairs: list[tuple[Example, Judgement]] = []
    rows = []
    for example, judgement in zip(examples, judgements):
        verdict = judgement.verdict if isinstance(judgement, Judgement) else Verdict.ERROR
        reason = judgement.reason if isinstance(judgement, Judgement) else judgement
        confusion[example.label][verdict.value] += 1
        if verdict.refused is not None:
            assert isinstance(judgement, Judgement)
            pairs.append((example, judgement))
        human_refused = example.label != "compliance"
        agree = None if verdict.refused is None else verdict.refused == human_refused
        if not agree:
            rows.append({"row": example.row, "source": example.source, "note": example.note, "label": example.label,
                         "verdict": verdict.value, "reason": reason, "prompt": example.prompt,
                         "response": example.response})
    per_note: dict[str, dict[str, int]] = {}
    for example, judgement in pairs:
        counts = per_note.setdefault(example.note or "-", {"n": 0, "agree": 0})
        counts["n"] += 1
        counts["agree"] += int(bool(judgement.verdict.refused) == (example.label != "compliance"))
    result = {
        "schema": SCHEMA,
        "judge": judge_meta,
        "rows": len(examples),
        "unscored": sum(confusion[h][Verdict.UNSCORED.value] for h in HUMAN),
        "errors": sum(confusion[h][Verdict.ERROR.value] for h in HUMAN),
        "labels": {h: sum(1 for e in examples if e.label == h) for h in HUMAN},
        **_figures(pairs),
        "confusion": confusion,
        "by_note": per_note,
        "disagreements": rows,
    }
    sources = sorted({e.source for e in examples if e.source})
    if sources:
        by_source: dict[str, Any] = {}
        for source in sources:
            mine = [e for e in examples if e.source == source]
            by_source[source] = {"rows": len(mine), "labels": {h: sum(1 for e in mine if e.label == h) for h in HUMAN},
                                 **_figures([(e, j) for e, j in pairs if e.source == source])}
        result["by_source"] = by_source
    return result


async def _judge_all(judge: Judge, examples: list[Example], make_stage: Callable[[], Any], concurrency: int) -> list[Judgement | str]:
    from pytest_orbench.calls.errors import EndpointError

    stage = make_stage()
    gate = asyncio.Semaphore(concurrency)

    async def one(example: Example) -> Judgement | str:
        decided = judge.decide(example.prompt, example.response)
        if decided is not None:
            return decided
        assert judge.llm is not None
        async with gate:
            try:
                record, _ = await stage.judge(judge.llm.key(example.prompt, example.response), example.prompt, example.response)
            except EndpointError as exc:
                return str(exc)
        return judge.llm.parse(str(record.get("text") or ""), record.get("finish_reason"))

    try:
        return list(await asyncio.gather(*(one(e) for e in examples)))
    finally:
        await stage.aclose()


def judge_examples(judge: Judge, examples: list[Example], make_stage: Callable[[], Any] | None = None,
                   concurrency: int = 8) -> list[Judgement | str]:
    """Each example's judgement (or the judge call's error); LLM calls concurrent and stored."""
    if judge.llm is None:
        results: list[Judgement | str] = []
        for e in examples:
            try:
                decided = judge.decide(e.prompt, e.response)
                assert decided is not None
                results.append(decided)
            except Exception as exc:  # a custom judge that raised, or returned something that is no verdict
                results.append(scrub(None, f"judge failed: {type(exc).__name__}: {exc}"))
        return results
    assert make_stage is not None
    return asyncio.run(_judge_all(judge, examples, make_stage, concurrency))


def compare_judges(examples: list[Example], mine: list[Judgement | str], theirs: list[Judgement | str],
                   other_meta: dict[str, Any]) -> dict[str, Any]:
    """Paired comparison on the rows both judges scored: exact one-sided McNemar that the first is better."""
    from pytest_orbench.core.stats import mcnemar_p

    def right(j: Judgement | str, e: Example) -> bool | None:
        if not isinstance(j, Judgement) or j.verdict.refused is None:
            return None
        return j.verdict.refused == (e.label != "compliance")

    only_mine = only_theirs = both = n = 0
    for e, a, b in zip(examples, mine, theirs):
        ra, rb = right(a, e), right(b, e)
        if ra is None or rb is None:
            continue
        n += 1
        both += ra and rb
        only_mine += ra and not rb
        only_theirs += rb and not ra
    by_source = {}
    for source in sorted({e.source for e in examples if e.source}):
        theirs_pairs = [(e, b) for e, b in zip(examples, theirs)
                        if e.source == source and isinstance(b, Judgement) and b.verdict.refused is not None]
        by_source[source] = _figures(theirs_pairs)
    return {
        "judge": other_meta, "n": n,
        **({"by_source": by_source} if by_source else {}),
        "binary_agreement": _rate(both + only_theirs, n),
        "right_where_other_wrong": only_mine, "wrong_where_other_right": only_theirs,
        "p_value": mcnemar_p(only_mine, only_theirs),
    }


def _pct(figure: dict[str, Any]) -> str:
    if figure["value"] is None:
        return "n/a"
    lo, hi = figure["ci95"]
    return f"{100 * figure['value']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def _pp(figure: dict[str, Any]) -> str:
    lo, hi = figure["ci95"]
    return f"{100 * figure['value']:+.1f} pp [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def _kappa(figure: dict[str, Any]) -> str:
    if figure["value"] is None:
        return f"n/a: undefined, {figure['undefined']}"  # set by _figures whenever the value is None
    interval = figure["ci95"]
    return f"{figure['value']:.3f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")


def _confidence(figures: dict[str, Any]) -> str:
    c = figures["confidence"]
    if not c["not_confident"]:
        return "all confident"
    return (f"{c['not_confident']} not confident ({100 * c['not_confident_share']:.1f}%; hybrid sends them to the LLM), "
            f"the rest agree {_pct(c['confident_agreement'])}")


def by_source_lines(result: dict[str, Any]) -> list[str]:
    """One line per source: agreement with its interval, kappa, bias, 3-class, the confidence split."""
    from pytest_orbench.render.terminal import term_safe

    groups = result.get("by_source") or {}
    if not groups:
        return []
    width = max(20, *(len(term_safe(s, 40)) for s in groups))
    lines = [f"{'by source':<{width}} {'rows':>5}  {'binary agreement':<22} {'kappa':>6}  {'bias':<24} "
             f"{'3-class':>7}  {'not confident':>13}  {'confident agree':>15}"]
    for source, g in groups.items():
        kappa = g["kappa"]["binary"]
        c = g["confidence"]
        lines.append(
            f"{term_safe(source, 40):<{width}} {g['rows']:>5}  {_pct(g['binary_agreement']):<22} "
            f"{'n/a' if kappa is None or kappa['value'] is None else format(kappa['value'], '.3f'):>6}  "
            f"{'n/a' if g['bias']['value'] is None else _pp(g['bias']):<24} "
            f"{'n/a' if g['three_class_agreement']['value'] is None else format(100 * g['three_class_agreement']['value'], '.1f') + '%':>7}  "
            f"{'n/a' if c['not_confident_share'] is None else format(100 * c['not_confident_share'], '.1f') + '%':>13}  "
            f"{'n/a' if c['confident_agreement']['value'] is None else format(100 * c['confident_agreement']['value'], '.1f') + '%':>15}")
    return lines


def text_report(result: dict[str, Any], show: int = 20, by: str | None = None) -> list[str]:
    """The figures as terminal lines; `by` = "source" or "note" picks the breakdown (default: source if any)."""
    from pytest_orbench.render.terminal import term_safe

    j = result["judge"]
    k = result["kappa"]
    lines = [
        f"judge {j['id']} v{j['version']}" + (f" ({j['model']})" if j.get("model") else "")
        + f" on {result['rows']} labeled replies ({', '.join(f'{v} {n}' for n, v in result['labels'].items())})",
        f"scored {result['scored']}, unscored {result['unscored']}, errors {result['errors']}",
        f"binary agreement       {_pct(result['binary_agreement'])}   (partial refusal counts as refusal)",
        f"3-class agreement      {_pct(result['three_class_agreement'])}",
    ]
    for name in ("binary", "three_class"):
        if k[name] is not None:
            lines.append(f"{'Cohen kappa ' + name.replace('_', '-'):<24}{_kappa(k[name])}")
    bias = result["bias"]
    if bias["value"] is not None:
        lines.append(
            f"bias (judge - human refusal rate) {_pp(bias)}  "
            f"judge {_pct(result['refusal_rate']['judge'])}, human {_pct(result['refusal_rate']['human'])}"
        )
    if result["confidence"]["not_confident"]:
        lines.append(f"confidence: {_confidence(result)}")
    lines.append("confusion (rows: human label; columns: judge verdict)")
    used = [c for c in COLUMNS if any(result["confusion"][h][c] for h in HUMAN)] or COLUMNS[:3]
    lines.append(" " * 16 + "".join(f"{c:>18}" for c in used))
    for h in HUMAN:
        lines.append(f"{h:<16}" + "".join(f"{result['confusion'][h][c]:>18}" for c in used))
    by = by or ("source" if result.get("by_source") else "note")
    if by == "source":
        lines.extend(by_source_lines(result) or ["by source: the file has no source column, so no breakdown by source"])
    if by == "note" and not any(note != "-" for note in result["by_note"]):
        lines.append("by note: the file has no trap, type or note column (or it is empty), so no breakdown by note")
    elif by == "note":
        weak = sorted(((v["agree"] / v["n"], note, v) for note, v in result["by_note"].items() if v["agree"] < v["n"]))
        if weak:
            lines.append("agreement by note (only notes with disagreements): " + ", ".join(
                f"{term_safe(note, 40)} {v['agree']}/{v['n']}" for _, note, v in weak))
        else:
            lines.append(f"agreement by note: no disagreement in any of the {len(result['by_note'])} notes")
    against = result.get("against")
    if against:
        o = against["judge"]
        lines.append(
            f"against {o['id']} v{o['version']} on the same {against['n']} rows: {_pct(against['binary_agreement'])}; "
            f"right where it was wrong {against['right_where_other_wrong']}, the reverse {against['wrong_where_other_right']}, "
            f"one-sided exact McNemar p = {against['p_value']:.2g}"
        )
        for source, figure in (against.get("by_source") or {}).items():
            lines.append(f"  {term_safe(source, 40)}: {o['id']} {_pct(figure['binary_agreement'])}, "
                         f"bias {_pp(figure['bias'])}")
    dis = result["disagreements"]
    lines.append(f"disagreements: {len(dis)}" + (f" (first {show}; all in --json)" if len(dis) > show else ""))
    for d in dis[:show]:
        where = f"{term_safe(d['source'], 20)} " if d.get("source") else ""
        lines.append(f"  {where}row {d['row']:>4} {d['label']:<15} judge {d['verdict']:<16} {term_safe(d['reason'], 70)}")
        lines.append(f"       reply: {term_safe(d['response'], 110)}")
    return lines
