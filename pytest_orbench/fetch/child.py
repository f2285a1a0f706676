"""The fetch child: a process of its own for litellm endpoints, so litellm's CPU work gets a core
instead of sharing the pytest process's GIL.

The parent (FetchChild) starts `python -m pytest_orbench.fetch.child` as soon as it knows a call may be
needed (at pytest_configure, while pytest collects); the child imports litellm first, and what
litellm's first call would import, and nothing of pytest or yaml. Once the prompts are known (at
configure when nothing can deselect one, otherwise after collection) the parent sends one frame with
what to fetch (a FetchFrame: store folder, run id, the endpoints' ModelSpecs, jobs, ...), or ("exit",)
when nothing needs a call; the child reads it on a thread while litellm imports, so the parent's write
never waits for the import. The child runs the FetchLoop, which commits replies and outcomes to the
store; tests read them there (fetch.wait.Waiter).

A large run is split between the child and copies of it forked once the work arrives (litellm
imported once, before any thread exists): each takes every n-th prompt text (shard_jobs) and its part
of the concurrency; one that dies has its prompts turned into errors at once, and the child ends after
all of them.

("stop",) or end of input (the parent died) stops new calls; the requests in flight finish and are
stored first (bounded), so nothing paid for is lost. Signals sent to pytest's whole process group
(Ctrl-C, a CI cancel) are ignored here: only the parent stops the child. Once every outcome is
committed the child leaves with os._exit: no one waits for litellm's interpreter teardown.
"""

from __future__ import annotations

import gc
import os
import pickle
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from pytest_orbench.fetch.frame import FetchFrame, read_frame, read_raw, write_frame


