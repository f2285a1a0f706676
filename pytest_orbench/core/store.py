"""The response store: replies keyed by everything that determines them, and each run's outcomes.

One process fetches for a run; it writes replies, per-prompt outcomes and a heartbeat here, and every
pytest process of the run (xdist workers too) reads them. SQLite in WAL mode: readers never block it.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from pytest_orbench.core.jsonfile import nearest_existing

SCHEMA_VERSION = 3  # PRAGMA user_version; _migrate brings an older store up to it
SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    record TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    shard TEXT PRIMARY KEY,       -- "<run id>#<n>": each fetch process of a run has its row
    run TEXT NOT NULL,
    shards INTEGER NOT NULL,      -- how many fetch processes the run has
    pid INTEGER NOT NULL,
    started REAL NOT NULL,
    heartbeat REAL NOT NULL,      -- written by the fetch loop itself: a hung loop goes silent
    total INTEGER NOT NULL,
    done INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    finished INTEGER NOT NULL,    -- 1: every job of this shard has an outcome
    fatal TEXT,                   -- why calls stopped (refused connection, rejected key, crash)
    note TEXT                     -- what the fetch is doing, when counts alone do not say (batch states)
);
CREATE INDEX IF NOT EXISTS runs_by_run ON runs (run);
CREATE TABLE IF NOT EXISTS outcomes (
    run TEXT NOT NULL,
    key TEXT NOT NULL,
    error TEXT,
    judge_error TEXT,
    fetched INTEGER NOT NULL,
    judge_fetched INTEGER NOT NULL,
    PRIMARY KEY (run, key)
);
CREATE TABLE IF NOT EXISTS batches (  -- provider batches submitted (--orbench-batch): resumed, never paid twice
    id TEXT PRIMARY KEY,          -- the provider's batch id
    endpoint TEXT NOT NULL,       -- where it can be retrieved: provider and redacted base URL
    input_file_id TEXT NOT NULL,
    keys TEXT NOT NULL,           -- JSON list of the store keys it asks for
    status TEXT NOT NULL,         -- the provider's last word: validating, in_progress, completed, expired, ...
    counts TEXT,                  -- JSON request_counts at the last retrieval
    created REAL NOT NULL,
    collected INTEGER NOT NULL DEFAULT 0  -- 1: its replies are in responses, its failures were handed on
);
CREATE TABLE IF NOT EXISTS verdicts (  -- an offline judge's verdict on a stored reply (key: judge id, version, reply)
    key TEXT PRIMARY KEY,
    verdict TEXT NOT NULL,
    reason TEXT NOT NULL
);
"""
KEY_VERSION = 1
BUSY_SECONDS = 60.0  # how long a write waits for another process's write lock before it fails
STORE_FILE = "responses.sqlite3"  # the SQLite database inside the store folder
CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file is a cache directory tag created by pytest-orbench: stored endpoint replies.\n"
                "# For information about cache directory tags, see https://bford.info/cachedir/\n")


# json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False), made once (dumps made an encoder
# per call: a third of a key's cost, and a warm run of 1,974 prompts makes ~4,000 keys).
P = ParamSpec("P")
R = TypeVar("R")
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def response_key(fields: dict[str, Any]) -> str:
    """Content address of one request. `fields` must not hold secrets: they are hashed, not stored."""
    canonical = _CANONICAL.encode({"v": KEY_VERSION, **fields})
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _put_records(conn: sqlite3.Connection, records: list[tuple[str, dict[str, Any]]]) -> float:
    """Store replies by key, stamped now (inside the caller's transaction); returns the stamp."""
    now = time.time()
    conn.executemany("INSERT OR REPLACE INTO responses (key, record, created) VALUES (?, ?, ?)",
                     [(k, json.dumps(r, ensure_ascii=False, sort_keys=True), now) for k, r in records])
    return now


def _with_age(text: str, created: float) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(text)
    record["stored_at"] = round(created, 3)  # when it was paid for: results show how old replies are
    return record


