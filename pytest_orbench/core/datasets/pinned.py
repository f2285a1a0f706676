"""Built-in datasets' pinned files: from the offline folder, the cache or a download, each checked by sha256."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from pytest_orbench.core.datasets.custom import read_rows, sha256_file
from pytest_orbench.core.datasets.prompts import Dataset, DatasetError, Prompt, local_ids
from pytest_orbench.core.datasets.registry import BUILTINS, SourceFile


def default_cache_dir() -> Path:
    env = os.environ.get("ORBENCH_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "pytest-orbench"


def _offline_hint(source: SourceFile) -> str:
    return (
        f"If this machine cannot reach {source.host}, put {source.filename} in a folder "
        "and pass --orbench-data-dir DIR (or set ORBENCH_DATA_DIR=DIR)."
    )


def download(source: SourceFile, dest: Path, timeout: float = 60.0) -> None:
    """Fetch `source` into `dest` atomically, refusing bytes whose sha256 differs from the pin."""
    import urllib.error  # here, not at import: urllib.request brings ssl, and the plugin imports this module
    import urllib.request  # even when it is not enabled

    url = source.url()
    headers = {"User-Agent": "pytest-orbench"}
    token = os.environ.get("HF_TOKEN") if source.host == "huggingface" else None
    if token:
        headers["Authorization"] = f"Bearer {token}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{source.filename}.")
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
                    for chunk in iter(lambda: resp.read(1 << 20), b""):
                        digest.update(chunk)
                        out.write(chunk)
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                if isinstance(exc, urllib.error.HTTPError):
                    exc.close()  # it holds the response body open
                raise DatasetError(f"could not download {source.filename} from {url}: {exc}. {_offline_hint(source)}") from exc
        if digest.hexdigest() != source.sha256:
            raise DatasetError(
                f"{source.filename} downloaded from {url} has sha256 {digest.hexdigest()}, "
                f"expected {source.sha256} (revision {source.revision}); the file was not used. "
                "Check HF_ENDPOINT / your mirror serves the pinned revision."
            )
        os.replace(tmp_name, dest)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def resolve_file(source: SourceFile, data_dir: Path | None, cache_dir: Path) -> Path:
    """Path of a verified copy of `source`: from the offline folder, the cache, or a download."""
    if data_dir is not None:
        path = data_dir / source.filename
        if not path.is_file():
            raise DatasetError(
                f"{source.filename} not found in the data folder {data_dir}; "
                f"put the file from {source.repo}@{source.revision[:12]} there under its upstream name, "
                "or drop --orbench-data-dir / ORBENCH_DATA_DIR to download it"
            )
        actual = sha256_file(path)
        if actual != source.sha256:
            raise DatasetError(
                f"{path} has sha256 {actual}, expected {source.sha256} "
                f"({source.repo} revision {source.revision}); refusing to use a file that differs from "
                "the pinned one. Replace it with the upstream file."
            )
        return path
    cached = cache_dir / source.sha256 / source.filename
    if cached.is_file() and sha256_file(cached) == source.sha256:
        return cached
    download(source, cached)
    return cached


def load_builtin(name: str, data_dir: Path | None, cache_dir: Path) -> Dataset:
    builtin = BUILTINS[name]
    path = resolve_file(builtin.source, data_dir, cache_dir)
    rows = read_rows(path)
    if builtin.label is not None:
        # XSTest: the id column is the upstream id; `type` is the category.
        rows = [r for r in rows if r.get("label") == builtin.label]
        raw_ids = [r["id"] for r in rows]
        categories = [r["type"] for r in rows]
    else:
        raw_ids = [str(i) for i in range(1, len(rows) + 1)]
        categories = [r["category"] for r in rows]
    ids = local_ids(raw_ids)
    prompts = tuple(
        Prompt(f"{name}-{lid}", name, cat, row["prompt"], builtin.expected, lid)
        for lid, cat, row in zip(ids, categories, rows)
    )
    source = {
        "file": builtin.source.filename,
        "sha256": builtin.source.sha256,
        "repo": builtin.source.repo,
        "revision": builtin.source.revision,
    }
    return Dataset(name, prompts, source, total=len(prompts))
