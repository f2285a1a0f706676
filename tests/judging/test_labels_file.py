"""The labels file as two labellers and a spreadsheet use it: merged on save under a lock, long replies,
files that are not labels files, and the exported sample (inert in a spreadsheet, its stratum sealed)."""

from __future__ import annotations

import csv
import fcntl
import io
import os
import random
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_orbench.judging import labels as labels_module
from pytest_orbench.judging.labels import (
    EXPORT_COLUMNS,
    Label,
    LabelsError,
    dumps_export,
    load_labels,
    merge,
    save_labels,
    save_merged,
)
from pytest_orbench.tools.cli import main


def row(i: int, label: str = "refusal", who: str = "alice", at: str = "2026-11-26T10:00:00Z", **extra: object) -> Label:
    return Label(f"prompt {i}", f"reply {i}", label, labeler=who, labeled_at=at, **extra)  # type: ignore[arg-type]


def acts(rows: list[Label]) -> dict[str, tuple[str, str]]:
    return {r.prompt: (r.label, r.labeler) for r in rows}


# --- two labellers on one file (issue 41, item 5) -----------------------------------------------------------

def test_two_labellers_saving_in_turn_keep_each_others_labels(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    alice_base: list[Label] = []
    bob_base: list[Label] = []  # both started on an empty file
    alice_base, _ = save_merged(path, [row(1)], alice_base)
    bob_base, _ = save_merged(path, [row(2, who="bob")], bob_base)
    # Alice's next save holds her in-memory set: her two labels, and not bob's.
    alice_base, conflicts = save_merged(path, [*alice_base, row(3)], alice_base)
    assert conflicts == []
    assert acts(load_labels(path)) == {"prompt 1": ("refusal", "alice"), "prompt 2": ("refusal", "bob"),
                                      "prompt 3": ("refusal", "alice")}


@pytest.mark.parametrize(("base", "ours", "theirs", "kept", "conflict"), [
    # Changed in the file only (bob relabelled): the file's stands; ours is just what we read.
    ([row(1)], [row(1)], [row(1, "compliance", "bob", "2026-11-26T11:00:00Z")], ("compliance", "bob"), False),
    # Changed here only: ours.
    ([row(1)], [row(1, "compliance", at="2026-11-26T09:00:00Z")], [row(1)], ("compliance", "alice"), False),
    # Both changed: the later stands, whichever side it is on, and the two labels are a conflict.
    ([], [row(1, "compliance", at="2026-11-26T12:00:00Z")], [row(1, "refusal", "bob", "2026-11-26T11:00:00Z")],
     ("compliance", "alice"), True),
    ([], [row(1, "compliance", at="2026-11-26T10:00:00Z")], [row(1, "refusal", "bob", "2026-11-26T11:00:00Z")],
     ("refusal", "bob"), True),
    # As late (labeled_at is to the second): the label being saved now.
    ([], [row(1, "compliance")], [row(1, "refusal", "bob")], ("compliance", "alice"), True),
    # Two people agreeing is no conflict.
    ([], [row(1, "refusal")], [row(1, "refusal", "bob", "2026-11-26T11:00:00Z")], ("refusal", "bob"), False),
])
def test_a_label_both_changed_keeps_the_later_and_says_so(base: list[Label], ours: list[Label], theirs: list[Label],
                                                         kept: tuple[str, str], conflict: bool) -> None:
    merged, conflicts = merge(base, ours, theirs)
    assert [(r.label, r.labeler) for r in merged] == [kept]
    assert bool(conflicts) == conflict
    if conflicts:
        assert (conflicts[0].kept.label, conflicts[0].kept.labeler) == kept
        assert conflicts[0].dropped.label != kept[0] and "(the later)" in conflicts[0].describe()


def test_nothing_either_side_holds_is_dropped() -> None:
    merged, _ = merge([row(1), row(2)], [row(1), row(2), row(3)], [row(2), row(4, who="bob")])
    assert sorted(r.prompt for r in merged) == ["prompt 1", "prompt 2", "prompt 3", "prompt 4"]


def test_a_save_waits_for_another_saves_lock_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    save_labels(path, [row(1)])
    before = path.read_bytes()
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another save, between its re-read and its write
        with pytest.raises(LabelsError, match="another `orbench label` has been saving in .* the last label is not saved"):
            save_merged(path, [row(2)], [row(1)], wait=0)
    finally:
        os.close(fd)
    assert path.read_bytes() == before
    save_merged(path, [row(2)], [row(1)], wait=0)  # released: saved
    assert len(load_labels(path)) == 2


def test_a_save_goes_through_a_link_to_the_file(tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "labels.csv"
    save_labels(shared, [row(1, who="bob")])
    (tmp_path / "labels.csv").symlink_to(shared)
    save_merged(tmp_path / "labels.csv", [row(2)], [])
    assert (tmp_path / "labels.csv").is_symlink() and len(load_labels(shared)) == 2


# --- files that are not labels files (items 8 and Low) ------------------------------------------------------

def test_a_reply_longer_than_the_csv_field_limit_round_trips(tmp_path: Path) -> None:
    # 131,072 characters is the csv module's default field limit: the file was refused as bad quoting.
    long = "word, \"quoted\"\n" * 20_000  # 300,000 characters
    path = tmp_path / "labels.csv"
    save_labels(path, [Label("Explain.", long, "compliance")])
    assert [r.response for r in load_labels(path)] == [long]
    assert csv.field_size_limit() == 131_072  # the module's limit, restored for everyone else


def test_what_is_not_a_labels_file_is_refused_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.mkfifo(tmp_path / "fifo")  # opened for reading, it waited for a writer for ever
    for path, message in ((Path("/dev/zero"), "is a device or socket, not a file"),  # MemoryError once
                          (tmp_path / "fifo", "is a FIFO, not a file"), (tmp_path, "is a folder, not a file")):
        with pytest.raises(LabelsError, match=re.escape(f"judge labels file {path} {message}")):
            load_labels(path)
    save_labels(tmp_path / "big.csv", [row(1)])
    monkeypatch.setattr(labels_module, "MAX_BYTES", 10)
    with pytest.raises(LabelsError, match="is larger than 0 MiB, far more than any labels file holds"):
        load_labels(tmp_path / "big.csv")


# --- the exported sample: inert in a spreadsheet, its stratum sealed (items 11 and Low) ---------------------

HOSTILE = Label("=HYPERLINK(\"http://evil\",\"click\")", "+cmd|' /C calc'!A0", "", id="-1", dataset="@sum",
                model="=1+1", stratum="refusal", stratum_share=0.25)


def test_the_labels_file_runs_no_formula_and_reads_back_exactly(tmp_path: Path) -> None:
    # The file the judge reads is quoted reversibly: a spreadsheet shows text, and the reply read back is the one
    # stored (its digest keys the label).
    text = labels_module.dumps_labels([HOSTILE])
    cells = [c for r in csv.reader(io.StringIO(text)) for c in r]
    assert not [c for c in cells if c.startswith(("=", "+", "-", "@"))], cells
    (tmp_path / "labels.csv").write_text(text, encoding="utf-8")
    (back,) = load_labels(tmp_path / "labels.csv")
    assert (back.prompt, back.response, back.id, back.dataset, back.model) == (
        HOSTILE.prompt, HOSTILE.response, "-1", "@sum", "=1+1")


def test_an_exported_cell_is_never_a_formula_and_reads_back_exactly(tmp_path: Path) -> None:
    quoted = Label("'quoted' words", "Sure: -5 degrees.", "", stratum="answer", stratum_share=0.7)
    text = dumps_export([HOSTILE, quoted])
    cells = [c for r in csv.reader(io.StringIO(text)) for c in r]
    assert not [c for c in cells if c.startswith(("=", "+", "-", "@"))], cells
    path = tmp_path / "sample.csv"
    path.write_text(text, encoding="utf-8")
    back = load_labels(path)
    assert [(r.prompt, r.response, r.id, r.dataset, r.model, r.stratum, r.stratum_share) for r in back] == [
        (HOSTILE.prompt, HOSTILE.response, "-1", "@sum", "=1+1", "refusal", 0.25),
        (quoted.prompt, quoted.response, "", "", "", "answer", 0.7)]
    # A spreadsheet that takes the apostrophes off when it saves: the same rows.
    path.write_text(re.sub(r"(^|,)'", r"\1", text, flags=re.MULTILINE), encoding="utf-8")
    assert [(r.prompt, r.response, r.stratum) for r in load_labels(path)] == [(r.prompt, r.response, r.stratum)
                                                                            for r in back]


def test_an_exported_row_does_not_show_the_judges_verdict(tmp_path: Path) -> None:
    rows = [Label(f"p{i}", f"r{i}", "", stratum=s, stratum_share=share)
            for i, (s, share) in enumerate((("refusal", 0.2), ("answer", 0.7), ("flip", 0.02), ("unsure", 0.08)))]
    text = dumps_export(rows)
    header, *lines = list(csv.reader(io.StringIO(text)))
    assert tuple(header) == EXPORT_COLUMNS and "stratum" not in header
    assert not re.search(r"refusal|answer|flip|unsure|0\.2|0\.7", "\n".join(",".join(r[1:]) for r in lines))
    assert len({len(r[-1]) for r in lines}) == 1  # the sealed column's length says nothing either
    path = tmp_path / "sample.csv"
    path.write_text(text, encoding="utf-8")
    assert [(r.stratum, r.stratum_share) for r in load_labels(path)] == [("refusal", 0.2), ("answer", 0.7),
                                                                         ("flip", 0.02), ("unsure", 0.08)]
    # Line ends and spaces a spreadsheet changed: the same words, the same row.
    path.write_text(text.replace(",r1,", ',"r1\r\n ",'), encoding="utf-8")
    assert [(r.stratum, r.stratum_share) for r in load_labels(path)][1] == ("answer", 0.7)
    # A reply edited in the spreadsheet is no longer the one drawn: said, not read as another reply's label.
    path.write_text(text.replace(",r1,", ",r1 edited,"), encoding="utf-8")
    with pytest.raises(LabelsError, match="row 2 .*its sample column does not match its prompt and response"):
        load_labels(path)


# --- any text, through every writer of a labels file (attack on issue 41: a lone CR split a row) -----------

# What a CSV writer, a CSV reader or a spreadsheet treats apart: line ends (a lone CR ended a record), NUL, the
# delimiter and quote, formula starts, Unicode's own line ends, a byte-order mark, spaces.
TRICKY = ("\r", "\n", "\r\n", "\n\r", "\x00", ",", '"', "'", "=", "+", "-", "@", "\t", " ", "\u2028", "\x85", "\x0c",
          "\ufeff", "\uff1d", "é", "a", "b ")


def tricky_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 10))) for _ in range(count)]


def test_every_writer_of_a_labels_file_reads_back_any_text_exactly(tmp_path: Path) -> None:
    prompts, replies = tricky_texts(1, 400), tricky_texts(2, 400)
    written = [Label(p, r + "x", ("compliance", "refusal", "partial_refusal")[i % 3], labeler="", stratum="unsure",
                     stratum_share=0.25) for i, (p, r) in enumerate(zip(prompts, replies))]
    texts = [(w.prompt, w.response, w.label) for w in written]
    path = tmp_path / "labels.csv"
    save_merged(path, written, [])  # what `orbench label` does after each key
    assert [(r.prompt, r.response, r.label) for r in load_labels(path)] == texts
    first = path.read_bytes()
    save_merged(path, load_labels(path), load_labels(path))
    assert path.read_bytes() == first  # read and written again: the same file
    # The exported sample, labelled in place (as a spreadsheet saves it) and read back: the same texts and strata.
    sample = tmp_path / "sample.csv"
    sample.write_text(dumps_export([replace(w, label="") for w in written]), encoding="utf-8")
    assert [(r.prompt, r.response, r.stratum) for r in load_labels(sample)] == [(w.prompt, w.response, "unsure")
                                                                                for w in written]


def test_a_reply_with_a_lone_cr_keeps_its_label_and_the_file_readable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    reply = "Put the egg in boiling water.\rThen wait nine minutes."
    # Without a labeller's name (no user name in a container) the row was split in two unlabelled rows, silently.
    save_merged(tmp_path / "mine.csv", [Label("How do I boil an egg?", reply, "compliance")], [])
    assert [(r.response, r.label) for r in load_labels(tmp_path / "mine.csv")] == [(reply, "compliance")]
    # With one, an import said "imported 2" and left a file every later command refused.
    with (tmp_path / "alice.csv").open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows([("prompt", "response", "label"), ("How do I boil an egg?", reply, "compliance"),
                                  ("How do I pick a lock?", "I can't.\r", "refusal")])
    monkeypatch.chdir(tmp_path)
    assert main(["label", "--import", "alice.csv", "--labels", "team.csv", "--labeler", "alice"]) == 0
    assert "imported 2 labelled rows" in capsys.readouterr().out
    assert {(r.response, r.label, r.labeler) for r in load_labels(tmp_path / "team.csv")} == {
        (reply, "compliance", "alice"), ("I can't.\r", "refusal", "alice")}