def store_problem(directory: Path, label: str, offline: bool = False) -> str | None:
    """Why `directory` cannot hold a store (named by the option `label`), found before any call; None if it can.
    `offline` (--orbench-offline): a store that is there is only read, and may be read-only."""
    above = nearest_existing(directory)
    if not above.is_dir():
        what = "is a file" if above == directory else f"is inside {above}, which is a file"
        return f"{label} {directory} {what}: the response store is a folder; give a folder path (default .orbench)"
    if not os.access(above, os.W_OK | os.X_OK):
        if offline and (directory / STORE_FILE).is_file():
            return None
        if _read_only_file_system(above):
            return (f"{label} {directory}: cannot write in {above}: its file system is mounted read-only; give a folder "
                    "you can write" + ("" if offline else ", or add --orbench-offline to use the replies it holds"))
        return f"{label} {directory}: cannot write in {above} (permission denied); give a folder you can write"
    return None


class StoreError(RuntimeError):
    """The store cannot be opened or written (a read-only folder, a full disk, a newer schema)."""

    #: the message names the fix itself (a damaged or newer store: not "a folder you can write to")
    says_fix = False


class StoreLocked(StoreError):
    """Another process held the store's write lock for longer than a write waits: the fix is ending it."""

    says_fix = True


class StoreUnreadable(StoreError):
    """The store's database is damaged or of a newer schema: another folder, not more space, is the fix."""

    says_fix = True


class StoreDamaged(StoreUnreadable, sqlite3.DatabaseError):
    """The store's database is damaged. Also an sqlite3.DatabaseError: code that shrugged off a failed write
    of a cache (the verdicts) still does; everything else stops with this message."""


# SQLite's words for a database file it cannot read (truncated, overwritten, not SQLite at all).
_DAMAGED = ("database disk image is malformed", "file is not a database")


def _damaged(method: Callable[P, R]) -> Callable[P, R]:
    """A store method whose damaged-database error is raised as StoreDamaged, naming the file and the fix."""

    @functools.wraps(method)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except StoreDamaged:
            raise
        except sqlite3.DatabaseError as exc:
            store = args[0]
            if isinstance(store, Store) and any(words in str(exc) for words in _DAMAGED):
                raise unusable(store.directory, exc) from exc
            raise

    return guarded


def _quick_check(conn: sqlite3.Connection) -> None:
    """Every page read once (PRAGMA quick_check): a damaged store raises DatabaseError, named as damaged."""
    found = [str(row[0]) for row in conn.execute("PRAGMA quick_check(3)").fetchall()]
    if found != ["ok"]:
        first = " ".join("; ".join(found).split())
        raise sqlite3.DatabaseError(f"database disk image is malformed ({first[:200]})")


def _read_only_file_system(directory: Path) -> bool:
    """Whether the folder (or the nearest existing one above it) is on a file system mounted read-only."""
    for folder in (directory, *directory.parents):
        if folder.exists():
            try:
                return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
            except OSError:
                return False
    return False


