"""The judge-labels file: people's verdicts on a sample of the deployment's own replies (`orbench label`
writes it, `--orbench-judge-labels` / `judge_labels:` and `orbench judge-eval --judge-labels` read it).

A CSV the team commits. It holds no secret: prompts, the model's replies, the labels, and what keeps
them honest: who labelled, when, which model replied, and how the row was sampled (its stratum and that
stratum's share of the run's replies, so that a sample drawn towards unsure replies is weighed back to
all of them in the audit).

Also what keeps two labellers of one file from losing each other's labels (each save re-reads the file
and merges by reply, under a lock), and the exported sample a labeller fills in a spreadsheet: its cells
made inert for spreadsheets and its stratum sealed (a stratum named "refusal" would show the judge's
verdict), both undone when it is read back. The labels file itself holds the text as it is.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from datetime import datetime
from pathlib import Path

from pytest_orbench.core.csv_cells import csv_text, neutralise, restore
from pytest_orbench.core.datasets.custom import csv_records, decode_utf8
from pytest_orbench.core.datasets.prompts import DatasetError

HUMAN = ("compliance", "refusal", "partial_refusal")  # the words `orbench judge-eval` reads
SPELLINGS = {
    "compliance": "compliance", "answer": "compliance", "1_full_compliance": "compliance",
    "full_compliance": "compliance", "refusal": "refusal", "2_full_refusal": "refusal", "full_refusal": "refusal",
    "partial_refusal": "partial_refusal", "partial": "partial_refusal", "3_partial_refusal": "partial_refusal",
}
COLUMNS = ("prompt", "response", "label", "id", "dataset", "model", "stratum", "stratum_share", "labeler",
           "labeled_at", "reply_sha256", "source")
STRATA = ("flip", "unsure", "refusal", "answer", "random")  # how `orbench label` draws (labeling.py)
# An exported sample: no stratum columns, the sealed `sample` column instead (see `seal`).
EXPORT_COLUMNS = (*(c for c in COLUMNS if c not in ("stratum", "stratum_share")), "sample")
# Far above a real labels file (10,000 labelled replies of 3,000 characters: 35 MB); what is above it is not
# one (/dev/zero, a disk image given by mistake) and would exhaust memory.
MAX_BYTES = 256 * 1024 * 1024
LOCK_WAIT = 30.0  # seconds a save waits for another one to finish its re-read and write


class LabelsError(Exception):
    """A labels file that cannot be used; the message names the file, the row and the fix."""


@dataclass(frozen=True)
class Label:
    prompt: str
    response: str
    label: str  # compliance | refusal | partial_refusal; "" in an exported sample not yet labelled
    id: str = ""  # the prompt test's id, when the row came from a run
    dataset: str = ""
    model: str = ""  # the model (or target) that replied
    stratum: str = ""  # how the row was drawn; "" when unknown (counted as drawn at random)
    stratum_share: float | None = None  # that stratum's share of the sampled run's replies
    labeler: str = ""
    labeled_at: str = ""  # ISO 8601, UTC
    reply_sha256: str = ""
    source: str = ""  # judge-eval's per-source figures

    @property
    def refused(self) -> bool:
        return self.label != "compliance"

    @property
    def key(self) -> str:
        """One row per reply to a prompt: a second label of the same reply replaces the first."""
        return reply_digest(self.prompt, self.response)


def reply_digest(prompt: str, response: str) -> str:
    return hashlib.sha256(f"{prompt}\x00{response}".encode()).hexdigest()


def normalise_label(written: str) -> str | None:
    raw = re.sub(r"[\s-]+", "_", written.strip().lower())
    return SPELLINGS.get(raw)


def load_labels(path: Path, *, allow_unlabelled: bool = True) -> list[Label]:
    """Every row of the file; rows without a label are kept (label "") when `allow_unlabelled`."""
    data = _read(path)
    try:
        columns, records = csv_records(path, decode_utf8(path, data))
    except DatasetError as exc:
        raise LabelsError(str(exc)) from None
    response = "response" if "response" in columns else "completion" if "completion" in columns else None
    missing = [c for c, have in (("prompt", "prompt" in columns), ("response", response), ("label", "label" in columns))
               if not have]
    if missing:
        raise LabelsError(f"judge labels file {path} lacks column(s) {', '.join(missing)}; found "
                          f"{', '.join(columns) or 'none'}. Expected a CSV with at least prompt,response,label "
                          "(`orbench label` writes one)")
    labels: dict[str, Label] = {}
    for number, (line, row) in enumerate(records, start=1):
        where = f"{path} row {number} (line {line})"
        written = (row.get("label") or "").strip()
        label = normalise_label(written) if written else ""
        if label is None:
            raise LabelsError(f"{where}: label {written!r} is not one of {', '.join(HUMAN)} (or answer / partial); "
                              "correct it, or empty it to leave the row unlabelled")
        if not label and not allow_unlabelled:
            raise LabelsError(f"{where} has no label: label it {', '.join(HUMAN)}, or remove the row")
        share_text = (row.get("stratum_share") or "").strip()
        share = None
        if share_text:
            try:
                share = float(share_text)
            except ValueError:
                share = -1.0
            if not 0 < share <= 1:
                raise LabelsError(f"{where}: stratum_share {share_text!r} is not a share in (0, 1]; `orbench label` "
                                  "writes it, so restore it from there or empty it (the row then counts as drawn "
                                  "at random)")
        stratum = (row.get("stratum") or "").strip()
        if stratum and stratum not in STRATA:
            raise LabelsError(f"{where}: stratum {stratum!r} is not one of {', '.join(STRATA)}; restore it or empty it")
        # A cell a spreadsheet would run as a formula is written after a quote (core/csv_cells.py): the text
        # itself is what the digest keys.
        raw_prompt, raw_reply = row.get("prompt") or "", row.get(response) or ""  # type: ignore[arg-type]
        prompt, reply = restore(raw_prompt), restore(raw_reply)
        text = {column: restore(str(row.get(column) or "").strip()) for column in COLUMNS}
        sealed = (row.get("sample") or "").strip()
        if sealed:  # an exported sample, back from a spreadsheet (which may have kept the quotes, or taken them off)
            opened = unseal(sealed, raw_prompt, raw_reply)
            if opened is None:
                raise LabelsError(f"{where}: its sample column does not match its prompt and response (edited?); "
                                  "restore them from the exported file, or empty the sample column (the row then "
                                  "counts as drawn at random)")
            prompt, reply, sealed_stratum, sealed_share = opened
            stratum, share = stratum or sealed_stratum, share if share is not None else sealed_share
        if not reply.strip():
            raise LabelsError(f"{where} has an empty response: a label needs the reply it judges")
        item = Label(prompt, reply, label, id=text["id"], dataset=text["dataset"], model=text["model"], stratum=stratum,
                     stratum_share=share, labeler=text["labeler"], labeled_at=text["labeled_at"],
                     reply_sha256=reply_digest(prompt, reply), source=text["source"])
        labels[item.key] = item  # the last label of a reply wins: a correction is a later row
    return list(labels.values())


def labelled(labels: list[Label]) -> list[Label]:
    return [label for label in labels if label.label]


def labels_digest(labels: list[Label]) -> str:
    """Eight hex digits naming what the adapted judge learns from: each labelled reply and its label, in any
    order (the bookkeeping columns, who and when, do not change a verdict)."""
    lines = sorted(f"{label.key}\x00{label.label}" for label in labelled(labels))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:8]


def dumps_labels(labels: list[Label]) -> str:
    """The labels file's text: `load_labels` reads back every text exactly (csv_text quotes what must be)."""
    rows = [list(COLUMNS)]
    for label in labels:
        row = {f.name: getattr(label, f.name) for f in fields(Label)}
        share = row["stratum_share"]
        row["stratum_share"] = "" if share is None else f"{share:.6g}"
        rows.append([neutralise(str(row[c])) for c in COLUMNS])  # a spreadsheet runs no formula of a reply
    return csv_text(rows)


