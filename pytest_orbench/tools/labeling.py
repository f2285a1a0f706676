"""`orbench label`: a person labels a sample of their model's stored replies, one key per reply.

The sample is drawn from a run's results (and the whole replies in its store): half of it at random across
the run's replies, half from what decides or troubles the gate (the prompts whose verdict flipped against
the baseline, and the replies the keyword judge is least sure of), never the same reply twice. Each row
records its stratum and that stratum's share of the run's replies, so that the audit weighs the sample
back to all of them. The judge's verdict is not shown: a labeller who sees it tends to agree with it.
"""

from __future__ import annotations

import getpass
import hashlib
import math
import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from pytest_orbench.judging.labels import (
    Conflict,
    Label,
    LabelsError,
    dumps_export,
    load_labels,
    reply_digest,
    save_merged,
)
from pytest_orbench.tools.label_files import conflicts_text, merge_import, path_problem
from pytest_orbench.tools.label_screen import Terminal, visible, wrapped

KEYS = {"a": "compliance", "r": "refusal", "p": "partial_refusal"}
LETTER = {label: key for key, label in KEYS.items()}
HELP = "a answer · r refusal · p partial refusal · s skip · b back · q quit · space more"


class LabelingError(Exception):
    """A results file or store that gives nothing to label; the message says what to do."""


@dataclass(frozen=True)
class Candidate:
    """One reply of the run that could be labelled."""

    id: str
    dataset: str
    category: str
    expected: str
    prompt: str
    response: str
    flipped: bool
    unsure: bool  # the keyword judge is not confident about it
    refused: bool  # the keyword judge's reading (strata only; never shown)

    @property
    def key(self) -> str:
        return reply_digest(self.prompt, self.response)

    @property
    def stratum(self) -> str:
        return "flip" if self.flipped else "unsure" if self.unsure else "refusal" if self.refused else "answer"


def candidates(results_path: Path, store_dir: Path | None) -> tuple[list[Candidate], str, list[str]]:
    """The run's replies with their whole text (from the store; a reply shorter than the results' 300-character
    excerpt is whole there too), the model that replied, and notes on what could not be used."""
    from pytest_orbench.core.records import ResultsError, load_results
    from pytest_orbench.core.store import Store
    from pytest_orbench.core.store_database import STORE_FILE
    from pytest_orbench.judging.keyword_judge import KeywordJudge
    from pytest_orbench.judging.llm_calls import reply_text

    try:
        results = load_results(results_path)
    except ResultsError as exc:
        raise LabelingError(str(exc)) from None
    run = results["run"]
    model = str(run.get("model") or run.get("target") or "")
    from pytest_orbench.render.results_file import flipped_ids

    flips = flipped_ids(results)
    store = Store(store_dir, check=True) if store_dir is not None and (store_dir / STORE_FILE).is_file() else None
    judge = KeywordJudge()
    found: list[Candidate] = []
    missing = errors = 0
    try:
        for prompt in results["prompts"]:
            if prompt.get("refused") is None:
                errors += 1  # no reply, or no verdict: nothing a person could compare with
                continue
            text = None
            key = prompt.get("reply_key")
            if store is not None and key:
                record = store.get(key)
                text = reply_text(record) if record else None
            if text is None:
                excerpt = prompt.get("reply_excerpt") or ""
                if len(excerpt) >= 300 or not excerpt.strip():
                    missing += 1
                    continue
                text = excerpt  # shorter than the excerpt's limit: the whole reply
            if not text.strip():
                continue  # an empty reply is decided without a judge
            judgement = judge.judge(prompt["prompt"], text)
            found.append(Candidate(prompt["id"], prompt["dataset"], prompt.get("category") or "", prompt["expected"],
                                   prompt["prompt"], text, prompt["id"] in flips, not judgement.confident,
                                   bool(judgement.verdict.refused)))
    finally:
        if store is not None:
            store.close()
    notes = []
    if missing:
        notes.append(f"{missing} replies are not in the store{f' {store_dir}' if store_dir else ''} (only their first "
                     "300 characters are in the results): point --store at the folder the run used to label them")
    if errors:
        notes.append(f"{errors} prompts have no judged reply (errors) and are left out")
    return found, model, notes


def _rank(seed: int, candidate: Candidate) -> str:
    return hashlib.sha256(f"{seed}\x00{candidate.key}".encode()).hexdigest()


