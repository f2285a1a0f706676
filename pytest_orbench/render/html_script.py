"""The reviewer page's script and style: it draws the rows from the page's data, as text nodes only.

Untrusted text reaches the page through `el` alone, as a text node with its control, format (bidi,
zero-width) and separator characters written as `[U+202E]`, as the Markdown report and the label screen
write them (markdown_escape.visible): shown, not obeyed. The marks download as a labels CSV whose cells
are neutralised for spreadsheets as core/csv_cells.py does (a quote before a formula start, or a quote).
"""

from __future__ import annotations

SCRIPT = r"""
'use strict';
const data = JSON.parse(document.getElementById('orbench-data').textContent);
const rows = data.rows;
const PAGE = 100;
let page = 0;
const $ = (id) => document.getElementById(id);
// Control (but newline and tab), format, separator, private-use, surrogate and unassigned characters: shown.
const HIDDEN = /\r\n|[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Cs}\p{Cn}]/gu;
const shown = (text) => String(text).replace(HIDDEN, (c) => c === '\n' || c === '\t' ? c : c === '\r\n' ? '\n'
  : '[U+' + c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0') + ']');
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = shown(text);
  if (cls) e.className = cls; return e; };
const marks = new Map();
function fill(select, values) {
  for (const v of values) { const o = el('option', v); o.value = v; select.appendChild(o); }
}
fill($('dataset'), [...new Set(rows.map((r) => r.dataset))]);
fill($('category'), [...new Set(rows.map((r) => r.category))].sort());
if (!data.paired) $('direction').value = 'all';  // nothing was compared: no prompt can have flipped
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
  if (side.reply) {
    const text = el('pre', side.reply + (side.whole || !side.note ? '' : ' …'));
    if (toxic) {
      text.hidden = true;
      const show = el('button', 'show the reply to a toxic prompt');
      show.addEventListener('click', () => { text.hidden = false; show.remove(); });
      box.appendChild(show);
    }
    box.appendChild(text);
  }
  if (side.note) box.appendChild(el('div', side.note, 'note'));
  return box;
}
function mark(row) {
  const box = el('div', '', 'mark');
  if (!row.mine.whole) {  // a mark labels the reply judged: only a whole one
    if (row.mine.reply) box.appendChild(el('span', 'not the whole reply here: label it with orbench label', 'note'));
    return box;
  }
  for (const [label, name] of [['compliance', 'answer'], ['refusal', 'refusal'], ['partial_refusal', 'partial']]) {
    const b = el('button', name);
    b.addEventListener('click', () => { marks.set(row.id, label); box.dataset.marked = label; $('marks').textContent = marks.size + ' marked'; });
    box.appendChild(b);
  }
  return box;
}
function empty(body) {
  const dir = $('direction').value;
  const filtered = $('dataset').value || $('category').value || $('search').value;
  const text = filtered ? 'No prompt matches these filters.'
    : dir === 'flips' ? 'No prompt flipped: every compared prompt kept its verdict (show: unchanged lists them).'
    : dir === 'error' ? 'No prompt was left without a verdict.' : 'No prompt here.';
  const tr = el('tr', '', 'empty');
  const td = el('td', text);
  td.colSpan = data.labels ? 7 : 6;
  tr.appendChild(td);
  body.appendChild(tr);
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
    if (data.labels) { const td = el('td'); td.appendChild(mark(row)); tr.appendChild(td); }
    body.appendChild(tr);
  }
  if (!list.length) empty(body);
  $('count').textContent = list.length ? list.length + ' prompts; page ' + (page + 1) + ' of ' + pages
    : 'none of the ' + rows.length + ' prompts';
}
for (const id of ['dataset', 'category', 'direction', 'search']) $(id).addEventListener('input', () => { page = 0; draw(); });
$('prev').addEventListener('click', () => { page = Math.max(0, page - 1); draw(); });
$('next').addEventListener('click', () => { page += 1; draw(); });
if (data.labels) {
  $('download').hidden = false;
  $('download').addEventListener('click', () => {
    // A formula start (= + - @ tab CR LF NUL, or a full-width = + - @) or a quote gets a quote before it: a
    // spreadsheet shows the text, and the labels reader takes the quote off again (core/csv_cells.py), so the label
    // keys the reply judged.
    const cell = (s) => { s = String(s); return /^[=+\-@\t\r\n\0'\uff1d\uff0b\uff0d\uff20]/.test(s) ? "'" + s : s; };
    const q = (s) => '"' + cell(s).replace(/"/g, '""') + '"';
    const lines = ['prompt,response,label,id,dataset,model,stratum,labeler,source'];
    for (const row of rows) if (marks.has(row.id)) lines.push([q(row.prompt), q(row.mine.reply), marks.get(row.id),
      q(row.id), q(row.dataset), q(data.model), '', 'html-review', 'review'].join(','));
    const link = document.createElement('a');
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
.note{color:#777;font-style:italic;font-size:12px} tr.empty td{color:#555;padding:14px 6px}
ul.checks li.fail{color:#b00} ul.checks li.inconclusive{color:#a60}
"""
