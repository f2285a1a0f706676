"""The judge-labels file: people's verdicts on a sample of the deployment's own replies (`orbench label`
writes it, `--orbench-judge-labels` / `judge_labels:` and `orbench judge-eval --judge-labels` read it).

A CSV the team commits. It holds no secret: prompts, the model's replies, the labels, and what keeps
them honest: who labelled, when, which model replied, and how the row was sampled (its stratum and that
stratum's share of the run's replies, so that a sample drawn towards unsure replies is weighed back to
all of them in the audit).
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

from pytest_orbench.core.csv_cells import neutralise, restore
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
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise LabelsError(f"judge labels file {path} does not exist: write one with `orbench label`, or fix the "
                          "path (--orbench-judge-labels / judge_labels:)") from None
    except OSError as exc:
        raise LabelsError(f"cannot read judge labels file {path}: {exc.strerror}") from None
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
        prompt, reply = restore(row.get("prompt") or ""), restore(row.get(response) or "")  # type: ignore[arg-type]
        if not reply.strip():
            raise LabelsError(f"{where} has an empty response: a label needs the reply it judges")
        text = {column: restore(str(row.get(column) or "").strip()) for column in COLUMNS}
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
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for label in labels:
        row = {f.name: getattr(label, f.name) for f in fields(Label)}
        share = row["stratum_share"]
        row["stratum_share"] = "" if share is None else f"{share:.6g}"
        writer.writerow([neutralise(str(row[c])) for c in COLUMNS])  # a spreadsheet runs no formula of a reply
    return out.getvalue()


def save_labels(path: Path, labels: list[Label]) -> None:
    """Written whole and atomically: a crash between two answers leaves the previous file."""
    from pytest_orbench.core.jsonfile import write_atomic

    write_atomic(path, dumps_labels([replace(label, reply_sha256=label.key) for label in labels]))