def draw(pool: list[Candidate], n: int, seed: int = 0) -> list[tuple[Candidate, str, float]]:
    """Up to `n` distinct replies, each with its stratum and that stratum's share of all the run's replies.

    Half (rounded up) is spread over the strata in proportion to their shares, half goes to the flips and
    the unsure replies. Within a stratum replies come in a fixed order (by seed), so a larger n extends a
    smaller one. The result is shuffled, so that strata do not come in runs. The same words given to two
    prompts stay two rows (the sample stays a sample of the run's replies); `session` asks about them once."""
    total = len(pool)
    if not total or n <= 0:
        return []
    by_stratum: dict[str, list[Candidate]] = {}
    seen: set[str] = set()
    for candidate in sorted(pool, key=lambda c: _rank(seed, c)):
        if candidate.key in seen:
            continue  # the same prompt text twice (in two datasets): one reply, one row
        seen.add(candidate.key)
        by_stratum.setdefault(candidate.stratum, []).append(candidate)
    shares = {s: c / total for s, c in Counter(c.stratum for c in pool).items()}
    n = min(n, sum(len(v) for v in by_stratum.values()))
    take = dict.fromkeys(by_stratum, 0)
    random_part = math.ceil(n / 2)
    # Largest remainder, in proportion to the shares.
    exact = {s: random_part * shares[s] for s in by_stratum}
    for s in by_stratum:
        take[s] = min(int(exact[s]), len(by_stratum[s]))
    for s in sorted(by_stratum, key=lambda s: exact[s] - int(exact[s]), reverse=True):
        if sum(take.values()) >= random_part:
            break
        if take[s] < len(by_stratum[s]):
            take[s] += 1
    # The rest to the flips and the unsure, then wherever replies are left.
    order = [s for s in ("flip", "unsure") if s in by_stratum] + [s for s in ("refusal", "answer") if s in by_stratum]
    while sum(take.values()) < n:
        grew = False
        for s in order:
            if sum(take.values()) < n and take[s] < len(by_stratum[s]) and (s in ("flip", "unsure") or not any(
                    take[f] < len(by_stratum[f]) for f in ("flip", "unsure") if f in by_stratum)):
                take[s] += 1
                grew = True
        if not grew:
            break
    chosen = [(c, s, shares[s]) for s in by_stratum for c in by_stratum[s][:take[s]]]
    return sorted(chosen, key=lambda row: hashlib.sha256(f"{seed}\x01{row[0].key}".encode()).hexdigest())


def as_label(candidate: Candidate, stratum: str, share: float, model: str, label: str = "", labeler: str = "",
             labeled_at: str = "") -> Label:
    return Label(candidate.prompt, candidate.response, label, candidate.id, candidate.dataset, model, stratum,
                 share, labeler, labeled_at, candidate.key)


def default_labeler() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in a container
        return ""


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Save = Callable[[list[Label], list[Label]], tuple[list[Label], list[Conflict]]]


def session(rows: list[tuple[Candidate, str, float]], labels: list[Label], save: Save, term: Terminal, model: str,
            labeler: str) -> tuple[int, int, list[Conflict]]:
    """Shows each row not yet labelled, takes one key each, saves after every answer (`save(ours, base)`
    merges into the file as another labeller may have left it, and returns what the file holds and the
    conflicts, which are shown at once). Returns (labelled now, still to do, conflicts)."""
    done = {label.key: label for label in labels}
    base = list(labels)  # the file as last read: what a save merges from
    todo = [i for i, (c, _, _) in enumerate(rows) if not (c.key in done and done[c.key].label)]
    mine: set[str] = set()  # the replies labelled in this session
    conflicts: list[Conflict] = []
    said = _said(labels)

    def keep(label: Label) -> None:
        nonlocal base, done, said
        done[label.key] = label
        mine.add(label.key)
        base, found = save(list(done.values()), base)
        done, said = {row.key: row for row in base}, _said(base)  # with what others saved meanwhile
        for conflict in found:
            term.write(f"note: {visible(conflict.describe())}\n")
        conflicts.extend(found)

    position, answered, history, forward = 0, 0, list[int](), True
    size = shutil.get_terminal_size((100, 30))
    width, height = min(size.columns, 120) - 2, max(size.lines, 12)
    while 0 <= position < len(todo):
        candidate, stratum, share = rows[todo[position]]
        earlier = done.get(candidate.key)
        if forward and earlier is not None and earlier.label and candidate.key not in mine:
            position += 1  # labelled meanwhile by someone else on this file
            continue
        same = said.get(_words(candidate.response)) if forward else None
        if same is not None and same.key != candidate.key:
            # The same words to another prompt: the person's label of them, without asking again.
            keep(as_label(candidate, stratum, share, model, same.label, labeler, now()))
            position += 1
            continue
        lines = [f"[{position + 1}/{len(todo)}] {visible(candidate.id)} · {visible(candidate.dataset)} · "
                 f"{visible(candidate.category)}", "", "PROMPT", *("  " + line for line in wrapped(candidate.prompt, width - 2)),
                 "", "REPLY", *("  " + line for line in wrapped(candidate.response, width - 2))]
        if earlier is not None and earlier.label:  # back (b) to a row labelled before: what it was given
            lines[1:1] = ["", f"LABELLED {LETTER[earlier.label]} {earlier.label.replace('_', ' ')}, by "
                              f"{visible(earlier.labeler or 'someone')} at {visible(earlier.labeled_at or '?')}: "
                              "a key relabels it, s keeps it"]
        page = max(5, height - 4)
        start, choice = 0, ""
        while True:
            term.write("\n" + "\n".join(lines[start:start + page]) + "\n")
            more = start + page < len(lines)
            term.write(f"\n{'-- more: space -- ' if more else ''}{HELP} > ")
            choice = term.key().lower()
            if choice == " " and more:
                start += page
                continue
            if choice in (*KEYS, "s", "b", "q"):
                break
            if choice not in (" ", ""):
                term.write(f"\n'{visible(choice)}' is not a key here.")
        term.write(choice + "\n")
        if choice == "q":
            break
        forward = choice != "b"
        if choice == "b":
            position = history.pop() if history else max(0, position - 1)
            continue
        history.append(position)
        if choice in KEYS:
            keep(as_label(candidate, stratum, share, model, KEYS[choice], labeler, now()))
            answered += 1
        position += 1
    remaining = sum(1 for i in todo if not (rows[i][0].key in done and done[rows[i][0].key].label))
    return answered, remaining, conflicts


