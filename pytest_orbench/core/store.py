"""The response store: replies keyed by everything that determines them, and judges' verdicts on them.

One process fetches for a run; it writes replies, per-prompt outcomes and a heartbeat here, and every
pytest process of the run (xdist workers too) reads them. SQLite in WAL mode: readers never block it.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from pytest_orbench.core.store_database import damaged, put_records
from pytest_orbench.core.store_runs import RunBookkeeping

KEY_VERSION = 1

# json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False), made once (dumps made an encoder
# per call: a third of a key's cost, and a warm run of 1,974 prompts makes ~4,000 keys).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def reply_sha256(text: str) -> str:
    """Which reply a verdict was on (16 hex digits): kept beside its store key, whose record a later call replaces."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def response_key(fields: dict[str, Any]) -> str:
    """Content address of one request. `fields` must not hold secrets: they are hashed, not stored."""
    canonical = _CANONICAL.encode({"v": KEY_VERSION, **fields})
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# The fields of a stored reply (calls.reply.Reply.record, plus what the fetch adds) and the JSON types each may
# hold; "text" must be there. Readers take them as typed: a "text" of null was read as an empty reply (a refusal).
_FIELDS: dict[str, tuple[type, ...]] = {
    "text": (str,), "finish_reason": (str, type(None)), "model": (str, type(None)),
    "system_fingerprint": (str, type(None)), "usage": (dict, type(None)), "cost": (int, float, type(None)),
    "seconds": (int, float, type(None)), "attempts": (int, type(None)), "batch_id": (str, type(None)),
}


def record_problem(record: Any) -> str | None:
    """Why a stored record is not a reply (or a judge's reply) as the store writes them, or None."""
    if not isinstance(record, dict):
        return f"JSON {type(record).__name__}, not an object"
    if "text" not in record:
        return "no text"
    for name, kinds in _FIELDS.items():
        value = record.get(name)
        if name in record and (not isinstance(value, kinds) or isinstance(value, bool)):
            return f"{name} is {_quoted(value)}, not {' or '.join(dict.fromkeys(_JSON_NAMES[k] for k in kinds))}"
    for name, value in (record.get("usage") or {}).items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return f"usage.{_quoted(name)[1:-1]} is {_quoted(value)}, not a whole number or null"
    return None


def _quoted(value: Any) -> str:
    """A value as JSON, cut short: control characters escaped, inert wherever the reason is shown."""
    try:
        return json.dumps(value)[:40]
    except (ValueError, RecursionError):  # nested too deep to write back
        return type(value).__name__


_JSON_NAMES = {str: "a string", int: "a number", float: "a number", dict: "an object", type(None): "null"}


def _with_age(text: Any, created: Any) -> dict[str, Any] | str:
    """The stored record with when it was stored, or why it is damaged (not JSON, or not a reply record). Either
    column may hold any type (SQLite's columns have affinities, not types): a hand edit may have put another."""
    if not isinstance(text, str):
        return f"not JSON text ({type(text).__name__})"
    if not isinstance(created, (int, float)):
        return "no time of storing"
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return "not JSON"
    problem = record_problem(record)
    if problem is not None:
        return problem
    record["stored_at"] = round(created, 3)  # when it was paid for: results show how old replies are
    return record  # type: ignore[no-any-return]


class StoredVerdict(NamedTuple):
    """A built-in offline judge's verdict on a stored reply, and its reason."""

    verdict: str
    reason: str


class Store(RunBookkeeping):
    """SQLite in WAL mode: each reply is committed as it arrives, so a killed run loses nothing paid for.

    A record that cannot be read (not JSON, or JSON of another shape: a hand edit, another tool's row) is
    damaged: every read treats it as missing, so it is asked again and overwritten, never judged;
    `damaged_records` keeps what the reads met (key -> why), for the run to say once."""

    def __init__(self, directory: Path, on_locked: Callable[[str], None] | None = None, check: bool = False,
                 read_only: bool = False) -> None:
        self.damaged_records: dict[str, str] = {}
        super().__init__(directory, on_locked, check, read_only)

    def _read(self, key: str, text: Any, created: Any) -> dict[str, Any] | None:
        record = _with_age(text, created)
        if isinstance(record, str):
            self.damaged_records[key] = record
            return None
        return record

    # -- responses ---------------------------------------------------------------------------
    @damaged
    def get(self, key: str, max_age: float | None = None) -> dict[str, Any] | None:
        """The stored record, if any and (with `max_age` seconds) stored recently enough."""
        since = -math.inf if max_age is None else time.time() - max_age
        row = self._conn().execute("SELECT record, created FROM responses WHERE key = ? AND created >= ?",
                                   (key, since)).fetchone()
        return None if row is None else self._read(key, row[0], row[1])

    @damaged
    def get_many(self, keys: Iterable[str], since: float | None = None) -> dict[str, dict[str, Any]]:
        """Stored records by key; with `since` (a time.time()), those stored before it count as missing
        (asked again)."""
        keys = list(keys)
        found: dict[str, dict[str, Any]] = {}
        conn = self._conn()
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for key, record, created in conn.execute(
                    f"SELECT key, record, created FROM responses WHERE key IN ({marks}) AND created >= ?",
                    (*chunk, -math.inf if since is None else since)):
                read = self._read(key, record, created)
                if read is not None:
                    found[key] = read
        return found

    @damaged
    def count_stored(self, keys: Iterable[str], before: float | None = None) -> int:
        """How many of `keys` are stored; with `before` (a time.time()), how many were stored before it (too
        old: asked again this run). Counted in the database: no record is read."""
        keys, count = list(keys), 0
        conn = self._conn()
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            marks = ",".join("?" * len(chunk))
            older = "" if before is None else " AND created < ?"
            count += conn.execute(f"SELECT COUNT(*) FROM responses WHERE key IN ({marks}){older}",
                                  (*chunk, *(() if before is None else (before,)))).fetchone()[0]
        return int(count)

    @damaged
    def verdict(self, key: str) -> StoredVerdict | None:
        """A built-in offline judge's stored (verdict, reason) on a reply, by verdict key."""
        row = self._conn().execute("SELECT verdict, reason FROM verdicts WHERE key = ?", (key,)).fetchone()
        if row is None or not (isinstance(row[0], str) and isinstance(row[1], str)):
            return None  # none, or damaged: judged again (and written over)
        return StoredVerdict(row[0], row[1])

    @damaged
    def put_verdicts(self, rows: list[tuple[str, str, str]]) -> None:
        if rows:
            with self._transaction() as conn:
                conn.executemany("INSERT OR REPLACE INTO verdicts (key, verdict, reason) VALUES (?, ?, ?)", rows)

    @damaged
    def put(self, key: str, record: dict[str, Any]) -> None:
        put_records(self._conn(), [(key, record)])
