"""A run's bookkeeping in the store: its shards and heartbeats, per-prompt outcomes, paid keys, provider batches."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from pytest_orbench.core.store_database import Database, damaged, put_records


@dataclass(frozen=True)
class RunState:
    """A run across its fetch processes: summed progress; finished only when every shard is; heartbeat and pid
    of the quietest shard; the first fatal message and note."""

    pid: int
    started: float
    heartbeat: float
    total: int
    done: int
    errors: int
    finished: bool
    fatal: str | None
    shards: int  # how many fetch processes the run has
    started_shards: int  # how many of them have started
    note: str | None


@dataclass(frozen=True)
class OtherRun:
    """Another run fetching into the same store now."""

    run: str
    pid: int
    started: float
    to_go: int  # replies it still has to fetch


@dataclass(frozen=True)
class BatchRow:
    """A submitted provider batch, as `orbench batches` lists it."""

    id: str
    endpoint: str
    status: str
    counts: dict[str, Any]  # the provider's request_counts at the last retrieval
    created: float
    collected: bool
    prompts: int


class StoredOutcome(NamedTuple):
    """A prompt's outcome in a run: the errors that remained, and whether the endpoint and judge were paid."""

    error: str | None
    judge_error: str | None
    fetched: int
    judge_fetched: int


