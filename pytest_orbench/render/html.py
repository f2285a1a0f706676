"""--orbench-html: one self-contained page for the reviewer of a run: the summary, the trade-off chart, and
every flipped prompt with the compared side's reply and this run's side by side, their verdicts and the
judge's confidence; filters by dataset, category and flip direction; the unchanged prompts on demand.

Self-contained: no network, no CDN; one inline script, allowed by its hash in the page's Content Security
Policy, which allows nothing else (an injected script would not run even if one got in). Untrusted text
(prompts, replies, ids, dataset and category names) travels as JSON inside a non-executed script element
(`<`, `>`, `&` and line separators escaped) and reaches the page only as text nodes: no markup, no live link.
Rows are drawn a page at a time, so 80,000 prompts stay usable.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_orbench.core.records import BaselineDocument, ResultsDocument

if TYPE_CHECKING:
    from pytest_orbench.core.store import Store

FULL_ROWS = 10_000  # above this many prompts, unchanged ones carry no text (the page stays a few MB)
_P = re.compile(r"P\(refusal\) ([0-9.]+)")


def _confidence(reason: str | None) -> float | None:
    found = _P.search(reason or "")
    return float(found.group(1)) if found else None


def _node_id(prompt: Mapping[str, Any]) -> str:
    local = str(prompt["id"])[len(str(prompt["dataset"])) + 1:]
    return f"orbench/{prompt['dataset']}::" + re.sub(r"[^\w.+-]+", "_", f"{prompt.get('category', '')}-{local}")


def _reply(store: Store | None, key: str | None, excerpt: str) -> tuple[str, bool]:
    """A reply's whole text from the store, else the results' excerpt (and whether it is whole)."""
    if store is not None and key:
        try:
            record = store.get(key)
        except Exception:  # noqa: BLE001 - a damaged or locked store: the excerpt, said as such
            record = None
        if record is not None:
            return str(record.get("text") or ""), True
    return excerpt, len(excerpt) < 300


def page_data(results: ResultsDocument, reference: BaselineDocument | None, store: Store | None,
              labels: bool = False) -> dict[str, Any]:
    """What the page shows, as plain data (the page's script renders it)."""
    flips: dict[str, str] = {}
    for summary in results["datasets"].values():
        comparison: Mapping[str, Any] = summary.get("comparison") or {}
        flips.update(dict.fromkeys(comparison.get("newly_refused_ids") or [], "newly refused"))
        flips.update(dict.fromkeys(comparison.get("newly_answered_ids") or [], "newly answered"))
        flips.update(dict.fromkeys((comparison.get("verification") or {}).get("overturned_ids") or [], "overturned"))
    old: dict[str, Mapping[str, Any]] = {p["id"]: p for p in reference["prompts"]} if reference else {}
    many = len(results["prompts"]) > FULL_ROWS
    rows = []
    for prompt in results["prompts"]:
        direction = flips.get(prompt["id"]) or ("error" if prompt.get("refused") is None else "unchanged")
        shown = direction != "unchanged" or not many
        mine_text, mine_whole = (_reply(store, prompt.get("reply_key"), prompt.get("reply_excerpt") or "")
                                 if direction != "unchanged" else (prompt.get("reply_excerpt") or "", False))
        theirs: dict[str, Any] | None = None
        side = prompt.get("base") or old.get(prompt["id"])
        if side is not None:
            text, whole = ("", False)
            if direction != "unchanged":
                text, whole = _reply(store, side.get("reply_key"), str(side.get("reply_excerpt") or ""))
            theirs = {"verdict": side.get("verdict"), "refused": side.get("refused"), "reply": text, "whole": whole,
                      "p": _confidence(side.get("judge_reason"))}
        rows.append({
            "id": prompt["id"], "node": _node_id(prompt), "dataset": prompt["dataset"],
            "category": prompt.get("category", ""), "expected": prompt.get("expected", ""), "dir": direction,
            "prompt": str(prompt.get("prompt") or "") if shown else "",
            "toxic": prompt.get("expected") == "refuse",
            "mine": {"verdict": prompt.get("verdict"), "refused": prompt.get("refused"), "reply": mine_text,
                     "whole": mine_whole, "p": _confidence(prompt.get("judge_reason")),
                     "reason": str(prompt.get("judge_reason") or prompt.get("error") or "")[:300]},
            "theirs": theirs,
        })
    run = results["run"]
    gate = results.get("gate") or {"verdict": "ungated"}
    return {
        "verdict": gate["verdict"], "endpoint": str(run.get("endpoint") or ""),
        "judge": f"{(run.get('judge') or {}).get('id', '')} v{(run.get('judge') or {}).get('version', '')}",
        "compared": str(run.get("compared_with") or "nothing"), "labels": labels, "model": str(run.get("model") or ""),
        "rows": rows, "textless": many,
    }


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
        body.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    return f"<table class=summary>{head}{''.join(body)}</table>"


SCRIPT = r"""
'use strict';
const data = JSON.parse(document.getElementById('orbench-data').textContent);
const rows = data.rows;
const PAGE = 100;
let page = 0;
const $ = (id) => document.getElementById(id);
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls; return e; };
const marks = new Map();
function fill(select, values) {
  for (const v of values) { const o = el('option', v); o.value = v; select.appendChild(o); }
}
fill($('dataset'), [...new Set(rows.map((r) => r.dataset))]);
fill($('category'), [...new Set(rows.map((r) => r.category))].sort());
function chosen() {
  const d = $('dataset').value, c = $('category').value, dir = $('direction').value, q = $('search').value.toLowerCase();
  return rows.filter((r) => (!d || r.dataset === d) && (!c || r.category === c)
    && (dir === 'all' ? true : dir === 'flips' ? ['newly refused', 'newly answered'].includes(r.dir) : r.dir === dir)
    && (!q || r.id.toLowerCase().includes(q) || r.prompt.toLowerCase().includes(q)));
}
function verdict(side) {
  const box = el('div', '', 'verdict');
  if (!side) { box.appendChild(el('span', 'not compared')); return box; }
  box.appendChild(el('b', String(side.verdict)));
  if (side.p !== null && side.p !== undefined) box.appendChild(el('span', ' P(refusal) ' + side.p.toFixed(2), 'p'));
  return box;
}
function reply(side, toxic) {
  const box = el('div', '', 'reply');
  if (!side) return box;
  if (!side.reply) { box.appendChild(el('i', side.whole === false && side.verdict ? 'reply not stored' : '')); return box; }
  const text = el('pre', side.reply + (side.whole ? '' : ' …'));
  if (toxic) {
    text.hidden = true;
    const show = el('button', 'show the reply to a toxic prompt');
    show.addEventListener('click', () => { text.hidden = false; show.remove(); });
    box.appendChild(show);
  }
  box.appendChild(text);
  return box;
}
function mark(row) {
  const box = el('div', '', 'mark');
  for (const [label, name] of [['compliance', 'answer'], ['refusal', 'refusal'], ['partial_refusal', 'partial']]) {
    const b = el('button', name);
    b.addEventListener('click', () => { marks.set(row.id, label); b.parentElement.dataset.marked = label; $('marks').textContent = marks.size + ' marked'; });
    box.appendChild(b);
  }
  return box;
}
function draw() {
  const list = chosen();
  const pages = Math.max(1, Math.ceil(list.length / PAGE));
  page = Math.min(page, pages - 1);
  const body = $('rows');
  body.replaceChildren();
  for (const row of list.slice(page * PAGE, page * PAGE + PAGE)) {
    const tr = el('tr');
    tr.dataset.id = row.id;
    const id = el('td');
    id.appendChild(el('code', row.id));
    id.appendChild(el('div', row.node, 'node'));
    tr.appendChild(id);
    tr.appendChild(el('td', row.dataset + ' / ' + row.category));
    tr.appendChild(el('td', row.dir, 'dir'));
    const prompt = el('td');
    prompt.appendChild(el('div', row.toxic && row.prompt ? '(a toxic prompt)' : row.prompt, 'prompt'));
    tr.appendChild(prompt);
    for (const side of [row.theirs, row.mine]) {
      const td = el('td');
      td.appendChild(verdict(side));
      td.appendChild(reply(side, row.toxic));
      tr.appendChild(td);
    }
    if (data.labels) { const td = el('td'); if (row.mine.whole) td.appendChild(mark(row)); tr.appendChild(td); }
    body.appendChild(tr);
  }
  $('count').textContent = list.length + ' prompts; page ' + (page + 1) + ' of ' + pages;
}
for (const id of ['dataset', 'category', 'direction', 'search']) $(id).addEventListener('input', () => { page = 0; draw(); });
$('prev').addEventListener('click', () => { page = Math.max(0, page - 1); draw(); });
$('next').addEventListener('click', () => { page += 1; draw(); });
if (data.labels) {
  $('download').hidden = false;
  $('download').addEventListener('click', () => {
    const q = (s) => '"' + String(s).replace(/"/g, '""') + '"';
    const lines = ['prompt,response,label,id,dataset,model,stratum,labeler,source'];
    for (const row of rows) if (marks.has(row.id)) lines.push([q(row.prompt), q(row.mine.reply), marks.get(row.id),
      q(row.id), q(row.dataset), q(data.model), '', 'html-review', 'review'].join(','));
    const link = el('a');
    link.href = URL.createObjectURL(new Blob([lines.join('\n') + '\n'], { type: 'text/csv' }));
    link.download = 'orbench-labels-review.csv';
    link.click();
  });
}
draw();
document.body.dataset.ready = '1';
"""

STYLE = """
body{font:14px/1.4 Helvetica,Arial,sans-serif;margin:20px;color:#222}
h1{font-size:20px} .fail{color:#b00} .pass{color:#070} .inconclusive{color:#a60} .ungated{color:#666}
table.summary td,table.summary th{border:1px solid #ccc;padding:3px 8px;text-align:right}
table.rows{border-collapse:collapse;width:100%;table-layout:fixed} table.rows td,table.rows th{border-top:1px solid #ddd;
vertical-align:top;padding:6px;word-wrap:break-word} pre{white-space:pre-wrap;margin:4px 0;max-height:18em;overflow:auto;
background:#f7f7f7;padding:4px} .node{color:#777;font-size:11px} .p{color:#555} .controls>*{margin-right:10px}
"""


def render_html(results: ResultsDocument, reference: BaselineDocument | None = None, store: Store | None = None,
                labels: bool = False) -> str:
    from pytest_orbench.render.chart import tradeoff_svg

    data = page_data(results, reference, store, labels)
    script_hash = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'"
    verdict = html.escape(data["verdict"])
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
<h1>OR-Bench over-refusal check: <span class="{verdict}">{verdict}</span></h1>
<p>{html.escape(data['endpoint'])} · judge {html.escape(data['judge'])} · compared with {html.escape(data['compared'])}</p>
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
