"""A dataset's prompts: the Prompt and Dataset types, test names, and ids that stay unique across datasets."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from pytest_orbench.core.datasets.registry import BUILTINS, Expected


class DatasetError(Exception):
    """A dataset cannot be used: the message names the file, the problem and the fix."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt to send; `id` is stable across runs of the same pinned file."""

    id: str
    dataset: str
    category: str
    text: str
    expected: Expected
    local_id: str

    @property
    def prompt_sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Dataset:
    name: str
    prompts: tuple[Prompt, ...]
    source: dict[str, str] = field(default_factory=dict)
    total: int = 0  # rows before sampling

    @property
    def expected(self) -> str:
        kinds = {p.expected for p in self.prompts}
        return kinds.pop() if len(kinds) == 1 else "mixed"


def local_ids(raw: list[str]) -> list[str]:
    """Zero-pad numeric ids to one width so ids sort and read the same in every report."""
    if raw and all(r.isdigit() for r in raw):
        width = max(len(r) for r in raw)
        return [r.zfill(width) for r in raw]
    return raw


def test_name(prompt: Prompt) -> str:
    """The prompt test's name under its dataset's node (`orbench/<dataset>::<name>`): category and id, with
    any run of characters other than word characters, '.', '+' and '-' made '_'."""
    return re.sub(r"[^\w.+-]+", "_", f"{prompt.category}-{prompt.local_id}")


def check_unique_ids(datasets: list[Dataset]) -> None:
    """Refuse datasets whose prompt ids collide. An id is the dataset's name, "-" and the row's own id, so
    dataset `a` with id `b-1` and dataset `a-b` with id `1` are both `a-b-1`; a results file or baseline
    with a repeated id is a damaged file, so such a run could not be read back. (Ids stay as they are
    built: committed baselines name their prompts by them.)"""
    first: dict[str, tuple[Dataset, int]] = {}
    clashes: list[tuple[str, str, str]] = []
    for dataset in datasets:
        for row, prompt in enumerate(dataset.prompts, 1):
            other = first.setdefault(prompt.id, (dataset, row))
            if other != (dataset, row):
                clashes.append((prompt.id, _where(*other), _where(dataset, row)))
    if clashes:
        prompt_id, one, two = clashes[0]
        extra = len(clashes) - 1
        more = f" ({extra} more {'id collides' if extra == 1 else 'ids collide'} too)" if extra else ""
        raise DatasetError(
            f"prompt id {prompt_id!r} names two prompts: {one}, and {two}{more}. A prompt's id is its dataset's "
            "name, '-' and the row's id, so these collide; rename one of the files (or set its `name:` in "
            "orbench.yaml), or change the id of one of the rows")


def _where(dataset: Dataset, row: int) -> str:
    """A prompt's place, for an error: the file and row of a custom dataset, the id of a built-in one."""
    prompt = dataset.prompts[row - 1]
    if dataset.name in BUILTINS:
        return f"built-in dataset {dataset.name!r}, id {prompt.local_id!r}"
    return f"dataset {dataset.name!r} ({dataset.source.get('file')}) row {row}, id {prompt.local_id!r}"