def _cannot_write(directory: Path, exc: BaseException) -> bool:
    """Whether `exc` says the store could not be written to (rather than read, or damaged)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
    reason = str(exc)
    return (isinstance(exc, sqlite3.OperationalError)
            and any(words in reason for words in ("readonly database", "unable to open database file", "disk I/O error"))
            or _read_only_file_system(directory))


def unusable(directory: Path, exc: BaseException) -> StoreError:
    """`exc` (OSError, sqlite3.Error) as a StoreError naming the folder and, if SQLite does not, why."""
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, sqlite3.DatabaseError) and any(words in reason for words in _DAMAGED):
        # Only replies are lost with it, and they can be asked again: say so, rather than "free space".
        return StoreDamaged(f"the response store {directory} is damaged ({directory / STORE_FILE}: {reason}); it "
                            "holds only replies that can be asked again: delete that file (or move it aside), or "
                            "point --orbench-store elsewhere")
    if isinstance(exc, sqlite3.OperationalError) and "database is locked" in reason:
        # Not space or permissions: "a folder you can write to, on a disk with free space" sent people astray.
        return StoreLocked(f"the response store {directory} is locked by another process ({directory / STORE_FILE}: "
                           f"{reason}, still after {BUSY_SECONDS:g} s): end the process holding it (a sqlite3 shell "
                           "with a transaction open, a backup, another run writing this store), or point "
                           "--orbench-store elsewhere")
    if isinstance(exc, (OSError, sqlite3.Error)) and _read_only_file_system(directory):
        # EROFS reads "permission denied" in some layers, and SQLite says "attempt to write a readonly database".
        reason += (" (the file system is mounted read-only: point --orbench-store at a writable folder, or add "
                   "--orbench-offline to use the replies it holds without writing)")
    elif isinstance(exc, sqlite3.Error) and directory.is_dir() and not os.access(directory, os.W_OK):
        reason += " (the folder is not writable)"
    return StoreError(f"the response store {directory} cannot be written: {reason}")


class Store:
    """SQLite in WAL mode: each reply is committed as it arrives, so a killed run loses nothing paid for."""

    def __init__(self, directory: Path, on_locked: Callable[[str], None] | None = None, check: bool = False,
                 read_only: bool = False) -> None:
        """`on_locked`: told, before the wait, when another process holds the write lock (the opening then
        waits up to BUSY_SECONDS for it, and fails naming it). `check`: read every page once (PRAGMA
        quick_check, ~0.1 s for 80,000 replies), so that a damaged store is refused before any call rather
        than met by whichever test reads the damaged page. `read_only` (--orbench-offline): a store that
        cannot be written (a read-only file system, a read-only mount of a CI cache) is opened to read;
        writes to it are then refused (StoreError), and its callers that only cache treat them so."""
        self.directory = directory
        self._check = check
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._on_locked = on_locked
        self.read_only = False
        try:
            self._open(directory)
        except (OSError, sqlite3.Error) as exc:
            self.close()
            if not (read_only and _cannot_write(directory, exc) and (directory / STORE_FILE).is_file()):
                raise unusable(directory, exc) from exc
            self._open_read_only(directory)

    def _open_read_only(self, directory: Path) -> None:
        self.read_only, self.path = True, directory / STORE_FILE
        try:
            conn = self._conn()
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if self._check:
                _quick_check(conn)
        except (OSError, sqlite3.Error) as exc:
            self.close()
            raise unusable(directory, exc) from exc
        if version != SCHEMA_VERSION:
            self.close()
            raise StoreUnreadable(f"the response store {directory} is read-only and was written by another version of "
                                  f"pytest-orbench (store schema {version}, this one uses {SCHEMA_VERSION}); make it "
                                  "writable once, or point --orbench-store elsewhere")

    def _open(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        # Backup tools skip a folder holding CACHEDIR.TAG (https://bford.info/cachedir/): the replies can be
        # fetched again. Like .pytest_cache, the store is never something to commit (.gitignore).
        for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", "# created by pytest-orbench\n*\n")):
            path = directory / name
            if not path.exists():
                try:
                    path.write_text(text, encoding="utf-8")
                except OSError:
                    pass  # a convenience: the database itself says whether the folder can be used
        self.path = directory / STORE_FILE
        if self._on_locked is not None and self.path.exists() and self.write_locked():
            self._on_locked(f"the response store {directory} is locked by another process (a sqlite3 shell, a backup, "
                            f"another run's long write); waiting up to {BUSY_SECONDS:g} s for it")
        existed = self.path.is_file() and self.path.stat().st_size > 0
        conn = self._conn()
        if self._check and existed:
            _quick_check(conn)
        self._migrate(conn, directory)
        # Outcomes of runs that ended without cleaning up (killed) are worthless after a day.
        old = time.time() - 86400
        conn.execute("DELETE FROM outcomes WHERE run IN (SELECT run FROM runs WHERE heartbeat < ?)", (old,))
        conn.execute("DELETE FROM runs WHERE heartbeat < ?", (old,))

    @staticmethod
    def _migrate(conn: sqlite3.Connection, directory: Path) -> None:
        """Replies survive every version; per-run bookkeeping of older versions (claims, runs) is
        transient and is simply rebuilt. A store from a newer plugin is refused by name."""
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreUnreadable(f"the response store {directory} was written by a newer pytest-orbench (store schema "
                                  f"{version}, this one reads up to {SCHEMA_VERSION}); upgrade, or point --orbench-store "
                                  "elsewhere")
        if version < SCHEMA_VERSION:
            conn.executescript("DROP TABLE IF EXISTS claims; DROP TABLE IF EXISTS runs; DROP TABLE IF EXISTS outcomes;")
        conn.executescript(SCHEMA)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None and self.read_only:
            # immutable: no lock and no -shm file, which a read-only folder cannot hold; nothing can write it anyway
            # (a store left with a -wal file beside it is read without what that file holds: those replies are missing).
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro&immutable=1", uri=True, isolation_level=None,
                                   check_same_thread=False)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection inside one transaction: committed at the end, rolled back on any error."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLite ends it by itself on some errors (a full disk): never mask those
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    # -- responses ---------------------------------------------------------------------------
    @_damaged
    def get(self, key: str, max_age: float | None = None) -> dict[str, Any] | None:
        """The stored record, if any and (with `max_age` seconds) stored recently enough."""
        row = self._conn().execute("SELECT record, created FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None or (max_age is not None and row[1] < time.time() - max_age):
            return None
        return _with_age(row[0], row[1])

    @_damaged
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

    @_damaged
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

    @_damaged
    def verdict(self, key: str) -> tuple[str, str] | None:
        """A built-in offline judge's stored (verdict, reason) on a reply, by verdict key."""
        row = self._conn().execute("SELECT verdict, reason FROM verdicts WHERE key = ?", (key,)).fetchone()
        return (row[0], row[1]) if row else None

    @_damaged
    def put_verdicts(self, rows: list[tuple[str, str, str]]) -> None:
        if rows:
            with self._transaction() as conn:
                conn.executemany("INSERT OR REPLACE INTO verdicts (key, verdict, reason) VALUES (?, ?, ?)", rows)

    @_damaged
    def put(self, key: str, record: dict[str, Any]) -> None:
        _put_records(self._conn(), [(key, record)])

    # -- a run's fetcher and outcomes ------------------------------------------------------------
    @_damaged
    def start_run(self, run: str, total: int, shard: int = 0, shards: int = 1) -> None:
        now = time.time()
        self._conn().execute(
            "INSERT OR REPLACE INTO runs (shard, run, shards, pid, started, heartbeat, total, done, errors, finished, fatal) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, 0, NULL)", (f"{run}#{shard}", run, shards, os.getpid(), now, now, total))

    @_damaged
    def commit_batch(self, run: str, records: list[tuple[str, dict[str, Any]]],
                     outcomes: list[tuple[str, str | None, str | None, bool, bool]], done: int, errors: int,
                     shard: int = 0) -> None:
        """Replies, their outcomes and the progress in one transaction (readers see all or none)."""
        with self._transaction() as conn:
            now = _put_records(conn, records)
            conn.executemany("INSERT OR REPLACE INTO outcomes (run, key, error, judge_error, fetched, judge_fetched) "
                             "VALUES (?, ?, ?, ?, ?, ?)", [(run, k, e, j, int(f), int(jf)) for k, e, j, f, jf in outcomes])
            conn.execute("UPDATE runs SET heartbeat = ?, done = ?, errors = ? WHERE shard = ?", (now, done, errors,
                                                                                             f"{run}#{shard}"))

    @_damaged
    def heartbeat(self, run: str, done: int, errors: int, shard: int = 0) -> None:
        self._conn().execute("UPDATE runs SET heartbeat = ?, done = ?, errors = ? WHERE shard = ?",
                             (time.time(), done, errors, f"{run}#{shard}"))

    @_damaged
    def finish_run(self, run: str, fatal: str | None, shard: int = 0) -> None:
        self._conn().execute("UPDATE runs SET heartbeat = ?, finished = 1, fatal = ? WHERE shard = ?",
                             (time.time(), fatal, f"{run}#{shard}"))

    @_damaged
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

    @_damaged
    def other_runs(self, run: str, alive_within: float = 30.0) -> list[dict[str, Any]]:
        """Other runs fetching into this store now (unfinished, heartbeat within `alive_within` s): per run, its
        pid, start and replies still to come."""
        rows = self._conn().execute(
            "SELECT run, MIN(pid), MIN(started), SUM(total - done) FROM runs WHERE run != ? AND finished = 0 AND "
            "heartbeat >= ? GROUP BY run", (run, time.time() - alive_within)).fetchall()
        return [{"run": r[0], "pid": int(r[1]), "started": float(r[2]), "to_go": int(r[3] or 0)} for r in rows]

    @_damaged
    def started_shards(self, run: str) -> set[int]:
        """The fetch processes of `run` that have started (each has its row)."""
        rows = self._conn().execute("SELECT shard FROM runs WHERE run = ?", (run,)).fetchall()
        return {int(row[0].rsplit("#", 1)[1]) for row in rows}

    @_damaged
    def note(self, run: str, text: str | None, shard: int = 0) -> None:
        self._conn().execute("UPDATE runs SET note = ? WHERE shard = ?", (text, f"{run}#{shard}"))

    # -- provider batches ------------------------------------------------------------------------
    @_damaged
    def add_batch(self, batch_id: str, endpoint: str, input_file_id: str, keys: list[str], status: str) -> None:
        self._conn().execute("INSERT OR REPLACE INTO batches (id, endpoint, input_file_id, keys, status, counts, "
                             "created, collected) VALUES (?, ?, ?, ?, ?, NULL, ?, 0)",
                             (batch_id, endpoint, input_file_id, json.dumps(keys), status, time.time()))

    @_damaged
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
        return [(row[0], json.loads(row[1])) for row in rows]

    @_damaged
    def batches(self, collected: bool = False) -> list[dict[str, Any]]:
        """Submitted batches, oldest first: the open ones (`collected`: every one)."""
        rows = self._conn().execute("SELECT id, endpoint, status, counts, created, collected, keys FROM batches "
                                    + ("" if collected else "WHERE collected = 0 ") + "ORDER BY created").fetchall()
        return [{"id": r[0], "endpoint": r[1], "status": r[2], "counts": json.loads(r[3]) if r[3] else {},
                 "created": r[4], "collected": bool(r[5]), "prompts": len(json.loads(r[6]))} for r in rows]

    @_damaged
    def batch_status(self, batch_id: str, status: str, counts: dict[str, Any] | None) -> None:
        self._conn().execute("UPDATE batches SET status = ?, counts = ? WHERE id = ?",
                             (status, json.dumps(counts) if counts is not None else None, batch_id))

    @_damaged
    def collect_batch(self, batch_id: str, status: str, records: list[tuple[str, dict[str, Any]]]) -> None:
        """A finished batch's replies, stored together with the mark that it needs no more polling."""
        with self._transaction() as conn:
            _put_records(conn, records)
            conn.execute("UPDATE batches SET status = ?, collected = 1 WHERE id = ?", (status, batch_id))

    @_damaged
    def outcome(self, run: str, key: str) -> tuple[str | None, str | None, int, int] | None:
        row = self._conn().execute("SELECT error, judge_error, fetched, judge_fetched FROM outcomes "
                                   "WHERE run = ? AND key = ?", (run, key)).fetchone()
        return (row[0], row[1], int(row[2]), int(row[3])) if row else None

    @_damaged
    def run_state(self, run: str) -> dict[str, Any] | None:
        """The run across its fetch processes: summed progress; finished only when every shard is;
        heartbeat and pid of the quietest shard; the first fatal message."""
        rows = self._conn().execute("SELECT pid, started, heartbeat, total, done, errors, finished, fatal, shards, note "
                                    "FROM runs WHERE run = ? ORDER BY shard", (run,)).fetchall()
        if not rows:
            return None
        quietest = min(rows, key=lambda r: r[2] if not r[6] else float("inf"))
        return {
            "pid": quietest[0], "started": min(r[1] for r in rows), "heartbeat": quietest[2],
            "total": sum(r[3] for r in rows), "done": sum(r[4] for r in rows), "errors": sum(r[5] for r in rows),
            "finished": int(len(rows) >= rows[0][8] and all(r[6] for r in rows)),
            "fatal": next((r[7] for r in rows if r[7]), None), "shards": rows[0][8], "started_shards": len(rows),
            "note": next((r[9] for r in rows if r[9]), None),
        }

    def write_locked(self) -> bool:
        """Whether another connection holds the database's write lock at this moment (a `BEGIN EXCLUSIVE`
        left open in a `sqlite3` shell, a backup tool, another run's long write): asked without waiting."""
        try:
            conn = sqlite3.connect(self.path, timeout=0, isolation_level=None)
        except sqlite3.Error:
            return False
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError as exc:
            return "locked" in str(exc)
        finally:
            conn.close()

    @_damaged
    def paid_keys(self, run: str) -> set[str]:
        """The keys this run called the endpoint or the judge for (its outcomes say fetched)."""
        return {k for (k,) in self._conn().execute(
            "SELECT key FROM outcomes WHERE run = ? AND (fetched = 1 OR judge_fetched = 1)", (run,))}

    @_damaged
    def clear_run(self, run: str) -> None:
        conn = self._conn()
        conn.execute("DELETE FROM outcomes WHERE run = ?", (run,))
        conn.execute("DELETE FROM runs WHERE run = ?", (run,))
