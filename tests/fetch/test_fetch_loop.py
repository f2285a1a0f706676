"""Store keys and runs, retries, the fetch loop and bounded waits, with fake callers (the HTTP path is in test_e2e)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pytest_orbench.calls.client import backoff, call_with_retries
from pytest_orbench.calls.errors import EndpointError
from pytest_orbench.calls.reply import Reply
from pytest_orbench.calls.scrubbing import scrub
from pytest_orbench.core.endpoint import ModelSpec
from pytest_orbench.core.store import Store, response_key
from pytest_orbench.core.store_database import StoreError
from pytest_orbench.fetch.loop import STOPPING, FetchLoop, Job
from pytest_orbench.fetch.wait import Waiter
from tests.fetch.events import WAIT, wait_for


def test_key_depends_on_every_field_and_not_on_order() -> None:
    base = {"model": "m", "api_base": None, "params": {"temperature": 0, "max_tokens": 10}, "system_prompt": None,
            "prompt": "p", "trial": 0, "target": None}
    key = response_key(base)
    assert key == response_key(dict(reversed(list(base.items()))))
    for field, value in [("model", "m2"), ("prompt", "p2"), ("trial", 1), ("system_prompt", "s"),
                         ("params", {"temperature": 0.5, "max_tokens": 10}), ("api_base", "http://x")]:
        assert response_key({**base, field: value}) != key, field


def test_keys_are_those_earlier_versions_stored_replies_under() -> None:
    # A changed key would ask every stored reply again: the canonical JSON (sorted keys, no spaces, UTF-8 as is).
    fields = {"model": "m", "api_base": None, "params": {"temperature": 0, "max_tokens": 10}, "system_prompt": None,
              "prompt": "Comment d\u00e9sactiver \u00ab l'alarme \u00bb ?", "trial": 0, "target": None}
    assert response_key(fields) == "57089d928e67132b4e56c35e956d2ff2c2715607d9765f9728bac83a2596ebe3"


def test_store_round_trip_ages_and_runs(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    assert (tmp_path / "s" / ".gitignore").read_text().endswith("*\n")
    assert (tmp_path / "s" / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    before = time.time()
    store.put("k", {"text": "hi"})
    got = store.get("k")
    assert got is not None and before - 1 <= got.pop("stored_at") <= time.time() + 0.01  # when it was paid for (ms)
    assert got == {"text": "hi"} and {k: {f: v for f, v in r.items() if f != "stored_at"}
                                      for k, r in store.get_many(["k", "x"]).items()} == {"k": {"text": "hi"}}
    # Too old for a max age: missing, so it is asked again; without a max age it is always there.
    time.sleep(0.05)
    assert store.get("k", max_age=0.01) is None and store.get_many(["k"], time.time() - 0.01) == {}
    assert store.count_stored(["k", "x"], before=time.time() - 0.01) == 1 and store.get("k", max_age=60) is not None
    store.start_run("run", 2)
    store.commit_batch("run", [("k2", {"text": "two"})], [("k2", None, None, True, False), ("k3", "HTTP 503", None, True, False)],
                       done=2, errors=1)
    assert store.outcome("run", "k2") == (None, None, 1, 0) and store.outcome("run", "k3") == ("HTTP 503", None, 1, 0)
    assert store.outcome("other-run", "k2") is None and store.get("k2")["text"] == "two"  # type: ignore[index]
    state = store.run_state("run")
    assert state is not None and (state.done, state.errors, state.finished) == (2, 1, 0)
    store.finish_run("run", "connection refused")
    assert store.run_state("run").fatal == "connection refused"  # type: ignore[union-attr]
    store.clear_run("run")
    assert store.run_state("run") is None and store.outcome("run", "k2") is None and store.get("k2") is not None
    # Two fetch processes for one run: progress adds up; finished only when both are; the first fatal wins.
    store.start_run("two", 3, shard=0, shards=2)
    assert store.run_state("two").started_shards == 1  # type: ignore[union-attr]
    store.start_run("two", 2, shard=1, shards=2)
    store.heartbeat("two", 2, 1, shard=0)
    store.heartbeat("two", 1, 0, shard=1)
    store.finish_run("two", None, shard=0)
    state = store.run_state("two")
    assert state is not None and (state.total, state.done, state.errors, state.finished) == (5, 3, 1, 0)
    assert state.started_shards == state.shards == 2
    store.finish_run("two", "connection refused", shard=1)
    state = store.run_state("two")
    assert state is not None and state.finished and state.fatal == "connection refused"
    # A fetch process that died: its prompts without an outcome get the reason, the others keep theirs;
    # its part of the run is finished, even if it never started.
    store.start_run("three", 2, shard=0, shards=2)
    store.commit_batch("three", [], [("a", None, None, True, False)], done=1, errors=0, shard=0)
    store.fail_shard("three", 1, 2, ["b", "c"], "killed")
    store.fail_shard("three", 0, 2, ["a", "d"], "killed too")
    assert store.outcome("three", "a") == (None, None, 1, 0) and store.outcome("three", "d") == ("killed too", None, 0, 0)
    assert store.outcome("three", "b") == store.outcome("three", "c") == ("killed", None, 0, 0)
    state = store.run_state("three")
    assert state is not None and (state.total, state.done, state.errors, state.finished) == (4, 4, 3, 1)
    store.close()


class FlakyCaller:
    def __init__(self, failures: int, retry_after: float | None = None, retryable: bool = True) -> None:
        self.failures = failures
        self.retry_after = retry_after
        self.retryable = retryable
        self.calls = 0

    async def __call__(self, prompt: str) -> Reply:
        self.calls += 1
        if self.calls <= self.failures:
            raise EndpointError("429 slow down", retryable=self.retryable, retry_after=self.retry_after)
        return Reply(f"answer to {prompt}", "stop")

    async def aclose(self) -> None:
        pass


def test_retries_honour_retry_after() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    caller = FlakyCaller(failures=2, retry_after=7.0)
    reply, attempts, _ = asyncio.run(call_with_retries(caller, "p", retries=3, sleep=sleep))
    assert reply.text == "answer to p" and attempts == 3 and slept == [7.0, 7.0]


def test_last_retry_raises_and_non_retryable_stops_at_once() -> None:
    async def sleep(seconds: float) -> None:
        pass

    caller = FlakyCaller(failures=10)
    with pytest.raises(EndpointError):
        asyncio.run(call_with_retries(caller, "p", retries=2, sleep=sleep))
    assert caller.calls == 3
    hard = FlakyCaller(failures=10, retryable=False)
    with pytest.raises(EndpointError):
        asyncio.run(call_with_retries(hard, "p", retries=5, sleep=sleep))
    assert hard.calls == 1


def test_the_deadline_on_a_litellm_call_is_named_whatever_the_call_was_doing(monkeypatch: pytest.MonkeyPatch) -> None:
    # The caller's own deadline (asyncio.wait_for) once had its own branch beside describe_failure; now
    # describe_failure names it, even when the cancelled call was handling a refused connection at the time
    # (not 'connection refused', which would stop every call as an unreachable endpoint).
    import types

    import pytest_orbench.calls.litellm_api as litellm_api

    class ContentPolicyViolationError(Exception):
        pass

    async def hang(**_: object) -> None:
        try:
            raise ConnectionRefusedError("refused, about to try another address")
        except ConnectionRefusedError:
            await asyncio.sleep(5)  # cancelled here: the CancelledError's context is the refusal

    monkeypatch.setattr(litellm_api, "_litellm", types.SimpleNamespace(
        acompletion=hang, ContentPolicyViolationError=ContentPolicyViolationError))
    caller = litellm_api.LiteLLMCaller(ModelSpec("openai/m", api_base="http://127.0.0.1:9/v1", timeout=0.05))
    started = time.monotonic()
    with pytest.raises(EndpointError) as caught:
        asyncio.run(caller("hi"))
    assert time.monotonic() - started < 2
    assert str(caught.value) == "timed out after 0.05 s"
    assert caught.value.timed_out and caught.value.retryable and not caught.value.unreachable


def test_backoff_grows_and_is_capped() -> None:
    assert backoff(0, None) <= 0.5 < backoff(3, None) * 2 and backoff(30, None) <= 60
    assert backoff(5, 2.5) == 2.5


class SlowCaller:
    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.prompts: list[str] = []

    async def __call__(self, prompt: str) -> Reply:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.prompts.append(prompt)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return Reply(prompt.upper(), "stop")

    async def aclose(self) -> None:
        pass


class RaisingCaller(SlowCaller):
    """Every call fails with `exc` (after recording the prompt)."""

    def __init__(self, exc: EndpointError) -> None:
        super().__init__()
        self.exc = exc

    async def __call__(self, prompt: str) -> Reply:
        self.prompts.append(prompt)
        raise self.exc


def run_loop(store: Store, caller: object, jobs: list[Job], **kwargs: object) -> None:
    loop = FetchLoop(store, lambda _config: caller, run_id="r", **{"concurrency": 5, "retries": 0, **kwargs})  # type: ignore[arg-type]
    asyncio.run(loop.run(jobs))


def test_a_stored_reply_cut_at_max_tokens_before_any_text_is_asked_again(tmp_path: Path) -> None:
    from pytest_orbench.fetch.plan import Request, make_plan
    from pytest_orbench.judging.registry import make_judge

    # Stored by a version that judged it "empty" (a refusal); asked again, it becomes the error it is.
    store = Store(tmp_path)
    store.put("cut", Reply("", "length").record())
    store.put("short", Reply("Step 1: mix", "length").record())  # cut, but with text: judged on it
    store.put("silent", Reply("", "stop").record())  # an empty reply: a refusal, as before
    plan = make_plan(store, make_judge("keyword"), [Request("cut", "p"), Request("short", "p"), Request("silent", "p")], None)
    assert [r.key for r in plan.misses] == ["cut"] and set(plan.stored) == {"short", "silent"}


def test_fetch_loop_bounds_concurrency_and_commits_each_reply_and_outcome(tmp_path: Path) -> None:
    caller = SlowCaller()
    store = Store(tmp_path)
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(40)]
    run_loop(store, caller, jobs)
    waiter = Waiter(Store(tmp_path), "r")
    outcomes = [waiter.result(job.key) for job in reversed(jobs)]
    assert [o.record and o.record["text"] for o in outcomes] == [f"P{i}" for i in reversed(range(40))]
    assert all(o.fetched and o.error is None for o in outcomes)
    assert caller.peak == 5 and sorted(caller.prompts) == sorted(j.prompt for j in jobs)
    state = store.run_state("r")
    assert state is not None and (state.total, state.done, state.finished, state.fatal) == (40, 40, 1, None)


def test_fatal_error_stops_all_calls(tmp_path: Path) -> None:
    caller = RaisingCaller(EndpointError("AuthenticationError: bad key", retryable=False, fatal=True))
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(20)]
    run_loop(Store(tmp_path), caller, jobs, concurrency=1, retries=3)
    errors = [Waiter(Store(tmp_path), "r").result(j.key).error for j in jobs]
    assert len(caller.prompts) == 1
    assert all(e and "AuthenticationError" in e for e in errors)


def test_the_first_call_goes_alone_so_a_rejected_request_is_sent_once(tmp_path: Path) -> None:
    # A rejected key, parameter or model: at concurrency 16 all 16 requests went out before the first came back.
    caller = RaisingCaller(EndpointError("the model rejects temperature=0.0 (HTTP 400); fix: ...", retryable=False,
                                         fatal=True, status=400))
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(40)]
    run_loop(Store(tmp_path), caller, jobs, concurrency=16, retries=3)
    assert caller.prompts == ["p0"]
    calls = [Waiter(Store(tmp_path), "r").result(j.key) for j in jobs]
    assert all(c.error and "rejects temperature" in c.error for c in calls)
    assert [c.fetched for c in calls] == [True] + [False] * 39  # "calls made": the one request sent


def test_once_the_endpoint_answers_the_calls_go_at_full_concurrency(tmp_path: Path) -> None:
    caller = SlowCaller()
    run_loop(Store(tmp_path), caller, [Job(f"k{i}", f"p{i}", i) for i in range(40)], concurrency=8)
    assert caller.prompts[0] == "p0" and caller.peak == 8

    class Busy(SlowCaller):  # a 429 first: an endpoint that takes calls, so the others go during its backoff
        async def __call__(self, prompt: str) -> Reply:
            if prompt == "p0" and "p0" not in self.prompts:
                self.prompts.append(prompt)
                raise EndpointError("HTTP 429 from host: slow down", retryable=True, retry_after=0.05, status=429)
            return await super().__call__(prompt)

    busy = Busy()
    run_loop(Store(tmp_path / "busy"), busy, [Job(f"k{i}", f"p{i}", i) for i in range(20)], concurrency=4, retries=1)
    assert busy.prompts[:2] == ["p0", "p1"] and busy.prompts.count("p0") == 2 and len(busy.prompts) == 21


def test_a_first_call_that_times_out_alone_does_not_end_the_calls(tmp_path: Path) -> None:
    # Without retries the first call's timeout is all the gate saw: the endpoint may answer the others (a slow
    # prompt), as it might have when they all started together. A hung endpoint is still stopped, a round later.
    class SlowFirst(SlowCaller):
        async def __call__(self, prompt: str) -> Reply:
            if prompt == "p0":
                self.prompts.append(prompt)
                raise EndpointError("timed out after 1 s", retryable=True, timed_out=True)
            return await super().__call__(prompt)

    slow = SlowFirst()
    run_loop(Store(tmp_path), slow, [Job(f"k{i}", f"p{i}", i) for i in range(20)], concurrency=4, retries=0)
    assert len(slow.prompts) == 20
    hung = RaisingCaller(EndpointError("timed out after 1 s", retryable=True, timed_out=True))
    run_loop(Store(tmp_path / "hung"), hung, [Job(f"k{i}", f"p{i}", i) for i in range(40)], concurrency=4, retries=0)
    assert len(hung.prompts) <= 1 + 4


def test_the_same_400_on_the_first_prompts_stops_the_calls(tmp_path: Path) -> None:
    # A 400 the plugin cannot read as a parameter (a proxy's "invalid request"): the same on 3 prompts in a row,
    # none answered, is the request as configured. Each went alone: 3 requests at concurrency 16.
    caller = RaisingCaller(EndpointError("HTTP 400 from host: invalid request", retryable=False, status=400))
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(40)]
    run_loop(Store(tmp_path), caller, jobs, concurrency=16, retries=3)
    assert caller.prompts == ["p0", "p1", "p2"]
    errors = [Waiter(Store(tmp_path), "r").result(j.key).error for j in jobs]
    assert errors[3] == ("not requested: HTTP 400 from host: invalid request (so did the first 3 prompts, the same each "
                         "time, and none was answered: the endpoint rejects the request as configured, whatever the "
                         "prompt (a parameter, the model's name, litellm_kwargs?), so no more calls are made)")

    class SomeRejected(SlowCaller):  # a 400 of a few prompts among answers: theirs, not the settings'
        async def __call__(self, prompt: str) -> Reply:
            if prompt in ("p0", "p2", "p3", "p4"):
                self.prompts.append(prompt)
                raise EndpointError("HTTP 400 from host: invalid request", retryable=False, status=400)
            return await super().__call__(prompt)

    some = SomeRejected()
    run_loop(Store(tmp_path / "some"), some, [Job(f"k{i}", f"p{i}", i) for i in range(20)], concurrency=4)
    assert len(some.prompts) == 20


def test_a_request_never_sent_is_no_call_made(tmp_path: Path) -> None:
    caller = RaisingCaller(EndpointError("litellm will not send temperature=0.0 to this model", retryable=False,
                                         fatal=True, sent=False))
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(5)]
    run_loop(Store(tmp_path), caller, jobs)
    assert [Waiter(Store(tmp_path), "r").result(j.key).fetched for j in jobs] == [False] * 5


def test_an_unreachable_endpoint_stops_all_calls_at_once_with_one_message(tmp_path: Path) -> None:
    caller = RaisingCaller(EndpointError("connection refused by 127.0.0.1:9", retryable=True, unreachable=True))
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(200)]
    started = time.monotonic()
    run_loop(Store(tmp_path), caller, jobs, concurrency=4, retries=4)
    assert time.monotonic() - started < 5  # no retries, no backoff: the first replies tell
    assert len(caller.prompts) <= 4  # only the requests already in flight
    errors = {Waiter(Store(tmp_path), "r").result(j.key).error for j in jobs}
    assert errors <= {"connection refused by 127.0.0.1:9",
                      "not requested: connection refused by 127.0.0.1:9 (no prompt was answered, so no more calls are made)"}


def test_a_hung_endpoint_is_not_waited_for_prompt_after_prompt(tmp_path: Path) -> None:
    # Every attempt times out and nothing has answered: each prompt took (retries + 1) x timeout, a run of
    # 1,974 prompts about 11 hours at the defaults. Once one prompt's attempts are spent, the calls stop.
    caller = RaisingCaller(EndpointError("timed out after 60 s", retryable=True, timed_out=True))
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(200)]
    run_loop(Store(tmp_path), caller, jobs, concurrency=2, retries=1)
    assert len(caller.prompts) <= 4  # the two prompts in flight, each asked twice
    errors = {Waiter(Store(tmp_path), "r").result(j.key).error for j in jobs}
    assert errors <= {"timed out after 60 s",
                      "not requested: timed out after 60 s (no prompt was answered, so no more calls are made)"}

    class SlowOnSome(SlowCaller):  # answers, but some prompts take longer than the timeout: not a hung endpoint
        async def __call__(self, prompt: str) -> Reply:
            await super().__call__(prompt)
            if int(prompt[1:]) % 4:  # three in four, every fourth answered between them
                raise EndpointError("timed out after 60 s", retryable=True, timed_out=True)
            return Reply("ok", "stop")

    some = SlowOnSome()
    run_loop(Store(tmp_path / "2"), some, jobs[:40], concurrency=1, retries=0)
    assert len(some.prompts) == 40


def test_a_refused_connection_after_replies_is_retried_as_a_blip(tmp_path: Path) -> None:
    class Blip(SlowCaller):
        async def __call__(self, prompt: str) -> Reply:
            self.prompts.append(prompt)
            if prompt == "p5" and self.prompts.count("p5") == 1:
                raise EndpointError("connection refused by 127.0.0.1:9", retryable=True, unreachable=True)
            return Reply(prompt.upper(), "stop")

    caller = Blip()
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(8)]
    run_loop(Store(tmp_path), caller, jobs, concurrency=1, retries=2)
    assert Waiter(Store(tmp_path), "r").result("k5").record is not None and caller.prompts.count("p5") == 2


@pytest.mark.parametrize("failure", [
    EndpointError("connection refused by 127.0.0.1:9", retryable=True, unreachable=True),
    # Hung: every attempt of every prompt waits out the timeout. Each prompt then took (retries + 1) x 60 s,
    # and a run of 1,974 prompts at concurrency 8 about 20 hours.
    EndpointError("timed out after 60 s", retryable=True, timed_out=True),
], ids=["went-away", "hung"])
def test_an_endpoint_that_goes_away_mid_run_stops_the_calls(tmp_path: Path, failure: EndpointError) -> None:
    # The server stopped after 10 replies (killed, redeployed away): each remaining prompt used to spend its
    # retries' backoff on refused connections, minutes for a run, hours at 2,000 prompts and a low concurrency.
    class GoesAway(SlowCaller):
        async def __call__(self, prompt: str) -> Reply:
            self.prompts.append(prompt)
            if len(self.prompts) > 10:
                raise failure
            return Reply(prompt.upper(), "stop")

    caller = GoesAway()
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(200)]
    run_loop(Store(tmp_path), caller, jobs, concurrency=2, retries=0)
    assert len(caller.prompts) <= 10 + 5 + 2  # the replies, the prompts that told, the ones in flight
    waiter = Waiter(Store(tmp_path), "r")
    errors = [waiter.result(j.key).error for j in jobs[10:]]
    gone = (f"not requested: {failure} (it had answered 10 prompts, then 5 prompts in a row "
            "failed every attempt, so no more calls are made to it)")
    assert set(errors) == {str(failure), gone} and errors.count(gone) >= 180


@pytest.mark.parametrize("answered", [0, 10], ids=["down-from-the-start", "down-mid-run"])
def test_an_outage_of_503s_stops_the_calls_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answered: int) -> None:
    # Every attempt of every prompt a 503: each prompt was tried retries + 1 times (100 prompts: 500 requests).
    monkeypatch.setattr("pytest_orbench.calls.client.backoff", lambda attempt, retry_after: 0.0)
    failure = EndpointError("HTTP 503 from 127.0.0.1:9: The server had an error", retryable=True)

    class Down(SlowCaller):
        async def __call__(self, prompt: str) -> Reply:
            self.prompts.append(prompt)
            up = len(self.prompts) <= answered
            await asyncio.sleep(0)
            if not up:
                raise failure
            return Reply(prompt.upper(), "stop")

    caller = Down()
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(100)]
    run_loop(Store(tmp_path), caller, jobs, concurrency=4, retries=4)
    # 5 attempts each: the prompts that told, those in flight when they began (begun before the last reply, they
    # do not count) and when they ended
    assert len(caller.prompts) <= answered + (3 + 5 + 3) * 5
    waiter = Waiter(Store(tmp_path), "r")
    errors = [waiter.result(j.key).error for j in jobs[answered:]]
    why = (f"it had answered {answered} prompts, then 5" if answered else "no prompt was answered: 5")
    stopped = f"not requested: {failure} ({why} prompts in a row failed every attempt, so no more calls are made to it)"
    assert set(errors) == {str(failure), stopped} and errors.count(stopped) >= 100 - answered - 11


def test_503s_among_replies_are_retried_and_counted_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not an outage: a quarter of the prompts fail every attempt, the others are answered between them.
    monkeypatch.setattr("pytest_orbench.calls.client.backoff", lambda attempt, retry_after: 0.0)

    class Some(SlowCaller):
        async def __call__(self, prompt: str) -> Reply:
            self.prompts.append(prompt)
            await asyncio.sleep(0.001)
            if int(prompt[1:]) % 4 == 0:
                raise EndpointError("HTTP 503 from 127.0.0.1:9: busy", retryable=True)
            return Reply(prompt.upper(), "stop")

    caller = Some()
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(100)]
    run_loop(Store(tmp_path), caller, jobs, concurrency=4, retries=4)
    assert len(caller.prompts) == 75 + 25 * 5
    waiter = Waiter(Store(tmp_path), "r")
    assert [waiter.result(j.key).error for j in jobs].count("HTTP 503 from 127.0.0.1:9: busy") == 25


def test_a_crash_in_the_loop_turns_every_remaining_prompt_into_an_error(tmp_path: Path) -> None:
    class Broken(SlowCaller):
        async def __call__(self, prompt: str) -> Reply:
            raise RuntimeError("unexpected bug")  # not an EndpointError: nothing in the loop expects it

    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(10)]
    run_loop(Store(tmp_path), Broken(), jobs, concurrency=2)
    waiter = Waiter(Store(tmp_path), "r")
    errors = [waiter.result(j.key).error for j in jobs]
    assert all(e and "RuntimeError: unexpected bug" in e for e in errors), errors
    assert Store(tmp_path).run_state("r").finished == 1  # type: ignore[union-attr]


def test_a_store_that_fills_up_stops_the_calls_and_says_why(tmp_path: Path) -> None:
    # SQLite's own "database or disk is full" (a page limit on this connection, the one the loop writes on).
    # The failed commit's ROLLBACK used to hide it behind "cannot rollback - no transaction is active",
    # and the loop went on paying for every prompt whose reply it could not keep.
    class Big(SlowCaller):
        async def __call__(self, prompt: str) -> Reply:
            await super().__call__(prompt)
            return Reply(prompt * 2000, "stop")

    store = Store(tmp_path)
    store._conn().execute(f"PRAGMA max_page_count = {store._conn().execute('PRAGMA page_count').fetchone()[0] + 8}")
    caller = Big()
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(300)]
    with pytest.raises(StoreError, match=f"the response store {tmp_path} cannot be written: database or disk is full"):
        run_loop(store, caller, jobs, concurrency=2)
    assert len(caller.prompts) < 60  # only what was in flight when a commit first failed


def test_a_store_that_cannot_be_created_is_one_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match=f"the response store {tmp_path / 'file' / 'store'} cannot be written: "):
        Store(tmp_path / "file" / "store")


def test_a_damaged_or_newer_store_says_to_delete_it_or_upgrade_not_to_free_space(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.put("k", {"text": "stored"})
    store.close()
    database = tmp_path / "responses.sqlite3"
    for damage, words in ((lambda: database.write_bytes(database.read_bytes()[:3000]), "database disk image is malformed"),
                          (lambda: database.write_bytes(b"not sqlite" * 1000), "file is not a database")):
        damage()
        for suffix in ("-wal", "-shm"):
            database.with_name(database.name + suffix).unlink(missing_ok=True)
        with pytest.raises(StoreError) as info:
            Store(tmp_path)
        assert str(info.value) == (f"the response store {tmp_path} is damaged ({database}: {words}); it holds only replies "
                                   "that can be asked again: delete that file (or move it aside), or point --orbench-store "
                                   "elsewhere")
        assert info.value.says_fix
    database.unlink()
    Store(tmp_path)._conn().execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match=f"^the response store {tmp_path} was written by a newer pytest-orbench "
                                         r"\(store schema 99, this one reads up to \d\); upgrade, or point --orbench-store "
                                         "elsewhere$") as info:
        Store(tmp_path)
    assert info.value.says_fix


@pytest.mark.usefixtures("orbench_env")
def test_a_damaged_store_is_one_usage_error_saying_to_delete_it(pytester: pytest.Pytester) -> None:
    (pytester.path / ".orbench").mkdir()
    (pytester.path / ".orbench" / "responses.sqlite3").write_bytes(b"\0garbage" * 2000)
    result = pytester.runpytest_inprocess("--orbench", "--orbench-model=openai/m", "--orbench-offline",
                                          "--orbench-datasets=toxic", "--orbench-sample=2", "--orbench-seed=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the response store *.orbench is damaged (*responses.sqlite3: file is not a database); "
                                 "it holds only replies that can be asked again: delete that file (or move it aside), or "
                                 "point --orbench-store elsewhere (store: in orbench.yaml)"])
    assert "free space" not in result.stderr.str()


def test_stop_finishes_requests_in_flight_and_gives_the_rest_an_outcome(tmp_path: Path) -> None:
    class Slower(SlowCaller):
        def __init__(self) -> None:
            super().__init__()
            self.asked = asyncio.Event()

        async def __call__(self, prompt: str) -> Reply:
            self.asked.set()
            await asyncio.sleep(0.3)
            return await super().__call__(prompt)

    caller = Slower()
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(20)]

    async def main() -> None:
        stop = asyncio.Event()
        loop = FetchLoop(Store(tmp_path), lambda _config: caller, run_id="r", concurrency=2, retries=0)
        task = asyncio.create_task(loop.run(jobs, stop))
        await caller.asked.wait()  # a request is in flight
        stop.set()  # Ctrl-C: pytest stops the fetch
        await task

    asyncio.run(main())
    store = Store(tmp_path)
    finished = [j.key for j in jobs if store.get(j.key) is not None]
    assert set(caller.prompts) == {f"p{k[1:]}" for k in finished}  # every request made was stored
    assert 0 < len(finished) < 20
    waiter = Waiter(store, "r")
    assert all(waiter.result(j.key).error == "not requested: the run stopped before this prompt was asked"
               for j in jobs if j.key not in finished)


def test_the_stop_is_noted_in_the_store_before_the_replies_in_flight_are_waited_for(tmp_path: Path) -> None:
    # What an end-to-end test waits for before it lets the held replies through: "stopping" said before the stop was
    # sent, replies let through then came first, and their workers asked the next prompts (12 requests, not 8).
    class Held(SlowCaller):
        def __init__(self) -> None:
            super().__init__()
            self.asked = asyncio.Event()
            self.reply = asyncio.Event()

        async def __call__(self, prompt: str) -> Reply:
            self.prompts.append(prompt)
            self.asked.set()
            await self.reply.wait()
            return Reply(prompt.upper(), "stop")

    caller = Held()
    store = Store(tmp_path)
    jobs = [Job(f"k{i}", f"p{i}", i) for i in range(5)]

    def noted() -> str | None:
        state = store.run_state("r")
        return None if state is None else state.note

    async def main() -> None:
        stop = asyncio.Event()
        loop = FetchLoop(Store(tmp_path), lambda _config: caller, run_id="r", concurrency=2, retries=0)
        task = asyncio.create_task(loop.run(jobs, stop))
        await caller.asked.wait()  # the first call goes alone (gate.Gate): one request in flight
        stop.set()
        deadline = time.monotonic() + WAIT
        while noted() != STOPPING:
            assert time.monotonic() < deadline, f"still waiting after {WAIT:g} s for the stop's note"
            await asyncio.sleep(0.01)
        assert not task.done()  # still waiting for the reply in flight
        caller.reply.set()
        await task

    asyncio.run(main())
    assert caller.prompts == ["p0"]  # none asked after the stop
    assert store.get("k0") is not None and store.paid_keys("r") == {"k0"}


@pytest.mark.parametrize(("state", "message"), [
    ("never", "no fetching process started for this run within 0.2 s"),
    ("silent", "has said nothing for 30 s; it is taken for dead"),
    ("finished", "the fetcher finished without asking for this prompt"),
])
def test_every_wait_is_bounded(tmp_path: Path, state: str, message: str) -> None:
    store = Store(tmp_path)
    if state != "never":
        store.start_run("r", 1)
    if state == "silent":
        store._conn().execute("UPDATE runs SET heartbeat = ? WHERE run = 'r'", (time.time() - 60,))
    if state == "finished":
        store.finish_run("r", None)
    started = time.monotonic()
    waiter = Waiter(store, "r")
    outcome = waiter.result("k1", first_wait=0.2)
    assert outcome.error is not None and message in outcome.error and time.monotonic() - started < 5
    if state != "finished":  # the next prompt is not waited for as long again (a day, over a whole run)
        started = time.monotonic()
        assert waiter.result("k2", first_wait=30).error == outcome.error
        assert time.monotonic() - started < 10  # not the 30 s (or the 30 s of silence) a new wait would take
    store.start_run("r2", 1)
    dead = Waiter(store, "r2", dead=lambda key: "the fetch process exited with status 1: ImportError: litellm")
    assert dead.result("k1").error == "the fetch process exited with status 1: ImportError: litellm"


def test_a_fetcher_blocked_by_another_process_holding_the_store_is_waited_for(tmp_path: Path) -> None:
    # Another process held the store's write lock (a sqlite3 shell's BEGIN EXCLUSIVE, a backup) for over 30 s
    # mid-run: the fetcher, waiting for the lock, could not write its heartbeat, and every waiting test took it
    # for dead ("has said nothing for 30 s") while it went on and stored the replies nobody waited for.
    import sqlite3
    import threading

    store = Store(tmp_path)
    store.start_run("r", 1)
    store._conn().execute("UPDATE runs SET heartbeat = ? WHERE run = 'r'", (time.time() - 60,))
    looks: list[str] = []
    waiter = Waiter(Store(tmp_path), "r", dead=lambda key: looks.append(key))  # called before each look
    fetcher = Store(tmp_path)  # opened before the lock (opening writes)
    holder = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")

    def release_then_store() -> None:
        wait_for(lambda: waiter._locked_at > 0, "the waiter to see the lock held", 60)  # the waiter has seen the lock held (its heartbeat is 60 s old)
        holder.execute("COMMIT")
        seen = len(looks)
        wait_for(lambda: len(looks) > seen + 2, "the waiter to look again", 60)  # the fetcher, given the lock at last, writes a moment later: the
        fetcher.commit_batch("r", [("k1", {"text": "hi"})], [("k1", None, None, True, False)], 1, 0)  # waiter waited

    thread = threading.Thread(target=release_then_store)
    thread.start()
    outcome = waiter.result("k1")
    thread.join()
    assert outcome.error is None and outcome.record is not None and outcome.record["text"] == "hi"
    # Held for longer than the fetcher's own writes wait for it: bounded, and the message says what happened.
    store.start_run("r2", 1)
    store._conn().execute("UPDATE runs SET heartbeat = ? WHERE run = 'r2'", (time.time() - 200,))
    late = Waiter(Store(tmp_path), "r2")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        error = late.result("k2").error
    finally:
        holder.execute("COMMIT")
    assert error is not None and "has stored nothing for 180 s while another process holds the write lock" in error


def test_a_store_held_locked_by_another_process_is_named_as_such(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A run starting while another process holds the store's write lock waited the lock out (60 s), then said
    # "cannot be written: database is locked; point --orbench-store at a folder you can write to, on a disk
    # with free space": neither permissions nor space were the problem.
    import sqlite3

    from pytest_orbench.core import store_database as store_module
    Store(tmp_path).close()
    monkeypatch.setattr(store_module, "BUSY_SECONDS", 0.2)
    holder = sqlite3.connect(tmp_path / store_module.STORE_FILE, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(store_module.StoreLocked) as info:
            Store(tmp_path)
    finally:
        holder.execute("COMMIT")
    assert info.value.says_fix and str(info.value).startswith(f"the response store {tmp_path} is locked by another "
                                                              "process")
    assert "still after 0.2 s): end the process holding it" in str(info.value)


def test_a_wait_ends_when_the_fetching_process_clears_the_run(tmp_path: Path) -> None:
    # Ctrl-C under xdist: the controller stops the fetch and clears the run's rows while workers still wait;
    # they took the missing rows for a fetcher not started yet and waited on (until xdist killed them).
    store = Store(tmp_path)
    store.start_run("r", 2)
    looks: list[str] = []

    def clears_after_the_first_look(key: str) -> None:  # called before each look at the store
        looks.append(key)
        if len(looks) == 2:  # the run was seen once: the fetching process now clears it
            Store(tmp_path).clear_run("r")

    started = time.monotonic()
    outcome = Waiter(store, "r", dead=clears_after_the_first_look).result("k1", first_wait=30)
    assert outcome.error == "the run was stopped (interrupted) before this prompt's reply came"
    assert len(looks) == 2 and time.monotonic() - started < 10  # at once, not after the 30 s of first_wait


def test_a_fetcher_that_ends_while_a_test_waits_still_delivers_what_it_committed(tmp_path: Path) -> None:
    # The fetcher commits its last outcomes and ends between two looks of the waiter (a fast target:
    # 250 replies in 0.2 s). Whatever it committed is delivered, not "the fetch thread stopped".
    store = Store(tmp_path)
    store.start_run("r", 2)

    def finishes_now(key: str) -> str:
        store.commit_batch("r", [("k1", {"text": "hi"})], [("k1", None, None, True, False)], 1, 0)
        store.commit_batch("r", [], [("k2", "HTTP 503", None, True, False)], 2, 1)
        store.finish_run("r", None)
        return "the fetch thread stopped"

    assert Waiter(store, "r", dead=finishes_now).result("k1").record == {"text": "hi", "stored_at": pytest.approx(time.time(), abs=5)}
    store.clear_run("r")
    store.start_run("r", 2)
    ends_quietly = Waiter(store, "r", dead=lambda key: finishes_now(key) and None)
    assert ends_quietly.result("k2").error == "HTTP 503"  # finished between looks: the outcome, not "without asking"
    store.close()


def test_fetch_process_frames_roundtrip_and_end_of_input() -> None:
    import io

    from pytest_orbench.fetch.frame import read_frame, write_frame

    buffer = io.BytesIO()
    write_frame(buffer, ("work", {"text": "é" * 10}))
    write_frame(buffer, ("stop",))
    buffer.seek(0)
    assert read_frame(buffer) == ("work", {"text": "é" * 10})
    assert read_frame(buffer) == ("stop",)
    assert read_frame(buffer) is None


def test_a_fetch_child_that_dies_gives_errors_not_verdicts(tmp_path: Path) -> None:
    from pytest_orbench.fetch.child import FetchChild

    child = FetchChild()
    # Work the child cannot use: it crashes on start, as it would on any bug, a failed import or a kill.
    child.start({"store": tmp_path, "jobs": []})
    outcome = Waiter(Store(tmp_path), "r", dead=lambda key: child.dead()).result("k1", first_wait=60)
    child.stop(10)
    assert outcome.record is None and outcome.error is not None
    assert outcome.error.startswith("the fetch process exited with status 1") and "AttributeError" in outcome.error


def test_sending_the_work_does_not_wait_for_the_childs_litellm_import(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The work goes out at pytest_configure; a frame of thousands of jobs is larger than the pipe's
    buffer, and pytest (and xdist's workers) must not wait for the child's ~2 s litellm import."""
    import threading

    from pytest_orbench.fetch.child import FetchChild

    fake = tmp_path / "fake" / "litellm"
    fake.mkdir(parents=True)
    release = tmp_path / "release"
    # A litellm whose import lasts until the test says so (at most 60 s: nothing waits forever).
    fake.joinpath("__init__.py").write_text(
        f"import os, time\nend = time.monotonic() + 60\n"
        f"while not os.path.exists({str(release)!r}) and time.monotonic() < end:\n    time.sleep(0.02)\n",
        encoding="utf-8")
    monkeypatch.syspath_prepend(str(fake.parent))  # the child imports what this process would
    child = FetchChild()
    jobs = [Job(key=f"{i:064x}", prompt="How do I kill a Python process? " * 20, index=i) for i in range(3000)]
    sender = threading.Thread(target=child.start, args=({"store": tmp_path, "jobs": jobs},), daemon=True)
    sender.start()
    sender.join(timeout=20)
    sent_during_import = not sender.is_alive()
    release.touch()
    sender.join(timeout=60)
    child.stop(5)
    assert sent_during_import, "the parent waited for the child's litellm import to send its work"


