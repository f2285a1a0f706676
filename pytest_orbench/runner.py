"""Fetching replies: a background asyncio loop per process, bounded concurrency, store claims across processes."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from pytest_orbench.client import Caller, EndpointError, call_with_retries
from pytest_orbench.judge import Judge
from pytest_orbench.judging import JudgeStage, judge_key, reply_text
from pytest_orbench.store import Store

POLL = 0.05  # seconds between looks at a prompt another process is fetching
DRAIN = 120.0  # seconds stop() waits for requests already in flight (paid for: keep them)


@dataclass(frozen=True)
class Job:
    key: str
    prompt: str
    index: int
    record: dict[str, Any] | None = None  # the stored reply, when only its LLM judgement is missing


@dataclass
class Outcome:
    """What a test gets: a reply record (and its LLM judge record), or the error that remained after the retries."""

    record: dict[str, Any] | None = None
    error: str | None = None
    fetched: bool = False  # paid for in this run
    judge: dict[str, Any] | None = None  # the LLM judge's stored reply, when the judge needed one
    judge_error: str | None = None
    judge_fetched: bool = False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Fetcher:
    """Fetches the replies this process's tests need, in test order, `concurrency` at a time.

    Every process of a run (xdist workers included) walks the same job list; a prompt is requested
    only by the process that first claims it in the store, and any other process waiting for it
    reads the stored reply once the claim is done. So each prompt costs one call per run.
    """

    def __init__(
        self, store: Store, make_caller: Callable[[], Caller], jobs: list[Job], *,
        run_id: str, concurrency: int, retries: int, shared: bool = True,
        judge: Judge | None = None, judge_stage: JudgeStage | None = None,
    ) -> None:
        self.store = store
        # An LLM judge's call follows its reply on the same worker slot, so judging overlaps fetching.
        self.judge = judge
        self.judge_stage = judge_stage
        self.make_caller = make_caller
        self.jobs = {job.key: job for job in jobs}
        self.order = [job.key for job in jobs]
        self.run_id = run_id
        self.concurrency = concurrency
        self.retries = retries
        # Claims coordinate processes (xdist workers); a lone process owns every prompt and skips
        # two SQLite writes per prompt on the event loop.
        self.shared = shared
        self.pid = os.getpid()
        self._events = {key: threading.Event() for key in self.jobs}
        self._outcomes: dict[str, Outcome] = {}
        self._mine: set[str] = set()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.PriorityQueue[tuple[int, int, str, bool]] | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._fatal: str | None = None
        self._caller: Caller | None = None
        self._draining = False
        self._busy: set[asyncio.Task[None]] = set()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="orbench-fetch", daemon=True)
        self._thread.start()
        self._ready.wait()

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._thread is not None:
            loop.call_soon_threadsafe(self._stop_event.set)
            self._thread.join(timeout=30)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        # Sync callable targets run in threads: as many as requests may be in flight.
        loop.set_default_executor(ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="orbench-target"))
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self.store.close()

    async def _main(self) -> None:
        self._stop_event = asyncio.Event()
        self._queue = asyncio.PriorityQueue()
        for index, key in enumerate(self.order):
            self._queue.put_nowait((index, index, key, False))
        self._ready.set()
        if any(job.record is None for job in self.jobs.values()):  # else only judge calls are due
            try:
                self._caller = self.make_caller()
            except EndpointError as exc:
                self._fatal = str(exc)
        workers = [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]
        await self._stop_event.wait()
        # Stop taking prompts; let requests in flight finish and be stored (a finished xdist worker
        # may hold prompts another worker is waiting for), then give back whatever is left.
        self._draining = True
        for worker in workers:
            if worker not in self._busy:
                worker.cancel()
        if self._busy:
            await asyncio.wait(set(self._busy), timeout=DRAIN)
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if self.shared:
            self.store.release_claims(self.run_id, self.pid)
        if self._caller is not None:
            await self._caller.aclose()
        if self.judge_stage is not None:
            await self.judge_stage.aclose()

    # -- the loop side ----------------------------------------------------------------------
    async def _worker(self) -> None:
        assert self._queue is not None
        task = asyncio.current_task()
        assert task is not None
        while not self._draining:
            _, _, key, forced = await self._queue.get()
            with self._lock:
                if self._draining or key in self._outcomes or (key in self._mine and not forced):
                    continue
                if not forced and self.shared and not self.store.try_claim(self.run_id, key, self.pid):
                    continue  # another process of this run has it
                self._mine.add(key)
            self._busy.add(task)
            try:
                outcome = await self._fetch(self.jobs[key])
                self._finish(key, outcome)
            finally:
                self._busy.discard(task)

    async def _fetch(self, job: Job) -> Outcome:
        record, fetched = job.record, False
        if record is None:
            if self._fatal is not None:
                return Outcome(error=f"not requested: {self._fatal}")
            assert self._caller is not None
            try:
                reply, attempts, seconds = await call_with_retries(self._caller, job.prompt, self.retries)
            except EndpointError as exc:
                if exc.fatal:
                    self._fatal = str(exc)
                return Outcome(error=str(exc), fetched=True)
            record = reply.record()
            record["seconds"] = round(seconds, 3)
            record["attempts"] = attempts
            self.store.put(job.key, record)
            fetched = True
        outcome = Outcome(record=record, fetched=fetched)
        key = judge_key(self.judge, job.prompt, record) if self.judge is not None and self.judge_stage else None
        if key is not None:
            assert self.judge_stage is not None
            try:
                outcome.judge, outcome.judge_fetched = await self.judge_stage.judge(key, job.prompt, reply_text(record))
            except EndpointError as exc:
                outcome.judge_error = str(exc)
        return outcome

    def _finish(self, key: str, outcome: Outcome) -> None:
        if self.shared:
            self.store.finish_claim(self.run_id, key, outcome.error or outcome.judge_error)
        with self._lock:
            self._outcomes[key] = outcome
        self._events[key].set()

    def _push(self, key: str, forced: bool) -> None:
        assert self._loop is not None and self._queue is not None
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (-1, -1, key, forced))

    # -- the test side (main thread) ----------------------------------------------------------
    def result(self, key: str) -> Outcome:
        """Block until the reply for `key` is known, from this process or another."""
        event = self._events[key]
        asked = False
        while True:
            if event.is_set():
                return self._outcomes[key]
            with self._lock:
                mine = key in self._mine
            if mine:
                event.wait()
                continue
            if not self.shared:
                if not asked:
                    self._push(key, forced=False)  # jump the queue: a test is waiting for it
                    asked = True
                event.wait(POLL)
                continue
            claim = self.store.claim(self.run_id, key)
            if claim is None:
                if not asked:
                    self._push(key, forced=False)  # jump the queue: a test is waiting for it
                    asked = True
                event.wait(POLL)
                continue
            state, pid, error = claim
            if state == "done":
                record = self.store.get(key)
                if record is not None:
                    # Paid for in this run by another process (only its judgement, if the reply was stored).
                    return Outcome(record=record, fetched=self.jobs[key].record is None)
                error = "the stored reply vanished"
            if state in ("done", "error"):
                return Outcome(error=error)
            if pid != self.pid and not _alive(pid) and self.store.take_over(self.run_id, key, pid, self.pid):
                with self._lock:
                    self._mine.add(key)
                self._push(key, forced=True)  # the claiming process died: fetch it here
                continue
            event.wait(POLL)