def _is_terminal(stream: TextIO) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: a pseudo-file (captured, piped in code)
        return False


def _words(text: str) -> str:
    return " ".join(text.split()).lower()


def _said(labels: list[Label]) -> dict[str, Label]:
    """A reply's words, labelled once: the label of each (another labeller's count too)."""
    return {_words(label.response): label for label in labels if label.label}


def run_label(results: Path, store: Path | None, labels_path: Path, n: int, seed: int, labeler: str,
              export: Path | None, import_from: Path | None, stdin: TextIO | None = None,
              stdout: TextIO | None = None, force: bool = False) -> int:
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    problem = path_problem(results, labels_path, export, import_from, force, store)
    if problem:
        raise LabelingError(problem)
    existing = load_labels(labels_path) if labels_path.exists() else []
    if import_from is not None:
        try:
            imported = load_labels(import_from)
        except LabelsError as exc:
            raise LabelingError(str(exc)) from None
        ours, count, conflicts = merge_import(existing, imported, labeler, now())
        merged, later = save_merged(labels_path, ours, existing)
        unlabelled = sum(1 for row in imported if not row.label)
        stdout.write(f"imported {count} labelled rows from {import_from} into {labels_path} "
                     f"({len([m for m in merged if m.label])} labelled in all"
                     + (f"; {unlabelled} rows without a label were left out" if unlabelled else "") + ")\n")
        stdout.write(conflicts_text(conflicts + later))
        return 0
    pool, model, notes = candidates(results, store)
    for note in notes:
        stdout.write(f"orbench label: {visible(note)}\n")
    if not pool:
        raise LabelingError(f"{results} has no reply to label" + (f" ({'; '.join(notes)})" if notes else ""))
    rows = draw(pool, n, seed)
    strata = Counter(s for _, s, _ in rows)
    # Not the refusal and answer strata: how many of each is the judge's verdict, which the labeller must not
    # see (a sample of 6 "refusal" says what each reply was judged).
    drawn = [(strata["flip"], "whose verdict flipped"), (strata["unsure"], "the judge is unsure of"),
             (strata["refusal"] + strata["answer"], "others")]
    stdout.write(f"orbench label: {len(rows)} of {len(pool)} replies by {visible(model) or 'the target'} ("
                 + ", ".join(f"{count} {what}" for count, what in drawn if count) + f"), seed {seed}\n")
    if export is not None:
        from pytest_orbench.core.jsonfile import write_atomic

        done = {label.key for label in existing if label.label}
        out = [as_label(c, s, share, model) for c, s, share in rows if c.key not in done]
        write_atomic(export.resolve(), dumps_export(out))
        stdout.write(f"wrote {len(out)} unlabelled rows to {export}: fill the label column with compliance, "
                     f"refusal or partial_refusal, then `orbench label --import {export} --labels {labels_path}`\n")
        return 0
    if not _is_terminal(stdin):
        raise LabelingError("orbench label takes one key per reply from a terminal; without one, use --export FILE "
                            "(label it in a spreadsheet) and --import FILE")
    def save(ours: list[Label], base: list[Label]) -> tuple[list[Label], list[Conflict]]:
        try:
            return save_merged(labels_path, ours, base)
        except (LabelsError, OSError) as exc:  # the file broken by hand meanwhile, the disk full, ...
            problem = str(exc) if isinstance(exc, LabelsError) else f"cannot write {labels_path}: {exc.strerror}"
            raise LabelingError(f"{problem}. The last label is not saved (the file is as it was): mend that, then "
                                "run the same command to go on") from None

    with Terminal(stdin, stdout) as term:
        answered, remaining, conflicts = session(rows, existing, save, term, model, labeler)
    total = len([label for label in (load_labels(labels_path) if labels_path.exists() else []) if label.label])
    stdout.write(f"\nlabelled {answered} now; {total} labelled in {labels_path}"
                 + (f"; {remaining} of this sample to go: run the same command to go on" if remaining else
                    "; the sample is done") + "\n")
    stdout.write(conflicts_text(conflicts))
    return 0