def test_fetch_process_exits_at_once_when_its_parent_is_gone() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "pytest_orbench.fetch.child"], input=b"", capture_output=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == b""


def test_scrub_removes_keys_litellm_reads_by_itself_and_secret_named_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # A gateway that echoes the key it was given: the key came from OPENAI_API_KEY (read by litellm, not by us)
    # or from a variable only a header or proxy uses; neither may reach an error text.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-SUPERSECRET1234")
    monkeypatch.setenv("GATEWAY_TOKEN", "gw-0123456789abcdef")
    monkeypatch.setenv("ORBENCH_TRACE", "verbose-tracing")  # not named like a secret: left alone
    text = "401 Incorrect API key provided: sk-proj-SUPERSECRET1234 (gateway gw-0123456789abcdef), verbose-tracing"
    scrubbed = scrub(ModelSpec("openai/gpt-4o-mini"), text)
    assert "SUPERSECRET" not in scrubbed and "gw-0123" not in scrubbed
    assert scrubbed == "401 Incorrect API key provided: *** (gateway ***), verbose-tracing"


@pytest.mark.parametrize(("first_bytes", "message"), [
    # A TLS server's alert to a plain-HTTP request (OpenSSL's s_server, Java): named, with the fix.
    (b"\x15\x03\x01\x00\x02\x02\x46", "the server at 127.0.0.1:{port} answered in TLS, not HTTP (its first bytes are "
                                      "a TLS record): use https:// in api_base"),
    # Python's and Node's TLS servers just drop the connection: nothing tells that from a crash, so "may".
    (b"", "connection to 127.0.0.1:{port} closed before a reply (or the endpoint may expect https://)"),
    (b"SSH-2.0-OpenSSH_9.6\r\n", "malformed reply (not HTTP) from 127.0.0.1:{port} (or the endpoint may expect https://)"),
])
def test_an_http_api_base_on_a_server_that_speaks_no_http_says_so(first_bytes: bytes, message: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Real litellm over a real socket: the server reads the request, answers these bytes and closes. Once
    # all three read "closed before a reply" or "cannot connect to ...: 400, message: Bad status line".
    import socket
    import threading

    from pytest_orbench.calls.litellm_api import LiteLLMCaller

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                conn.settimeout(5)
                conn.recv(65536)
                conn.sendall(first_bytes)

    threading.Thread(target=serve, daemon=True).start()
    caller = LiteLLMCaller(ModelSpec("openai/m", api_base=f"http://127.0.0.1:{port}/v1", timeout=10))

    async def call() -> EndpointError:
        try:
            with pytest.raises(EndpointError) as caught:
                await caller("hi")
            return caught.value
        finally:
            await caller.aclose()

    try:
        error = asyncio.run(call())
    finally:
        server.close()
    assert str(error) == message.format(port=port)
    assert error.unreachable == (first_bytes != b"")  # a server that speaks no HTTP: every call the same


@pytest.mark.usefixtures("orbench_env")
def test_a_session_opens_the_store_once(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # The configure-time check, the preview (--orbench-max-cost) and the fetch's plan each opened it, each
    # time running the schema check and the day-old cleanup, and a WAL checkpoint on close.
    opened: list[Path] = []
    real_open = Store._open
    monkeypatch.setattr(Store, "_open", lambda self, directory: opened.append(directory) or real_open(self, directory))
    args = ("--orbench", "--orbench-model=openai/m", "--orbench-offline", "--orbench-datasets=toxic", "--orbench-sample=2",
            "--orbench-seed=1", "--orbench-max-cost=1", "-p", "no:cacheprovider")
    pytester.makefile(".yaml", orbench="litellm_kwargs: {input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}\n")
    result = pytester.runpytest_inprocess(*args)
    assert result.parseoutcomes()["errors"] == 2  # offline, nothing stored: an error each, no call
    assert opened == [pytester.path / ".orbench"]


class IdleChild:
    """A fetch process that never gets as far as starting its run (litellm still importing)."""

    pid = None

    def spawn(self) -> None: ...
    def start(self, work: object) -> None: ...
    def watch(self, on_death: object) -> None: ...
    def dismiss(self) -> None: ...
    def stop(self, wait: float) -> None: ...
    def dead(self) -> None: ...


def test_a_run_begun_moments_after_another_on_one_store_says_the_other_is_fetching(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two runs 1.5 s apart: the first's fetch process was still importing litellm when the second looked, so its
    # run was not in the store yet, and the second said nothing of it (both paid for every reply).
    import os
    from types import SimpleNamespace

    from pytest_orbench.fetch.coordinator import Coordinator
    from pytest_orbench.fetch.plan import Request
    from pytest_orbench.judging.registry import make_judge

    monkeypatch.setattr("pytest_orbench.fetch.child.FetchChild", IdleChild)
    settings = SimpleNamespace(store=tmp_path, concurrency=4, offline=False, base=None, batch=None, target=None, trials=1,
                               retries=0, store_max_age=None, max_cost=None, judge="keyword", judge_spec=None,
                               model="openai/m", system_prompt=None, timeout=5.0,
                               endpoint_spec=lambda: ModelSpec("openai/m"))
    requests = [Request(f"k{i}", f"p{i}") for i in range(3)]
    runs = [Coordinator(settings, make_judge("keyword"), f"run-{n}", fetches=True) for n in range(3)]  # type: ignore[arg-type]
    assert "another run" not in (runs[0].begin(requests) or "")
    said = runs[1].begin(requests) or ""
    assert (f"; another run (pid {os.getpid()}, started 0 s ago) is fetching into this store now (3 replies to go): what "
            "it has not stored yet is asked again here and paid twice; let it finish first to reuse its replies") in said
    for run in runs[:2]:
        run.stop()
    assert "another run" not in (runs[2].begin(requests) or "")  # both stopped: neither is fetching any more
    runs[2].stop()


def test_an_announced_run_counts_until_its_fetch_starts_or_it_ends(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.announce_run("a", 10)
    assert [(o.run, o.to_go) for o in store.other_runs("b")] == [("a", 10)] and store.other_runs("a") == []
    store.start_run("a", 10)
    store.heartbeat("a", 4, 0)
    assert [(o.run, o.to_go) for o in store.other_runs("b")] == [("a", 6)]  # its fetch process says how far it got
    store.clear_run("a")
    assert store.other_runs("b") == []
    store.announce_run("killed", 5)  # its pytest process died before its fetch process started: 2 minutes ago
    store._conn().execute("UPDATE announced SET started = started - 121")
    assert store.other_runs("b") == []
    store.close()
