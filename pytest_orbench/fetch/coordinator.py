"""Fetch coordination for a pytest session: what is stored, who makes the calls, how tests wait.

One process fetches for the whole session: the xdist controller, or the only pytest process. It
starts the fetch child as soon as a call may be needed (at pytest_configure, while pytest collects)
and hands it every selected prompt after collection. Every process, xdist workers included, takes
stored replies from the store and waits there (fetch.wait.Waiter) for the rest.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_orbench.core.durations import format_age
from pytest_orbench.core.store import Store
from pytest_orbench.core.store_database import StoreError
from pytest_orbench.fetch.frame import FetchFrame
from pytest_orbench.fetch.loop import DRAIN, RETRY_WAIT, FetchLoop, Job, Outcome
from pytest_orbench.fetch.plan import Plan, Request, fetching, make_plan
from pytest_orbench.fetch.thread import ThreadFetcher
from pytest_orbench.fetch.wait import Waiter
from pytest_orbench.judging.judges import Judge
from pytest_orbench.judging.llm_calls import judge_key

if TYPE_CHECKING:
    from pytest_orbench.fetch.child import FetchChild
    from pytest_orbench.fetch.settings import FetchSettings

# litellm costs a few ms of CPU per call: with enough prompts and cores, two fetch processes (each with
# half the concurrency, so the session-wide limit holds) go faster than one (measured: 7.7-8.2 s vs
# 10.4-11.7 s for 1,974 calls at 50 ms latency, 64 in flight, on 2 cores).
SHARD_MIN_JOBS = 200
MAX_SHARDS = 2


class Coordinator:
    def __init__(self, settings: FetchSettings, judge: Judge, run_id: str, *, fetches: bool,
                 fresh_after: float | None = None) -> None:
        self.settings = settings
        self.judge = judge
        self.run_id = run_id
        self.fetches = fetches  # this process makes the calls (xdist controller or a lone process)
        # Replies stored before this time.time() are asked again (None: any age). Fixed once, on the
        # controller, and handed to xdist workers: a worker that judged freshness by its own clock (once with
        # 60 s of grace) took a reply the fetcher was asking again for a fresh one, and its test ended with
        # the stale reply before any call was made (--orbench-refresh within a minute of a run).
        self.fresh_after = fresh_after
        self.store: Store | None = None
        self.plan = Plan()
        self._served: set[str] = set()  # keys whose stored reply a test took from the plan (outcome)
        self.child: FetchChild | None = None  # the fetch process (it forks the others, if any)
        self.shards = 0  # fetch processes in use
        self.thread: ThreadFetcher | None = None
        self.waiter: Waiter | None = None
        self.jobs = 0
        self.paid: set[str] = set()  # keys called for (reply or judge) in this session, known once it is stopped
        # The fetch process's pid when a second interrupt ended the wait for its replies in flight: it stores them
        # by itself, so `paid` is then incomplete.
        self.draining: int | None = None
        self.unstored = 0  # of `paid`: requests submitted in provider batches still open (collected by the next run)
        self.on_wait: Callable[[], None] | None = None

    # -- the fetching process --------------------------------------------------------------
    def early(self, requests: list[Request], plan: Plan | None = None) -> None:
        """At configure: when any prompt may need a litellm call, start the fetch child now, so its
        Python and litellm start while pytest collects (-k may still deselect those prompts). `plan`:
        `preview(requests)`, when the caller has it already."""
        s = self.settings
        if not self.fetches or s.offline or s.target is not None or not requests:
            return
        plan = plan or self.preview(requests)
        if plan.misses or plan.unjudged:
            from pytest_orbench.fetch.child import FetchChild

            self.child = FetchChild()
            self.child.spawn()

    def open_store(self, on_locked: Callable[[str], None] | None = None) -> Store:
        """The session's store, opened once (each opening runs the schema check and the day-old cleanup, and
        its close a WAL checkpoint): the configure-time check, `preview` and `begin` share it; `stop` closes it.
        `on_locked`: see `Store`."""
        if self.store is None:
            # A damaged store is refused before any call; offline, a read-only one is read.
            self.store = Store(self.settings.store, on_locked, check=True, read_only=self.settings.offline)
        return self.store

    def preview(self, requests: list[Request]) -> Plan:
        """What `begin` would do with these requests (store hits, calls, judge calls), calling nothing."""
        # offline=True keeps the stored replies that still need a judge call in plan.stored
        return make_plan(self.open_store(), self.judge, requests, self.fresh_after, offline=True)

    def _leave_this_runs_replies(self, plan: Plan) -> None:
        """An xdist worker plans once it has collected, while the controller's fetch may have stored replies
        already (many, on a busy machine): those were paid for in this run, not read from the store. They are
        waited for as the rest, whose outcome says so (else `calls` counted them as stored: "271 made" of 300)."""
        assert self.store is not None
        state = self.store.run_state(self.run_id)  # read after the plan: a run not started by then stored nothing
        if state is None:
            return
        started = round(state.started, 3)  # (stored_at is rounded so)
        for key in [k for k, record in plan.stored.items() if record.get("stored_at", 0) >= started]:
            del plan.stored[key]

    def _shards(self, jobs: int) -> int:
        import os

        if jobs < SHARD_MIN_JOBS or self.settings.concurrency < 8 or (os.cpu_count() or 1) < 2:
            return 1
        return MAX_SHARDS

    def begin(self, requests: list[Request], preview: Plan | None = None) -> str | None:
        """After collection: plan, and in the fetching process start the calls. Returns the line
        that says what will happen (fetching process only). `requests`: every trial of every prompt,
        under the configuration tested and then the live base (if any). `preview`: `preview(requests)`,
        when the caller read it already (the store is then not read again)."""
        s = self.settings
        self.open_store()
        assert self.store is not None
        max_age = None if s.offline else s.store_max_age
        if preview is not None and self.fetches and not s.offline:
            plan = fetching(preview)  # read with the same cutoff, in the form offline runs keep
        else:
            plan = make_plan(self.store, self.judge, requests, None if s.offline else self.fresh_after,
                             offline=s.offline)
        if not self.fetches and not s.offline:
            self._leave_this_runs_replies(plan)
        self.plan = plan
        pending = [] if s.offline else plan.misses + plan.unjudged
        self.waiter = Waiter(self.store, self.run_id, dead=self._dead if self.fetches else None, on_wait=self._waiting)
        if not self.fetches:
            return None
        self.jobs = len(pending)  # before the fetch starts: a start that fails still leaves `stop` its clean-up
        if pending:
            self._announce(len(pending))
            self._fetch([Job(r.key, r.text, n, record=None, config=r.config) for n, r in enumerate(plan.misses)]
                        + [Job(r.key, r.text, len(plan.misses) + n, record=self._stored_reply(r.key), config=r.config)
                           for n, r in enumerate(plan.unjudged)])
        elif self.child is not None:
            self.child.dismiss()
        processes = self.shards if self.shards > 1 else 0
        pace = (f"through provider batches (polled every {s.batch.poll:g} s, waiting up to {_age(s.batch.wait)})"
                if s.batch is not None else f"{s.concurrency} at a time")
        action = ("offline: none will be fetched" if s.offline else
                  f"{len(plan.misses)} to fetch, {pace}"
                  + (f" (from {processes} fetch processes)" if pending and processes else ""))
        judging = f", {len(plan.unjudged)} stored replies to judge" if plan.unjudged and not s.offline else ""
        aged = f" ({plan.stale} stored replies older than {_age(max_age)} are asked again)" if plan.stale else ""
        aged += _damaged_note(plan.damaged, s.offline)
        replies = len(dict.fromkeys(r.key for r in requests))
        stored = replies - len(plan.misses)
        each = s.trials * (2 if s.base is not None else 1)
        prompts = len(requests) // each
        how = " and ".join(w for w in (f"{s.trials} trials each" if s.trials > 1 else "",
                                       "the live base too" if s.base is not None else "") if w)
        notes = [f"{len(requests)} replies: {how}"] if each > 1 else []
        if replies < len(requests):  # prompts with identical text: one reply each text, one call
            shared = len(requests) - replies
            notes.append(f"{replies} distinct: {shared} shared a reply with an identical prompt")
        what = f"{prompts} prompts" + (f" ({'; '.join(notes)})" if notes else "")
        return f"orbench: {what}, {stored} stored, {action}{judging}{aged}{self._sharing(pending)}"

    def _announce(self, total: int) -> None:
        """Said in the store before the fetch process starts (it imports litellm first, seconds): a run begun
        meanwhile on this store sees this one fetching (`_sharing`), as this one sees a run announced earlier."""
        assert self.store is not None
        try:
            self.store.announce_run(self.run_id, total)
        except (OSError, sqlite3.Error):
            pass  # only the other runs' warning: the fetch meets the store's trouble and says it

    def _sharing(self, pending: list[Request]) -> str:
        """Another run fetching into this store now does not share its calls in flight with this one: said,
        since what both ask is paid twice (two runs 15 s apart paid twice for 1,610 of 1,974 prompts)."""
        assert self.store is not None
        if not pending:
            return ""
        try:
            others = self.store.other_runs(self.run_id)
        except StoreError:
            return ""
        if not others:
            return ""
        to_go = sum(o.to_go for o in others)
        who = (f"another run (pid {others[0].pid}, started {time.time() - others[0].started:.0f} s ago) is"
               if len(others) == 1 else f"{len(others)} other runs are")
        return (f"; {who} fetching into this store now ({to_go:,} replies to go): what it has not stored yet is asked "
                "again here and paid twice; let it finish first to reuse its replies")

    def _stored_reply(self, key: str) -> dict[str, Any]:
        assert self.store is not None
        record = self.store.get(key)
        assert record is not None
        return record

    def _fetch(self, jobs: list[Job]) -> None:
        s = self.settings
        if s.target is not None:
            # The user's function runs in this process, where their conftest set things up.
            from pytest_orbench.calls.client import Caller, make_caller
            from pytest_orbench.calls.rejections import BASE, RUN
            from pytest_orbench.judging.llm_calls import judge_stage

            assert self.store is not None
            stage = judge_stage(self.judge, self.store, s.retries, s.store_max_age)
            configs = self._configs()

            def caller(config: int) -> Caller:
                c = configs[config]
                return make_caller(c.system_prompt, spec=c.endpoint_spec() if c.model else None, target=c.target,
                                   timeout=c.timeout, knobs=BASE if config else RUN)

            loop = FetchLoop(Store(s.store), caller, run_id=self.run_id,
                             concurrency=s.concurrency,
                             retries=s.retries, judge=self.judge if stage is not None else None, judge_stage=stage,
                             max_cost=s.max_cost)
            self.thread = ThreadFetcher(loop, jobs, s.concurrency)
            self.thread.start()
            return
        from pytest_orbench.fetch.child import FetchChild

        self.shards = 1 if s.batch is not None else self._shards(len(jobs))
        if self.child is None:
            self.child = FetchChild()
        # The child splits the jobs and the concurrency between itself and the processes it forks.
        self.child.start(FetchFrame(
            store=s.store, run_id=self.run_id, retries=s.retries, shards=self.shards,
            concurrency=s.concurrency,
            configs=[(c.endpoint_spec() if c.model else None, c.system_prompt) for c in self._configs()],
            max_age=s.store_max_age, max_cost=s.max_cost, judge=s.judge if self.judge.llm is not None else None,
            judge_spec=s.judge_spec if self.judge.llm is not None else None, jobs=jobs,
            # hybrid's keyword model, when judge_labels adapted it: the fetch process sends the same replies to the LLM
            keyword_model=getattr(getattr(self.judge, "keyword", None), "model", None) if self.judge.llm else None,
            batch=s.batch,
        ))
        shards = self.shards
        self.child.watch(lambda why: self._child_died(why, jobs, shards))

    def _child_died(self, why: str, jobs: list[Job], shards: int) -> None:
        """The fetch process died (killed, crashed) before it was stopped: its prompts without an outcome
        get `why` as their error in the store, where every process waiting for them (xdist workers) reads
        it at once. A forked fetch process that had started goes on to its end (its own prompts)."""
        from pytest_orbench.fetch.child import shard_jobs

        try:
            store = Store(self.settings.store)
        except StoreError:
            return  # the store itself failed (a full disk): the workers see the heartbeat stop instead
        try:
            started = store.started_shards(self.run_id)
            for shard in range(shards):
                if shard == 0 or shard not in started:
                    store.fail_shard(self.run_id, shard, shards, [job.key for job in shard_jobs(jobs, shard, shards)],
                                     why)
        except (OSError, sqlite3.Error):
            pass
        finally:
            store.close()

    def _configs(self) -> list[FetchSettings]:
        """What each Request.config means: the configuration under test, then the live base (if any)."""
        return [self.settings, *([self.settings.base] if self.settings.base is not None else [])]

    def _dead(self, key: str) -> str | None:
        if self.thread is not None:
            return self.thread.dead()
        return self.child.dead() if self.child is not None else None

    def _waiting(self) -> None:
        if self.on_wait is not None:
            self.on_wait()

    # -- every process -------------------------------------------------------------------------
    def outcome(self, request: Request, prompt_id: str) -> Outcome:
        plan = self.plan
        # Each stored reply leaves the plan when its test takes it: held until the end, every reply's text of a
        # warm run was in memory at once (1.7 KB a prompt, in each xdist worker too; issue 37). A second test
        # with the key (an identical prompt, a re-run) reads it from the store again.
        record = plan.stored.pop(request.key, None)
        if record is None and request.key in self._served and self.store is not None:
            record = self.store.get(request.key)
        if record is not None:
            self._served.add(request.key)
            return Outcome(record=record, judge=plan.judged.get(request.key),
                           judge_error=self._offline_judge_error(request, prompt_id, record))
        if self.settings.offline:
            why = plan.damaged.get(request.key)
            stored = f"the stored reply for {prompt_id} is damaged ({why})" if why else f"no stored reply for {prompt_id}"
            return Outcome(error=f"{stored} and --orbench-offline is set; run once without it to fetch")
        assert self.waiter is not None and self.store is not None
        outcome = self.waiter.result(request.key)
        if outcome.record is not None and outcome.judge_error is None and self.judge.llm is not None:
            key = judge_key(self.judge, request.text, outcome.record)
            if key is not None:
                outcome.judge = self.store.get(key)
                if outcome.judge is None:
                    outcome.judge_error = "no judgement was stored for this reply"
        return outcome

    def _offline_judge_error(self, request: Request, prompt_id: str, record: dict[str, Any]) -> str | None:
        if request.key in self.plan.judged or self.judge.llm is None:
            return None
        key = judge_key(self.judge, request.text, record)
        if key is None:
            return None
        damaged = f" (the stored one is damaged: {self.plan.damaged[key]})" if key in self.plan.damaged else ""
        return (f"no stored judgement for {prompt_id} from judge model {self.judge.llm.spec.model}{damaged} "
                "and --orbench-offline is set; run once without it to judge")

    def progress(self) -> str | None:
        """"orbench: 812/1974 replies (41%), 64.9/s, ETA 18 s, 0 errors" while the fetch runs."""
        if self.store is None or not self.jobs:
            return None
        state = self.store.run_state(self.run_id)
        if state is None or state.finished or not state.total:
            return None
        note = state.note or ""
        if note and not note.startswith(RETRY_WAIT):  # provider batches: their states say more than a rate
            return f"orbench: {note}; {state.errors} errors so far"
        done, total = state.done, state.total
        elapsed = max(1e-6, time.time() - state.started)
        rate = done / elapsed
        eta = f"ETA {(total - done) / rate:.0f} s" if rate > 0 else "ETA unknown"
        waiting, _, until = note.removeprefix(RETRY_WAIT).partition(" ")
        if note and until and float(until) > time.time():  # the rate before a Retry-After of 60 s said "ETA 2 s"
            eta = (f"{waiting} {'request waits' if waiting == '1' else 'requests wait'} up to "
                   f"{float(until) - time.time():.0f} s more to be retried (the endpoint's Retry-After, or backoff)")
        return (f"orbench: {done}/{total} replies ({100 * done / total:.0f}%), {rate:.1f}/s, {eta}, "
                f"{state.errors} errors so far")

    def stopping(self) -> str | None:
        """What stopping now waits for, when the fetch is not over (an interruption, -x), else None."""
        if not self.fetches or not self.jobs or self.store is None or (self.child is None and self.thread is None):
            return None
        try:
            state = self.store.run_state(self.run_id)
        except sqlite3.Error:
            return None
        if state is None or state.finished:
            return None
        return (f"orbench: stopping the fetch at {state.done}/{state.total} replies: the requests in flight are "
                f"paid for, so they finish and are stored for the next run (waiting up to {DRAIN:g} s)")

    def stop(self) -> None:
        """Stops the fetching (what is in flight is stored first) and closes the store; safe to repeat."""
        if self.thread is not None:
            self.thread.stop()
            self.thread = None
        child, self.child = self.child, None
        if child is not None:
            try:
                child.stop(DRAIN + 10)
            except KeyboardInterrupt:
                # A second Ctrl-C (or `timeout` passing the group's SIGINT on) during the drain: stop waiting, and
                # say so. Without this the store was read as if the fetch were over: "nothing was asked" while
                # the replies in flight were paid for, and pytest_unconfigure found no child left to wait for.
                self.draining = child.pid
                if self.store is not None:
                    self.store.close()
                    self.store = None
                raise
        if self.store is not None:
            if self.fetches and self.jobs:
                try:
                    self.paid = self.store.paid_keys(self.run_id)
                    # Paid for but not stored: requests in a provider batch that is still open (--orbench-batch)
                    self.unstored = len(self.paid) - self.store.count_stored(self.paid)
                    self.store.clear_run(self.run_id)
                except (OSError, sqlite3.Error):
                    pass  # bookkeeping (a full disk): the next run older than a day deletes it
            self.store.close()
            self.store = None


def _damaged_note(damaged: dict[str, str], offline: bool) -> str:
    """The begin line's word on stored records that cannot be read: said once, with one example of why."""
    if not damaged:
        return ""
    n, why = len(damaged), next(iter(damaged.values()))
    fate = "cannot be used offline" if offline else "asked again"
    return (f" ({n} stored record{'s are' if n != 1 else ' is'} damaged ({why}{f'; {n - 1} more' if n > 1 else ''}): "
            f"{fate}, never judged)")


def _age(seconds: float | None) -> str:
    return format_age(seconds)
