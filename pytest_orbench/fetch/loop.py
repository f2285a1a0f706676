"""The run's one fetch loop: every job asked, judged and committed to the store with its outcome.

One process fetches for the whole session: the xdist controller (or the only pytest process) starts
it, in a child process for litellm endpoints (fetch/child.py) or on a thread for a `target:` callable
(fetch/thread.py). It asks the endpoint for every job, `concurrency` at a time, runs the LLM judge right
after each reply, and commits replies, judgements and per-prompt outcomes to the store in small batches,
where every pytest process waits for them (fetch/wait.py).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pytest_orbench.calls.client import Caller, call_with_retries
from pytest_orbench.calls.errors import EndpointError
from pytest_orbench.core.records import NOT_REQUESTED
from pytest_orbench.core.store import Store
from pytest_orbench.core.store_database import unusable
from pytest_orbench.fetch.gate import Gate, Turn, rejection
from pytest_orbench.judging.judges import Judge
from pytest_orbench.judging.llm_calls import JudgeStage, judge_key, reply_text

BATCH_SECONDS = 0.05  # replies and outcomes are committed together at most this late
HEARTBEAT_SECONDS = 1.0  # the loop says it is alive (and how far it got) this often
DRAIN = 60.0  # seconds a stop waits for requests already in flight (paid for: keep them)
UNUSABLE_STOP = 5  # this many replies without text (max_tokens too low) before any usable one: stop calling
# This many prompts in a row whose every attempt failed in a way another attempt might have mended (unreachable:
# connection refused, DNS, TLS; timed out; a 429, 5xx or malformed reply; a target that raised), with no reply
# between them: the endpoint went away (a server stopped mid-run), hung, or is down (a 503 outage). Each such
# prompt spent its retries' backoff (~4-8 s at the default 4), or (retries + 1) timeouts, so a blip is over long
# before; without this stop every remaining prompt spent them too (200 prompts at concurrency 4: 4 minutes of
# refused connections; 1,974 prompts hung at concurrency 8: ~20 hours; 100 prompts against a 503 outage: 500
# requests). Failures between replies (a burst of 503s, prompts slower than the timeout) reset nothing: each
# is retried and counted as before.
GONE_STOP = 5
# This many prompts in a row, none answered, that got the same HTTP 4xx (a 400 the plugin cannot read as a parameter
# it sent): the request as configured is rejected, whatever the prompt. The first call of a configuration goes alone,
# and so does each after a 4xx until one is answered (Gate), so such a run sends this many requests, not a
# concurrency's worth.
REJECTED_STOP = 3
# A retry wait this long (an endpoint's Retry-After of 60 s, a long backoff) is noted in the run's state, so the
# progress line says the run waits rather than an ETA of 2 s made from the rate before the wait.
LONG_WAIT = 5.0
RETRY_WAIT = "retry-wait "  # the note's prefix: "retry-wait <requests waiting> <epoch seconds the last one wakes>"
STOPPING = "stopping"  # the note once the loop has taken a stop: no prompt is asked after it


@dataclass(frozen=True)
class Job:
    key: str
    prompt: str
    index: int
    record: dict[str, Any] | None = None  # the stored reply, when only its LLM judgement is missing
    config: int = 0  # which configuration asks it: 0 the one under test, 1 the live base
    fetched: bool = False  # `record` was paid for in this run (a provider batch's reply, judged next)


class Batcher(Protocol):
    """Asks the jobs through provider batches (batch.BatchPhase), handing each outcome to the loop."""

    async def run(self, jobs: list[Job], stop: asyncio.Event, sink: Any) -> None: ...


@dataclass(slots=True)
class Outcome:
    """What a test gets: a reply record (and its LLM judge record), or the error that remained after the retries."""

    record: dict[str, Any] | None = None
    error: str | None = None
    fetched: bool = False  # paid for in this run
    judge: dict[str, Any] | None = None  # the LLM judge's stored reply, when the judge needed one
    judge_error: str | None = None
    judge_fetched: bool = False


class FetchLoop:
    """Fetches and judges every job once; writes the outcomes; never leaves a job without one."""

    def __init__(self, store: Store, make_caller: Callable[[int], Caller], *, run_id: str, concurrency: int,
                 retries: int, judge: Judge | None = None, judge_stage: JudgeStage | None = None,
                 shard: int = 0, shards: int = 1, max_cost: float | None = None,
                 batcher: Batcher | None = None) -> None:
        self.store = store
        self.batcher = batcher  # --orbench-batch: replies come from provider batches, judge calls from here
        self.max_cost = max_cost  # USD this loop may spend (--orbench-max-cost, split between fetch processes)
        self.spent = 0.0
        self.shard, self.shards = shard, shards
        self.make_caller = make_caller
        self.run_id = run_id
        self.concurrency = concurrency
        self.retries = retries
        self.judge = judge
        self.judge_stage = judge_stage
        self._callers: dict[int, Caller] = {}
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._fatal: str | None = None  # stops every call: the loop failed, or the spend limit was reached
        # Per configuration (0 the one under test, 1 the live base), which have their own endpoints: replies
        # that came back (after one, a refused connection is a blip, not a dead endpoint), and why one is dead.
        self._answered: Counter[int] = Counter()
        self._dead: dict[int, str] = {}
        self._unusable: Counter[int] = Counter()  # replies with no text at max_tokens while none was usable
        self._failing: Counter[int] = Counter()  # prompts in a row that failed every attempt since the last reply (GONE_STOP)
        self._rejected: dict[int, tuple[str, int]] = {}  # the same 4xx on prompts in a row, none answered (REJECTED_STOP)
        self._gates: dict[int, Gate] = {}
        self._stop = asyncio.Event()  # run()'s: a prompt that waited for its turn at a gate is not asked after it
        self._waking: dict[int, float] = {}  # id of each long retry wait -> when it ends (epoch seconds)
        self._last_answer: dict[int, float] = {}  # monotonic time of each configuration's last reply
        self._pending_records: list[tuple[str, dict[str, Any]]] = []
        self._pending_outcomes: list[tuple[str, Outcome]] = []
        self._done = 0
        self._errors = 0

    async def run(self, jobs: list[Job], stop: asyncio.Event | None = None) -> None:
        """Every job ends with an outcome row, whatever happens (a crash here becomes each job's error)."""
        stop = self._stop = stop or asyncio.Event()
        self.store.start_run(self.run_id, len(jobs), self.shard, self.shards)
        queue = self._queue
        misses = [job for job in jobs if job.record is None]
        for job in jobs if self.batcher is None else [job for job in jobs if job.record is not None]:
            queue.put_nowait(job)
        flusher = asyncio.create_task(self._flush_periodically())
        try:
            for config in sorted({job.config for job in misses} if self.batcher is None else ()):  # else judge calls only
                try:
                    self._callers[config] = self.make_caller(config)
                except EndpointError as exc:
                    self._dead[config] = str(exc)  # that configuration's prompts only
            if self.batcher is not None and misses:
                # The replies first (they come back together), then the judge calls they need, as below.
                await self.batcher.run(misses, stop, self)
            workers = [asyncio.create_task(self._worker(queue, stop)) for _ in range(min(self.concurrency, len(jobs)) or 1)]
            stopper = asyncio.create_task(stop.wait())
            pending: set[asyncio.Task[Any]] = {*workers, stopper}
            while not stopper.done() and any(not w.done() for w in workers):
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(not w.done() for w in workers):  # asked to stop: requests in flight finish (paid for)
                self._note_stop()
                await asyncio.wait(workers, timeout=DRAIN)
            stopper.cancel()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        except Exception as exc:  # a bug must not leave tests waiting: every job not done becomes an error
            self._fatal = self._fatal or f"the fetch loop failed: {type(exc).__name__}: {exc}"
        finally:
            reason = self._fatal or "the run stopped before this prompt was asked"
            while not queue.empty():
                job = queue.get_nowait()
                self._finish(job, Outcome(error=f"{NOT_REQUESTED}{reason}"))
            flusher.cancel()
            try:
                self._flush()
                self.store.finish_run(self.run_id, self._fatal, self.shard)
            except (OSError, sqlite3.Error) as exc:  # the waiters learn it from the fetcher's death, at once
                raise unusable(self.store.directory, exc) from exc
            finally:
                for caller in self._callers.values():
                    await caller.aclose()
                if self.judge_stage is not None:
                    await self.judge_stage.aclose()

    # -- what a batcher hands back -----------------------------------------------------------------
    def deliver(self, job: Job, record: dict[str, Any]) -> None:
        """A reply a provider batch returned (already stored): judged, then its outcome is written."""
        self._answered[job.config] += 1
        self.spent += float(record.get("cost") or 0.0)
        self._queue.put_nowait(replace(job, record=record, fetched=True))

    def fail(self, job: Job, error: str, fetched: bool) -> None:
        self._finish(job, Outcome(error=error, fetched=fetched))

    def note(self, text: str | None) -> None:
        self.store.note(self.run_id, text, self.shard)

    async def _retry_wait(self, seconds: float) -> None:
        """The wait before a retry; a long one is noted for the progress line while it lasts."""
        if seconds < LONG_WAIT:
            await asyncio.sleep(seconds)
            return
        token = object()
        self._waking[id(token)] = time.time() + seconds
        self._note_waits()
        try:
            await asyncio.sleep(seconds)
        finally:
            del self._waking[id(token)]
            self._note_waits()

    def _note_stop(self) -> None:
        """The stop, as this loop took it, said in the run's state (STOPPING): from then on no prompt is asked, and
        the requests in flight are waited for (DRAIN). What a test waits for before letting replies through."""
        self._say(STOPPING)

    def _note_waits(self) -> None:
        if self._stop.is_set():
            return  # the note says the stop (nobody shows the progress line after it)
        self._say(f"{RETRY_WAIT}{len(self._waking)} {max(self._waking.values()):.1f}" if self._waking else None)

    def _say(self, text: str | None) -> None:
        """A note for the progress line, or None: only a word, so the store's trouble is left to the next flush,
        which meets it and says it."""
        try:
            self.note(text)
        except (OSError, sqlite3.Error):
            pass

    async def _worker(self, queue: asyncio.Queue[Job], stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                job = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                outcome = await self._fetch(job)
            except Exception as exc:  # a bug, not an endpoint failure: this prompt and all not yet asked
                self._fatal = self._fatal or f"the fetch loop failed: {type(exc).__name__}: {exc}"
                outcome = Outcome(error=self._fatal)
            self._finish(job, outcome)

    async def _fetch(self, job: Job) -> Outcome:
        record, fetched = job.record, job.fetched
        if record is None:
            if self.max_cost is not None and self.spent >= self.max_cost and self._fatal is None:
                self._fatal = (f"the run's spend reached the --orbench-max-cost limit (${self.spent:.4f} of "
                               f"${self.max_cost:.4f}{' for this fetch process' if self.shards > 1 else ''}); "
                               "what was paid for is stored")
            try:
                turn = await self._gates.setdefault(job.config, Gate()).enter()
            except asyncio.CancelledError:  # the run stopped while this prompt waited for its turn: never sent
                self._finish(job, Outcome(error=f"{NOT_REQUESTED}the run stopped before this prompt was asked"))
                raise
            try:
                return await self._ask(job, turn)
            finally:
                turn.done(False)
        return await self._judged(job, record, fetched)

    async def _ask(self, job: Job, turn: Turn) -> Outcome:
        """One prompt asked of its configuration's endpoint, with retries, then judged. A call that went alone
        (Gate) opens the calls once the endpoint has shown that it takes them."""
        # A dead endpoint stops the calls of its own configuration: a live base that cannot be reached
        # leaves the run under test asking its own endpoint, and the other way round.
        stopped = self._fatal or self._dead.get(job.config)
        if stopped is not None:
            return Outcome(error=f"{NOT_REQUESTED}{stopped}")
        if self._stop.is_set():
            return Outcome(error=f"{NOT_REQUESTED}the run stopped before this prompt was asked")
        caller = self._callers[job.config]
        started = time.monotonic()

        def retry(exc: EndpointError) -> bool:
            turn.done(True)  # a failure another attempt may mend (a 429, a 5xx, a timeout): the endpoint takes calls
            return job.config not in self._dead and exc.worth_retrying(self._answered[job.config])

        try:
            reply, attempts, seconds = await call_with_retries(caller, job.prompt, self.retries, sleep=self._retry_wait,
                                                               should_retry=retry)
        except EndpointError as exc:
            # A prompt whose every attempt timed out, with nothing answered yet: a hung endpoint (it took
            # retries x timeout per prompt, hours for a run); an endpoint that answers some goes on.
            # A timeout of the call that went alone (no retry: the gate never opened) says less than it did when
            # `concurrency` prompts started together and none answered: the others are asked first.
            if exc.ends_calls(self._answered[job.config]) and not (turn.alone and exc.timed_out and not exc.fatal):
                why = ("no prompt was answered, so no more calls are made" if not self._answered[job.config]
                       else "so no more calls are made to it")
                self._dead.setdefault(job.config, f"{exc} ({why})")
            # Every attempt failed, and another might have mended it: the retries are spent (a non-retryable
            # error, a 400 of this prompt, says nothing of the endpoint).
            gone = exc.unreachable or exc.timed_out or exc.retryable
            # In a row means with no reply between: a prompt during which another was answered (half the
            # prompts hang, a trickle of faults under concurrency) says the endpoint still answers.
            if not gone:
                self._failing[job.config] = 0
            elif started >= self._last_answer.get(job.config, 0.0):
                self._failing[job.config] += 1
            if self._failing[job.config] >= GONE_STOP:
                answered, failed = self._answered[job.config], self._failing[job.config]
                self._dead.setdefault(job.config, f"{exc} (" + (
                    f"it had answered {answered} prompts, then {failed} prompts in a row" if answered else
                    f"no prompt was answered: {failed} prompts in a row") + " failed every attempt, so no more "
                    "calls are made to it)")
            self._unusable[job.config] += exc.unusable and not self._answered[job.config]
            if self._unusable[job.config] >= UNUSABLE_STOP:
                self._dead.setdefault(job.config, f"{exc} (so did the first {self._unusable[job.config]} replies, "
                                                  "and none had text, so no more calls are made)")
            self._noterejection(job.config, exc)
            # A request the endpoint rejected (a 4xx not worth another attempt), or a fatal error, keeps the calls
            # one at a time (the next finds them stopped, or goes alone); anything else opens them.
            turn.done(not exc.fatal and not rejection(exc))
            return Outcome(error=str(exc), fetched=exc.sent)
        self._answered[job.config] += 1
        self._rejected.pop(job.config, None)
        turn.done(True)
        self._failing[job.config] = 0
        self._last_answer[job.config] = time.monotonic()
        record = reply.record()
        record["seconds"] = round(seconds, 3)
        record["attempts"] = attempts
        self.spent += float(record.get("cost") or 0.0)
        self._pending_records.append((job.key, record))
        return await self._judged(job, record, True)

    def _noterejection(self, config: int, exc: EndpointError) -> None:
        """REJECTED_STOP: the same 4xx on the first prompts, none answered, stops the calls, saying so."""
        if exc.fatal or not rejection(exc) or self._answered[config]:
            self._rejected.pop(config, None)
            return
        # The same error whatever the prompt: a 400 that quotes each prompt back is still the same 400 (its gist).
        gist, count = self._rejected.get(config, (exc.gist, 0))
        count = count + 1 if gist == exc.gist else 1
        self._rejected[config] = (exc.gist, count)
        if count >= REJECTED_STOP:
            self._dead.setdefault(config, f"{exc} (so did the first {count} prompts, the same each time, and none was "
                                          "answered: the endpoint rejects the request as configured, whatever the prompt "
                                          "(a parameter, the model's name, litellm_kwargs?), so no more calls are made)")

    async def _judged(self, job: Job, record: dict[str, Any], fetched: bool) -> Outcome:
        """The LLM judge's call for a reply, when its judge needs one."""
        outcome = Outcome(record=record, fetched=fetched)
        key = judge_key(self.judge, job.prompt, record) if self.judge is not None and self.judge_stage else None
        if key is not None:
            assert self.judge_stage is not None
            try:
                outcome.judge, outcome.judge_fetched = await self.judge_stage.judge(key, job.prompt, reply_text(record))
                if outcome.judge_fetched and outcome.judge is not None:
                    self.spent += float(outcome.judge.get("cost") or 0.0)
            except EndpointError as exc:
                outcome.judge_error = str(exc)
        return outcome

    def _finish(self, job: Job, outcome: Outcome) -> None:
        self._pending_outcomes.append((job.key, outcome))
        self._done += 1
        self._errors += bool(outcome.error or outcome.judge_error)

    def _flush(self) -> None:
        if self._pending_records or self._pending_outcomes:
            records, outcomes = self._pending_records, self._pending_outcomes
            self._pending_records, self._pending_outcomes = [], []
            try:
                self.store.commit_batch(self.run_id, records, [
                    (key, o.error, o.judge_error, o.fetched, o.judge_fetched) for key, o in outcomes], self._done,
                    self._errors, self.shard)
            except BaseException:
                # Not committed: kept for the next attempt (the disk may have room again by then).
                self._pending_records[:0], self._pending_outcomes[:0] = records, outcomes
                raise
        else:
            self.store.heartbeat(self.run_id, self._done, self._errors, self.shard)

    async def _flush_periodically(self) -> None:
        last_beat = 0.0
        while True:
            await asyncio.sleep(BATCH_SECONDS)
            # From the loop itself: a loop that hangs stops the heartbeat, and the waiters notice.
            if self._pending_outcomes or time.monotonic() - last_beat > HEARTBEAT_SECONDS:
                try:
                    self._flush()
                except (OSError, sqlite3.Error) as exc:
                    # A full disk, a folder gone read-only: a reply now would be paid for and lost.
                    self._fatal = self._fatal or (f"{unusable(self.store.directory, exc)}; no more calls are made, "
                                                  "since their replies could not be kept")
                    await asyncio.sleep(HEARTBEAT_SECONDS)  # tried again, with the calls in flight, at the end
                last_beat = time.monotonic()
