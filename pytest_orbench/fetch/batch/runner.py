"""The batch runner of --orbench-batch: the prompts a run must ask, sent through the provider's batch
API (batch/provider.py) and polled until done. Replies land in the store under the keys synchronous
calls use, so judging, the gate and the reports cannot tell the difference.

Each batch is written to the store (id, endpoint, the keys it asks for) as soon as the provider
accepts it: a session that is interrupted, or stops waiting (--orbench-batch-wait), leaves it there,
and the next run polls the same batch instead of submitting (and paying for) the prompts again, unless
it was submitted longer ago than --orbench-store-max-age (its replies would be too old to use). A
batch that expires or is cancelled, and requests that fail with a transient error (5xx, 429), are
followed by a new batch of the missing prompts only, up to --orbench-retries times; other per-request
failures (HTTP 400, ...) become those prompts' errors, as in a synchronous run.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pytest_orbench.calls.errors import EndpointError
from pytest_orbench.core.records import NOT_REQUESTED

if TYPE_CHECKING:
    from pytest_orbench.core.store import Store
    from pytest_orbench.fetch.batch.provider import BatchProvider
    from pytest_orbench.fetch.loop import Job


@dataclass(frozen=True)
class BatchSettings:
    poll: float  # seconds between retrievals of a batch
    wait: float  # seconds this session waits for its batches; the rest is collected by the next run
    max_requests: int  # request lines per file (--orbench-batch-max-requests)


class Sink(Protocol):
    """What the batch phase hands its outcomes to (the fetch loop)."""

    spent: float

    def deliver(self, job: Job, record: dict[str, Any]) -> None: ...

    def fail(self, job: Job, error: str, fetched: bool) -> None: ...

    def note(self, text: str | None) -> None: ...


@dataclass
class Active:
    endpoint: BatchProvider
    keys: list[str]
    status: str
    counts: dict[str, Any] = field(default_factory=dict)
    failures: int = 0  # retrievals in a row that failed


class BatchPhase:
    """Asks every job through provider batches: resumes the open batches that hold them, submits the
    rest, polls, collects, resubmits what is missing; every job ends delivered or failed."""

    def __init__(self, store: Store, endpoints: list[BatchProvider], settings: BatchSettings, retries: int,
                 max_cost: float | None = None, max_age: float | None = None) -> None:
        self.store, self.endpoints, self.settings = store, endpoints, settings
        self.retries, self.max_cost = retries, max_cost
        self.max_age = max_age  # --orbench-store-max-age: an open batch older than this is not resumed
        self.active: dict[str, Active] = {}
        self.waiting: dict[str, Job] = {}
        self.submissions: Counter[str] = Counter()  # key -> batches it was put in by this run
        self.last_problem: dict[str, str] = {}

    async def run(self, jobs: list[Job], stop: asyncio.Event, sink: Sink) -> None:
        deadline = time.monotonic() + self.settings.wait
        self.waiting = {job.key: job for job in jobs}
        for config, endpoint in enumerate(self.endpoints):
            mine = [job for job in jobs if job.config == config]
            if not mine:
                continue
            left = {job.key for job in mine}
            for batch_id, keys in self.store.open_batches(endpoint.name, self.max_age):
                if left.intersection(keys):
                    self.active[batch_id] = Active(endpoint, keys, "submitted earlier")
                    left.difference_update(keys)
            await self._submit(endpoint, [job for job in mine if job.key in left], sink)
        while self.active and not stop.is_set() and time.monotonic() < deadline:
            for batch_id in list(self.active):
                await self._poll(batch_id, sink)
            sink.note(self._note(deadline))
            if self.active:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=max(0.0, min(self.settings.poll,
                                                                             deadline - time.monotonic())))
                except TimeoutError:
                    pass
        why = ("the run stopped" if stop.is_set() else
               f"this session stopped waiting after {_duration(self.settings.wait)} (--orbench-batch-wait)")
        where = {key: batch_id for batch_id, active in self.active.items() for key in active.keys}
        for key, job in list(self.waiting.items()):
            if key in where:
                batch_id = where[key]
                sink.fail(job, f"not answered yet: {why} while batch {batch_id} was {self.active[batch_id].status}; "
                               "run again to collect it (it is not submitted again)", True)
            else:
                sink.fail(job, self.last_problem.get(key, f"{NOT_REQUESTED}{why}"), False)
        self.waiting.clear()
        sink.note(None)

    def _note(self, deadline: float) -> str:
        states = Counter(a.status for a in self.active.values())
        done = sum(int(a.counts.get("completed") or 0) for a in self.active.values())
        total = sum(int(a.counts.get("total") or 0) or len(a.keys) for a in self.active.values())
        left = max(0.0, deadline - time.monotonic())
        return (f"{len(self.active)} batch{'es' if len(self.active) != 1 else ''} "
                f"({', '.join(f'{n} {s}' for s, n in sorted(states.items()))}): {done}/{total} requests done, "
                f"{len(self.waiting)} replies awaited; polled every {self.settings.poll:g} s, "
                f"waiting up to {_duration(left)} more")

    async def _submit(self, endpoint: BatchProvider, jobs: list[Job], sink: Sink) -> None:
        if not jobs:
            return
        if self.max_cost is not None and sink.spent >= self.max_cost:
            for job in jobs:
                self._fail(job, f"{NOT_REQUESTED}the run's spend reached the --orbench-max-cost limit "
                                f"(${sink.spent:.4f} of ${self.max_cost:.4f}); what was paid for is stored", sink, False)
            return
        fatal: str | None = None  # a rejected key: the other files are not tried
        for chunk in self._chunks(endpoint, jobs):
            try:
                if fatal is not None:
                    raise EndpointError(fatal, retryable=False, fatal=True)
                batch_id, file_id, status = await endpoint.submit(b"".join(line for _, line in chunk))
            except EndpointError as exc:
                fatal = str(exc) if exc.fatal else None
                for job, _ in chunk:
                    self._fail(job, str(exc), sink, False)
                continue
            keys = [job.key for job, _ in chunk]
            self.store.add_batch(batch_id, endpoint.name, file_id, keys, status)
            self.active[batch_id] = Active(endpoint, keys, status)
            self.submissions.update(keys)

    def _chunks(self, endpoint: BatchProvider, jobs: list[Job]) -> list[list[tuple[Job, bytes]]]:
        chunks: list[list[tuple[Job, bytes]]] = [[]]
        size = 0
        for job in jobs:
            line = endpoint.line(job.key, job.prompt)
            if chunks[-1] and (len(chunks[-1]) >= self.settings.max_requests or size + len(line) > endpoint.max_bytes):
                chunks.append([])
                size = 0
            chunks[-1].append((job, line))
            size += len(line)
        return [c for c in chunks if c]

    def _fail(self, job: Job, error: str, sink: Sink, fetched: bool) -> None:
        if self.waiting.pop(job.key, None) is not None:
            sink.fail(job, error, fetched)

    async def _poll(self, batch_id: str, sink: Sink) -> None:
        active = self.active[batch_id]
        try:
            batch = await active.endpoint.retrieve(batch_id)
        except EndpointError as exc:
            active.failures += 1
            if exc.fatal or active.failures > self.retries:
                del self.active[batch_id]  # left open in the store: the next run tries again
                for key in active.keys:
                    if key in self.waiting:
                        self._fail(self.waiting[key], f"{exc}; run again to collect batch {batch_id} (it is not "
                                                      "submitted again)", sink, True)
            return
        active.failures = 0
        active.status, active.counts = active.endpoint.progress(batch)
        self.store.batch_status(batch_id, active.status, active.counts)
        if active.status in active.endpoint.terminal:
            del self.active[batch_id]
            await self._collect(batch_id, active, batch, sink)

    async def _collect(self, batch_id: str, active: Active, batch: Any, sink: Sink) -> None:
        endpoint = active.endpoint
        try:
            output, errors = await endpoint.download(batch)
        except (EndpointError, ValueError) as exc:
            for key in active.keys:
                if key in self.waiting:
                    self._fail(self.waiting[key], f"batch {batch_id} is {active.status}, but its results could not "
                                                  f"be read ({exc}); run again to collect them", sink, True)
            return
        records, problems = endpoint.interpret(output, errors, batch_id)  # problems: (what happened, worth another batch)
        # Stored with the mark that the batch is done: a run killed here loses nothing and polls nothing.
        self.store.collect_batch(batch_id, active.status, records)
        for key, record in records:
            job = self.waiting.pop(key, None)
            if job is not None:
                sink.deliver(job, record)
        failed = active.status == "failed"
        detail = endpoint.batch_errors(batch) if failed else ""
        again: dict[int, list[Job]] = {}
        for key in active.keys:
            job = self.waiting.get(key)
            if job is None:
                continue
            problem, transient = problems.get(key) or (
                f"batch {batch_id} was {active.status} before this request ran", active.status in ("expired", "cancelled"))
            if failed:
                problem, transient = f"batch {batch_id} failed{detail}", False
            if transient and self.submissions[key] <= self.retries:
                self.last_problem[key] = problem
                again.setdefault(job.config, []).append(job)
            else:
                tries = self.submissions[key]
                self._fail(job, problem + (f" (asked in {tries} batches)" if transient and tries > 1 else ""), sink, True)
        for config, jobs in again.items():
            await self._submit(self.endpoints[config], jobs, sink)


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
