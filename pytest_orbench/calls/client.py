"""Endpoint calls: a configuration's caller (a litellm model or a `target:` callable), retried with backoff."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from pytest_orbench.calls.errors import MAX_BACKOFF, EndpointError
from pytest_orbench.calls.litellm_api import LiteLLMCaller
from pytest_orbench.calls.rejections import RUN, Knobs
from pytest_orbench.calls.reply import Reply
from pytest_orbench.calls.scrubbing import hide, scrub, secrets_of
from pytest_orbench.core.endpoint import TARGET_PARAMETERS, LoadError, ModelSpec, load_callable

T = TypeVar("T")
R = TypeVar("R")


class Caller(Protocol):
    async def __call__(self, prompt: str) -> Reply: ...

    async def aclose(self) -> None: ...


class CallableCaller:
    """Calls the user's `(prompt, system_prompt) -> str` function, sync (in a thread) or async."""

    def __init__(self, target: str, system_prompt: str | None, timeout: float) -> None:
        self.system_prompt = system_prompt
        self.timeout = timeout
        self.function = load_target(target)
        self._secrets = secrets_of(None)  # environment values named like secrets, never kept from a reply

    async def aclose(self) -> None:
        pass

    async def __call__(self, prompt: str) -> Reply:
        try:
            result = await asyncio.wait_for(self._call(prompt), self.timeout)
        except TimeoutError:
            raise EndpointError(f"target timed out after {self.timeout:g}s", retryable=True, timed_out=True) from None
        except Exception as exc:
            raised = exc.raised if isinstance(exc, _TargetExit) else exc  # a SystemExit is named as itself
            raise EndpointError(scrub(None, f"target raised {type(raised).__name__}: {raised}"), retryable=True) from None
        if result is None:
            # Most often a function that forgot its `return`: read as an empty reply, every prompt was a refusal.
            raise EndpointError('target returned None, expected str (return "" for an empty reply)', retryable=False,
                                unusable=True)
        if not isinstance(result, str):
            raise EndpointError(f"target returned {type(result).__name__}, expected str", retryable=False, unusable=True)
        return Reply(hide(result, self._secrets), "stop")

    async def _call(self, prompt: str) -> Any:
        # SystemExit and KeyboardInterrupt raised by the user's code (an app that calls sys.exit on an error;
        # a signal reaches only pytest's main thread) become ordinary errors before they reach a task, which
        # would re-raise them out of the fetch loop and stop every call with a traceback. A sync function's
        # come back from its thread here too: _in_daemon_thread carries any BaseException to the await.
        try:
            if _is_async(self.function):
                return await self.function(prompt, self.system_prompt)
            result = await _in_daemon_thread(self.function, prompt, self.system_prompt)
            if inspect.isawaitable(result):  # an async function behind a sync-looking wrapper (a decorator)
                result = await result
            return result
        except (SystemExit, KeyboardInterrupt) as exc:
            raise _TargetExit(exc) from None


async def _in_daemon_thread(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` on a daemon thread, awaited (asyncio.to_thread, but abandoned at exit).

    A sync target that never returns (a socket read without a timeout) is given up on after --orbench-timeout,
    but the thread goes on; an executor's threads are joined when the interpreter exits, so pytest would
    print its summary and then hang until CI's job limit. A daemon thread is left behind instead."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context variables

    def settle(ok: bool, value: Any) -> None:
        if not future.done():  # cancelled when the call timed out
            future.set_result(value) if ok else future.set_exception(value)

    def work() -> None:
        try:
            ok, value = True, context.run(function, *args)
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt too: carried to the await
            ok, value = False, exc
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:
            pass  # the fetch loop has closed: nobody waits for this reply any more

    threading.Thread(target=work, name="orbench-target", daemon=True).start()
    return await future


class _TargetExit(Exception):
    """A SystemExit or KeyboardInterrupt raised by a `target:` function, carried as an ordinary exception."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(str(raised))
        self.raised = raised


def _is_async(function: Any) -> bool:
    """A coroutine function, or an object whose `__call__` is one (`inspect` sees neither through the other)."""
    call = None if inspect.isroutine(function) else type(function).__call__
    return inspect.iscoroutinefunction(function) or (call is not None and inspect.iscoroutinefunction(call))


def load_target(spec: str) -> Callable[..., Any]:
    try:
        return load_callable(spec, "target", TARGET_PARAMETERS)  # type: ignore[no-any-return]
    except LoadError as exc:
        raise EndpointError(str(exc), retryable=False, fatal=True) from exc


def make_caller(system_prompt: str | None, *, spec: ModelSpec | None = None, target: str | None = None,
                timeout: float = 60.0, knobs: Knobs = RUN) -> Caller:
    """The caller of one configuration: the user's function (`target`, `module:attr`) or a model through litellm
    (`knobs`: where its settings are written, the run's or the live base's)."""
    if target:
        return CallableCaller(target, system_prompt, timeout)
    assert spec is not None, "a configuration has a target or a model"
    return LiteLLMCaller(spec, system_prompt, knobs)


def backoff(attempt: int, retry_after: float | None) -> float:
    """Seconds before the next attempt: the server's Retry-After when given, else exponential with jitter."""
    if retry_after is not None:
        return max(0.0, retry_after)
    return float(min(MAX_BACKOFF, 0.5 * 2**attempt) * (0.5 + random.random() / 2))


async def call_with_retries(
    call: Callable[[T], Awaitable[R]], request: T, retries: int,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    should_retry: Callable[[EndpointError], bool] | None = None,
) -> tuple[R, int, float]:
    """(result, attempts, seconds) of `call(request)`. Raises the last EndpointError once retries are
    spent, or at once when `should_retry` says the error is not worth another attempt."""
    start = time.monotonic()
    attempt = 0
    while True:
        try:
            reply = await call(request)
            return reply, attempt + 1, time.monotonic() - start
        except EndpointError as exc:
            if not exc.retryable or attempt >= retries or (should_retry is not None and not should_retry(exc)):
                raise
            await sleep(backoff(attempt, exc.retry_after))
            attempt += 1
