"""Waiting for a prompt's outcome in the store, bounded by the fetcher's liveness (a dead child, a stale
heartbeat, a finished run): every pytest process, xdist workers included, waits here."""

from __future__ import annotations

import time
from collections.abc import Callable

from pytest_orbench.core.store import Store
from pytest_orbench.core.store_runs import RunState
from pytest_orbench.fetch.loop import Outcome

STALE_SECONDS = 30.0  # a fetcher silent for this long is taken for dead
# ... unless another process holds the store's write lock meanwhile: the fetcher is then waiting for it, not
# dead (each of its writes waits up to 60 s for a lock, then fails and says so); it is waited for this long.
LOCKED_SECONDS = 180.0


class Waiter:
    """Waits for one prompt's outcome in the store, bounded: the fetcher died, went silent, or
    finished without it, and the wait ends with an error saying so."""

    def __init__(self, store: Store, run_id: str, dead: Callable[[str], str | None] | None = None,
                 on_wait: Callable[[], None] | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.dead = dead  # the fetching process's own check of what fetches `key` (its child), if this is it
        self.on_wait = on_wait  # called about once a second while waiting (progress)
        self._given_up: str | None = None  # a fetcher that never started or went silent is not waited for twice
        self._seen = False  # the run's row was seen: once it is gone, the fetching process has cleared it (stopped)
        self._locked_at = 0.0  # when another process was last seen holding the store's write lock

    def result(self, key: str, first_wait: float = 120.0) -> Outcome:
        delay, started, last_note = 0.002, time.monotonic(), time.monotonic()
        while True:
            # Whether the fetcher is gone or finished is asked before the outcome is read: it commits
            # every outcome before it ends, so one missing after that is missing for good (no race).
            problem = self.dead(key) if self.dead is not None else None
            state = self.store.run_state(self.run_id)
            row = self.store.outcome(self.run_id, key)
            if row is not None:
                error, judge_error, fetched, judge_fetched = row
                record = None if error else self.store.get(key)
                if record is None and not error:
                    error = "the stored reply vanished"
                return Outcome(record=record, error=error, fetched=bool(fetched), judge_error=judge_error,
                               judge_fetched=bool(judge_fetched))
            if problem is not None:
                return Outcome(error=problem)
            if state is None and self._seen:
                return Outcome(error="the run was stopped (interrupted) before this prompt's reply came")
            self._seen = self._seen or state is not None
            if state is not None and state.finished:
                # No outcome and the run is over: a reply the fetcher counted as fresh (not refetched)
                # is in the store; anything else is an error, never a wait.
                record = None if state.fatal else self.store.get(key)
                if record is not None:
                    return Outcome(record=record)
                return Outcome(error=state.fatal or "the fetcher finished without asking for this prompt")
            problem = self._given_up or self._silent(state, started, first_wait)
            if problem is not None:
                # Every later prompt would wait as long again (120 s each, a day for a run): it gets this now,
                # unless its outcome has come in after all.
                self._given_up = problem
                return Outcome(error=problem)
            if self.on_wait is not None and time.monotonic() - last_note > 1.0:
                self.on_wait()
                last_note = time.monotonic()
            time.sleep(delay)
            delay = min(0.05, delay * 2)

    def _silent(self, state: RunState | None, started: float, first_wait: float) -> str | None:
        if state is None or state.started_shards < state.shards:
            if time.monotonic() - started > first_wait:
                return f"no fetching process started for this run within {first_wait:g} s"
            return None
        # Silence counts from the last sight of another process holding the store's write lock, too: a fetcher
        # that waited for it needs a moment to write again once it is released.
        silent = time.time() - max(state.heartbeat, self._locked_at)
        if silent <= STALE_SECONDS:
            return None
        # A fetcher that cannot write is silent too: with the store locked by another process, it was taken for
        # dead after 30 s while it waited for the lock (and then stored the replies nobody waited for any more).
        if self.store.write_locked():
            self._locked_at = time.time()
            if time.time() - state.heartbeat <= LOCKED_SECONDS:
                return None
            return (f"the fetching process (pid {state.pid}) has stored nothing for {LOCKED_SECONDS:g} s while "
                    f"another process holds the write lock of the response store {self.store.path}; it is taken for "
                    "dead (end the process holding it: a sqlite3 shell, a backup, another run)")
        return (f"the fetching process (pid {state.pid}) has said nothing for {STALE_SECONDS:g} s; "
                "it is taken for dead")