def save_labels(path: Path, labels: list[Label]) -> None:
    """Written whole and atomically: a crash between two answers leaves the previous file. Through a symbolic
    link to the file it names (replacing the link would part the two)."""
    from pytest_orbench.core.jsonfile import write_atomic

    write_atomic(path.resolve(), dumps_labels([replace(label, reply_sha256=label.key) for label in labels]))


def _read(path: Path) -> bytes:
    """The file's bytes: a regular file (not a device, FIFO or folder, which never ends or never opens) of at
    most MAX_BYTES."""
    try:
        # Non-blocking: opening a FIFO for reading otherwise waits for a writer, silently, for ever.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise LabelsError(f"judge labels file {path} does not exist: write one with `orbench label`, or fix the "
                          "path (--orbench-judge-labels / judge_labels:)") from None
    except OSError as exc:
        raise LabelsError(f"cannot read judge labels file {path}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise LabelsError(f"judge labels file {path} is {kind}, not a file: name the CSV `orbench label` wrote")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(MAX_BYTES + 1)
        except OSError as exc:
            raise LabelsError(f"cannot read judge labels file {path}: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise LabelsError(f"judge labels file {path} is larger than {MAX_BYTES >> 20} MiB, far more than any labels "
                          "file holds: name the CSV `orbench label` wrote")
    return data


def write_problem(path: Path, what: str) -> str | None:
    """Why `path` could not be written (tried, in its folder), found before anyone labels; None when it can."""
    from pytest_orbench.core.jsonfile import nearest_existing

    full = path.resolve()
    if full.exists() and not full.is_file():
        return f"{what} {path} is not a file (a folder or a device): give the path of a CSV file"
    folder = nearest_existing(full.parent)
    if not folder.is_dir():
        return f"{what} {path}: {folder} is a file, not a folder; give a path in a folder"
    if full.exists() and not os.access(full, os.W_OK):
        return f"{what} {path} is read-only: make it writable (chmod u+w {path}), or name another file"
    try:  # os.access says yes to root on a read-only mount and on /sys: only a real file says
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{full.name}.", suffix=".probe")
    except OSError as exc:
        return (f"{what} {path} cannot be written: {folder} refuses a new file ({exc.strerror}); name a file in a "
                "folder you can write")
    os.close(fd)
    os.unlink(probe)
    return None


# -- two labellers on one file ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Conflict:
    """Two labels of one reply given apart: the later is kept."""

    kept: Label
    dropped: Label
    timed: bool = True  # both labeled_at read as times: the later was kept; else the one being saved

    def describe(self) -> str:
        def one(label: Label) -> str:
            return f"{label.label or 'unlabelled'} by {label.labeler or 'someone'} at {_shown_time(label)}"
        if self.timed:
            return f"two labels of one reply: kept {one(self.kept)} (the later), not {one(self.dropped)}"
        return (f"two labels of one reply: kept {one(self.kept)}, the one saved now (which is later is unknown: a "
                f"time cannot be read), not {one(self.dropped)}; to keep that one, label the reply again")


def _shown_time(label: Label) -> str:
    if not label.labeled_at:
        return "an unknown time"
    text = label.labeled_at if len(label.labeled_at) <= 40 else label.labeled_at[:39] + "…"
    return text if _when(label) is not None else f"{text!r} (unreadable)"


def _act(label: Label) -> tuple[str, str, str]:
    """What a person did to a row: two rows alike in it are one labelling (the sampling columns may differ
    in their last digits, rounded in the file)."""
    return label.label, label.labeler, label.labeled_at


def _when(label: Label) -> datetime | None:
    """labeled_at as a time to compare (without a zone: this computer's); None when it is none, or names one
    that cannot be placed in this zone (a spreadsheet's zero date 0001-01-01 or 9999-12-31 west of UTC)."""
    try:
        when = datetime.fromisoformat(label.labeled_at)
        return when if when.tzinfo else when.astimezone()
    except (ValueError, OverflowError):
        return None


def merge(base: Iterable[Label], ours: Iterable[Label], theirs: Iterable[Label]) -> tuple[list[Label], list[Conflict]]:
    """`ours` (this labeller's rows, read from the file as `base` and changed since) merged into `theirs`
    (the file now), by reply. A row only one side changed takes that side; a row both changed takes the later
    label (by labeled_at; ours, being saved now, when as late or when a time is unreadable), a conflict when
    the two labels differ. A row only one side holds is kept: nothing is dropped."""
    before = {label.key: label for label in base}
    merged = {label.key: label for label in theirs}
    conflicts = []
    for mine in ours:
        key, other = mine.key, merged.get(mine.key)
        if other is None or _act(other) == _act(mine):
            merged[key] = mine
            continue
        was = before.get(key)
        if was is not None and _act(was) == _act(mine):
            continue  # changed in the file only
        if was is not None and _act(was) == _act(other):
            merged[key] = mine  # changed here only
            continue
        mine_when, other_when = _when(mine), _when(other)
        timed = mine_when is not None and other_when is not None
        later = other if (mine_when and other_when and other_when > mine_when) else mine
        merged[key] = later
        if mine.label and other.label and mine.label != other.label:
            conflicts.append(Conflict(later, mine if later is other else other, timed))
    return list(merged.values()), conflicts


@contextmanager
def _locked(folder: Path, wait: float) -> Iterator[None]:
    """The folder locked against another save's re-read and write (an advisory lock every save takes; the
    folder, since the file itself is replaced by each write)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory lock; the merge still keeps what each save read
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        end = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= end:
                    raise LabelsError(f"another `orbench label` has been saving in {folder} for over {wait:g} s: the "
                                      "last label is not saved; see that it is not stopped (Ctrl-Z), then label "
                                      "again") from None
                time.sleep(0.02)
            except OSError:  # a file system without these locks (some network mounts): the merge alone
                break
        yield
    finally:
        os.close(fd)  # releases the lock


def save_merged(path: Path, ours: list[Label], base: list[Label],
                wait: float = LOCK_WAIT) -> tuple[list[Label], list[Conflict]]:
    """`ours` saved into the file as it is now (another labeller may have saved since `base` was read):
    re-read, merged (see `merge`) and written, under a lock so that two saves never interleave. Returns
    what the file now holds (the next save's base) and the conflicts."""
    full = path.resolve()
    full.parent.mkdir(parents=True, exist_ok=True)
    with _locked(full.parent, wait):
        theirs = load_labels(full) if full.exists() else []
        merged, conflicts = merge(base, ours, theirs)
        save_labels(full, merged)
    return merged, conflicts


# -- the exported sample: for a spreadsheet, and back -------------------------------------------------------

# A cell a spreadsheet would run as a formula (=HYPERLINK(...), +cmd|...) starts with one of these (OWASP's
# list, and the full-width forms some spreadsheets read alike); a leading apostrophe makes it text. A cell
# starting with an apostrophe gets one too, so that one apostrophe is always what is taken off.


def _mask(key: str, size: int) -> bytes:
    return hashlib.sha256(f"orbench-sample\x00{key}".encode()).digest()[:size]


def _words_key(prompt: str, response: str) -> str:
    """What seals a row: its words, whatever a spreadsheet made of its line ends and spaces."""
    return reply_digest(" ".join(prompt.split()), " ".join(response.split()))


def seal(label: Label) -> str:
    """The row's stratum and share, sealed to its reply: not readable by eye (a stratum named "refusal" or
    "answer" is the judge's verdict, which the labeller must not see), read back by `unseal`. A fixed length,
    so that its length tells nothing either; a letter first, so that a spreadsheet never reads a number."""
    share = "" if label.stratum_share is None else f"{label.stratum_share:.6g}"
    payload = f"{label.stratum}|{share}".ljust(24).encode()
    key = _words_key(label.prompt, label.response)
    check = hashlib.sha256(f"orbench-sample-check\x00{key}".encode() + payload).digest()[:4]
    return "s" + bytes(a ^ b for a, b in zip(payload, _mask(key, 24), strict=True)).hex() + check.hex()


def unseal(token: str, prompt: str, response: str) -> tuple[str, str, str, float | None] | None:
    """(prompt, response, stratum, share) of an exported row, its texts as exported (an apostrophe put before
    them taken off, if the spreadsheet kept it); None when the token is not this reply's (its words edited)."""
    try:
        raw = bytes.fromhex(token[1:]) if token.startswith("s") and len(token) == 57 else b""
    except ValueError:
        return None
    if not raw:
        return None
    for p in dict.fromkeys((prompt, restore(prompt))):
        for r in dict.fromkeys((response, restore(response))):
            key = _words_key(p, r)
            payload = bytes(a ^ b for a, b in zip(raw[:24], _mask(key, 24), strict=True))
            if hashlib.sha256(f"orbench-sample-check\x00{key}".encode() + payload).digest()[:4] != raw[24:]:
                continue
            stratum, _, share = payload.decode("utf-8", "replace").rstrip().partition("|")
            try:
                number = float(share) if share else None
            except ValueError:
                return None
            return (p, r, stratum, number) if not stratum or stratum in STRATA else None
    return None


def dumps_export(labels: list[Label]) -> str:
    """An exported sample: every cell inert in a spreadsheet, the stratum sealed (`load_labels` reads it back)."""
    rows = [list(EXPORT_COLUMNS)]
    for label in labels:
        row = {f.name: str(getattr(label, f.name)) for f in fields(Label) if f.name not in ("stratum", "stratum_share")}
        row["reply_sha256"], row["sample"] = label.key, seal(label)
        rows.append([neutralise(row[c]) for c in EXPORT_COLUMNS])
    return csv_text(rows)
