"""The files a finished run writes: results JSON, Markdown report, trade-off SVG, JUnit XML, the HTML review page."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_orbench.core.jsonfile import write_atomic, write_json
from pytest_orbench.core.records import BaselineDocument, ResultsDocument

if TYPE_CHECKING:
    from pytest_orbench.core.store import Store


def junit_xml(results: ResultsDocument) -> str:
    """One testcase per gate check: a failed check fails, an inconclusive one errors."""
    from junit_xml import TestCase, TestSuite, to_xml_report_string

    from pytest_orbench.render.markdown_escape import visible

    cases = []
    for check in results.get("gate", {}).get("checks", []):
        # Names and messages can quote untrusted text (a dataset's name, an endpoint's error): CI pages show
        # them, so bidi and other invisible characters are written as [U+202E], not obeyed.
        name, message = visible(check["name"]), visible(check["message"])
        case = TestCase(name, classname=f"orbench.gate.{visible(check['dataset'])}", elapsed_sec=0.0, stdout=message)
        if check["outcome"] == "fail":
            case.add_failure_info(message=message, failure_type="regression")
        elif check["outcome"] == "inconclusive":
            case.add_error_info(message=message, error_type="inconclusive")
        cases.append(case)
    return str(to_xml_report_string([TestSuite("orbench-gate", cases)], prettyprint=True))


def tradeoff_svg(results: ResultsDocument) -> str:
    from pytest_orbench.render.chart import our_points, paper_points, svg

    return svg(paper_points() + our_points(results["datasets"]))


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
    `prompts_file` naming the other (schema, records, SHA-256). `records.load_results` reads both forms."""
    import hashlib
    import json as json_module

    from pytest_orbench.core.jsonfile import escape_invisible
    from pytest_orbench.core.records import FULL_PROMPTS_MAX, PROMPTS_SCHEMA, PROMPTS_SCHEMA_VERSION, prompt_lines_name

    prompts = results["prompts"]
    if len(prompts) <= FULL_PROMPTS_MAX:
        write_json(path, results)
        return [path]
    lines_path = path.parent / prompt_lines_name(path)
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


def write_outputs(results: ResultsDocument, *, json: Path | None = None, markdown: Path | None = None,
                  svg: Path | None = None, junit: Path | None = None, markdown_max_chars: int | None = None,
                  failed: dict[Path, str] | None = None, html: Path | None = None,
                  reference: BaselineDocument | None = None, store: Store | None = None,
                  labels: bool = False) -> list[Path]:
    """Write the requested files atomically; return what was written. The Markdown report stays within
    `markdown_max_chars` (default: a GitHub comment's 65,536) by dropping list items, never Markdown.
    With `failed`, a file that cannot be written (a full disk) is recorded there with the reason and the
    others are still written; without it, the OSError is raised."""
    def render_html(*args: Any) -> str:
        from pytest_orbench.render.html import render_html as render  # only runs that write one

        return render(*args)

    def render_markdown() -> str:
        from pytest_orbench.render.markdown_fit import (  # only runs that write one
            GITHUB_COMMENT_LIMIT,
            render_markdown_within,
        )

        return render_markdown_within(results, markdown_max_chars or GITHUB_COMMENT_LIMIT)

    # Each writer returns the files it wrote: the results JSON of a large run is two.
    files: list[tuple[Path | None, Callable[[Path], object]]] = [
        (json, lambda path: write_results(path, results)),
        (markdown, lambda path: write_atomic(path, render_markdown())),
        (svg, lambda path: write_atomic(path, tradeoff_svg(results))),
        (junit, lambda path: write_atomic(path, junit_xml(results))),
        (html, lambda path: write_atomic(path, render_html(results, reference, store, labels))),
    ]
    written: list[Path] = []
    for path, write in files:
        if path is None:
            continue
        try:
            wrote = write(path)
        except OSError as exc:
            if failed is None:
                raise
            failed[path] = exc.strerror or str(exc)  # the atomic write left no half-written file behind
            continue
        written += wrote if isinstance(wrote, list) else [path]
    return written
