"""A FetchLoop on a thread of the pytest process, for `target:` callables (their conftest state lives there)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from pytest_orbench.fetch.loop import DRAIN, FetchLoop, Job


class ThreadFetcher:
    """A FetchLoop on a thread of this process: for `target:` callables (their conftest state lives here)."""

    def __init__(self, loop: FetchLoop, jobs: list[Job], concurrency: int) -> None:
        self.loop, self.jobs, self.concurrency = loop, jobs, concurrency
        self._thread: threading.Thread | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self.failure: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="orbench-fetch", daemon=True)
        self._thread.start()
        self._ready.wait(30)

    def _run(self) -> None:
        event_loop = asyncio.new_event_loop()
        # Sync callable targets run in threads: as many as requests may be in flight.
        event_loop.set_default_executor(ThreadPoolExecutor(max_workers=self.concurrency,
                                                           thread_name_prefix="orbench-target"))
        self._event_loop = event_loop

        async def main() -> None:
            self._stop = asyncio.Event()
            self._ready.set()
            await self.loop.run(self.jobs, self._stop)

        try:
            event_loop.run_until_complete(main())
        except BaseException as exc:  # noqa: BLE001 - reported to the waiters, never swallowed silently
            self.failure = f"the fetch thread failed: {type(exc).__name__}: {exc}"
        finally:
            self._ready.set()
            event_loop.run_until_complete(event_loop.shutdown_asyncgens())
            event_loop.close()

    def dead(self) -> str | None:
        if self._thread is not None and not self._thread.is_alive():
            return self.failure or "the fetch thread stopped"
        return None

    def stop(self) -> None:
        if self._event_loop is not None and self._stop is not None and self._thread is not None:
            try:
                self._event_loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass  # its loop has already closed
            self._thread.join(timeout=DRAIN + 10)