class FetchChild:
    """The parent's handle on the child: spawn early, send the work, tell how it died, stop it."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr = tempfile.TemporaryFile()
        self._lock = threading.Lock()
        self._sent = False
        self._stopping = False
        self._stderr_lock = threading.Lock()  # the watcher thread reads it; stop() closes it

    def spawn(self) -> None:
        env = dict(os.environ)
        # The child imports exactly what this process imports (a checkout, pytester's sys.path).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        # Only litellm and this package run there: warnings are nobody's business (your PYTHONWARNINGS=error
        # would turn litellm's into failed calls), and its stderr keeps to what matters when it dies.
        env["PYTHONWARNINGS"] = "ignore"
        self._proc = subprocess.Popen([sys.executable, "-m", "pytest_orbench.fetch.child"], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=self._stderr, env=env)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _send(self, message: Any) -> bool:
        if self._proc is None or self._proc.stdin is None:
            return False
        try:
            with self._lock:
                write_frame(self._proc.stdin, message)
            return True
        except (BrokenPipeError, OSError):
            return False

    def start(self, work: FetchFrame) -> None:
        if self._proc is None:
            self.spawn()
        self._sent = self._send(work)

    def dismiss(self) -> None:
        """Nothing to fetch after all: the child leaves without a word."""
        self._send(("exit",))
        self._close_stdin()

    def dead(self) -> str | None:
        """Why the child is gone before it could answer, or None while it runs (or ended normally)."""
        if self._proc is None:
            return "the fetch process was never started"
        code = self._proc.poll()
        if code is None or (code == 0 and self._sent):
            return None
        with self._stderr_lock:
            if self._stderr.closed:
                return None  # stopped by the parent (stop): not a death
            self._stderr.seek(0)
            lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        # The cause first: its own last word, or a traceback's last line; not the warnings an import printed.
        cause = next((line for line in reversed(lines) if line.startswith("fetch process failed")
                      or re.match(r"^[\w.]+(?:Error|Exception|Exit|Interrupt)\b", line)), None)
        tail = [line for line in lines[-3:] if line != cause and "Warning" not in line]
        shown = [cause] if cause else tail
        from pytest_orbench.calls.scrubbing import scrub

        # (its last words may quote a request: never with the run's secrets)
        return scrub(None, f"the fetch process {_how(code)}" + (f": {' | '.join(shown)}" if shown else ""))

    def watch(self, on_death: Callable[[str], None]) -> None:
        """Calls `on_death(why)` from a thread of its own if the child dies before the parent stops it:
        under xdist only this process can see that, and the workers learn it from the store at once
        (they would otherwise wait for its heartbeat to go stale)."""
        proc = self._proc
        if proc is None:
            return

        def wait() -> None:
            proc.wait()
            why = None if self._stopping else self.dead()
            if why is not None:
                on_death(why)

        threading.Thread(target=wait, name="orbench-watch", daemon=True).start()

    def stop(self, wait: float) -> None:
        proc = self._proc
        if proc is None:
            return
        self._stopping = True
        try:
            if proc.poll() is None:
                self._send(("stop",))
        finally:
            # Even when a second Ctrl-C cuts this short: with its input closed the child stops new calls,
            # stores the replies in flight and leaves by itself (bounded by DRAIN), waited for or not.
            self._close_stdin()
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        with self._stderr_lock:
            self._stderr.close()

    def _close_stdin(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass


def _how(code: int) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    if code >= 0:
        return f"exited with status {code}"
    import signal

    try:
        name = f" ({signal.Signals(-code).name})"
    except ValueError:
        name = ""
    return f"was killed by signal {-code}{name}"


def _ignore_group_signals() -> None:
    """The parent alone decides when this process stops: ("stop",) or end of input (it died). Ctrl-C in
    a terminal, a CI cancel or `kill -TERM -PGID` signal pytest's whole process group, this process
    included; without this it died at once and lost the replies in flight (paid for). Ignored, a
    group SIGINT ends as one sent to pytest alone (KeyboardInterrupt, then ("stop",) and the drain),
    and a group SIGTERM or SIGHUP as pytest's own death (its pipe closes, and this process drains and
    leaves, bounded by DRAIN). Forked copies inherit it.

    Not a session of its own (start_new_session): staying in pytest's group keeps it in the user's
    job, so Ctrl-Z suspends it with pytest and a group SIGKILL (the last resort of `timeout -s KILL`,
    CI runners, process supervisors) still ends it at once instead of leaving it running unseen; and
    SIG_IGN also works where process groups do not exist. Only SIGKILL of this process itself (or of
    the group) can now lose the replies in flight, as documented."""
    import signal

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)  # no SIGHUP on Windows
        if number is not None:
            signal.signal(number, signal.SIG_IGN)


def _child() -> int:
    _ignore_group_signals()  # before anything is in flight; asyncio.run leaves an ignored SIGINT ignored
    # The work is read as it comes, while litellm imports: a frame of a few thousand jobs is larger than
    # the pipe's buffer, and the parent's write (at pytest_configure) would wait for this read, holding
    # up pytest's collection and xdist's workers for the length of the import. Only bytes are read
    # there: unpickling imports modules, which stays on this thread.
    source = sys.stdin.buffer
    received: list[bytes | None] = []
    reader = threading.Thread(target=lambda: received.append(read_raw(source)), name="orbench-work", daemon=True)
    reader.start()
    # litellm first: its import (~2 s of CPU) runs while the parent collects. It builds a few hundred
    # thousand objects that live as long as the process: with the collector off meanwhile the import
    # takes ~30% less CPU, and frozen afterwards they are never scanned again by the collections the
    # calls trigger (and forked copies do not touch their pages).
    from pytest_orbench.calls.litellm_api import _import_litellm, quiet_litellm, warm_up_litellm

    gc.disable()
    try:
        _import_litellm()
        quiet_litellm()
        warm_up_litellm()
    finally:
        gc.freeze()
        gc.enable()
    reader.join()  # ends with the frame or at end of input (the parent died); no thread is left to fork with
    work = pickle.loads(received[0]) if received and received[0] is not None else None
    if work is None or isinstance(work, tuple):  # ("exit",); ("stop",) before any work (Ctrl-C while pytest collects); no parent
        os._exit(0)
    shards = work.shards
    if shards < 2:
        return _run_shard(work, 0, 1, lambda: read_frame(source))
    # More fetch processes: fork them now, with litellm imported once (copy-on-write) and before any
    # thread, event loop or database connection exists. They stop when this process says so or dies:
    # both close the pipe's write end, and their read of it returns.
    stop_read, stop_write = os.pipe()
    forked: dict[int, int] = {}
    for shard in range(1, shards):
        pid = os.fork()
        if pid == 0:
            os.close(stop_write)
            os.close(0)  # only the first process listens to the parent
            return _run_shard(work, shard, shards, lambda: os.read(stop_read, 1))
        forked[pid] = shard
    os.close(stop_read)
    watchers = [threading.Thread(target=_watch, args=(pid, shard, work), daemon=True) for pid, shard in forked.items()]
    for watcher in watchers:
        watcher.start()

    def listen() -> None:
        read_frame(source)
        os.close(stop_write)

    return _run_shard(work, 0, shards, listen, watchers)


def shard_jobs(jobs: list[Any], shard: int, shards: int) -> list[Any]:
    """The jobs of fetch process `shard` of `shards` (interleaved: every shard follows the test order).

    Interleaved by prompt text, not by job: a prompt's trials and its live base's replies stay in one
    process, whose judge stage asks an LLM judge once for replies that came back the same."""
    by_text: dict[str, list[Any]] = {}
    for job in jobs:
        by_text.setdefault(job.prompt, []).append(job)
    return [job for n, same in enumerate(by_text.values()) if n % shards == shard for job in same]


def _share(work: FetchFrame, shard: int, shards: int) -> tuple[list[Any], int]:
    """This shard's jobs (shard_jobs) and its part of the concurrency."""
    concurrency = work.concurrency
    return shard_jobs(work.jobs, shard, shards), concurrency // shards + (1 if shard < concurrency % shards else 0)


