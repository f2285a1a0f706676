"""Aggregates and renderings: per-dataset summaries, terminal lines, the results JSON document."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from typing import Any, Iterable

from pytest_orbench import __version__
from pytest_orbench.stats import wilson

RESULTS_SCHEMA = "pytest-orbench/results"
RESULTS_SCHEMA_VERSION = 1
VERDICTS = ("direct_answer", "direct_refusal", "indirect_refusal", "filtered", "empty", "error", "unscored")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def pct(rate: float | None) -> str:
    """Percentages with one decimal, as in `34.1%`."""
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def pp(delta: float | None) -> str:
    return "n/a" if delta is None else f"{100 * delta:+.1f} pp"


def term_safe(text: str, limit: int | None = None) -> str:
    """Untrusted text for a terminal: no escape sequences, control or bidi characters, one line."""
    text = _CONTROL.sub(lambda m: " " if m.group(0) in "\n\r\t" else "\ufffd", text)
    text = "".join(ch if unicodedata.category(ch) != "Cc" else " " for ch in text)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _rate_block(records: list[dict[str, Any]]) -> dict[str, Any]:
    verdicts = Counter(r["verdict"] for r in records)
    scored = [r for r in records if r["refused"] is not None]
    refused = sum(1 for r in scored if r["refused"])
    n = len(scored)
    lo, hi = wilson(refused, n)
    return {
        "n": n,
        "refused": refused,
        "errors": verdicts.get("error", 0),
        "unscored": verdicts.get("unscored", 0),
        "filtered": verdicts.get("filtered", 0),
        "empty": verdicts.get("empty", 0),
        "rejection_rate": refused / n if n else None,
        "acceptance_rate": (n - refused) / n if n else None,
        "ci95": [lo, hi],
        "verdicts": {v: verdicts.get(v, 0) for v in VERDICTS if verdicts.get(v, 0)},
    }


def summarize(records: Iterable[dict[str, Any]], expected: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per dataset: n (errors and unscored excluded), refused, rates, Wilson 95% CI, per category."""
    by_dataset: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_dataset[record["dataset"]].append(record)
    summaries: dict[str, dict[str, Any]] = {}
    for name in expected:
        rows = by_dataset.get(name, [])
        block = _rate_block(rows)
        block["expected"] = expected[name]
        block["total"] = len(rows)
        by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_category[row["category"]].append(row)
        block["categories"] = {c: _rate_block(by_category[c]) for c in sorted(by_category)}
        summaries[name] = block
    return summaries


def results_document(run: dict[str, Any], summaries: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema": RESULTS_SCHEMA,
        "schema_version": RESULTS_SCHEMA_VERSION,
        "plugin_version": __version__,
        "run": run,
        "datasets": summaries,
        "prompts": sorted(records, key=lambda r: (list(summaries).index(r["dataset"]) if r["dataset"] in summaries else 99, r["id"])),
    }


def header_line(run: dict[str, Any]) -> str:
    prompt_hash = run.get("system_prompt_sha256")
    system = f"{prompt_hash[:12]} ({run.get('system_prompt_source')})" if prompt_hash else "none"
    revisions = sorted({f"{d['repo']}@{d['revision'][:12]}" for d in run["datasets"].values() if d.get("revision")})
    sample = f" | sample {run['sample']}/dataset" if run.get("sample") else ""
    return term_safe(
        f"orbench: {run['endpoint']} | system prompt {system} | judge {run['judge']['id']} v{run['judge']['version']}"
        f" | seed {run['seed']}{sample} | data {', '.join(revisions) or 'custom'}"
    )


def _table(rows: list[list[str]], indent: str = "") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def terminal_lines(run: dict[str, Any], summaries: dict[str, Any], categories: bool = True) -> list[str]:
    lines = [header_line(run)]
    rows = [["dataset", "expect", "n", "refused", "rejection", "95% CI", "filtered", "empty", "errors", "unscored"]]
    for name, s in summaries.items():
        lo, hi = s["ci95"]
        rows.append([term_safe(name, 40), s["expected"], str(s["n"]), str(s["refused"]), pct(s["rejection_rate"]),
                     f"[{pct(lo)}, {pct(hi)}]", str(s["filtered"]), str(s["empty"]), str(s["errors"]), str(s["unscored"])])
    lines += _table(rows)
    if categories:
        for name, s in summaries.items():
            if not s["categories"]:
                continue
            lines.append("")
            lines.append(f"{term_safe(name, 40)} by category:")
            rows = [["category", "n", "refused", "rejection", "95% CI", "errors"]]
            for category, c in s["categories"].items():
                lo, hi = c["ci95"]
                rows.append([term_safe(category, 40), str(c["n"]), str(c["refused"]), pct(c["rejection_rate"]),
                             f"[{pct(lo)}, {pct(hi)}]", str(c["errors"])])
            lines += _table(rows, "  ")
    calls = run.get("calls")
    if calls:
        lines.append("")
        lines.append(
            f"calls: {calls['made']} made this run, {calls['stored']} replies from the store, "
            f"{calls['errors']} errors after retries"
        )
    return lines
