"""A generate run: the pipeline over a store, then its dataset files, its summary file and its terminal lines."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_orbench.core.csv_cells import csv_text
from pytest_orbench.core.store import Store
from pytest_orbench.tools.generate.config import GenerateConfig
from pytest_orbench.tools.generate.generator import Candidate, Pipeline


def write_set(path: Path, candidates: list[Candidate], expected: str, config: GenerateConfig, label: str) -> None:
    """CSV or JSONL (by suffix): id, prompt, category, expected, then provenance columns."""
    from pytest_orbench.core.jsonfile import write_atomic

    rows = []
    for n, c in enumerate(candidates, 1):
        rows.append({
            "id": f"{label}{n:04d}", "prompt": c.text,
            "category": c.toxic_category if expected == "refuse" else c.seed.category,
            "expected": expected, "seed_id": c.seed.id, "seed": c.seed.text, "rewrite_id": c.id,
            "rewriter": config.rewriter.model,
            "votes": ";".join(f"{m}={v or 'unparseable'}" for m, v in c.votes.items()),
            "moderators": ";".join(s.model for s in config.moderators),
            "panel_refusals": f"{sum(1 for r in c.panel.values() if r)}/{len(c.panel)}" if c.panel else "",
            "panel": ";".join(s.model for s in config.panel),
        })
    if path.suffix.lower() == ".jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    else:
        header = list(rows[0]) if rows else ["id", "prompt", "category", "expected"]
        # (csv_text: a rewrite holding a lone "\r" stays one row when the file is read back as a dataset)
        text = csv_text([header, *([str(r[c]) for c in header] for r in rows)])
    write_atomic(path, text)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = ["", f"{'category':<16}{'seeds':>7}{'rewrites':>10}{'safe':>7}{'toxic':>7}{'kept':>7}"]
    for cat, c in summary["categories"].items():
        lines.append(f"{cat[:15]:<16}{c['seeds']:>7}{c['rewrites']:>10}{c['safe']:>7}{c['toxic']:>7}{c['kept']:>7}")
    agreement = summary["stages"]["moderate"]["agreement"]
    models = summary["stages"]["moderate"]["moderators"]
    lines.append("moderator agreement with the majority: " + ", ".join(
        f"{name} ({models[name]}) {100 * a['with_majority']:.1f}%" if a["with_majority"] is not None else f"{name} n/a"
        for name, a in agreement.items()))
    for stage, s in summary["spend"].items():
        if not (s["made"] or s["stored"] or s["errors"]):
            continue
        cost = "cost unknown" if s["cost_usd"] is None else f"${s['cost_usd']:.4f}"
        lines.append(f"{stage}: {s['made']} calls made, {s['stored']} from the store, {s['errors']} failed; "
                     f"{s['prompt_tokens']:,} + {s['completion_tokens']:,} tokens, {cost}")
    for failure, count in summary["failures"].items():
        lines.append(f"  {count}x {failure}")
    return lines


def run_generate(config: GenerateConfig, store_dir: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the pipeline, write the set(s) and the summary; return the summary."""
    from pytest_orbench.calls.litellm_api import LiteLLMCaller
    from pytest_orbench.calls.rejections import GENERATE
    from pytest_orbench.core.jsonfile import dumps, write_atomic

    store = Store(store_dir, check=True)
    try:
        pipeline = Pipeline(config, store, lambda spec: LiteLLMCaller(spec, knobs=GENERATE), log)
        generated = asyncio.run(pipeline.run())
    finally:
        store.close()
    kept, toxic, summary = generated.kept, generated.toxic, generated.summary
    # A run whose calls failed and that produced nothing for a file does not replace the set made before:
    # exit 1 says so, and the next run retries only what failed.
    failed = any(s["errors"] for s in summary["spend"].values())
    summary["output"]["kept_previous"] = [str(p) for p, items in ((config.out, kept), (config.toxic_out, toxic))
                                          if failed and p is not None and not items and p.exists()]
    if str(config.out) not in summary["output"]["kept_previous"]:
        write_set(config.out, kept, "answer", config, "g")
        summary["output"]["file"] = str(config.out)
    if config.toxic_out is not None and str(config.toxic_out) not in summary["output"]["kept_previous"]:
        write_set(config.toxic_out, toxic, "refuse", config, "t")
        summary["output"]["toxic_file"] = str(config.toxic_out)
    if config.summary is not None:
        write_atomic(config.summary, dumps(summary))
    return summary
