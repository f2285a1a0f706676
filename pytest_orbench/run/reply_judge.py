"""The judge's verdict on each reply of a prompt, a built-in offline judge's kept in the store for the next run."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from pytest_orbench.calls.scrubbing import scrub
from pytest_orbench.core.store import Store, response_key
from pytest_orbench.core.store_database import StoreError
from pytest_orbench.fetch.loop import Outcome
from pytest_orbench.judging.judges import Judge, Judgement, Verdict
from pytest_orbench.judging.llm_calls import final_judgement, reply_text
from pytest_orbench.judging.registry import cached
from pytest_orbench.run.verdicts import Judged, needs_verdict

_VERDICTS = {verdict.value for verdict in Verdict}


class ReplyJudge:
    """Judges replies; the verdicts a cached judge made anew are kept until `save` writes them to the store."""

    def __init__(self, judge: Judge, judge_name: str, store: Callable[[], Store | None]) -> None:
        self.judge = judge
        self.cached = cached(judge_name)
        self._store = store  # the run's store while it is open (the coordinator's), else None
        self._new_verdicts: list[tuple[str, str, str]] = []

    def judged(self, prompt: str, outcomes: list[Outcome], keys: list[str]) -> Judged:
        """Each outcome with the judge's verdict on its reply (raises StoreError: the store, not the judge)."""
        return Judged(outcomes, [self._verdict(prompt, o) if needs_verdict(o) else None for o in outcomes], keys)

    def _verdict(self, prompt: str, outcome: Outcome) -> Judgement | str:
        assert outcome.record is not None
        try:
            return self._judgement(prompt, outcome.record, outcome.judge)
        except StoreError:
            raise  # the store, not the judge: the run stops (PromptRun.record)
        except Exception as exc:  # a custom judge that raised or returned something that is no verdict
            return scrub(None, f"judge {self.judge.id} failed: {type(exc).__name__}: {exc}")

    def _judgement(self, prompt: str, reply: dict[str, Any], judged: dict[str, Any] | None) -> Judgement:
        """The judge's verdict; a built-in offline judge's verdict on a stored reply is kept in the store
        (keyed by judge id and version, prompt and reply), so a re-run does not judge it again."""
        store = self._store()
        if not self.cached or store is None:
            return final_judgement(self.judge, prompt, reply, judged)
        key = response_key({"verdict_of": self.judge.id, "version": self.judge.version, "prompt": prompt,
                            "reply": reply_text(reply), "finish_reason": reply.get("finish_reason")})
        found = store.verdict(key)
        if found is not None and found.verdict in _VERDICTS:  # another word there: a damaged row, judged again
            return Judgement(Verdict(found.verdict), found.reason)
        judgement = final_judgement(self.judge, prompt, reply, judged)
        self._new_verdicts.append((key, judgement.verdict.value, judgement.reason))
        return judgement

    def save(self) -> None:
        """Writes the verdicts made anew to the store (while it is open)."""
        rows, self._new_verdicts = self._new_verdicts, []
        store = self._store()
        if rows and store is not None:
            try:
                store.put_verdicts(rows)
            except (OSError, sqlite3.Error):
                pass  # a cache of what the keyword judge decides in microseconds (a full disk): decided again next run
