"""Waiting on what the code exposes (a store row, a line of output, a simulator counter, a process's end)
instead of sleeping: the end-to-end tests of the fetch and the batches hold no timing assumption, so a busy
machine makes them slower, never wrong. Every wait is bounded (generously) and says what it waited for."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pytest_orbench.core.store_database import STORE_FILE

T = TypeVar("T")
WAIT = 120.0  # seconds: long enough for a busy machine; reached only when the awaited event never comes


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    """Polls `condition` until it holds; an AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout:g} s for {what}")
        time.sleep(0.02)


def _read(store: Path, sql: str, empty: T, read: Callable[[sqlite3.Cursor], T]) -> T:
    """`read` of `sql` on the response store folder `store`, read without writing; `empty` while the store does not
    exist yet or the run is creating its tables."""
    path = store / STORE_FILE
    if not path.is_file():
        return empty
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return read(conn.execute(sql))
    except sqlite3.OperationalError:  # the run is creating its tables
        return empty
    finally:
        conn.close()


def stored_replies(store: Path) -> int:
    """Replies in the response store folder `store` (0 while it does not exist), read without writing."""
    return _read(store, "SELECT COUNT(*) FROM responses", 0, lambda rows: int(rows.fetchone()[0]))


def run_notes(store: Path) -> list[str | None]:
    """The note of each fetch process's run row in the response store folder `store` (what its loop says it is doing,
    e.g. fetch.loop.STOPPING; None: nothing to say), read without writing; [] while no fetch has started, and once the
    session has stopped its fetch (the rows are cleared then)."""
    return _read(store, "SELECT note FROM runs", [],
                 lambda rows: [None if row[0] is None else str(row[0]) for row in rows])


class Run:
    """pytest in a process of its own, its output (stdout and stderr, unbuffered) read as it comes, so a test
    can act when a line appears."""

    def __init__(self, args: list[str], cwd: Path, new_session: bool = False) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=new_session)
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Every byte as it comes (a row of dots has no end of line until it is full)."""
        assert self.proc.stdout is not None
        with self.proc.stdout:
            while chunk := os.read(self.proc.stdout.fileno(), 65536):
                self._chunks.append(chunk)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace")

    def wait_for_output(self, pattern: str, timeout: float = WAIT) -> None:
        """Until the output matches the regular expression `pattern` (an AssertionError if the process ends
        first, or after `timeout`)."""
        wait_for(lambda: re.search(pattern, self.text()) or not self._reader.is_alive(),
                 f"{pattern!r} in the output", timeout)
        assert re.search(pattern, self.text()), f"ended without {pattern!r}:\n{self.text()[-3000:]}"

    def finish(self, timeout: float = WAIT) -> str:
        """Waits for the process to end; all it printed."""
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=30)
        return self.text()

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode
