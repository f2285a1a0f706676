"""Reviewable JSON files: stable key order, one prompt record per line, atomic writes."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

# Characters that change how text displays without being seen (bidi overrides, zero-width, line and
# paragraph separators, C1 controls): written as \u escapes, so a diff or an editor shows them. JSON
# readers get the same strings back.
_INVISIBLE = re.compile("[\u0080-\u009f\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u2028-\u202e"
                        "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000e0000-\U000e0fff]")


def _escape_invisible(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = ord(match.group(0))
        if code > 0xFFFF:
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
        return f"\\u{code:04x}"

    return _INVISIBLE.sub(one, text)


def dumps(data: Mapping[str, Any], records_key: str = "prompts") -> str:
    """JSON with sorted keys; the list under `records_key` gets one compact record per line; invisible
    characters escaped."""
    return "".join(_chunks(data, records_key))


def _chunks(data: Mapping[str, Any], records_key: str) -> Iterator[str]:
    """`dumps` in pieces, a record at a time: written as they come, an 80,000-prompt results file (100 MB) is
    never one string (it was five at once, joined, framed and escaped: +250 MiB at 40,000 prompts; issue 37).
    The escape matches one character at a time, so escaping the pieces escapes the whole."""
    records = data.get(records_key)
    head = {k: v for k, v in data.items() if k != records_key}
    text = _escape_invisible(json.dumps(head, indent=2, sort_keys=True, ensure_ascii=False))
    if records is None:
        yield text + "\n"
        return
    yield text[:-2] + ",\n" if head else "{\n"
    if not records:
        yield f'  "{records_key}": []'
    else:
        yield f'  "{records_key}": [\n    '
        for n, record in enumerate(records):
            line = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
            yield (",\n    " if n else "") + _escape_invisible(line)
        yield "\n  ]"
    yield "\n}\n"


def escape_invisible(text: str) -> str:
    """Invisible and bidi characters as JSON escapes (\\u202e): what a viewer shows is what the file holds."""
    return _escape_invisible(text)


def write_atomic(path: Path, text: str | Iterable[str]) -> None:
    """Write via a temporary file and os.replace: readers never see half a file. `text`: the file's text, or
    its pieces in order (written as they come: a large file is never held whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            if isinstance(text, str):
                fh.write(text)
            else:
                fh.writelines(text)
        # mkstemp makes the file private (0600); a baseline or report is an ordinary file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def nearest_existing(path: Path) -> Path:
    """`path`, or the nearest folder above it that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def output_problem(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | None] | None = None) -> str | None:
    """Why the files to write (`outputs`: the option that names each, its path) could not be written as asked,
    found before any work is done or paid for; None when they can. A folder at the path, a file where its
    folder should be, a folder that cannot be written, two outputs on one file (the second would replace the
    first), or an output on a file the run reads (`inputs`: a baseline, a dataset), which it would replace."""
    written: dict[Path, str] = {}
    read = {p.resolve(): label for label, p in (inputs or {}).items() if p is not None}
    for label, path in outputs.items():
        if path is None:
            continue
        full = path.resolve()
        if full.is_dir():
            return f"{label} {path} is a folder: give the path of a file to write (in it, or elsewhere)"
        above = nearest_existing(full.parent)
        if not above.is_dir():
            return f"{label} {path}: {above} is a file, not a folder; give a path in a folder"
        if not os.access(above, os.W_OK | os.X_OK):
            return f"{label} {path}: cannot write in {above} (permission denied); give a path in a folder you can write"
        if full in written:
            return f"{written[full]} and {label} both name {path}: the second would replace the first; give each its own file"
        if full in read:
            return f"{label} {path} is the input file given as {read[full]}: writing it would replace that file; give another path"
        written[full] = label
    return None


def write_json(path: Path, data: Mapping[str, Any], records_key: str = "prompts") -> None:
    write_atomic(path, _chunks(data, records_key))


class DuplicateKeyError(ValueError):
    """A JSON object with one key twice: json.loads keeps the last silently, so a hand edit or a merge that
    kept both values decides unseen which one counts."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        where = f" (in the object with \"id\": {json.dumps(data['id'])})" if isinstance(data.get("id"), str) else ""
        raise DuplicateKeyError(f"the key {json.dumps(key)} appears twice in one object{where}: json keeps one value "
                                "silently")
    return data


_CONFLICT = re.compile(r"^(<{7}|={7}|>{7})(?: |$)", re.MULTILINE)


def loads_document(text: str) -> Any:
    """A baseline's or results file's JSON, refusing what json.loads reads silently one way: a key twice
    in one object (DuplicateKeyError). Git's merge-conflict markers are named by line (ValueError)."""
    marker = _CONFLICT.search(text)
    if marker:
        line = text.count("\n", 0, marker.start()) + 1
        raise ValueError(f"it holds git merge-conflict markers (line {line}: {marker.group(1)})")
    return json.loads(text, object_pairs_hook=_unique_keys)


def read_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data
