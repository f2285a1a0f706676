"""Opening and checking the store's database (schema, migrations, read-only opening, quick check) and its errors."""

from __future__ import annotations

import errno
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
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
CREATE TABLE IF NOT EXISTS announced (  -- a run about to fetch, before its fetch process starts (litellm's import)
    run TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,         -- the pytest process that will start it
    started REAL NOT NULL,
    total INTEGER NOT NULL        -- replies it will ask for
);
CREATE TABLE IF NOT EXISTS verdicts (  -- an offline judge's verdict on a stored reply (key: judge id, version, reply)
    key TEXT PRIMARY KEY,
    verdict TEXT NOT NULL,
    reason TEXT NOT NULL
);
"""
BUSY_SECONDS = 60.0  # how long a write waits for another process's write lock before it fails
STORE_FILE = "responses.sqlite3"  # the SQLite database inside the store folder
CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file is a cache directory tag created by pytest-orbench: stored endpoint replies.\n"
                "# For information about cache directory tags, see https://bford.info/cachedir/\n")


def put_records(conn: sqlite3.Connection, records: list[tuple[str, dict[str, Any]]]) -> float:
    """Store replies by key, stamped now (inside the caller's transaction); returns the stamp."""
    now = time.time()
    conn.executemany("INSERT OR REPLACE INTO responses (key, record, created) VALUES (?, ?, ?)",
                     [(k, json.dumps(r, ensure_ascii=False, sort_keys=True), now) for k, r in records])
    return now


P = ParamSpec("P")
R = TypeVar("R")


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
        if read_only_file_system(above):
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


def damaged(method: Callable[P, R]) -> Callable[P, R]:
    """A store method whose damaged-database error is raised as StoreDamaged, naming the file and the fix."""

    @functools.wraps(method)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except StoreDamaged:
            raise
        except sqlite3.DatabaseError as exc:
            store = args[0]
            if isinstance(store, Database) and any(words in str(exc) for words in _DAMAGED):
                raise unusable(store.directory, exc) from exc
            raise

    return guarded


def quick_check(conn: sqlite3.Connection) -> None:
    """Every page read once (PRAGMA quick_check): a damaged store raises DatabaseError, named as damaged."""
    found = [str(row[0]) for row in conn.execute("PRAGMA quick_check(3)").fetchall()]
    if found != ["ok"]:
        first = " ".join("; ".join(found).split())
        raise sqlite3.DatabaseError(f"database disk image is malformed ({first[:200]})")


def read_only_file_system(directory: Path) -> bool:
    """Whether the folder (or the nearest existing one above it) is on a file system mounted read-only."""
    for folder in (directory, *directory.parents):
        if folder.exists():
            try:
                return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
            except OSError:
                return False
    return False


def cannot_write(directory: Path, exc: BaseException) -> bool:
    """Whether `exc` says the store could not be written to (rather than read, or damaged)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
    reason = str(exc)
    return (isinstance(exc, sqlite3.OperationalError)
            and any(words in reason for words in ("readonly database", "unable to open database file", "disk I/O error"))
            or read_only_file_system(directory))


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
    if isinstance(exc, (OSError, sqlite3.Error)) and read_only_file_system(directory):
        # EROFS reads "permission denied" in some layers, and SQLite says "attempt to write a readonly database".
        reason += (" (the file system is mounted read-only: point --orbench-store at a writable folder, or add "
                   "--orbench-offline to use the replies it holds without writing)")
    elif isinstance(exc, sqlite3.Error) and directory.is_dir() and not os.access(directory, os.W_OK):
        reason += " (the folder is not writable)"
    return StoreError(f"the response store {directory} cannot be written: {reason}")


class Database:
    """The store's SQLite database in WAL mode, one connection per thread: opened (made, migrated, checked, or
    read-only), and closed. The store's tables are read and written by its subclasses."""

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
            if not (read_only and cannot_write(directory, exc) and (directory / STORE_FILE).is_file()):
                raise unusable(directory, exc) from exc
            self._open_read_only(directory)

    def _open_read_only(self, directory: Path) -> None:
        self.read_only, self.path = True, directory / STORE_FILE
        try:
            conn = self._conn()
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if self._check:
                quick_check(conn)
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
            quick_check(conn)
        self._migrate(conn, directory)
        # Outcomes of runs that ended without cleaning up (killed) are worthless after a day.
        old = time.time() - 86400
        conn.execute("DELETE FROM outcomes WHERE run IN (SELECT run FROM runs WHERE heartbeat < ?)", (old,))
        conn.execute("DELETE FROM runs WHERE heartbeat < ?", (old,))
        conn.execute("DELETE FROM announced WHERE started < ?", (old,))

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
