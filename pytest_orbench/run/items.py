"""The prompt tests: one pytest item per prompt, grouped under a node per dataset.

An item holds the requests of its prompt (a trial each, under the configuration tested and the live
base); the run (`prompt_run.PromptRun`) fetches and judges, the item turns the verdict into
pass / xfail / fail / skip.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import pytest

from pytest_orbench.core.datasets.prompts import Prompt
from pytest_orbench.core.records import PromptRecord
from pytest_orbench.fetch.loop import Outcome
from pytest_orbench.judging.judges import Verdict
from pytest_orbench.render.terminal import term_safe
from pytest_orbench.run.keys import Requests


class Run(Protocol):
    """What a prompt test asks of the run (prompt_run.PromptRun): its replies, then its record (made and handed
    over for the results), and with --orbench-strict what the compared side said."""

    @property
    def runs_no_test(self) -> bool: ...

    def replies(self, item: PromptItem) -> tuple[list[Outcome], list[Outcome]]: ...
    def record(self, item: PromptItem, outcomes: list[Outcome], base_outcomes: list[Outcome],
               error: str | None = None) -> PromptRecord: ...
    def strict_before(self, item: PromptItem, record: PromptRecord) -> bool | None: ...


@functools.cache
def _marks() -> tuple[pytest.MarkDecorator, ...]:
    """Every prompt test's marks, made once and shared (a mark is immutable; 1,974 prompts made 3,948)."""
    # filterwarnings: the reply is fetched by litellm in a background thread while the item runs, and
    # warning filters are process-wide: a user's `filterwarnings = error` must not turn litellm's own
    # warnings into failed endpoint calls. No user code runs inside a prompt item.
    return pytest.mark.orbench, pytest.mark.filterwarnings("ignore")


class DatasetNode(pytest.Collector):
    """Groups one dataset's prompt tests: node id `orbench/<dataset>`."""

    def collect(self) -> list[pytest.Item]:
        return []  # items are created by collection.collect


_NONE: list[Outcome] = []  # an item's outcomes before its setup and after its teardown (never appended to)
_NO_KEYWORDS: set[str] = set()  # every prompt item's extra_keyword_matches: its keywords are listextrakeywords'


class PromptItem(pytest.Item):
    """One prompt sent to the endpoint; passes when the behaviour matches the expectation."""

    def __init__(self, *, prompt: Prompt, requests: Requests, plugin: Run, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt = prompt
        self.requests = requests
        self.plugin = plugin
        self.outcomes: list[Outcome] = _NONE  # one per trial, from setup to teardown
        self.base_outcomes: list[Outcome] = _NONE  # the live base's, one per trial
        for mark in _marks():
            self.add_marker(mark)
        # -k "hard-1k and privacy", -k "refuse": dataset, category and expectation are keywords; and the prompt's
        # id, as the gate, the comment and the results print it: -k hard-1k-0018 runs that prompt. Made when -k
        # asks (listextrakeywords), not kept: a set per item was ~450 B a prompt, 34 MiB at 80,000 (issue 37).
        self.extra_keyword_matches = _NO_KEYWORDS

    def listextrakeywords(self) -> set[str]:
        prompt = self.prompt
        return {prompt.dataset, prompt.category, prompt.expected, prompt.id, *super().listextrakeywords()}

    def setup(self) -> None:
        if self.plugin.runs_no_test:
            return  # --setup-only / --setup-plan: the reply is this test's work, not its setup; nothing is asked
        self.outcomes, self.base_outcomes = self.plugin.replies(self)
        usable = [o for o in self.outcomes if o.error is None and o.judge_error is None]
        if usable:
            return  # some trials may have failed: the others decide, and the failures are counted
        first = self.outcomes[0]
        if first.error is not None:
            self.plugin.record(self, self.outcomes, self.base_outcomes, error=first.error)
            # pytrace=False: the endpoint's message, not a traceback of the plugin.
            pytest.fail(f"no reply for {term_safe(self.prompt.id, 200)}: {term_safe(first.error, 500)}", pytrace=False)
        assert first.judge_error is not None
        self.plugin.record(self, self.outcomes, self.base_outcomes, error=first.judge_error)
        pytest.fail(f"no judgement for {term_safe(self.prompt.id, 200)}: {term_safe(first.judge_error, 500)}", pytrace=False)

    def runtest(self) -> None:
        record = self.plugin.record(self, self.outcomes, self.base_outcomes)
        if record["verdict"] == Verdict.ERROR.value:
            pytest.fail(f"judge failed on {term_safe(self.prompt.id, 200)}: "
                        f"{term_safe(record['error'] or 'no reason given', 500)}", pytrace=False)
        if record["verdict"] == Verdict.UNSCORED.value:
            # Not an answer, not a refusal: excluded from the rates, counted apart, never guessed.
            pytest.skip(f"unscored: {term_safe(record['judge_reason'], 200)}")
        before = self.plugin.strict_before(self, record)
        if before is not None and record["refused"] is not None:
            worse = record["refused"] and not before if self.prompt.expected == "answer" else before and not record["refused"]
            if worse:
                what = "newly refused (the baseline answered it)" if self.prompt.expected == "answer" else \
                    "newly answered (the baseline refused it)"
                pytest.fail(f"--orbench-strict: {what}: {record['verdict']} ({term_safe(record['judge_reason'], 120)})",
                            pytrace=False)
        if not record["matched"]:
            what = "over-refusal" if self.prompt.expected == "answer" else "complied with a prompt that should be refused"
            message = f"{what}: {record['verdict']} ({term_safe(record['judge_reason'], 120)})"
            if self.config.option.runxfail:
                # --runxfail makes pytest.xfail a no-op, which would pass the mismatch; "as if not marked" is a failure.
                pytest.fail(message, pytrace=False)
            pytest.xfail(message)

    def teardown(self) -> None:
        # The replies are judged and their record handed over: an item kept them (and every reply's text with
        # them) until the session ended, ~1.7 KB a prompt (issue 37).
        self.outcomes, self.base_outcomes = _NONE, _NONE  # one shared empty list: not two lists per prompt

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        # The verdict is the message; a traceback through the plugin says nothing and costs
        # ~0.1 s per xfail to format (measured: 86 s of a 97 s run of 1,974 prompts).
        if isinstance(excinfo.value, (pytest.fail.Exception, pytest.xfail.Exception)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, term_safe(self.prompt.id, 200)  # the failure headline: an id is untrusted text
