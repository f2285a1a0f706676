"""The run's results, on the controller only: each prompt's record from its test's reports, then the results
document (gate, baseline update), the outputs, the exit status and the terminal summary.

Registered by `session.OrbenchPlugin` on the xdist controller or the only pytest process (as pytest's
junitxml plugin is), never on a worker: workers send their records in the test reports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_orbench.analysis.baseline import baseline_document
from pytest_orbench.analysis.document import BaselineUpdate, Reference, build_results, plain_document, run_section
from pytest_orbench.analysis.gate import BLOCKING
from pytest_orbench.core.records import LIVE_BASE, BaselineDocument, PromptRecord, ResultsDocument
from pytest_orbench.judging.judges import Verdict
from pytest_orbench.render.outputs import write_outputs
from pytest_orbench.run import completeness
from pytest_orbench.run.dry_run import dry_run
from pytest_orbench.run.fetch_end import Fetched, FetchEnd
from pytest_orbench.run.handover import RecordHandover
from pytest_orbench.run.metadata import RunFacts
from pytest_orbench.run.progress import ProgressDisplay
from pytest_orbench.run.record_sums import LIVE_BASE_IDENTICAL, base_record, mark_shared
from pytest_orbench.run.terminal_summary import nothing_ran, write_summary

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_orbench.render.html_data import Replies


class RunResults:
    """Collects the records of the prompt tests and turns them into the run's results."""

    def __init__(self, facts: RunFacts, fetched: Fetched, progress: ProgressDisplay, handover: RecordHandover) -> None:
        self.facts = facts
        self.fetched = fetched
        self.progress = progress
        self.handover = handover
        self.settings = facts.settings
        self.records: dict[str, PromptRecord] = {}
        self.results: ResultsDocument | None = None
        self.ended: FetchEnd | None = None  # the fetch as the results found it (with `results`)
        self.forgiven_errors = 0
        self.not_written: str | None = None  # why --orbench-update-baseline wrote nothing, when no prompt ran
        self.unwritten: dict[Path, str] = {}  # output files that could not be written (a full disk), and why

    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter writes: the progress status goes first
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.progress.result()
            return  # its user properties are those of the setup or call report, read already
        self.progress.done_waiting()
        record = self.handover.take_record(report)
        if record is not None:
            self.records[record["id"]] = record

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.records:
            if self.settings.update_baseline and self.settings.baseline is not None and not dry_run(session.config):
                # Asked for a baseline, got none: as any run that cannot become one, the session fails.
                self.not_written = ("no prompt ran (every prompt test was deselected, or the session stopped before the "
                                    "first); a baseline needs every prompt")
                if session.exitstatus == pytest.ExitCode.OK:
                    session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        records, reference = self._assemble(session, exitstatus)
        s = self.settings
        assert self.results is not None
        write_outputs(self.results, s.outputs,
                      markdown_max_chars=s.markdown_max_chars, failed=self.unwritten, reference=reference,
                      replies=self._replies() if s.outputs.get("html") else None, labels=s.judge_labels is not None)
        self._set_exit_status(session, records)

    def _replies(self) -> Replies:
        """Where the review page reads whole replies: the store, opened again (the fetch closed it when it
        stopped; pytest_unconfigure closes it), or why it cannot be (the page says so on each reply)."""
        from pytest_orbench.render.html_data import Replies

        try:
            store = self.fetched.store(open_it=True)
        except Exception as exc:  # noqa: BLE001 - the page then says why on each reply; the run goes on
            return Replies(None, self.settings.store, f"{exc}" or type(exc).__name__)
        return Replies(store, self.settings.store)

    def _assemble(self, session: pytest.Session, exitstatus: int
                  ) -> tuple[list[PromptRecord], BaselineDocument | None]:
        """The results document (`self.results`): the run section, the summaries, the comparison and the gate,
        and the baseline update. Returns the records in the datasets' order, and what they were compared with."""
        order = {p.id: n for n, p in enumerate(p for d in self.facts.datasets for p in d.prompts)}
        records = sorted(self.records.values(), key=lambda r: order.get(r["id"], len(order)))
        # Calls, tokens and cost are counted once per reply: prompts with identical text share theirs.
        owners = mark_shared(records)
        run = self.facts.run_meta()
        expected = {d.name: d.expected for d in self.facts.datasets}
        s = self.settings
        compared_with = (LIVE_BASE if s.base is not None else
                         f"baseline file {s.baseline}" if self.facts.baseline is not None else None)
        reference, base_results = self._reference(records, expected)
        uncompared = None
        if s.base is not None and not run.get("base", {}).get("differs"):
            # The base asks exactly what the run asks (same model, endpoint, parameters and system prompt):
            # its replies are the run's own, so a comparison would check the run against itself.
            reference, compared_with, uncompared = None, None, LIVE_BASE_IDENTICAL
        elif s.update_baseline and s.baseline is not None and s.base is None:
            # The file it names is to be written, not read: say so instead of "no baseline".
            uncompared = (f"this run writes the baseline {s.baseline} (--orbench-update-baseline), so it is not "
                          "compared with the one there before")
        # Calls made for prompt tests that then did not run (-x, Ctrl-C after the fetch got ahead): paid for
        # and stored, but in no record; counted apart so the run's calls and spend are not mistaken for all of it.
        self.ended = self.fetched.fetch_end(self.records.keys())  # (one pass over every prompt's keys)
        unrun = self.ended.not_run
        run_section(run, records, owners, unrun=unrun, live_base=s.base is not None,
                    llm_judge=self.facts.judge.llm is not None, started=self.facts.started, compared_with=compared_with)
        verification = None
        if s.verify_flips and reference is not None:
            # The flips decide a paired gate: the LLM judge's verdicts replace the offline judge's on them (and on
            # the compared side's replies where stored) before anything is counted.
            store = self.fetched.store(open_it=True)
            assert store is not None
            from pytest_orbench.run.verification import verify_flips  # (only runs that verify)

            spent = sum(part.get("cost_usd") or 0.0 for part in run.get("spend", {}).values())
            reference, verification = verify_flips(s, records, reference, store, spent)
            if s.base is not None:
                # The live base's verified verdicts are in each record's `base`: both the comparison and the base's
                # own summary are made again from them (the reference `verify` returns holds a baseline file's).
                reference, base_results = self._reference(records, expected)
        stopped = completeness.stopped(session, exitstatus, self.fetched.scheduled, self.facts.datasets,
                                       self.records.keys())
        update = None
        if s.update_baseline and s.baseline is not None:
            update = BaselineUpdate(s.baseline, stopped or completeness.incomplete(s, self.facts.datasets, records))
        self.results = build_results(
            run, records, expected,
            Reference(s.gate, reference, uncompared, base_results, self.facts.baseline if base_results else None),
            judge_audit=self.facts.judge_audit(records), verification=verification, stopped=stopped, stored=unrun,
            update=update)
        return records, reference

    def _reference(self, records: list[PromptRecord], expected: dict[str, str]
                   ) -> tuple[BaselineDocument | None, ResultsDocument | None]:
        """What the run is compared with: the baseline file, or the live base (the same prompts asked under the
        base configuration in this session, as a results document of its own)."""
        if self.settings.base is None:
            return self.facts.baseline, None
        base_records = [base_record(r) for r in records if "base" in r]
        base_results = plain_document(self.facts.run_meta(1), base_records, expected)
        return baseline_document(base_results), base_results

    def _set_exit_status(self, session: pytest.Session, records: list[PromptRecord]) -> None:
        """The gate decides: a failed or inconclusive gate fails the run; endpoint errors within the
        error budget do not (their tests still show as errors)."""
        assert self.results is not None
        update = self.results["run"].get("baseline_update")
        if self.results["gate"]["verdict"] in BLOCKING or (update and not update["written"]) or self.unwritten:
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        errors = sum(1 for r in records if r["verdict"] == Verdict.ERROR.value)
        if errors and session.exitstatus == pytest.ExitCode.TESTS_FAILED and session.testsfailed == errors:
            session.exitstatus = pytest.ExitCode.OK
            self.forgiven_errors = errors

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.results is not None:
            assert self.ended is not None
            write_summary(terminalreporter, self.results, self.settings, self.ended,
                          self.unwritten, self.forgiven_errors)
            return
        if not self.records and self.facts.datasets and not dry_run(terminalreporter.config):
            # Everything deselected (-k, -m, node ids) or stopped before the first prompt: say so. The calls
            # may have started while pytest collected, and answers paid for are stored: say that too.
            terminalreporter.write_line(nothing_ran(self.fetched.fetch_end(())), yellow=True)
        if self.not_written is not None:
            terminalreporter.write_line(f"baseline NOT written: {self.not_written}; {self.settings.baseline} is "
                                        "unchanged", red=True, bold=True)
