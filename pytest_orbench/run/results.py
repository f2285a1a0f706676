"""The run's results, on the controller only: each prompt's record from its test's reports, then the results
document (gate, baseline update), the outputs, the exit status and the terminal summary.

Registered by `session.OrbenchPlugin` on the xdist controller or the only pytest process (as pytest's
junitxml plugin is), never on a worker: workers send their records in the test reports.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from pytest_orbench.analysis.baseline import baseline_document, drift, save_baseline
from pytest_orbench.analysis.gate import BLOCKING, assess, mark_stopped
from pytest_orbench.analysis.summary import results_document, served_versions, summarize
from pytest_orbench.core.records import LIVE_BASE, BaselineDocument, PromptRecord, ResultsDocument
from pytest_orbench.judging.judges import Verdict
from pytest_orbench.render.outputs import write_outputs
from pytest_orbench.run import completeness
from pytest_orbench.run.dry_run import dry_run
from pytest_orbench.run.fetch_end import Fetched
from pytest_orbench.run.handover import RecordHandover
from pytest_orbench.run.metadata import RunFacts
from pytest_orbench.run.progress import ProgressDisplay
from pytest_orbench.run.record_sums import (
    LIVE_BASE_IDENTICAL,
    base_record,
    endpoint_error,
    mark_shared,
    never_asked,
    spend,
)
from pytest_orbench.run.terminal_summary import nothing_ran, write_summary
from pytest_orbench.run.verification import attach_verification, verify_flips

if TYPE_CHECKING:
    from pathlib import Path


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
        write_outputs(self.results, json=s.json, markdown=s.markdown, svg=s.svg, junit=s.junit,
                      markdown_max_chars=s.markdown_max_chars, failed=self.unwritten, html=s.html,
                      reference=reference, store=self.fetched.store() if s.html else None,
                      labels=s.judge_labels is not None)
        self._set_exit_status(session, records)

    def _assemble(self, session: pytest.Session, exitstatus: int
                  ) -> tuple[list[PromptRecord], BaselineDocument | None]:
        """The results document (`self.results`): the run section, the summaries, the comparison and the gate,
        and the baseline update. Returns the records in the datasets' order, and what they were compared with."""
        order = {p.id: n for n, p in enumerate(p for d in self.facts.datasets for p in d.prompts)}
        records = sorted(self.records.values(), key=lambda r: order.get(r["id"], len(order)))
        # Calls, tokens and cost are counted once per reply: prompts with identical text share theirs.
        owners = mark_shared(records)
        run = self.facts.run_meta()
        run["calls"] = {
            "made": sum(r.get("calls_made", int(r["fetched"])) for r in owners),
            "stored": sum(r.get("calls_stored", int(r["from_store"])) for r in owners),
            # Replies the endpoint failed to give, the live base's included (its calls are counted in `made`
            # too); a reply the judge left without a judgement is the judge's error, not the endpoint's.
            "errors": sum(endpoint_error(r) + endpoint_error(r.get("base") or {}) for r in owners),
            # Of those, the prompts never asked: the calls had stopped (a rejected key, a refused connection).
            "prompts": len(records),
            "shared": len(records) - len(owners),
        }
        never = sum(never_asked(r) + never_asked(r.get("base") or {}) for r in owners)
        if never:
            run["calls"]["not_requested"] = never
        # Calls made for prompt tests that then did not run (-x, Ctrl-C after the fetch got ahead): paid for
        # and stored, but in no record; counted apart so the run's calls and spend are not mistaken for all of it.
        unrun = self.fetched.fetch_end(self.records.keys()).not_run
        if unrun:
            run["calls"]["fetched_not_run"] = unrun
        run["spend"] = {"endpoint": spend([(r["cost"], r["usage"]) for r in owners])}
        if self.settings.base is not None:
            run["spend"]["base"] = spend([(r["base"]["base_cost"], r["base"]["base_usage"]) for r in owners if "base" in r])
        if self.facts.judge.llm is not None:
            # Per reply (every trial, the live base's too): what went to the LLM judge, the calls paid for now
            # (replies judged alike share one call) and the replies it left without a judgement.
            run["judge_calls"] = {
                "sent_to_llm": sum(r["judge_sent"] for r in owners),
                "decided_without_llm": sum(r["judge_decided"] for r in owners),
                "made": sum(r["judge_calls_made"] for r in owners),
                "errors": sum(r["judge_errors"] for r in owners),
            }
            run["spend"]["judge"] = spend([(r["judge_cost"], r["judge_usage"]) for r in owners])
        run["served"] = served_versions(records)
        run["started"] = datetime.fromtimestamp(self.facts.started, UTC).isoformat(timespec="seconds")
        run["duration_seconds"] = round(time.time() - self.facts.started, 2)
        expected = {d.name: d.expected for d in self.facts.datasets}
        s = self.settings
        run["compared_with"] = (LIVE_BASE if s.base is not None else
                                f"baseline file {s.baseline}" if self.facts.baseline is not None else None)
        reference, base_results = self._reference(records, expected)
        uncompared = None
        if s.base is not None and not run.get("base", {}).get("differs"):
            # The base asks exactly what the run asks (same model, endpoint, parameters and system prompt):
            # its replies are the run's own, so a comparison would check the run against itself.
            reference, run["compared_with"], uncompared = None, None, LIVE_BASE_IDENTICAL
        elif s.update_baseline and s.baseline is not None and s.base is None:
            # The file it names is to be written, not read: say so instead of "no baseline".
            uncompared = (f"this run writes the baseline {s.baseline} (--orbench-update-baseline), so it is not "
                          "compared with the one there before")
        verification = None
        if s.verify_flips and reference is not None:
            # The flips decide a paired gate: the LLM judge's verdicts replace the offline judge's on them (and on
            # the compared side's replies where stored) before anything is counted.
            store = self.fetched.store(open_it=True)
            assert store is not None
            reference, verification = verify_flips(s, records, reference, store)
            if s.base is not None:
                _, base_results = self._reference(records, expected)
        results = results_document(run, summarize(records, expected), records)
        results["judge_audit"] = self.facts.judge_audit(records)
        if base_results is not None:
            results["base"] = {"run": {k: base_results["run"][k] for k in ("endpoint", "system_prompt_sha256", "served")},
                               "datasets": {n: {k: d[k] for k in ("n", "refused", "rejection_rate", "ci95", "errors", "flaky")}
                                            for n, d in base_results["datasets"].items()}}
            if self.facts.baseline is not None:
                results["drift"] = drift(self.facts.baseline, base_results, s.gate.alpha)
        self.results = assess(results, reference, s.gate, uncompared)
        if verification is not None:
            attach_verification(self.results, verification)
        stopped = completeness.stopped(session, exitstatus, self.fetched.scheduled, self.facts.datasets,
                                         self.records.keys(), len(records))
        if stopped:
            mark_stopped(self.results["gate"], stopped, stored=unrun)
        if s.update_baseline and s.baseline is not None:
            reason = stopped or completeness.incomplete(s, self.facts.datasets, records)
            self.results["run"]["baseline_update"] = {"path": str(s.baseline), "written": reason is None, "reason": reason}
            if reason is None:
                try:
                    save_baseline(s.baseline, self.results)
                except OSError as exc:  # a full disk: said, and the run fails, instead of a traceback and no summary
                    self.results["run"]["baseline_update"].update(
                        written=False, reason=f"writing it failed: {exc.strerror or exc}")
        return records, reference

    def _reference(self, records: list[PromptRecord], expected: dict[str, str]
                   ) -> tuple[BaselineDocument | None, ResultsDocument | None]:
        """What the run is compared with: the baseline file, or the live base (the same prompts asked under the
        base configuration in this session, as a results document of its own)."""
        if self.settings.base is None:
            return self.facts.baseline, None
        base_records = [base_record(r) for r in records if "base" in r]
        base_run = self.facts.run_meta(1)
        base_run["served"] = served_versions(base_records)
        base_results = results_document(base_run, summarize(base_records, expected), base_records)
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
            write_summary(terminalreporter, self.results, self.settings, self.fetched.fetch_end(self.records.keys()),
                          self.unwritten, self.forgiven_errors)
            return
        if not self.records and self.facts.datasets and not dry_run(terminalreporter.config):
            # Everything deselected (-k, -m, node ids) or stopped before the first prompt: say so. The calls
            # may have started while pytest collected, and answers paid for are stored: say that too.
            terminalreporter.write_line(nothing_ran(self.fetched.fetch_end(())), yellow=True)
        if self.not_written is not None:
            terminalreporter.write_line(f"baseline NOT written: {self.not_written}; {self.settings.baseline} is "
                                        "unchanged", red=True, bold=True)
