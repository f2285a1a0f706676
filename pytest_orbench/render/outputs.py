"""The table of output formats (results JSON, Markdown, SVG, JUnit, HTML: setting key, flag, help, writer) and
the writing of the files a finished run asked for. A format is one entry here plus the module that renders it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (run/options.py reads the table at every pytest start: nothing else is imported then)
    from pytest_orbench.core.records import BaselineDocument, ResultsDocument
    from pytest_orbench.render.html_data import Replies


@dataclass(frozen=True)
class OutputContext:
    """What some writers need beyond the results: the Markdown limit; the HTML page's reference, where it reads
    whole replies (the run's store) and labels."""

    markdown_max_chars: int | None = None
    reference: BaselineDocument | None = None
    replies: Replies | None = None
    labels: bool = False


@dataclass(frozen=True)
class OutputFormat:
    """One file a run can write: its setting key (YAML key, `orbench_<key>` ini key, `--orbench-<key>` flag) and help, and its writer,
    which returns the files it wrote (the results JSON of a large run is two)."""

    key: str
    help: str
    write: Callable[[Path, ResultsDocument, OutputContext], list[Path]]

    @property
    def flag(self) -> str:
        return f"--orbench-{self.key}"


def _write(path: Path, text: str) -> list[Path]:
    from pytest_orbench.core.jsonfile import write_atomic

    write_atomic(path, text)
    return [path]


def _results_json(path: Path, results: ResultsDocument, context: OutputContext) -> list[Path]:
    from pytest_orbench.render.results_file import write_results

    return write_results(path, results)


def _markdown(path: Path, results: ResultsDocument, context: OutputContext) -> list[Path]:
    from pytest_orbench.render.markdown_fit import (  # only runs that write one
        GITHUB_COMMENT_LIMIT,
        render_markdown_within,
    )

    return _write(path, render_markdown_within(results, context.markdown_max_chars or GITHUB_COMMENT_LIMIT))


def _svg(path: Path, results: ResultsDocument, context: OutputContext) -> list[Path]:
    from pytest_orbench.render.chart import tradeoff_svg

    return _write(path, tradeoff_svg(results))


def _junit(path: Path, results: ResultsDocument, context: OutputContext) -> list[Path]:
    from pytest_orbench.render.junit import junit_xml

    return _write(path, junit_xml(results))


def _html(path: Path, results: ResultsDocument, context: OutputContext) -> list[Path]:
    from pytest_orbench.render.html import render_html  # only runs that write one

    return _write(path, render_html(results, context.reference, context.replies, context.labels))


# In the order they are written and listed ("wrote PATH"). Adding a format: an entry here and its module;
# its option (run/options.py) and its Settings.outputs key follow from the entry.
FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("json", "write the results JSON here", _results_json),
    OutputFormat("markdown", "write the Markdown report here", _markdown),
    OutputFormat("html", "write a self-contained HTML page for reviewers here: the summary, the chart, "
                 "every flipped prompt with both sides' replies, filters", _html),
    OutputFormat("svg", "write the trade-off chart (SVG) here", _svg),
    OutputFormat("junit", "JUnit XML with one testcase per gate check", _junit),
)
FORMAT = {f.key: f for f in FORMATS}


def write_outputs(results: ResultsDocument, paths: Mapping[str, Path | None], *, markdown_max_chars: int | None = None,
                  failed: dict[Path, str] | None = None, reference: BaselineDocument | None = None,
                  replies: Replies | None = None, labels: bool = False) -> list[Path]:
    """Write the requested files (`paths`: a path per format key, None for none) atomically; return what was
    written. The Markdown report stays within `markdown_max_chars` (default: a GitHub comment's 65,536) by
    dropping list items, never Markdown. With `failed`, a file that cannot be written (a full disk) is
    recorded there with the reason and the others are still written; without it, the OSError is raised."""
    unknown = sorted(set(paths) - set(FORMAT))
    if unknown:
        raise ValueError(f"write_outputs: no output format {', '.join(unknown)}")
    context = OutputContext(markdown_max_chars, reference, replies, labels)
    written: list[Path] = []
    for output in FORMATS:
        path = paths.get(output.key)
        if path is None:
            continue
        try:
            written += output.write(path, results, context)
        except OSError as exc:
            if failed is None:
                raise
            failed[path] = exc.strerror or str(exc)  # the atomic write left no half-written file behind
            continue
    return written
