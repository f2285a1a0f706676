"""Where `orbench label` reads and writes: its paths checked before anyone labels (an export never replaces a
file unasked, nor the command's own results or labels), an exported sample merged back, and the labels two
people gave one reply told."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from pytest_orbench.judging.labels import Conflict, Label, merge, write_problem
from pytest_orbench.render.markdown_escape import visible


def same_file(a: Path, b: Path) -> bool:
    """One file under two names: the same path once links are followed, or the same file on disk (a hard link)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def path_problem(results: Path, labels: Path, export: Path | None, import_from: Path | None, force: bool,
                 store: Path | None = None) -> str | None:
    """Why the command's paths will not do, found before anyone labels (a read-only labels file once failed at
    the first key); None when they do."""
    if export is not None and import_from is not None:
        return "--export writes a sample to label, --import reads one back: give one of them"
    for what, path in (("--labels", labels), ("--export", export), ("RESULTS", results)):
        try:
            if path is not None:
                path.resolve()
        except (RuntimeError, OSError) as exc:  # a loop of symbolic links: RuntimeError, before Python 3.13
            return f"{what} {path} cannot be followed to a file ({exc}); name the file itself"
    if import_from is None and same_file(labels, results):
        return (f"--labels {labels} is the results file the replies come from: writing labels would replace it; "
                "name another file (default orbench-labels.csv)")
    if export is None:
        return write_problem(labels, "--labels")
    for what, other in (("the labels file (--labels)", labels), ("the results file", results)):
        if same_file(export, other):
            return (f"--export {export} is {what}: writing the sample would replace it (even with --force); name "
                    "another file, such as sample.csv")
    if store is not None and export.resolve().is_relative_to(store.resolve()):
        return (f"--export {export} is inside the response store {store} (even with --force): name a file outside "
                "it, such as sample.csv")
    if export.exists() and not force:
        return f"--export {export} exists: name a new file, or add --force to replace it"
    return write_problem(export, "--export")


def merge_import(labels: list[Label], imported: list[Label], labeler: str,
                 stamp: str) -> tuple[list[Label], int, list[Conflict]]:
    """The labelled rows of a spreadsheet round trip merged into `labels` (unlabelled rows are ignored): a row
    for a reply labelled otherwise in `labels` keeps the later label (a row without a time was labelled at
    `stamp`, now), a conflict."""
    stamped = [replace(row, labeler=row.labeler or labeler, labeled_at=row.labeled_at or stamp)
               for row in imported if row.label]
    merged, conflicts = merge([], stamped, labels)
    return merged, len(stamped), conflicts


def conflicts_text(conflicts: list[Conflict]) -> str:
    """The replies two people labelled otherwise, for the end of the command ("" when none)."""
    if not conflicts:
        return ""
    lines = [f"{len(conflicts)} repl{'ies were' if len(conflicts) > 1 else 'y was'} labelled otherwise by someone else "
             "on this file; the later label is kept (the one saved now when a time cannot be read):"]
    lines += [f"  {visible(' '.join(c.kept.prompt.split())[:60])}: {visible(c.describe())}" for c in conflicts]
    return "\n".join(lines) + "\n"
