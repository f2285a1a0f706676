"""The response store: replies keyed by everything that determines them, and judges' verdicts on them.

One process fetches for a run; it writes replies, per-prompt outcomes and a heartbeat here, and every
pytest process of the run (xdist workers too) reads them. SQLite in WAL mode: readers never block it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from pytest_orbench.core.store_database import damaged, put_records
from pytest_orbench.core.store_runs import RunBookkeeping

KEY_VERSION = 1

# json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False), made once (dumps made an encoder
# per call: a third of a key's cost, and a warm run of 1,974 prompts makes ~4,000 keys).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def response_key(fields: dict[str, Any]) -> str:
    """Content address of one request. `fields` must not hold secrets: they are hashed, not stored."""
    canonical = _CANONICAL.encode({"v": KEY_VERSION, **fields})
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _with_age(text: str, created: float) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(text)
    record["stored_at"] = round(created, 3)  # when it was paid for: results show how old replies are
    return record


class StoredVerdict(NamedTuple):
    """A built-in offline judge's verdict on a stored reply, and its reason."""

    verdict: str
    reason: str


class Store(RunBookkeeping):
    """SQLite in WAL mode: each reply is committed as it arrives, so a killed run loses nothing paid for."""

    # -- responses ---------------------------------------------------------------------------
    @damaged
    def get(self, key: str, max_age: float | None = None) -> dict[str, Any] | None:
        """The stored record, if any and (with `max_age` seconds) stored recently enough."""
        row = self._conn().execute("SELECT record, created FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None or (max_age is not None and row[1] < time.time() - max_age):
            return None
        return _with_age(row[0], row[1])

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
                    f"SELECT key, record, created FROM responses WHERE key IN ({marks})", chunk):
                if since is None or created >= since:
                    found[key] = _with_age(record, created)
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
        return StoredVerdict(row[0], row[1]) if row else None

    @damaged
    def put_verdicts(self, rows: list[tuple[str, str, str]]) -> None:
        if rows:
            with self._transaction() as conn:
                conn.executemany("INSERT OR REPLACE INTO verdicts (key, verdict, reason) VALUES (?, ?, ?)", rows)

    @damaged
    def put(self, key: str, record: dict[str, Any]) -> None:
        put_records(self._conn(), [(key, record)])
