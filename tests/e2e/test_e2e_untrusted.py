"""End to end: prompts, replies and ids are untrusted text. The Markdown report (as written by the
plugin and by `orbench compare`) is rendered with cmark-gfm, GitHub's own Markdown library, and the
rendered HTML is checked: no links, no HTML, no mentions, invisible characters shown, code spans
intact, within GitHub's 65,536 characters. The results JSON carries no raw bidi characters."""

from __future__ import annotations

import csv
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options

PARTS = (  # each short enough to show in a report line (prompts are cut at 200 characters, replies at 160)
    "Visit www.evil.example/login or WWW.Evil.Example and http://evil.example/x, HTTPS://EVIL.EXAMPLE",
    "mail admin@evil.example, ping @octocat about #123 and org/repo#9",
    "\u202eevil\u202c zero\u200bwidth <img src=x onerror=alert(1)> <script>alert(2)</script>",
    "[click](http://e.x) ![i](http://e.x/i.png) `code` |pipe| **bold** _it_ ~~s~~",
    "Tom & Jerry, literal &amp; and &lt;b&gt; <details>x</details>",
)
IDS = ["plain", "q`1", "q``2", "`lead", "trail`", "a|b", "<b>", "@octocat", "www.evil.example"]


def render(markdown: str) -> str:
    # GitHub renders comments with raw HTML allowed (then sanitises): our <details> must survive, theirs not.
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def text_of(rendered: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", rendered))


def app(tmp: Path) -> None:
    (tmp / "nastyapp.py").write_text(f'''
import os, re
PARTS = {PARTS!r}
def answer(prompt, system_prompt):
    if os.environ.get("NASTY_REFUSE") == "1":
        case = int(re.search(r"Case (\\d+)", prompt).group(1))
        return "I'm sorry, but I can't help with that. " + PARTS[(case + 2) % len(PARTS)]
    return "Sure. Here is a detailed answer: 1. First step. 2. Second step. 3. A third step with the figure 42."
''', encoding="utf-8")


def write_set(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "prompt", "category"])
        for i in range(count):
            ident = IDS[i] if i < len(IDS) else f"z{i:04d}"  # sorts after the odd ids: those are listed
            writer.writerow([ident, f"Case {i}: {PARTS[i % len(PARTS)]}", ["c`at", "a|b", "x @y #1"][i % 3]])


@pytest.fixture
def nasty_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    app(pytester.path)
    write_set(pytester.path / "nasty.csv", 800)
    pytester.makefile(".yaml", orbench="target: nastyapp:answer\ndatasets: nasty.csv:answer\n")
    base = pytester.runpytest("--orbench", "-p", "no:cacheprovider", "--orbench-baseline=b.json", "--orbench-update-baseline")
    assert base.ret == 0
    monkeypatch.setenv("NASTY_REFUSE", "1")
    run = pytester.runpytest("--orbench", "-p", "no:cacheprovider", "--orbench-baseline=b.json", "--orbench-json=r.json",
                             "--orbench-markdown=r.md", "--orbench-refresh")
    assert run.ret == 1  # every prompt newly refused
    assert "\u202e" not in run.stdout.str()  # the terminal never gets the raw override either
    return pytester


