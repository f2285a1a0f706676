"""CSV cells a spreadsheet opens as text: formula starts neutralised on write (OWASP), restored on read.

A cell that starts with `=`, `+`, `-`, `@`, a tab, a carriage return (OWASP's CSV Injection list), a line
feed or a NUL (ASVS 1.2.10) is a formula to Excel, LibreOffice and Google Sheets: a prompt or a reply
such as `=HYPERLINK("http://evil", "click")` would act when a reviewer opens the file. Written with a
single quote before it, the cell shows as the text it is.

The quote is also put before a cell that starts with a quote, so `restore(neutralise(x)) == x` for every
string: a labels file keys each label by a digest of the prompt and the reply (judging/labels.py), so the
text read back must be the text the run judged. The page's download (render/html_script.py) does the
same in JavaScript; tests/render/test_html.py holds the two to the same cells. And `csv_text`: rows written
so that the strict reader reads every cell back exactly, whatever line ends it holds.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

# (and their full-width forms, which some spreadsheets read as the same operators)
FORMULA_STARTS = frozenset("=+-@\t\r\n\x00\uff1d\uff0b\uff0d\uff20")
QUOTE = "'"


def neutralise(cell: str) -> str:
    """The cell as a spreadsheet shows it as text: a quote before a formula start (or before a quote)."""
    return QUOTE + cell if cell[:1] in FORMULA_STARTS or cell[:1] == QUOTE else cell


def restore(cell: str) -> str:
    """The text `neutralise` was given. A cell written otherwise (by hand, by an older version) that starts
    with a quote and then a formula start or a quote loses that first quote too: a spreadsheet hides it."""
    return cell[1:] if cell[:1] == QUOTE and (cell[1:2] in FORMULA_STARTS or cell[1:2] == QUOTE) else cell


def csv_text(rows: Iterable[Sequence[str]]) -> str:
    """Rows as CSV text, one line end ("\\n") per record, that a strict csv reader (core/datasets/custom.py
    `csv_records`) reads back cell for cell, whatever a cell holds.

    The csv module quotes a cell that holds its own line end ("\\n"), but its reader also ends a record at a lone
    "\\r" (a model's progress output, CRLF halved by a gateway): unquoted, such a cell split its row in two. A row
    holding a "\\r" is written with every cell quoted; the others as the module quotes them."""
    out = io.StringIO()
    plain = csv.writer(out, lineterminator="\n")
    quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for row in rows:
        (quoted if any("\r" in cell for cell in row) else plain).writerow(row)
    return out.getvalue()
