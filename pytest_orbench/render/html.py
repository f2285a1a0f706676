"""--orbench-html: one self-contained page for the reviewer of a run: the verdict with the checks that did
not pass and what changed, the summary, the trade-off chart, and every flipped prompt with the compared
side's reply and this run's side by side (whole, from the store), their verdicts and the judge's
confidence; filters by dataset, category and flip direction; the unchanged prompts on demand.

Self-contained: no network, no CDN; one inline script, allowed by its hash in the page's Content Security
Policy, which allows nothing else (an injected script would not run even if one got in). Untrusted text
(prompts, replies, ids, dataset and category names) travels as JSON inside a non-executed script element
(`<`, `>`, `&` and line separators escaped) and reaches the page only as text nodes: no markup, no live link;
its bidi, control and invisible characters shown as `[U+202E]`. Rows are drawn a page at a time, so 80,000
prompts stay usable. The rows' data is html_data's, the script and style html_script's.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Mapping
from typing import Any

from pytest_orbench.core.records import BaselineDocument, ResultsDocument, against_live_base
from pytest_orbench.render.html_data import FULL_ROWS, Replies, page_data
from pytest_orbench.render.html_script import SCRIPT, STYLE
from pytest_orbench.render.markdown_escape import visible

__all__ = ["FULL_ROWS", "Replies", "render_html"]


def _t(text: object, limit: int | None = None) -> str:
    """Text for the page's markup: escaped, on one line, its invisible and bidi characters shown."""
    shown = " ".join(visible(str(text)).split())
    if limit is not None and len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return html.escape(shown)


