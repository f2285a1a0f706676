"""The Markdown report fitted within a character limit (GitHub's comments): the largest parts cut first."""

from __future__ import annotations

from pytest_orbench.core.records import ResultsDocument
from pytest_orbench.render.markdown import FULL_REPORT, ICON, MARKER, Fit, headline, render_markdown
from pytest_orbench.render.markdown_escape import md_text

GITHUB_COMMENT_LIMIT = 65536  # characters in an issue comment or a job summary

# From the whole report to the smallest: prompt lists first, then the per-category table, then checks and
# warnings, datasets, and the chart. Each cut says what was left out and where the full report is.
FITS = (
    *(Fit(lists=n) for n in (None, 200, 100, 50, 20, 10, 5, 0)),
    *(Fit(lists=0, categories=n) for n in (200, 50, 10, 0)),
    *(Fit(lists=0, categories=0, checks=n) for n in (50, 10)),
    *(Fit(lists=0, categories=0, checks=10, datasets=n) for n in (100, 30, 10, 3)),
    Fit(lists=0, categories=0, checks=3, datasets=3, chart=False),
)


def minimal_markdown(results: ResultsDocument, max_chars: int, why: str | None = None) -> str:
    """The verdict alone, within `max_chars`: when even the smallest report does not fit, or a report was
    refused (the Action's comment then never keeps an earlier verdict)."""
    why = why or "the report does not fit in this space"
    body = (f"{MARKER}\n### OR-Bench over-refusal check: {headline(results)}\n\n"
            f"Only the verdict is shown here: {md_text(why)}; {FULL_REPORT}.\n")
    if len(body) <= max_chars:
        return body
    gate = results.get("gate")
    verdict = gate["verdict"] if gate else "ungated"
    head = f"{MARKER}\n### OR-Bench over-refusal check: {ICON[verdict]} **{verdict}**\n\n{FULL_REPORT}.\n"
    return head[:max_chars]


def render_markdown_within(results: ResultsDocument, max_chars: int = GITHUB_COMMENT_LIMIT) -> str:
    """The report shortened to fit (GitHub comments: 65,536 characters), the largest parts cut first; at worst
    the verdict alone. Always within `max_chars`."""
    for fit in FITS:
        body = render_markdown(results, fit=fit)
        if len(body) <= max_chars:
            return body
    return minimal_markdown(results, max_chars, f"the report is longer than {max_chars:,} characters even without "
                                                "its lists and tables")
