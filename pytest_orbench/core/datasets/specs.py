"""What the user asked for: a built-in dataset's name, or a custom CSV/JSONL file and its expectation."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from pytest_orbench.core.datasets.prompts import DatasetError
from pytest_orbench.core.datasets.registry import BUILTINS, Expected


@dataclass(frozen=True)
class DatasetSpec:
    """What the user asked for: a built-in name, or a custom CSV/JSONL file."""

    name: str
    path: Path | None = None
    expected: Expected | None = None
    prompt_column: str = "prompt"
    category_column: str = "category"
    id_column: str = "id"

    @property
    def builtin(self) -> bool:
        return self.path is None


EXPECT_WORDS: dict[str, Expected] = {
    "answer": "answer", "safe": "answer", "comply": "answer", "compliance": "answer",
    "refuse": "refuse", "unsafe": "refuse", "refusal": "refuse", "toxic": "refuse",
}


def parse_spec(entry: str, base: Path) -> DatasetSpec:
    """Parse one `--orbench-datasets` entry: a built-in name, or `PATH[:answer|:refuse]`."""
    entry = entry.strip()
    if entry in BUILTINS:
        return DatasetSpec(entry)
    expected: Expected | None = None
    head, sep, tail = entry.rpartition(":")
    if sep and tail.lower() in EXPECT_WORDS:
        entry, expected = head, EXPECT_WORDS[tail.lower()]
    if sep and not expected and head.lower().endswith((".csv", ".jsonl")):
        raise DatasetError(f"{entry!r}: {tail!r} after the file is not an expectation; write {head}:answer or {head}:refuse")
    if not entry.lower().endswith((".csv", ".jsonl")):
        parts = re.split(r"[\s;]+", entry)
        if len(parts) > 1 and all(part in BUILTINS or part.lower().endswith((".csv", ".jsonl")) for part in parts):
            raise DatasetError(f"unknown dataset {entry!r}: separate datasets with commas, {','.join(parts)}")
        close = difflib.get_close_matches(entry.lower(), list(BUILTINS), n=1, cutoff=0.6)
        if close:
            raise DatasetError(f"unknown dataset {entry!r}: did you mean {close[0]!r}? (built-ins: {', '.join(BUILTINS)})")
        raise DatasetError(
            f"unknown dataset {entry!r}: use one of {', '.join(BUILTINS)} "
            "or a .csv/.jsonl file path (optionally suffixed :answer or :refuse)"
        )
    path = (base / entry).resolve()
    return DatasetSpec(Path(entry).stem, path=path, expected=expected)


def spec_from_mapping(data: dict[str, object], base: Path) -> DatasetSpec:
    """A custom dataset declared in orbench.yaml: {name, path, expect, prompt_column, ...}."""
    allowed = {"name", "path", "expect", "prompt_column", "category_column", "id_column"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise DatasetError(f"unknown key(s) {unknown} in a datasets entry; allowed: {sorted(allowed)}")
    if "path" not in data:
        raise DatasetError("a datasets entry needs `path:` (a CSV or JSONL file)")
    path = (base / str(data["path"])).resolve()
    expect_word = str(data.get("expect", "")).lower()
    if expect_word and expect_word not in EXPECT_WORDS:
        raise DatasetError(f"datasets entry {path.name}: expect must be 'answer' or 'refuse', got {expect_word!r}")
    return DatasetSpec(
        name=str(data.get("name", path.stem)),
        path=path,
        expected=EXPECT_WORDS[expect_word] if expect_word else None,
        prompt_column=str(data.get("prompt_column", "prompt")),
        category_column=str(data.get("category_column", "category")),
        id_column=str(data.get("id_column", "id")),
    )
