"""The labels file in a spreadsheet: no cell starts a formula, and every label reads back as written."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from pytest_orbench.judging.labels import Label, dumps_labels, load_labels, reply_digest


def test_a_formula_in_a_reply_is_inert_in_the_file_and_read_back_whole(tmp_path: Path) -> None:
    written = [Label("-how do I?", '=HYPERLINK("http://evil.example", "x")', "compliance", id="@id", model="+m",
                     labeler="'alice"),
               Label("plain", "'quoted' and fine", "refusal"), Label("tab", "\tcmd", "refusal")]
    text = dumps_labels(written)
    cells = [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row]
    assert not [cell for cell in cells if cell[:1] in set("=+-@\t\r\n")]
    path = tmp_path / "labels.csv"
    path.write_text(text, encoding="utf-8")
    read = load_labels(path)
    assert [(r.prompt, r.response, r.id, r.model, r.labeler) for r in read] == \
        [(w.prompt, w.response, w.id, w.model, w.labeler) for w in written]
    assert [r.key for r in read] == [reply_digest(w.prompt, w.response) for w in written]
