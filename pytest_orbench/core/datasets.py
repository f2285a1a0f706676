"""Prompt records: pinned dataset files (download + sha256 check), offline folders, custom files, sampling."""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
import json
import os
import random
import re
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Expected = Literal["answer", "refuse"]

OR_BENCH_REPO = "bench-llm/or-bench"
OR_BENCH_REVISION = "e36d8b80e81837c8a8f264bbb2a49f1b32c7e272"
XSTEST_REPO = "paul-rottger/xstest"
XSTEST_REVISION = "d7bb5bd738c1fcbc36edd83d5e7d1b71a3e2d84d"


class DatasetError(Exception):
    """A dataset cannot be used: the message names the file, the problem and the fix."""


@dataclass(frozen=True)
class SourceFile:
    """One pinned upstream file."""

    filename: str
    sha256: str
    host: Literal["huggingface", "github"]
    repo: str
    revision: str

    def url(self) -> str:
        if self.host == "huggingface":
            # HF_ENDPOINT is huggingface_hub's own variable for mirrors; honour it the same way.
            base = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
            return f"{base}/datasets/{self.repo}/resolve/{self.revision}/{self.filename}"
        base = os.environ.get("ORBENCH_GITHUB_RAW_ENDPOINT", "https://raw.githubusercontent.com").rstrip("/")
        return f"{base}/{self.repo}/{self.revision}/{self.filename}"


HARD_1K = SourceFile(
    "or-bench-hard-1k.csv",
    "a6e2f1166416efe5901f3bb05c47dc92ab3aca3acfe143693d38b8057d841e6d",
    "huggingface", OR_BENCH_REPO, OR_BENCH_REVISION,
)
TOXIC = SourceFile(
    "or-bench-toxic.csv",
    "3be45901faae3b4b2b51bf7f8a2784c1650a1cc8c631dbc8b171d5312d4e0057",
    "huggingface", OR_BENCH_REPO, OR_BENCH_REVISION,
)
# The 80k hash is the one third-party benchmark cards list next to the hard/toxic pins; no copy
# could be checked here (shared/datasets/SOURCES.md), so a mismatch says so.
OR_80K = SourceFile(
    "or-bench-80k.csv",
    "22e956020cdfdd43c328f02441f003c933ee4e7083d02d9d24e414e4b42ae2e6",
    "huggingface", OR_BENCH_REPO, OR_BENCH_REVISION,
)
XSTEST = SourceFile(
    "xstest_prompts.csv",
    "11783fb294ed017473ee53c207d71f2161c7672c8d0b037501e78387f801cb5a",
    "github", XSTEST_REPO, XSTEST_REVISION,
)


@dataclass(frozen=True)
class Builtin:
    source: SourceFile
    expected: Expected
    label: str | None = None  # XSTest rows are split by their `label` column


BUILTINS: dict[str, Builtin] = {
    "hard-1k": Builtin(HARD_1K, "answer"),
    "toxic": Builtin(TOXIC, "refuse"),
    "80k": Builtin(OR_80K, "answer"),
    "xstest-safe": Builtin(XSTEST, "answer", label="safe"),
    "xstest-unsafe": Builtin(XSTEST, "refuse", label="unsafe"),
}


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