class RunBookkeeping(Database):
    """The runs, outcomes and batches tables: written by a run's fetch processes, read by its pytest processes."""

    # -- a run's fetcher and outcomes ------------------------------------------------------------
    @damaged
    def start_run(self, run: str, total: int, shard: int = 0, shards: int = 1) -> None:
        now = time.time()
        self._conn().execute(
            "INSERT OR REPLACE INTO runs (shard, run, shards, pid, started, heartbeat, total, done, errors, finished, fatal) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, 0, NULL)", (f"{run}#{shard}", run, shards, os.getpid(), now, now, total))

    @damaged
    def commit_batch(self, run: str, records: list[tuple[str, dict[str, Any]]],
                     outcomes: list[tuple[str, str | None, str | None, bool, bool]], done: int, errors: int,
                     shard: int = 0) -> None:
        """Replies, their outcomes and the progress in one transaction (readers see all or none)."""
        with self._transaction() as conn:
            now = put_records(conn, records)
            conn.executemany("INSERT OR REPLACE INTO outcomes (run, key, error, judge_error, fetched, judge_fetched) "
                             "VALUES (?, ?, ?, ?, ?, ?)", [(run, k, e, j, int(f), int(jf)) for k, e, j, f, jf in outcomes])
            conn.execute("UPDATE runs SET heartbeat = ?, done = ?, errors = ? WHERE shard = ?", (now, done, errors,
                                                                                             f"{run}#{shard}"))

    @damaged
    def heartbeat(self, run: str, done: int, errors: int, shard: int = 0) -> None:
        self._conn().execute("UPDATE runs SET heartbeat = ?, done = ?, errors = ? WHERE shard = ?",
                             (time.time(), done, errors, f"{run}#{shard}"))

    @damaged
    def finish_run(self, run: str, fatal: str | None, shard: int = 0) -> None:
        self._conn().execute("UPDATE runs SET heartbeat = ?, finished = 1, fatal = ? WHERE shard = ?",
                             (time.time(), fatal, f"{run}#{shard}"))

    @damaged
    def fail_shard(self, run: str, shard: int, shards: int, keys: list[str], reason: str) -> None:
        """A fetch process died: each of its prompts without an outcome gets `reason` as its error, and
        its part of the run is finished (started first if it never was), in one transaction."""
        now = time.time()
        with self._transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO runs (shard, run, shards, pid, started, heartbeat, total, done, errors, "
                         "finished, fatal) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, 0, NULL)",
                         (f"{run}#{shard}", run, shards, os.getpid(), now, now, len(keys)))
            done = {k for (k,) in conn.execute("SELECT key FROM outcomes WHERE run = ?", (run,))}
            missing = [k for k in keys if k not in done]
            conn.executemany("INSERT OR IGNORE INTO outcomes (run, key, error, judge_error, fetched, judge_fetched) "
                             "VALUES (?, ?, ?, NULL, 0, 0)", [(run, k, reason) for k in missing])
            conn.execute("UPDATE runs SET heartbeat = ?, done = total, errors = errors + ?, finished = 1 WHERE shard = ?",
                         (now, len(missing), f"{run}#{shard}"))

    @damaged
    def announce_run(self, run: str, total: int) -> None:
        """`run` will fetch `total` replies: other runs see it (other_runs) before its fetch process has started."""
        self._conn().execute("INSERT OR REPLACE INTO announced (run, pid, started, total) VALUES (?, ?, ?, ?)",
                             (run, os.getpid(), time.time(), total))

    @damaged
    def other_runs(self, run: str, alive_within: float = 30.0, announced_within: float = 120.0) -> list[OtherRun]:
        """Other runs fetching into this store now (unfinished, heartbeat within `alive_within` s), or about to
        (announced within `announced_within` s, their fetch process not started yet): per run, its pid, start
        and replies still to come."""
        now = time.time()
        rows = self._conn().execute(
            "SELECT run, MIN(pid), MIN(started), SUM(total - done) FROM runs WHERE run != ? AND finished = 0 AND "
            "heartbeat >= ? GROUP BY run UNION ALL SELECT run, pid, started, total FROM announced WHERE run != ? AND "
            "started >= ? AND run NOT IN (SELECT run FROM runs) ORDER BY 3",
            (run, now - alive_within, run, now - announced_within)).fetchall()
        return [OtherRun(r[0], int(r[1]), float(r[2]), int(r[3] or 0)) for r in rows]

    @damaged
    def started_shards(self, run: str) -> set[int]:
        """The fetch processes of `run` that have started (each has its row)."""
        rows = self._conn().execute("SELECT shard FROM runs WHERE run = ?", (run,)).fetchall()
        return {int(row[0].rsplit("#", 1)[1]) for row in rows}

    @damaged
    def note(self, run: str, text: str | None, shard: int = 0) -> None:
        self._conn().execute("UPDATE runs SET note = ? WHERE shard = ?", (text, f"{run}#{shard}"))

    # -- provider batches ------------------------------------------------------------------------
    @damaged
    def add_batch(self, batch_id: str, endpoint: str, input_file_id: str, keys: list[str], status: str) -> None:
        self._conn().execute("INSERT OR REPLACE INTO batches (id, endpoint, input_file_id, keys, status, counts, "
                             "created, collected) VALUES (?, ?, ?, ?, ?, NULL, ?, 0)",
                             (batch_id, endpoint, input_file_id, json.dumps(keys), status, time.time()))

    @damaged
    def open_batches(self, endpoint: str, max_age: float | None = None) -> list[tuple[str, list[str]]]:
        """(batch id, keys) of the batches submitted to `endpoint` whose replies were not collected yet,
        oldest first. With `max_age` seconds, older open batches are closed unread (status "too old"):
        their replies would be older than the store may serve."""
        conn = self._conn()
        if max_age is not None:
            conn.execute("UPDATE batches SET collected = 1, status = 'too old (' || status || ')' WHERE endpoint = ? "
                         "AND collected = 0 AND created < ?", (endpoint, time.time() - max_age))
        rows = conn.execute("SELECT id, keys FROM batches WHERE endpoint = ? AND collected = 0 ORDER BY created",
                            (endpoint,)).fetchall()
        found = [(row[0], _keys(row[1])) for row in rows]
        # A row whose keys cannot be read (a hand edit) says nothing of which prompts its replies answer: closed
        # unread, and its prompts are asked again.
        conn.executemany("UPDATE batches SET collected = 1, status = 'damaged (' || status || ')' WHERE id = ?",
                         [(batch_id,) for batch_id, keys in found if keys is None])
        return [(batch_id, keys) for batch_id, keys in found if keys is not None]

    @damaged
    def batches(self, collected: bool = False) -> list[BatchRow]:
        """Submitted batches, oldest first: the open ones (`collected`: every one)."""
        rows = self._conn().execute("SELECT id, endpoint, status, counts, created, collected, keys FROM batches "
                                    + ("" if collected else "WHERE collected = 0 ") + "ORDER BY created").fetchall()
        return [BatchRow(str(r[0]), str(r[1]), str(r[2]), _counts(r[3]), r[4] if isinstance(r[4], (int, float)) else 0.0,
                         bool(r[5]), len(_keys(r[6]) or ())) for r in rows]

    @damaged
    def batch_status(self, batch_id: str, status: str, counts: dict[str, Any] | None) -> None:
        self._conn().execute("UPDATE batches SET status = ?, counts = ? WHERE id = ?",
                             (status, json.dumps(counts) if counts is not None else None, batch_id))

    @damaged
    def collect_batch(self, batch_id: str, status: str, records: list[tuple[str, dict[str, Any]]]) -> None:
        """A finished batch's replies, stored together with the mark that it needs no more polling."""
        with self._transaction() as conn:
            put_records(conn, records)
            conn.execute("UPDATE batches SET status = ?, collected = 1 WHERE id = ?", (status, batch_id))

    @damaged
    def outcome(self, run: str, key: str) -> StoredOutcome | None:
        row = self._conn().execute("SELECT error, judge_error, fetched, judge_fetched FROM outcomes "
                                   "WHERE run = ? AND key = ?", (run, key)).fetchone()
        return StoredOutcome(row[0], row[1], int(row[2]), int(row[3])) if row else None

    @damaged
    def run_state(self, run: str) -> RunState | None:
        """The run across its fetch processes (RunState), None before any has started."""
        rows = self._conn().execute("SELECT pid, started, heartbeat, total, done, errors, finished, fatal, shards, note "
                                    "FROM runs WHERE run = ? ORDER BY shard", (run,)).fetchall()
        if not rows:
            return None
        quietest = min(rows, key=lambda r: r[2] if not r[6] else float("inf"))
        return RunState(
            pid=quietest[0], started=min(r[1] for r in rows), heartbeat=quietest[2],
            total=sum(r[3] for r in rows), done=sum(r[4] for r in rows), errors=sum(r[5] for r in rows),
            finished=len(rows) >= rows[0][8] and all(r[6] for r in rows),
            fatal=next((r[7] for r in rows if r[7]), None), shards=rows[0][8], started_shards=len(rows),
            note=next((r[9] for r in rows if r[9]), None),
        )

    @damaged
    def paid_keys(self, run: str) -> set[str]:
        """The keys this run called the endpoint or the judge for (its outcomes say fetched)."""
        return {k for (k,) in self._conn().execute(
            "SELECT key FROM outcomes WHERE run = ? AND (fetched = 1 OR judge_fetched = 1)", (run,))}

    @damaged
    def clear_run(self, run: str) -> None:
        conn = self._conn()
        conn.execute("DELETE FROM announced WHERE run = ?", (run,))
        conn.execute("DELETE FROM outcomes WHERE run = ?", (run,))
        conn.execute("DELETE FROM runs WHERE run = ?", (run,))


def _keys(text: Any) -> list[str] | None:
    """A batch row's store keys (a JSON list of strings), or None when the row is damaged."""
    try:
        keys = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    return keys if isinstance(keys, list) and all(isinstance(k, str) for k in keys) else None


def _counts(text: Any) -> dict[str, Any]:
    """A batch row's request counts at the last retrieval ({} when none, or damaged)."""
    try:
        counts = json.loads(text) if text else {}
    except (TypeError, ValueError, RecursionError):
        return {}
    if not isinstance(counts, dict):
        return {}
    return {str(k): v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}
