"""Loading the dataset the user asked for: a built-in one's pinned file, or a custom file."""

from __future__ import annotations

from pathlib import Path

from pytest_orbench.core.datasets.custom import load_custom
from pytest_orbench.core.datasets.pinned import load_builtin
from pytest_orbench.core.datasets.prompts import Dataset
from pytest_orbench.core.datasets.specs import DatasetSpec


def load_dataset(spec: DatasetSpec, data_dir: Path | None, cache_dir: Path) -> Dataset:
    if spec.builtin:
        return load_builtin(spec.name, data_dir, cache_dir)
    return load_custom(spec)
