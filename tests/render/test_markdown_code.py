"""The Markdown report's own code spans render as code on GitHub (`orbench label`), while untrusted text in the
same messages (a dataset name, an endpoint's error) stays inert, backticks and all."""

from __future__ import annotations

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options

from pytest_orbench.analysis.baseline import baseline_document
from pytest_orbench.analysis.document import assess
from pytest_orbench.analysis.gate import parse_gate
from pytest_orbench.render.markdown import render_markdown
from pytest_orbench.render.markdown_escape import md_message
from tests.analysis.test_gate import make_results


def render(markdown: str) -> str:
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def test_the_reports_own_code_spans_render_as_code() -> None:
    results = assess(make_results({"hard-1k": [False] * 20}), baseline_document(make_results({"hard-1k": [False] * 20})),
                     parse_gate({}))
    results["judge_audit"] = None  # no labels: the report says how to check the judge
    body = render_markdown(results)
    assert "\\`orbench label\\`" not in body
    assert "(<code>orbench label</code>)" in render(body)


@pytest.mark.parametrize("quoted", [
    "x`[click](http://evil.example)`", "`<img src=x onerror=alert(1)>`", "a`b", "`@octocat #12 www.evil.example`",
    "``<b>x</b>``", "trail`",
])
def test_untrusted_text_inside_a_message_stays_inert(quoted: str) -> None:
    rendered = render(f"- {md_message(f'dataset {quoted}: label it with `orbench label` first')}")
    assert "<a " not in rendered and "<img" not in rendered and "<b>" not in rendered
    assert "<code>orbench label</code>" in rendered or quoted.count("`") % 2  # an odd backtick may pair with ours


def test_a_message_keeps_its_spaces_around_code() -> None:
    assert md_message("run `orbench label` and `x` then") == "run `orbench label` and `x` then"
    assert md_message("a lone ` backtick") == "a lone \\` backtick"
