"""The results JSON file (--orbench-json), in two files for a large run, and the prompts that matter in it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_orbench.core import records
from pytest_orbench.core.jsonfile import escape_invisible, write_atomic, write_json
from pytest_orbench.core.records import (
    PROMPTS_SCHEMA,
    PROMPTS_SCHEMA_VERSION,
    ResultsDocument,
    prompt_lines_name,
)


def flipped_ids(results: ResultsDocument) -> set[str]:
    """The prompts whose verdict flipped against the baseline or the live base, either direction, every dataset."""
    flipped: set[str] = set()
    for summary in results["datasets"].values():
        comparison: Mapping[str, Any] = summary.get("comparison") or {}
        flipped.update(comparison.get("newly_refused_ids") or [], comparison.get("newly_answered_ids") or [])
    return flipped


def prompts_that_matter(results: ResultsDocument) -> list[Any]:
    """The prompts a person reads first: every flip (either direction, against the baseline or the live base) and
    every error (the prompt's, a trial's, the live base's)."""
    flipped = flipped_ids(results)
    return [p for p in results["prompts"] if p["id"] in flipped or p.get("error") or p.get("trial_errors")
            or (isinstance(p.get("base"), dict) and p["base"].get("error"))]


def write_results(path: Path, results: ResultsDocument) -> list[Path]:
    """The results JSON; above FULL_PROMPTS_MAX prompts, in two files: every prompt's record, one per line, in
    `<name>.prompts.jsonl` beside it (written first, streamed), and the JSON with the prompts that matter and
    `prompts_file` naming the other (schema, records, SHA-256). `records.load_results` reads both forms. Up to
    FULL_PROMPTS_MAX, a `<name>.prompts.jsonl` left beside it by an earlier run is removed."""
    import hashlib
    import json as json_module

    prompts = results["prompts"]
    lines_path = path.parent / prompt_lines_name(path)
    if len(prompts) <= records.FULL_PROMPTS_MAX:  # (read when called, as the terminal summary reads it)
        write_json(path, results)
        # An earlier large run's prompts file beside it would disagree with this one (a tool, a person, reading
        # every record from it): the results are this one file now. A file of that name that is not one is kept.
        if _prompt_lines(lines_path):
            lines_path.unlink()
        return [path]
    digest = hashlib.sha256()

    def lines() -> Iterator[str]:
        for record in prompts:
            line = escape_invisible(json_module.dumps(record, sort_keys=True, ensure_ascii=False)) + "\n"
            digest.update(line.encode("utf-8"))
            yield line

    write_atomic(lines_path, lines())
    kept = prompts_that_matter(results)
    document = {**results, "prompts": kept, "prompts_file": {
        "path": lines_path.name, "schema": PROMPTS_SCHEMA, "schema_version": PROMPTS_SCHEMA_VERSION,
        "records": len(prompts), "sha256": digest.hexdigest(), "kept_here": len(kept),
        "note": "this file keeps the summary, the gate and the prompts that matter (flips and errors); every prompt's "
                "record is in the file named by path, one JSON object per line"}}
    write_json(path, document)
    return [lines_path, path]


def _prompt_lines(path: Path) -> bool:
    """Whether `path` is a prompts file a large run wrote (its first line a prompt's record)."""
    import json as json_module

    try:
        with path.open("rb") as fh:
            first = json_module.loads(fh.readline(1 << 20))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(first, dict) and {"id", "verdict", "dataset"} <= first.keys()
