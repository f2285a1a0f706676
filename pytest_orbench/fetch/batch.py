"""Provider batch APIs (--orbench-batch): the prompts a run must ask, sent as JSONL request files
through litellm's batch calls (create_file, create_batch, retrieve_batch, file_content) and polled
until done. Replies land in the store under the keys synchronous calls use, so judging, the gate and
the reports cannot tell the difference.

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
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from pytest_orbench.calls.client import (
    RETRY_STATUSES,
    EndpointError,
    Reply,
    _chain,
    _import_litellm,
    call_with_retries,
    describe_failure,
    hide,
    no_visible_text,
    scrub,
    secrets_of,
)
from pytest_orbench.calls.prices import Price, price_of
from pytest_orbench.core.endpoint import ModelSpec, provider_of, redact_url
from pytest_orbench.core.records import NOT_REQUESTED

if TYPE_CHECKING:
    from pytest_orbench.core.store import Store
    from pytest_orbench.fetch.loop import Job

# Providers whose batches litellm submits in OpenAI's JSONL format (Vertex AI, Bedrock and Anthropic
# take other request files and storage buckets: not supported yet).
PROVIDERS = ("openai", "azure", "hosted_vllm", "litellm_proxy")
MAX_REQUESTS = 50_000  # OpenAI: requests per input file
MAX_BYTES = 190_000_000  # OpenAI: 200 MB per input file, with room to spare
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
# Chat completion parameters that go into each request line; other litellm_kwargs (custom pricing,
# litellm switches) are litellm's own and are not sent.
BODY_PARAMS = frozenset(("temperature max_tokens max_completion_tokens top_p seed stop presence_penalty frequency_penalty "
                         "logit_bias logprobs top_logprobs n response_format reasoning_effort user service_tier tools "
                         "tool_choice parallel_tool_calls").split())
CALL_PARAMS = ("api_version", "organization", "extra_headers")  # litellm_kwargs for the batch calls themselves
CONTENT_FILTER = ("content_filter", "content_policy_violation")


def batch_problem(model: str) -> str | None:
    """Why `model` cannot be asked through a provider batch, or None."""
    provider = provider_of(model)
    if provider in PROVIDERS:
        return None
    if not provider:
        return (f"--orbench-batch submits OpenAI-format batch files through litellm, for {', '.join(PROVIDERS)} models; "
                f"{model!r} names no provider: write it as provider/model (e.g. openai/{model}) or run without "
                "--orbench-batch")
    return (f"--orbench-batch submits OpenAI-format batch files through litellm, for {', '.join(PROVIDERS)} models; "
            f"{model!r} is a model of {provider}, whose batch API is not supported: run it without --orbench-batch")


@dataclass(frozen=True)
class BatchSettings:
    poll: float = 30.0  # seconds between retrievals of a batch
    wait: float = 86400.0  # seconds this session waits for its batches; the rest is collected by the next run
    max_requests: int = MAX_REQUESTS  # request lines per file


class Sink(Protocol):
    """What the batch phase hands its outcomes to (the fetch loop)."""

    spent: float

    def deliver(self, job: Job, record: dict[str, Any]) -> None: ...

    def fail(self, job: Job, error: str, fetched: bool) -> None: ...

    def note(self, text: str | None) -> None: ...


class NoVisibleText(ValueError):
    """A reply that stopped at max_tokens before any text (client.no_visible_text)."""


class Endpoint:
    """litellm's batch calls against one configuration's endpoint, and its request lines."""

    def __init__(self, spec: ModelSpec, system_prompt: str | None, retries: int) -> None:
        self.spec, self.system_prompt, self.retries = spec, system_prompt, retries
        self.secrets = secrets_of(spec)  # a reply that echoes the key is never stored with it
        self.provider = provider_of(spec.model)
        self.name = f"{self.provider} {redact_url(spec.api_base) or 'default'}"  # where its batches can be retrieved
        kwargs = spec.request_kwargs()
        self.common: dict[str, Any] = {"custom_llm_provider": self.provider,
                                       **{k: kwargs[k] for k in CALL_PARAMS if k in kwargs}}
        if spec.api_base:
            self.common["api_base"] = spec.api_base
        if spec.api_key:
            self.common["api_key"] = spec.api_key
        self.params = {k: v for k, v in kwargs.items() if k in BODY_PARAMS}
        if isinstance(kwargs.get("extra_body"), dict):
            self.params.update(kwargs["extra_body"])
        self.model = spec.model.split("/", 1)[1] if "/" in spec.model else spec.model

    def line(self, key: str, prompt: str) -> bytes:
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        body = {"model": self.model, "messages": messages, **self.params}
        request = {"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body}
        return (json.dumps(request, ensure_ascii=False) + "\n").encode("utf-8")

    def record(self, body: dict[str, Any], batch_id: str) -> dict[str, Any]:
        """A reply record from a batch's output line, as a synchronous call stores it (plus its batch id)."""
        try:
            choice = body["choices"][0]
            text, finish = choice["message"].get("content") or "", choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed reply in batch {batch_id} (no choices): {exc}") from None
        cut = no_visible_text(text, finish, self.params.get("max_tokens"))
        if cut is not None:
            raise NoVisibleText(cut)
        usage = body.get("usage") or {}
        prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        fingerprint = body.get("system_fingerprint")
        record = Reply(hide(str(text), self.secrets), finish, body.get("model"), prompt_tokens, completion_tokens,
                       self.cost(prompt_tokens, completion_tokens),
                       fingerprint if isinstance(fingerprint, str) and fingerprint else None).record()
        record["batch_id"] = batch_id
        return record

    @cached_property
    def price(self) -> Price | None:
        return price_of(self.spec.model, self.spec.call_kwargs)

    def cost(self, prompt_tokens: Any, completion_tokens: Any) -> float | None:
        """USD at the batch price (litellm's table, or *_batches custom pricing); the synchronous price
        when no batch price is listed (an upper bound); None without a price."""
        price = self.price
        if price is None or not isinstance(prompt_tokens, int) or not isinstance(completion_tokens, int):
            return None
        return price.cost(prompt_tokens, completion_tokens, batch=True)

    async def _call(self, what: str, name: str, **kwargs: Any) -> Any:
        """One litellm batch call, retried on transient failures like a completion (an endpoint that
        cannot be reached is not waited for: a poll that meets one is repeated at the next poll anyway)."""
        call = getattr(_import_litellm(), name)

        async def attempt(_: None) -> Any:
            try:
                return await call(**kwargs, **self.common)
            except Exception as exc:  # noqa: BLE001 - mapped onto what happened, as for completions
                # litellm's batch calls raise the OpenAI SDK's own exceptions: a rejected key by class name
                auth = any(type(e).__name__ in ("AuthenticationError", "PermissionDeniedError") for e in _chain(exc))
                failure = describe_failure(exc, self.spec.api_base, self.spec.timeout)
                raise EndpointError(f"{what} failed: {scrub(self.spec, str(failure))}",
                                    retryable=failure.retryable and not auth, retry_after=failure.retry_after,
                                    fatal=auth, unreachable=failure.unreachable) from None

        result, _, _ = await call_with_retries(attempt, None, self.retries, should_retry=lambda e: not e.unreachable)
        return result

    async def submit(self, data: bytes) -> tuple[str, str, str]:
        """(batch id, input file id, status) of a new batch of these request lines."""
        uploaded = await self._call("uploading the batch file", "acreate_file",
                                    file=("pytest-orbench-batch.jsonl", data), purpose="batch")
        batch = await self._call("creating the batch", "acreate_batch", completion_window="24h",
                                 endpoint="/v1/chat/completions", input_file_id=uploaded.id,
                                 metadata={"created_by": "pytest-orbench"})
        return str(batch.id), str(uploaded.id), str(batch.status)

    async def retrieve(self, batch_id: str) -> Any:
        return await self._call(f"retrieving batch {batch_id}", "aretrieve_batch", batch_id=batch_id)

    async def lines(self, file_id: str | None) -> dict[str, dict[str, Any]]:
        """A batch output or error file, by custom_id."""
        if not file_id:
            return {}
        content = await self._call(f"downloading file {file_id}", "afile_content", file_id=file_id)
        found: dict[str, dict[str, Any]] = {}
        for text in bytes(content.content).decode("utf-8").splitlines():
            if text.strip():
                line = json.loads(text)
                found[str(line.get("custom_id"))] = line
        return found