def _json_for_script(data: Any) -> str:
    """JSON that cannot end its script element or start markup: <, >, & and the line separators escaped."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                          ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def _summary_table(results: ResultsDocument) -> str:
    head = ("<tr><th>dataset</th><th>expect</th><th>n</th><th>rejection</th><th>95% CI</th><th>compared</th>"
            "<th>Δ</th><th>p (adj.)</th><th>newly refused</th><th>newly answered</th><th>errors</th></tr>")
    body = []
    for name, s in results["datasets"].items():
        c: Mapping[str, Any] = s.get("comparison") or {}
        lo, hi = s["ci95"]

        def pct(v: Any) -> str:
            return "n/a" if v is None else f"{100 * float(v):.1f}%"
        cells = [name, s["expected"], str(s["n"]), pct(s["rejection_rate"]), f"[{pct(lo)}, {pct(hi)}]",
                 pct(c.get("baseline_rate")) if c else "", f"{100 * c['delta']:+.1f} pp" if c.get("delta") is not None else "",
                 f"{c['p_adjusted']:.3g}" if c.get("p_adjusted") is not None else "", str(c.get("newly_refused", "")),
                 str(c.get("newly_answered", "")), str(s["errors"])]
        body.append("<tr>" + "".join(f"<td>{_t(cell)}</td>" for cell in cells) + "</tr>")
    return f"<table class=summary>{head}{''.join(body)}</table>"


def _changes(results: ResultsDocument) -> str:
    """What it was compared with and what changed in the configuration (as the Markdown report says it)."""
    changes = results.get("changes")
    if changes is None:
        return ""
    against = "the live base (the same prompts asked under the base configuration in this run)" \
        if against_live_base(results["run"]) else "the baseline file"
    if not changes:
        return (f"<p><b>Compared with</b> {against}. <b>What changed:</b> nothing in the configuration (same "
                "endpoint, system prompt and parameters).</p>")
    items = []
    for change in changes:
        if change.get("message"):
            text = f"{_t(change['what'])}: {_t(change['message'], 300)}"
        else:
            old, new = change["baseline"], change["current"]
            if change["what"] == "system prompt sha256":
                old, new = (str(v)[:12] if v else "none" for v in (old, new))
            text = f"{_t(change['what'])}: {_t(old if old not in (None, '') else 'none', 200)} → " \
                   f"{_t(new if new not in (None, '') else 'none', 200)}"
        items.append(f"<li>{text}</li>")
    return f"<p><b>Compared with</b> {against}. <b>What changed:</b></p><ul class=changes>{''.join(items)}</ul>"


def _gate(results: ResultsDocument) -> tuple[str, str]:
    """The headline's reason (the checks that did not pass), and the gate's section: those checks with their
    numbers, its warnings, what was not compared, what changed, and the checks that passed (folded)."""
    gate = results.get("gate")
    if not gate:
        return "", _changes(results)
    failed = sorted((c for c in gate["checks"] if c["outcome"] != "pass"), key=lambda c: c["outcome"] != "fail")
    named = "; ".join(c["name"] for c in failed[:3]) + (f"; and {len(failed) - 3} more checks" if len(failed) > 3 else "")
    reason = _t(named, 600) if failed else _t(gate.get("note", "nothing was checked")) \
        if gate["verdict"] == "ungated" else ""
    parts = []
    if failed:
        parts.append("<ul class=checks>" + "".join(
            f"<li class=\"{_t(c['outcome'])}\"><b>{_t(c['outcome'].upper())}</b>: {_t(c['name'])}: {_t(c['message'])}</li>"
            for c in failed) + "</ul>")
    warnings = gate.get("warnings") or []
    if warnings:
        parts.append("<p><b>Warnings:</b></p><ul class=warnings>" + "".join(f"<li>{_t(w)}</li>" for w in warnings)
                     + "</ul>")
    if gate.get("not_compared") or gate.get("baseline_only"):
        parts.append(f"<p>Not compared (not in the baseline): {_t(', '.join(gate.get('not_compared') or []) or 'none')}"
                     f"; in the baseline but not run: {_t(', '.join(gate.get('baseline_only') or []) or 'none')}.</p>")
    parts.append(_changes(results))
    passed = [c for c in gate["checks"] if c["outcome"] == "pass"]
    if passed:
        parts.append(f"<details><summary>{len(passed)} {'check' if len(passed) == 1 else 'checks'} passed</summary><ul>" + "".join(
            f"<li>{_t(c['name'])}: {_t(c['message'])}</li>" for c in passed) + "</ul></details>")
    return reason, "\n".join(p for p in parts if p)


def render_html(results: ResultsDocument, reference: BaselineDocument | None = None, replies: Replies | None = None,
                labels: bool = False) -> str:
    """The page. `replies`: where the changed prompts' whole replies are read (the run's store, or why it could
    not be opened); without it each side shows what the results keep of it and says why."""
    from pytest_orbench.render.chart import tradeoff_svg

    data = page_data(results, reference, replies or Replies(), labels)
    script_hash = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'"
    verdict = html.escape(data["verdict"])
    reason, gate = _gate(results)
    svg = tradeoff_svg(results) if {"hard-1k", "toxic"} <= set(results["datasets"]) else ""
    mark_head = "<th>mark the verdict</th>" if labels else ""
    textless = ("<p>Over 10,000 prompts: the unchanged ones are listed without their text (the results file has "
                "it).</p>" if data["textless"] else "")
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8>
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name=referrer content=no-referrer>
<title>OR-Bench review: {verdict}</title><style>{STYLE}</style></head>
<body>
<h1>OR-Bench over-refusal check: <span class="{verdict}">{verdict}</span>{': ' + reason if reason else ''}</h1>
<p>{_t(data['endpoint'])} · judge {_t(data['judge'])} · compared with {_t(data['compared'])}</p>
<div class=gate>{gate}</div>
{_summary_table(results)}
<div class=chart>{svg}</div>
<h2>Prompts</h2>{textless}
<div class=controls>
<label>dataset <select id=dataset><option value="">all</option></select></label>
<label>category <select id=category><option value="">all</option></select></label>
<label>show <select id=direction><option value=flips>flipped</option><option value="newly refused">newly refused</option>
<option value="newly answered">newly answered</option><option value=overturned>overturned by the LLM judge</option>
<option value=error>errors</option><option value=unchanged>unchanged</option><option value=all>all</option></select></label>
<label>search <input id=search type=search></label>
<button id=prev>previous</button><button id=next>next</button> <span id=count></span>
<button id=download hidden>download the marks as a labels CSV</button> <span id=marks></span>
</div>
<table class=rows><thead><tr><th style="width:14%">id (pytest -k)</th><th style="width:10%">dataset / category</th>
<th style="width:8%">flip</th><th style="width:20%">prompt</th><th>compared side</th><th>this run</th>{mark_head}</tr></thead>
<tbody id=rows></tbody></table>
<script type="application/json" id="orbench-data">{_json_for_script(data)}</script>
<script>{SCRIPT}</script>
</body></html>
"""
