"""Custom dataset files: CSV and JSONL rows read strictly (errors name the line), loaded as a dataset."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
from collections import defaultdict
from pathlib import Path

from pytest_orbench.core.datasets.prompts import Dataset, DatasetError, Prompt, local_ids, test_name
from pytest_orbench.core.datasets.registry import Expected
from pytest_orbench.core.datasets.specs import EXPECT_WORDS, DatasetSpec


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
            try:  # a \ud800 escape without its pair is no character: every later digest of the text failed (INTERNALERROR)
                json.dumps(row, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise DatasetError(f"{path}:{number}: a \\u escape of half a character (a surrogate such as \\ud800 "
                                   "without its pair) is not text; write the character itself, or both halves of its "
                                   "pair (\\ud83d\\ude00)") from None
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
    # No field is longer than the text: the csv module's own limit (131,072 characters) refused a long reply
    # in a labels file as bad quoting. The limit is the module's, for the whole process: restored after.
    limit = csv.field_size_limit(max(len(text) + 1, csv.field_size_limit()))
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
    finally:
        csv.field_size_limit(limit)
    return fields, rows


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
    ids = local_ids(raw_ids)
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