@dataclass
class Active:
    endpoint: Endpoint
    keys: list[str]
    status: str
    counts: dict[str, Any] = field(default_factory=dict)
    failures: int = 0  # retrievals in a row that failed


class BatchPhase:
    """Asks every job through provider batches: resumes the open batches that hold them, submits the
    rest, polls, collects, resubmits what is missing; every job ends delivered or failed."""

    def __init__(self, store: Store, endpoints: list[Endpoint], settings: BatchSettings, retries: int,
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

    async def _submit(self, endpoint: Endpoint, jobs: list[Job], sink: Sink) -> None:
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

    def _chunks(self, endpoint: Endpoint, jobs: list[Job]) -> list[list[tuple[Job, bytes]]]:
        chunks: list[list[tuple[Job, bytes]]] = [[]]
        size = 0
        for job in jobs:
            line = endpoint.line(job.key, job.prompt)
            if chunks[-1] and (len(chunks[-1]) >= self.settings.max_requests or size + len(line) > MAX_BYTES):
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
        active.status = str(batch.status)
        counts: Any = getattr(batch, "request_counts", None)
        active.counts = counts.model_dump() if hasattr(counts, "model_dump") else dict(counts or {})
        self.store.batch_status(batch_id, active.status, active.counts)
        if active.status in TERMINAL:
            del self.active[batch_id]
            await self._collect(batch_id, active, batch, sink)

    async def _collect(self, batch_id: str, active: Active, batch: Any, sink: Sink) -> None:
        endpoint = active.endpoint
        try:
            output = await endpoint.lines(getattr(batch, "output_file_id", None))
            errors = await endpoint.lines(getattr(batch, "error_file_id", None))
        except (EndpointError, ValueError) as exc:
            for key in active.keys:
                if key in self.waiting:
                    self._fail(self.waiting[key], f"batch {batch_id} is {active.status}, but its results could not "
                                                  f"be read ({exc}); run again to collect them", sink, True)
            return
        records: list[tuple[str, dict[str, Any]]] = []
        problems: dict[str, tuple[str, bool]] = {}  # key -> (what happened, worth another batch)
        for key, line in output.items():
            response = line.get("response") or {}
            if response.get("status_code") == 200:
                try:
                    records.append((key, endpoint.record(response.get("body") or {}, batch_id)))
                    continue
                except ValueError as exc:
                    problems[key] = (str(exc), not isinstance(exc, NoVisibleText))  # another batch would say the same
            else:
                errors.setdefault(key, line)
        for key, line in errors.items():
            if _filtered(line):
                records.append((key, {**Reply("", "content_filter").record(), "batch_id": batch_id}))
            else:
                problems.setdefault(key, _problem(line, batch_id))
        # Stored with the mark that the batch is done: a run killed here loses nothing and polls nothing.
        self.store.collect_batch(batch_id, active.status, records)
        for key, record in records:
            job = self.waiting.pop(key, None)
            if job is not None:
                sink.deliver(job, record)
        failed = active.status == "failed"
        detail = _batch_errors(batch) if failed else ""
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


def _filtered(line: dict[str, Any]) -> bool:
    """A request the provider's content filter refused: a reply with finish_reason content_filter, as
    in a synchronous run."""
    body = (line.get("response") or {}).get("body") or {}
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get("code") in CONTENT_FILTER


def _problem(line: dict[str, Any], batch_id: str) -> tuple[str, bool]:
    """What happened to one failed request line, and whether another batch may succeed."""
    error = line.get("error")
    if isinstance(error, dict) and error.get("code") == "batch_expired":
        return f"batch {batch_id} expired before this request ran", True
    response = line.get("response") or {}
    status = response.get("status_code")
    body = response.get("body") or {}
    message = body.get("error", {}).get("message") if isinstance(body, dict) and isinstance(body.get("error"), dict) \
        else None
    if isinstance(status, int):
        transient = status in RETRY_STATUSES or status >= 500
        return f"HTTP {status} in batch {batch_id}: {' '.join(str(message or 'no message').split())[:300]}", transient
    if isinstance(error, dict):
        return f"batch {batch_id} request failed: {error.get('code')}: {error.get('message')}", True
    return f"batch {batch_id} returned a line without a response", True


def _batch_errors(batch: Any) -> str:
    errors = getattr(batch, "errors", None)
    data = getattr(errors, "data", None) or (errors.get("data") if isinstance(errors, dict) else None) or []
    messages = [str(getattr(e, "message", None) or (e.get("message") if isinstance(e, dict) else e)) for e in data]
    return (": " + "; ".join(messages)[:300]) if messages else ""


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