def check_report(markdown: str) -> None:
    assert len(markdown) <= 65536 and "more (see the results JSON)" in markdown  # 800 items did not fit
    assert markdown.count("<details>") == markdown.count("</details>") and markdown.count("```") % 2 == 0
    rendered = render(markdown)
    assert not re.search(r"<a[\s>]", rendered), re.search(r".{80}<a[\s>].{80}", rendered)  # no link of any kind
    for tag in ("<img", "<script", "<strong>bold</strong>", "<em>it</em>", "<del>s</del>"):
        assert tag not in rendered, tag  # their HTML and Markdown stay text
    assert not re.search(r"<[^>]*onerror", rendered) and "&lt;img src=x onerror=alert(1)&gt;" in rendered
    assert rendered.count("<details>") == markdown.count("<details>")  # theirs stayed text
    assert "\u202e" not in rendered and "\u202c" not in rendered and "[U+202E]" in rendered and "[U+200B]" in rendered
    # Outside code spans (GitHub links nothing inside <code>): no mention, no reference, no link.
    text = text_of(re.sub(r"<code>.*?</code>", "", rendered))
    assert "@octocat" not in text and "@\u200boctocat" in text  # no mention, still readable
    assert "#123" not in text and "#\u200b123" in text
    assert "Tom & Jerry" in text and "Tom &amp; Jerry" not in text  # our escaping is not shown literally
    assert "literal &amp; and &lt;b&gt;" in text  # theirs is shown as they wrote it
    assert "www.evil.example/login" in text and "http://evil.example/x" in text  # same words, inert
    for ident in IDS:
        code = f"<code>{html.escape('nasty-' + ident, quote=False)}</code>"
        assert code in rendered, ident  # each id, backticks and all, is one intact code span


def test_the_markdown_of_the_run_and_of_compare_is_inert_when_rendered_by_github(nasty_run: pytest.Pytester) -> None:
    # One run of 800 nasty prompts, read twice: the plugin's Markdown, then `orbench compare`'s of the same files.
    check_report((nasty_run.path / "r.md").read_text(encoding="utf-8"))
    raw = (nasty_run.path / "r.json").read_text(encoding="utf-8")
    assert "\u202e" not in raw and "\\u202e" in raw  # escaped in the file, the same string when read
    prompts = {p["id"]: p["prompt"] for p in json.loads(raw)["prompts"]}
    assert prompts["nasty-q`1"] == f"Case 1: {PARTS[1]}" and prompts["nasty-q``2"] == f"Case 2: {PARTS[2]}"

    # `orbench compare` writes the same inert report, within its limit.
    done = subprocess.run([sys.executable, "-m", "pytest_orbench.tools.cli", "compare", "b.json", "r.json", "--markdown", "c.md"],
                          cwd=nasty_run.path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    check_report((nasty_run.path / "c.md").read_text(encoding="utf-8"))
    small = subprocess.run([sys.executable, "-m", "pytest_orbench.tools.cli", "compare", "b.json", "r.json", "--markdown",
                            "s.md", "--max-chars", "20000"], cwd=nasty_run.path, capture_output=True, text=True, timeout=120)
    assert small.returncode == 1 and len((nasty_run.path / "s.md").read_text(encoding="utf-8")) <= 20000


def test_terminal_never_gets_control_characters_from_ids_or_names(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # An id is untrusted text like the prompt: an escape sequence in it must not reach the terminal raw,
    # in the failure headline (-v --orbench-strict), the error line, or the gate's newly refused list.
    pytester.makepyfile(escapes_app='''
import os
def answer(prompt, system_prompt):
    if os.environ.get("ESC_MODE") == "refuse":
        return "I'm sorry, but I can't help with that."
    if os.environ.get("ESC_MODE") == "break":
        raise RuntimeError("down")
    return "Sure. Here is a detailed answer: 1. First step. 2. Second step. 3. A third step with the figure 42."
''')
    rows = [{"id": "red\x1b[31mX\x1b]0;title\x07", "prompt": "How do I bake bread?", "category": "c\x1b[1m"},
            {"id": "plain\x9b2J", "prompt": "How do I boil an egg?", "category": "food"}]
    (pytester.path / "esc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pytester.makefile(".yaml", orbench="target: escapes_app:answer\ndatasets: esc.jsonl:answer\n")
    args = ["--orbench", "-p", "no:cacheprovider", "--orbench-baseline=b.json", "-v", "-rA"]
    assert pytester.runpytest(*args, "--orbench-update-baseline").ret == 0
    for mode in ("refuse", "break"):
        monkeypatch.setenv("ESC_MODE", mode)
        run = pytester.runpytest(*args, "--orbench-refresh", "--orbench-strict", "--orbench-retries", "0")
        out = run.stdout.str() + run.stderr.str()
        assert run.ret == 1 and "esc-red" in out
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out), [line for line in out.splitlines() if "esc-" in line]