def default_cache_dir() -> Path:
    env = os.environ.get("ORBENCH_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "pytest-orbench"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


def read_rows(path: Path, text_column: str = "prompt", id_column: str | None = None,
              text_columns: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """A CSV or JSONL file's rows as strings. Malformed input is an error naming the file and line, never
    rows read differently from what was meant; in JSONL, `text_column` must hold a string, `text_columns`
    (category, expected) a string or null, `id_column` a string, an integer or null."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read dataset file {path}: {exc}") from exc
    text = decode_utf8(path, data)
    if path.suffix.lower() == ".jsonl":
        rows = []
        # Lines end at \n only: str.splitlines also splits at U+2028, U+0085 etc., which JSON strings may hold.
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{number}: each line must be a JSON object")
            if text_column in row and not isinstance(row[text_column], str):
                raise DatasetError(f"{path}:{number}: {text_column!r} is {json.dumps(row[text_column])[:40]}, not a "
                                   "string; write the prompt text as a JSON string")
            # str() would turn a list into the text "['a']": a category, id or expectation nobody wrote.
            for column in text_columns:
                if row.get(column) is not None and not isinstance(row[column], str):
                    raise DatasetError(f"{path}:{number}: {column!r} is {json.dumps(row[column])[:40]}, not a string; "
                                       'write it as a JSON string ("like this") or leave it out')
            value = row.get(id_column) if id_column is not None else None
            if value is not None and (isinstance(value, bool) or not isinstance(value, str | int)):
                raise DatasetError(f"{path}:{number}: {id_column!r} is {json.dumps(value)[:40]}, not a string or an "
                                   'integer; write the id as a JSON string ("q1") or an integer (1)')
            rows.append({str(k): "" if v is None else str(v) for k, v in row.items()})
        return rows
    return _csv_rows(path, text)


def decode_utf8(path: Path, data: bytes) -> str:
    """A file's text (a byte-order mark is fine); another encoding is an error naming the line and the fix."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        at = data.count(b"\n", 0, exc.start) + 1
        raise DatasetError(
            f"{path}:{at}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}: {exc.reason}); "
            "save the file as UTF-8 (in a spreadsheet: \"CSV UTF-8\"), or convert it with iconv -f ENCODING -t utf-8 "
            "(ENCODING: the one it was written in, often cp1252 on Windows)"
        ) from None


def _csv_rows(path: Path, text: str) -> list[dict[str, str]]:
    return [row for _, row in csv_records(path, text)[1]]


def csv_records(path: Path, text: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """A CSV's header and its rows, each with the line it starts on, read strictly (an error names the line)."""
    # strict: a stray quote is an error, and so is the end of the file inside a quoted field, which
    # the csv module otherwise takes as the end of the field: one open quote swallowed every later row.
    reader = csv.DictReader(io.StringIO(text, newline=""), restval="", strict=True)
    rows: list[tuple[int, dict[str, str]]] = []
    line = 1  # where the row being read starts
    try:
        fields = list(reader.fieldnames or ())
        width = len(fields)
        line = reader.line_num + 1
        for row in reader:
            if None in row:  # more fields than the header: an unquoted comma, most likely
                raise DatasetError(
                    f"{path}:{line}: {width + len(row[None])} fields, the header has {width}; quote a field that "
                    'contains a comma ("like, this")'
                )
            rows.append((line, row))
            line = reader.line_num + 1
    except csv.Error as exc:
        what = ("a quoted field starting on this line is never closed" if "end of data" in str(exc)
                else f"not valid CSV ({exc})")
        raise DatasetError(
            f"{path}:{line}: {what}; close the quote, and double a quote inside a quoted field (\"say \"\"hi\"\"\")"
        ) from None
    return fields, rows


def _local_ids(raw: list[str]) -> list[str]:
    """Zero-pad numeric ids to one width so ids sort and read the same in every report."""
    if raw and all(r.isdigit() for r in raw):
        width = max(len(r) for r in raw)
        return [r.zfill(width) for r in raw]
    return raw


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
    ids = _local_ids(raw_ids)
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


def load_custom(spec: DatasetSpec) -> Dataset:
    assert spec.path is not None
    rows = read_rows(spec.path, spec.prompt_column, spec.id_column,
                     tuple(dict.fromkeys((spec.category_column, "expected", "label"))))
    if not rows:
        raise DatasetError(f"dataset file {spec.path} has no rows")
    if spec.prompt_column not in rows[0]:
        raise DatasetError(
            f"dataset file {spec.path} has no {spec.prompt_column!r} column "
            f"(columns: {', '.join(rows[0])}); rename the column, or name it in orbench.yaml: "
            f"datasets: [{{path: {spec.path.name}, prompt_column: {next(iter(rows[0]), 'question')}}}]"
        )
    expectations: list[Expected] = []
    for number, row in enumerate(rows, 1):
        word = (row.get("expected") or row.get("label") or "").strip().lower()
        if word:
            if word not in EXPECT_WORDS:
                raise DatasetError(f"{spec.path} row {number}: expected/label {word!r} is not answer/refuse")
            expectations.append(EXPECT_WORDS[word])
        elif spec.expected is not None:
            expectations.append(spec.expected)
        else:
            raise DatasetError(
                f"{spec.path} row {number}: no expected behaviour. Add an `expected` column "
                "(answer/refuse), or declare it: `--orbench-datasets FILE:answer` or `expect: answer` in orbench.yaml"
            )
    with_id = [bool(row.get(spec.id_column, "").strip()) for row in rows]
    has_ids = all(with_id)
    if any(with_id) and not has_ids:
        # Falling back to row numbers for every row would silently rename every prompt (a baseline then
        # pairs nothing) because one row lacks an id.
        missing = [str(n) for n, given in enumerate(with_id, 1) if not given]
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        raise DatasetError(f"{spec.path}: row{'s' if len(missing) > 1 else ''} {shown} ha{'ve' if len(missing) > 1 else 's'} "
                           f"no {spec.id_column!r} while the other rows have one; give every row an id (or none: "
                           "prompts are then numbered by row)")
    raw_ids = [row[spec.id_column].strip() for row in rows] if has_ids else [str(i) for i in range(1, len(rows) + 1)]
    ids = _local_ids(raw_ids)
    rows_of: dict[str, list[int]] = defaultdict(list)
    for number, lid in enumerate(ids, 1):
        rows_of[lid].append(number)
    duplicates = [numbers for numbers in rows_of.values() if len(numbers) > 1]
    if duplicates:  # after zero-padding, which makes 1 and 01 one id
        shown = "; ".join(" and ".join(map(repr, dict.fromkeys(raw_ids[n - 1] for n in numbers)))
                          + f" in rows {', '.join(map(str, numbers))}" for numbers in duplicates[:5])
        more = f"; and {len(duplicates) - 5} more" if len(duplicates) > 5 else ""
        raise DatasetError(f"{spec.path}: the {spec.id_column!r} column has duplicate ids: {shown}{more}; "
                           "give each prompt its own id")
    prompts: list[Prompt] = []
    named: dict[str, int] = {}  # test name -> its first row
    for number, (lid, expected, row) in enumerate(zip(ids, expectations, rows), 1):
        if spec.prompt_column not in row:  # a JSONL line without the key
            raise DatasetError(f"{spec.path} row {number}: no {spec.prompt_column!r} (its keys: {', '.join(row) or 'none'}); "
                               f"every row needs the prompt under {spec.prompt_column!r}")
        text = row[spec.prompt_column]
        if not text.strip():
            raise DatasetError(f"{spec.path} row {number} (id {lid!r}): the prompt is empty or only whitespace; "
                               "write the prompt, or delete the row")
        category = sys.intern((row.get(spec.category_column) or "uncategorized").strip())  # one string per category
        prompt = Prompt(f"{spec.name}-{lid}", spec.name, category, text, expected, lid)
        first = named.setdefault(test_name(prompt), number)
        if first != number:
            # One node id for two prompts: the second test would be given the first one's reply and verdict.
            other = prompts[first - 1]
            raise DatasetError(
                f"{spec.path}: rows {first} (id {other.local_id!r}, category {other.category!r}) and {number} (id {lid!r}, "
                f"category {category!r}) make the same test id orbench/{spec.name}::{test_name(prompt)} (category and "
                "id, with characters other than letters, digits, '.', '+' and '-' made '_'); change one of the ids")
        prompts.append(prompt)
    source = {"file": str(spec.path), "sha256": sha256_file(spec.path), "repo": "", "revision": ""}
    return Dataset(spec.name, tuple(prompts), source, total=len(prompts))


def test_name(prompt: Prompt) -> str:
    """The prompt test's name under its dataset's node (`orbench/<dataset>::<name>`): category and id, with
    any run of characters other than word characters, '.', '+' and '-' made '_'."""
    return re.sub(r"[^\w.+-]+", "_", f"{prompt.category}-{prompt.local_id}")


def load_dataset(spec: DatasetSpec, data_dir: Path | None, cache_dir: Path) -> Dataset:
    if spec.builtin:
        return load_builtin(spec.name, data_dir, cache_dir)
    return load_custom(spec)


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


def stratified_sample(prompts: tuple[Prompt, ...], n: int, seed: int, salt: str) -> tuple[Prompt, ...]:
    """`n` prompts, categories in proportion, seeded; original order kept.

    Samples are nested: with the same seed, a smaller sample is part of every larger one, so a run
    of 100 against a baseline sampled at 500 compares all of its 100 prompts. Each category's prompts
    are shuffled by a generator of its own; the sample takes them in that order, one at a time, to the
    category the quota method (Balinski and Young 1975) picks next, which keeps every category's count
    within one of its proportional share at every size."""
    if n >= len(prompts):
        return prompts
    by_category: dict[str, list[int]] = defaultdict(list)
    for index, prompt in enumerate(prompts):
        by_category[prompt.category].append(index)
    for category, indices in by_category.items():
        random.Random(f"{seed}:{salt}:{category}").shuffle(indices)
    counts = _quota_counts({c: len(ix) for c, ix in by_category.items()}, n)
    chosen = [i for c, ix in by_category.items() for i in ix[:counts[c]]]
    return tuple(prompts[i] for i in sorted(chosen))


def _quota_counts(sizes: dict[str, int], n: int) -> dict[str, int]:
    """How many of each category a sample of `n` takes: seats handed out one at a time, each to the
    category with the most members per seat (m / (a + 1)) among those still under their upper quota
    at that size; ties go to the larger category, then to the name. House-monotone and within quota."""
    total = sum(sizes.values())
    counts = dict.fromkeys(sizes, 0)
    for size in range(1, n + 1):
        eligible = [c for c, m in sizes.items() if counts[c] < -(-size * m // total)]
        pick = max(eligible, key=lambda c: (sizes[c] / (counts[c] + 1), sizes[c], c))
        counts[pick] += 1
    return counts
