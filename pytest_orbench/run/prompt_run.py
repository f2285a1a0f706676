"""What a prompt test asks of the run: its replies from the fetch, and its record, judged and handed over."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import NoReturn

import pytest

from pytest_orbench.core.records import REPORT_PROPERTY, PromptRecord
from pytest_orbench.core.store_database import StoreError
from pytest_orbench.fetch.coordinator import Coordinator
from pytest_orbench.fetch.loop import Outcome
from pytest_orbench.fetch.plan import Request
from pytest_orbench.run.dry_run import dry_run
from pytest_orbench.run.fetch_start import unusable_store
from pytest_orbench.run.handover import RecordHandover
from pytest_orbench.run.items import PromptItem
from pytest_orbench.run.progress import ProgressDisplay
from pytest_orbench.run.reply_judge import ReplyJudge
from pytest_orbench.run.verdicts import error_record, prompt_record


class PromptRun:
    """The run as the prompt tests see it (`items.Run`)."""

    def __init__(self, config: pytest.Config, coordinator: Coordinator, progress: ProgressDisplay, judging: ReplyJudge,
                 handover: RecordHandover, *, strict: bool, baseline_refused: Mapping[str, bool | None],
                 digest: bool) -> None:
        self.config = config
        self.coordinator = coordinator
        self.progress = progress
        self.judging = judging
        self.handover = handover
        self.strict = strict
        self.baseline_refused = baseline_refused
        self.digest = digest  # with judge_labels: records name the reply they show (verdicts.prompt_record)

    @functools.cached_property
    def runs_no_test(self) -> bool:
        """`dry_run.dry_run`, read once per session by the prompt tests (it was ~20 us a test)."""
        return dry_run(self.config)

    def replies(self, item: PromptItem) -> tuple[list[Outcome], list[Outcome]]:
        """The outcome of each trial: under the configuration tested, and under the live base."""
        return ([self._outcome(item, r) for r in item.requests.head],
                [self._outcome(item, r) for r in item.requests.base])

    def _outcome(self, item: PromptItem, request: Request) -> Outcome:
        try:
            return self.coordinator.outcome(request, item.prompt.id)
        except StoreError as exc:
            self.store_failed(item, exc)
        finally:
            self.progress.done_waiting()

    def record(self, item: PromptItem, outcomes: list[Outcome], base_outcomes: list[Outcome],
               error: str | None = None) -> PromptRecord:
        """The prompt's record, handed over for the results: its replies judged, or the `error` that left every
        trial without a verdict."""
        prompt, requests = item.prompt, item.requests
        if error is not None:
            base = self.judging.judged(prompt.text, base_outcomes, [r.key for r in requests.base])
            record = error_record(prompt, error, outcomes, base, self.digest)
        else:
            try:
                head = self.judging.judged(prompt.text, outcomes, [r.key for r in requests.head])
                base = self.judging.judged(prompt.text, base_outcomes, [r.key for r in requests.base])
            except StoreError as exc:
                self.store_failed(item, exc)
            record = prompt_record(prompt, head, base, self.digest)
        self.handover.hand_over(item, record)
        return record

    def strict_before(self, item: PromptItem, record: PromptRecord) -> bool | None:
        """With --orbench-strict: whether the compared side (the live base, or the baseline) refused the prompt."""
        if not self.strict:
            return None
        return record["base"]["refused"] if "base" in record else self.baseline_refused.get(item.prompt.id)

    def store_failed(self, item: PromptItem, exc: StoreError) -> NoReturn:
        """The store failed under a test (damaged since the run began): the run stops with its message, which
        the gate's "completeness" check quotes (inconclusive); never an internal error."""
        message = unusable_store(exc)
        item.session.shouldstop = message
        if not any(name == REPORT_PROPERTY for name, _ in item.user_properties):
            # a result, so that the gate says inconclusive
            self.handover.hand_over(item, error_record(item.prompt, message, None, None, self.digest))
        pytest.fail(message, pytrace=False)
