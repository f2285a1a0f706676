"""Stored records that cannot be read (not JSON, or JSON of another shape) inside an intact store: missing,
asked again and said once; never judged, never an INTERNALERROR."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.calls.reply import Reply
from pytest_orbench.core.store import Store, record_problem
from pytest_orbench.core.store_database import STORE_FILE
from pytest_orbench.fetch.plan import Request, make_plan
from pytest_orbench.judging.registry import make_judge

# Each way a record can be damaged in place, the database itself intact (its pages pass quick_check). TEXT_NULL
# was read as an empty reply, a refusal: on the replies a regression newly answered, it hid the regression (PASS).
NOT_JSON, NOT_AN_OBJECT, TEXT_NULL = "not json{", "[1, 2]", '{"text": null, "finish_reason": "stop"}'
DAMAGES = (NOT_JSON, NOT_AN_OBJECT, TEXT_NULL)


def damage_records(store: Path, keys: list[str] | None = None, every: int = 1,
                   damages: tuple[str, ...] = DAMAGES) -> list[str]:
    """Overwrites stored records in place with `damages`, in turn: those of `keys` (a results file's `reply_key`s,
    say), or every `every`-th record in key order, in the store folder `store` (e.g. `.orbench`). Returns the keys
    damaged. The run's next read of one finds it damaged: it is asked again (offline: an error), never judged."""
    conn = sqlite3.connect(store / STORE_FILE)
    try:
        chosen = keys if keys is not None else [k for (k,) in conn.execute("SELECT key FROM responses ORDER BY key")][::every]
        with conn:
            for n, key in enumerate(chosen):
                conn.execute("UPDATE responses SET record = ? WHERE key = ?", (damages[n % len(damages)], key))
    finally:
        conn.close()
    return chosen


@pytest.mark.parametrize(("record", "problem"), [
    ({"text": "Sure."}, None),
    (Reply("Sure.", "stop", "m", 3, 4, 0.01, "fp").record() | {"seconds": 0.2, "attempts": 1, "batch_id": "b"}, None),
    ([1, 2], "JSON list, not an object"),
    ("text", "JSON str, not an object"),
    ({"finish_reason": "stop"}, "no text"),
    ({"text": None}, "text is null, not a string"),  # read as "" it was an empty reply: a refusal
    ({"text": 5}, "text is 5, not a string"),
    ({"text": "x", "finish_reason": 1}, "finish_reason is 1, not a string or null"),
    ({"text": "x", "cost": "0.1"}, 'cost is "0.1", not a number or null'),
    ({"text": "x", "attempts": True}, "attempts is true, not a number or null"),
    ({"text": "x", "usage": []}, "usage is [], not an object or null"),
    ({"text": "x", "usage": {"prompt_tokens": "7"}}, 'usage.prompt_tokens is "7", not a whole number or null'),
    # What it quotes is JSON: control characters escaped, inert in a terminal
    ({"text": "x", "usage": {"\x1b[2J": "\x1b]0;x\x07"}}, 'usage.\\u001b[2J is "\\u001b]0;x\\u0007", not a whole number or null'),
])
def test_a_record_of_another_shape_is_damaged(record: Any, problem: str | None) -> None:
    assert record_problem(record) == problem