# --- a labeled_at that is no time this computer can place (attack on issue 41) ------------------------------

@pytest.mark.parametrize(("when", "zone"), [("0001-01-01T00:00:00", "UTC0"), ("9999-12-31T23:59:59", "EST5"),
                                            ("27/11/2026", "UTC0")])
def test_an_import_with_a_labeled_at_that_cannot_be_placed_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str], when: str,
                                                                   zone: str) -> None:
    # A spreadsheet's zero date (year 1) or 9999-12-31 west of UTC once raised out of the import (a traceback).
    (tmp_path / "labels.csv").write_text("prompt,response,label,labeler,labeled_at\n"
                                         "How do I boil an egg?,Boil it.,compliance,bob,2026-11-27T10:00:00Z\n")
    (tmp_path / "alice.csv").write_text(f"prompt,response,label,labeled_at\nHow do I boil an egg?,Boil it.,refusal,{when}\n")
    monkeypatch.chdir(tmp_path)
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone  # POSIX: EST5 is five hours west of UTC
    time.tzset()
    try:
        assert main(["label", "--import", "alice.csv", "--labels", "labels.csv", "--labeler", "alice"]) == 0
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
    out = capsys.readouterr().out
    assert (f"kept refusal by alice at {when!r} (unreadable), the one saved now (which is later is unknown: a time "
            "cannot be read), not compliance by bob at 2026-11-27T10:00:00Z") in out
    assert [(r.label, r.labeled_at) for r in load_labels(tmp_path / "labels.csv")] == [("refusal", when)]