def _run_shard(work: FetchFrame, shard: int, shards: int, wait_for_stop: Any,
               others: list[threading.Thread] | None = None) -> int:
    import asyncio

    from pytest_orbench.calls.client import make_caller
    from pytest_orbench.calls.rejections import BASE, RUN
    from pytest_orbench.calls.scrubbing import remember_secrets, spec_secrets
    from pytest_orbench.core.store import Store
    from pytest_orbench.fetch.loop import FetchLoop
    from pytest_orbench.judging.llm_calls import judge_stage
    from pytest_orbench.judging.registry import make_judge

    # Each endpoint's callers scrub every endpoint's secrets (a judge that echoes the tested model's key), as the
    # pytest process does.
    remember_secrets(*(secret for spec in [*(spec for spec, _ in work.configs), work.judge_spec] if spec is not None
                       for secret in spec_secrets(spec)))
    jobs, concurrency = _share(work, shard, shards)
    store = Store(work.store)
    judge = make_judge(work.judge, work.judge_spec, work.keyword_model) if work.judge is not None else None
    stage = judge_stage(judge, store, work.retries, work.max_age) if judge is not None else None
    configs = work.configs
    max_cost = None if work.max_cost is None else work.max_cost / shards
    batcher = None
    if work.batch is not None:  # --orbench-batch (always one fetch process)
        from pytest_orbench.fetch.batch.provider import BatchProvider, provider_for
        from pytest_orbench.fetch.batch.runner import BatchPhase

        endpoints: list[BatchProvider] = []
        for spec, system_prompt in configs:
            assert spec is not None  # a model: --orbench-batch refuses a target
            endpoints.append(provider_for(spec, system_prompt, work.retries))
        batcher = BatchPhase(store, endpoints, work.batch, work.retries, max_cost, work.max_age)
    loop = FetchLoop(store, lambda config: make_caller(configs[config][1], spec=configs[config][0],
                                                       knobs=BASE if config else RUN),
                     run_id=work.run_id,
                     concurrency=concurrency, retries=work.retries, judge=judge, judge_stage=stage,
                     shard=shard, shards=shards, max_cost=max_cost, batcher=batcher)

    async def main() -> None:
        stop = asyncio.Event()
        event_loop = asyncio.get_running_loop()

        def listen() -> None:
            # ("stop",) or end of input (the parent was killed): no new calls; the ones in flight are
            # paid for, so they finish and are stored before the process leaves.
            wait_for_stop()
            event_loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=listen, name="orbench-listen", daemon=True).start()
        await loop.run(jobs, stop)

    try:
        asyncio.run(main())
    except BaseException as exc:  # noqa: BLE001 - the parent reads stderr and the run row
        print(f"fetch process failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    store.close()
    for other in others or ():
        other.join()  # the parent learns the run is over from the store; each shard ends bounded (DRAIN)
    os._exit(0)  # every outcome is committed: skip the interpreter's (and litellm's) teardown


def _watch(pid: int, shard: int, work: FetchFrame) -> None:
    """A forked fetch process that dies before it is done: its prompts without an outcome become errors
    saying so, at once (the tests waiting for them end), and its part of the run is finished."""
    from pytest_orbench.core.store import Store

    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return
    reason = f"fetch process {pid} (shard {shard + 1} of {work.shards}) {_how(code)} before asking for this prompt"
    store = Store(work.store)
    try:
        jobs, _ = _share(work, shard, work.shards)
        store.fail_shard(work.run_id, shard, work.shards, [job.key for job in jobs], reason)
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(_child())