def test_damaged_records_read_as_missing_and_say_why(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for key in ("good", "a", "b", "c"):
        store.put(key, Reply(f"reply {key}", "stop").record())
    damage_records(tmp_path, ["a", "b", "c"])
    assert store.get("a") is None and store.get("good") is not None
    assert set(store.get_many(["good", "a", "b", "c", "missing"])) == {"good"}
    assert store.damaged_records == {"a": "not JSON", "b": "JSON list, not an object", "c": "text is null, not a string"}
    store.put("a", Reply("asked again", "stop").record())  # the new reply takes its place
    assert store.get("a")["text"] == "asked again"  # type: ignore[index]
    # SQLite's columns have affinities, not types: a hand edit can leave a blob, or a word where the time was.
    store._conn().execute("UPDATE responses SET record = x'7b7d' WHERE key = 'b'")
    store.put("c", {"text": "fine"})
    store._conn().execute("UPDATE responses SET created = 'yesterday' WHERE key = 'c'")
    assert store.get("b") is None and store.get("c", max_age=60) is None and store.get_many(["b", "c"], 0.0) == {}
    assert (store.damaged_records["b"], store.damaged_records["c"]) == ("not JSON text (bytes)", "no time of storing")
    store.close()


def test_a_plan_asks_damaged_replies_and_judgements_again(tmp_path: Path) -> None:
    from pytest_orbench.core.endpoint import ModelSpec
    from pytest_orbench.judging.llm_calls import judge_key

    store = Store(tmp_path)
    requests = [Request(k, f"prompt {k}") for k in ("good", "null", "broken")]
    for request in requests:
        store.put(request.key, Reply("I can't help with that.", "stop").record())
    store.put("null", {"text": None, "finish_reason": "stop"})  # read as "", an empty reply: a refusal
    damage_records(tmp_path, ["broken"])
    plan = make_plan(store, make_judge("keyword"), requests, None)
    assert set(plan.stored) == {"good"} and [r.key for r in plan.misses] == ["null", "broken"]
    assert plan.damaged == {"null": "text is null, not a string", "broken": "not JSON"}
    # An LLM judge's stored judgement that is damaged: the reply is judged again, not read as "no class".
    judge = make_judge("llm", ModelSpec("openai/judge"))
    key = judge_key(judge, "prompt good", plan.stored["good"])
    assert key is not None
    store.put(key, Reply("[[1_full_compliance]]", "stop").record())
    damage_records(tmp_path, [key])
    judged = make_plan(store, judge, requests[:1], None, offline=True)
    assert judged.judged == {} and [r.key for r in judged.unjudged] == ["good"] and judged.damaged == {key: "not JSON"}
    store.close()


@pytest.mark.parametrize("stored", [("banana", "tampered"), (5, "a number"), (b"\xff", "a blob")])
def test_a_damaged_stored_verdict_is_judged_again_not_a_judge_failure(tmp_path: Path, stored: tuple[Any, Any]) -> None:
    # The keyword judge's verdicts kept in the store: a row of another word read as Verdict("banana"), a ValueError
    # blamed on the judge ("judge keyword failed"), an error where the reply had a verdict.
    from pytest_orbench.core.store import response_key
    from pytest_orbench.fetch.loop import Outcome
    from pytest_orbench.run.reply_judge import ReplyJudge

    store = Store(tmp_path)
    judge = make_judge("keyword")
    reply = Reply("Sure, here is how to kill a Python process: run kill -9 PID.", "stop").record()
    key = response_key({"verdict_of": judge.id, "version": judge.version, "prompt": "p", "reply": reply["text"],
                        "finish_reason": "stop"})
    store.put_verdicts([(key, "direct_refusal", "placeholder")])
    store._conn().execute("UPDATE verdicts SET verdict = ?, reason = ? WHERE key = ?", (*stored, key))
    (verdict,) = ReplyJudge(judge, "keyword", lambda: store).judged("p", [Outcome(record=reply)], ["k"]).verdicts
    assert not isinstance(verdict, str) and verdict == judge.decide("p", reply["text"], "stop")
    store.close()


def test_damaged_batch_rows_are_closed_unread_and_listed_without_a_crash(tmp_path: Path) -> None:
    # keys and counts are JSON in the batches table: json.loads raised out of the batch run and `orbench batches`.
    store = Store(tmp_path)
    store.add_batch("good", "openai http://x", "file-1", ["k1", "k2"], "in_progress")
    store.add_batch("bad", "openai http://x", "file-2", ["k3"], "in_progress")
    store.batch_status("good", "in_progress", {"completed": 1, "total": 2})
    store._conn().execute("UPDATE batches SET keys = 'nope' WHERE id = 'bad'")
    store._conn().execute("""UPDATE batches SET counts = '{"total": "\\u001b[2J", "completed": 1}' WHERE id = 'good'""")
    assert store.open_batches("openai http://x") == [("good", ["k1", "k2"])]
    rows = {row.id: row for row in store.batches(collected=True)}
    assert (rows["bad"].status, rows["bad"].collected, rows["bad"].prompts) == ("damaged (in_progress)", True, 0)
    assert rows["good"].counts == {"completed": 1}  # only numbers: a word there reached the terminal as it was
    store.close()
