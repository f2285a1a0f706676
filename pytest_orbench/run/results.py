"""The run's results, on the controller only: each prompt's record, then the gate, the outputs, the
baseline update, the exit status and the terminal summary.

Registered by `session.OrbenchPlugin` on the xdist controller or the only pytest process (as pytest's
junitxml plugin is), never on a worker: workers send their records in the test reports.
"""

from __future__ import annotations

from collections.abc import Collection, Generator
from typing import TYPE_CHECKING, Any, Protocol, cast

import pytest

from pytest_orbench.analysis.baseline import BaselineError, baseline_document, load_baseline
from pytest_orbench.analysis.document import BaselineUpdate, Reference, build_results, plain_document, run_section
from pytest_orbench.analysis.gate import BLOCKING
from pytest_orbench.analysis.summary import summarize
from pytest_orbench.core import records as records_module
from pytest_orbench.core.datasets import Dataset
from pytest_orbench.core.records import (
    LIVE_BASE,
    REPORT_PROPERTY,
    BaselineDocument,
    PromptRecord,
    ResultsDocument,
    RunMeta,
)
from pytest_orbench.judging.judges import Judge, Verdict
from pytest_orbench.render.outputs import FORMATS, write_outputs
from pytest_orbench.render.terminal import (
    drift_lines,
    gate_lines,
    judge_audit_lines,
    term_safe,
    terminal_lines,
    xfail_line,
)
from pytest_orbench.run.progress import ProgressDisplay
from pytest_orbench.run.settings import Settings

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_orbench.fetch.coordinator import Coordinator


class Run(Protocol):
    """What the results ask of the run (session.OrbenchPlugin)."""

    settings: Settings
    judge: Judge
    datasets: list[Dataset]
    baseline: BaselineDocument | None
    scheduled: set[str] | None
    started: float
    progress: ProgressDisplay
    coordinator: Coordinator

    def run_meta(self, config: int = 0) -> RunMeta: ...
    def keys_of(self, prompt_ids: Collection[str]) -> set[str]: ...
    def take_record(self, report: pytest.TestReport) -> PromptRecord | None: ...
    def judge_audit(self, records: list[PromptRecord]) -> dict[str, Any] | None: ...


# pytest options after which it only shows something (what would run, fixtures, markers) and runs no test.
# (--setup-plan sets setuponly in its own pytest_configure, after this plugin's: both are read. --help needs
# no entry: plugin.pytest_configure builds no session under it.)
DRY_RUN_OPTIONS = ("collectonly", "setuponly", "setupplan", "showfixtures", "show_fixtures_per_test", "markers")


def dry_run(config: pytest.Config) -> bool:
    """pytest runs no test in this session (--collect-only, --setup-plan, --fixtures, ...): no prompt is asked."""
    return any(getattr(config.option, name, False) for name in DRY_RUN_OPTIONS)



LIVE_BASE_IDENTICAL = ("the live base is the run's own configuration (nothing differs: model, endpoint, parameters and "
                       "system prompt are the same), so nothing was compared")
_BASE_ONLY = ("fetched", "served_model", "system_fingerprint", "base_cost", "base_usage")
_IDENTITY = ("id", "dataset", "category", "expected", "prompt_sha256", "prompt")


def base_record(record: PromptRecord) -> PromptRecord:
    """The prompt as the live base answered it, as a record of its own (for the base run's summaries)."""
    base = record["base"]
    return cast(PromptRecord, {  # (a cast: mypy cannot build a TypedDict from others' keys plus its own)
        **{k: v for k, v in base.items() if k not in _BASE_ONLY}, **{k: record[k] for k in _IDENTITY},  # type: ignore[literal-required]
        "matched": None if base["refused"] is None else base["refused"] == (record["expected"] == "refuse"),
        "from_store": not base["fetched"], "fetched": base["fetched"],
        "calls_made": 0, "calls_stored": 0,  # counted on the prompt's own record
        "cost": base["base_cost"], "usage": base["base_usage"],
        "judge_llm": False, "judge_fetched": False, "judge_cost": None, "judge_usage": None,  # on the prompt's record
        "judge_sent": 0, "judge_decided": 0, "judge_calls_made": 0, "judge_errors": 0,
        "served_model": base["served_model"], "system_fingerprint": base["system_fingerprint"],
    })


def mark_shared(records: list[PromptRecord]) -> list[PromptRecord]:
    """The records that own their replies. Prompts with identical text share every reply (the store key
    holds the text, not the id), so one call answers them all: the first of them (in `records`' order)
    counts the calls, tokens and cost; each later one names it in `shared_reply_with` and counts no call."""
    first: dict[str, str] = {}
    owners = []
    for record in records:
        owner = first.setdefault(record["prompt_sha256"], record["id"])
        if owner == record["id"]:
            owners.append(record)
        else:
            record["shared_reply_with"] = owner
            record["calls_made"] = record["calls_stored"] = 0
    return owners


class RunResults:
    """Collects the records of the prompt tests and turns them into the run's results."""

    def __init__(self, plugin: Run) -> None:
        self.plugin = plugin
        self.settings = plugin.settings
        self.records: dict[str, PromptRecord] = {}
        self.results: ResultsDocument | None = None
        self.forgiven_errors = 0
        self.not_written: str | None = None  # why --orbench-update-baseline wrote nothing, when no prompt ran
        self.unwritten: dict[Path, str] = {}  # output files that could not be written (a full disk), and why

    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter writes: the progress status goes first
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.plugin.progress.result()
            return  # its user properties are those of the setup or call report, read already
        self.plugin.progress.done_waiting()
        record = self.plugin.take_record(report)
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
        order = {p.id: n for n, p in enumerate(p for d in self.plugin.datasets for p in d.prompts)}
        records = sorted(self.records.values(), key=lambda r: order.get(r["id"], len(order)))
        # Calls, tokens and cost are counted once per reply: prompts with identical text share theirs.
        owners = mark_shared(records)
        run = self.plugin.run_meta()
        expected = {d.name: d.expected for d in self.plugin.datasets}
        s = self.settings
        compared_with = (LIVE_BASE if s.base is not None else
                         f"baseline file {s.baseline}" if self.plugin.baseline is not None else None)
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
        unrun = len(self.plugin.coordinator.paid - self.plugin.keys_of(self.records.keys()))
        run_section(run, records, owners, unrun=unrun, live_base=s.base is not None,
                    llm_judge=self.plugin.judge.llm is not None, started=self.plugin.started, compared_with=compared_with)
        verification = None
        if s.verify_flips and reference is not None:
            # The flips decide a paired gate: the LLM judge's verdicts replace the offline judge's on them (and on
            # the compared side's replies where stored) before anything is counted.
            reference, verification = self._verify(records, reference)
            if s.base is not None:
                _, base_results = self._reference(records, expected)
        stopped = self._stopped(session, exitstatus, len(records))
        update = None
        if s.update_baseline and s.baseline is not None:
            update = BaselineUpdate(s.baseline, stopped or self._incomplete(records))
        self.results = build_results(
            run, records, expected,
            Reference(s.gate, reference, uncompared, base_results, self.plugin.baseline if base_results else None),
            judge_audit=self.plugin.judge_audit(records), verification=verification, stopped=stopped, stored=unrun,
            update=update)
        write_outputs(self.results, {f.key: getattr(s, f.key) for f in FORMATS},
                      markdown_max_chars=s.markdown_max_chars, failed=self.unwritten, reference=reference,
                      store=self.plugin.coordinator.store if s.html else None, labels=s.judge_labels is not None)
        self._set_exit_status(session, records)

    def _reference(self, records: list[PromptRecord], expected: dict[str, str]
                   ) -> tuple[BaselineDocument | None, ResultsDocument | None]:
        """What the run is compared with: the baseline file, or the live base (the same prompts asked under the
        base configuration in this session, as a results document of its own)."""
        if self.settings.base is None:
            return self.plugin.baseline, None
        base_records = [base_record(r) for r in records if "base" in r]
        base_results = plain_document(self.plugin.run_meta(1), base_records, expected)
        return baseline_document(base_results), base_results

    def _verify(self, records: list[PromptRecord], reference: BaselineDocument
                ) -> tuple[BaselineDocument, dict[str, Any]]:
        from pytest_orbench.run.verification import verify

        s = self.settings
        assert s.judge_spec is not None
        store = self.plugin.coordinator.open_store()
        reference, tallies, verifier = verify(records, reference, spec=s.judge_spec, store=store, retries=s.retries,
                                              concurrency=s.concurrency, live_base=s.base is not None)
        return reference, {"tallies": tallies, "model": s.judge_spec.model, "calls": verifier.calls,
                           "cost_usd": None if verifier.cost is None else round(verifier.cost, 6),
                           "usage": verifier.usage}

    def _stopped(self, session: pytest.Session, exitstatus: int, ran: int) -> str | None:
        """Why the run ended before its selected prompts were done (None: it did not). A stop after every
        selected prompt ran (-x on one of your own tests that came later) left nothing unchecked."""
        scheduled = self.plugin.scheduled
        total = len(scheduled) if scheduled is not None else sum(len(d.prompts) for d in self.plugin.datasets)
        if scheduled is not None and scheduled <= self.records.keys() and exitstatus != pytest.ExitCode.INTERNAL_ERROR:
            return None
        if session.shouldstop or session.shouldfail:  # (a reason of ours, the damaged store's, ends as "interrupted")
            return f"the run stopped early ({session.shouldfail or session.shouldstop}) after {ran} of {total} prompts"
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return f"the run was interrupted after {ran} of {total} prompts"
        if exitstatus == pytest.ExitCode.INTERNAL_ERROR:
            return f"the run crashed (internal error) after {ran} of {total} prompts"
        if scheduled is not None:
            # Selected, and yet no result came back: an xdist worker killed while running it (the OOM killer, a
            # segfault in the user's code) reports a failure without one. The gate passed on the prompts that
            # were left, with only the warning meant for -k deselection.
            missing = sorted(scheduled - self.records.keys())
            if missing:
                return (f"no result came back for {len(missing)} of the run's {total} selected prompts ({missing[0]}"
                        f"{', ...' if len(missing) > 1 else ''}: an xdist worker that crashed running it?)")
        return None

    def _incomplete(self, records: list[PromptRecord]) -> str | None:
        """Why this run, which was not stopped (`_stopped`), may not become a baseline (None: it may). A
        baseline is only ever a complete, trustworthy run: every selected prompt answered, within the
        error budget, not a sample of a full baseline."""
        total = sum(len(d.prompts) for d in self.plugin.datasets)
        if len(records) < total:
            return (f"only {len(records)} of the run's {total} prompts ran (-k/-m deselection, -x or an interruption); "
                    "a baseline needs every prompt")
        budget = self.settings.gate.error_budget
        for name, summary in summarize(records, {d.name: d.expected for d in self.plugin.datasets}).items():
            missing = summary["errors"] + summary["unscored"]
            if summary["total"] and missing / summary["total"] > budget:
                return (f"{name}: {missing} of {summary['total']} prompts errored or went unscored, over the error budget "
                        f"({100 * budget:.1f}%); fix the endpoint and run again")
        old = self._existing_baseline()
        if old is None:
            return None
        # Updated from a run that covers less, the baseline would check less from then on, unannounced.
        if self.settings.sample and not old["run"].get("sample"):
            return (f"this run is a sample ({self.settings.sample} per dataset) and {self.settings.baseline} holds a full run; "
                    "update it from a full run, or delete it first to start a sampled baseline")
        if self.settings.sample and self.settings.sample < int(old["run"]["sample"] or 0):
            return (f"this run is a sample of {self.settings.sample} per dataset and {self.settings.baseline} holds "
                    f"{old['run']['sample']} per dataset; update it from a sample at least as large, or delete it first "
                    "to start a smaller one")
        dropped = [name for name in old["datasets"] if name not in {d.name for d in self.plugin.datasets}]
        if dropped:
            return (f"{self.settings.baseline} holds {', '.join(dropped)}, which this run did not ask; run "
                    f"{'it' if len(dropped) == 1 else 'them'} too, or delete the file first to start a baseline without "
                    f"{'it' if len(dropped) == 1 else 'them'}")
        return None

    def _existing_baseline(self) -> BaselineDocument | None:
        path = self.settings.baseline
        if path is None or not path.is_file():
            return None
        try:
            return load_baseline(path)
        except BaselineError:
            return None  # unreadable: replacing it is what the user asked for

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
        if self.results is None:
            if not self.records and self.plugin.datasets and not dry_run(terminalreporter.config):
                # Everything deselected (-k, -m, node ids) or stopped before the first prompt: say so. The calls
                # may have started while pytest collected, and answers paid for are stored: say that too.
                terminalreporter.write_line(_nothing_ran(self.plugin.coordinator), yellow=True)
            if self.not_written is not None:
                terminalreporter.write_line(f"baseline NOT written: {self.not_written}; {self.settings.baseline} is "
                                            "unchanged", red=True, bold=True)
            return
        terminalreporter.write_sep("=", "orbench summary")
        for line in terminal_lines(self.results["run"], self.results["datasets"]) + drift_lines(self.results.get("drift")):
            terminalreporter.write_line(line)
        for line in judge_audit_lines(self.results):
            terminalreporter.write_line(line)
        if self.plugin.coordinator.draining is not None:
            terminalreporter.write_line(f"orbench: a second interrupt ended the wait for the replies in flight: the fetch "
                                        f"process (pid {self.plugin.coordinator.draining}) stores them by itself, and "
                                        "the next run reuses them; they are not counted here", yellow=True)
        for path in (self.settings.json, self.settings.markdown, self.settings.html, self.settings.svg, self.settings.junit):
            if path is not None and path in self.unwritten:
                terminalreporter.write_line(f"NOT written: {path}: {self.unwritten[path]}", red=True, bold=True)
            elif path is not None:
                terminalreporter.write_line(f"wrote {path}")
                if path == self.settings.json and len(self.results["prompts"]) > records_module.FULL_PROMPTS_MAX:
                    terminalreporter.write_line(
                        f"wrote {path.parent / records_module.prompt_lines_name(path)}: every prompt's record, one per "
                        f"line ({path.name} keeps the summary, the gate and the flips and errors: over "
                        f"{records_module.FULL_PROMPTS_MAX:,} prompts it names this file instead of holding them all)")
        update = self.results["run"].get("baseline_update")
        if update and update["written"]:
            terminalreporter.write_line(f"baseline updated: {self.settings.baseline} (review and commit it)")
        elif update:
            terminalreporter.write_line(f"baseline NOT written: {update['reason']}; {self.settings.baseline} is unchanged",
                                        red=True, bold=True)
        xfailed = xfail_line(self.results, self.settings.strict, bool(terminalreporter.config.option.runxfail))
        if xfailed:
            terminalreporter.write_line(xfailed)
        lines = gate_lines(self.results)
        if lines:
            terminalreporter.write_sep("=", "orbench gate")
            verdict = self.results["gate"]["verdict"]
            for line in lines:
                terminalreporter.write_line(line, green=verdict == "pass", red=verdict in BLOCKING,
                                            yellow=verdict == "ungated", bold=line is lines[0])
            if verdict in BLOCKING:
                self._count_the_gate(terminalreporter, verdict)
        if self.forgiven_errors:
            terminalreporter.write_line(
                f"{self.forgiven_errors} endpoint errors are within the error budget "
                f"({100 * self.settings.gate.error_budget:.1f}%): the gate passed, so the run does not fail"
            )

    def _count_the_gate(self, terminalreporter: Any, verdict: str) -> None:
        """A failed or inconclusive gate as one failed test, "orbench gate": pytest's last line then counts it and
        is red (it was a green "1189 passed, 785 xfailed" above an exit status of 1), with -q, -qq and under xdist,
        and the short summary names why. Nothing else sees it: the results, JUnit and the exit status are the gate's."""
        assert self.results is not None
        why = "; ".join(f"{c['outcome'].upper()}: {c['name']}" for c in self.results["gate"]["checks"]
                        if c["outcome"] != "pass") or verdict.upper()
        report = pytest.TestReport(nodeid="orbench gate", location=("orbench", None, "orbench gate"), keywords={},
                                   outcome="failed", longrepr=term_safe(why, 300), when="call")
        terminalreporter.stats.setdefault("failed", []).append(report)


# Shared by the logged reports and the run items of prompt tests that have none (80,000 empty lists otherwise);
# never appended to.
_NO_PROPERTIES: list[tuple[str, object]] = []
_NO_SECTIONS: list[Any] = []


def _without_record(properties: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """User properties without the prompt's record string: the shared empty list when nothing else is left."""
    return [p for p in properties if p[0] != REPORT_PROPERTY] or _NO_PROPERTIES


def release_item(item: pytest.Item) -> None:
    """What a prompt item holds only for its run, released once every report of it is made and logged: the
    record's JSON string (read into the results by then; ReportRelease releases the reports' copies) and
    pytest's per-item lists, then empty."""
    item.user_properties = _without_record(item.user_properties)
    if not item._report_sections:
        item._report_sections = _NO_SECTIONS


class ReportRelease:
    """What pytest keeps of each prompt test after every plugin has seen its reports: at 80,000 prompts bare
    pytest alone holds ~465 MiB, mostly three reports per test. A passing setup's or teardown's report is kept
    by the terminal reporter under stats[""], which nothing reads (its summary skips that key): released. The
    record's JSON string in each report's user properties, read into the results by then (and by --junitxml,
    which reads the teardown report in its own hook), is released too, and so are the keyword names each
    report copies from its item (benchmarks/README.md: pytest's peak RSS at 80,000 prompts)."""

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.nodeid.startswith("orbench/"):
            return
        # each report's own list (the item's is released after its teardown, release_item)
        report.user_properties = _without_record(report.user_properties)
        report.keywords = {}  # the item's keyword names (~500 B), read by no one once the report is logged
        if not report.sections:
            report.sections = _NO_SECTIONS
        if report.when != "call" and report.passed and self.reporter is not None:
            kept = self.reporter.stats.get("")
            if kept and kept[-1] is report:
                kept.pop()

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @property
    def reporter(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")


class ErrorDigest:
    """pytest lists every errored test twice, in its ERRORS section and in the short summary: a dead endpoint
    made 1,974 prompt errors, about 6,000 lines of the same connection error that buried the gate. The first
    SHOWN_ERRORS prompt errors are listed, then one line counts the rest (-vv lists them all). Only the
    listing is cut: the outcome counts, the exit status, JUnit and the results keep every one."""

    SHOWN_ERRORS = 10

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # around the terminal reporter's own: before its sections, after its summary
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None]:
        errors: list[Any] = terminalreporter.stats.get("error", [])
        ours = [r for r in errors if str(getattr(r, "nodeid", "")).startswith("orbench/")]
        hidden = ours[self.SHOWN_ERRORS:] if terminalreporter.config.get_verbosity() < 2 else []
        if not hidden:
            return (yield)
        left_out = {id(r) for r in hidden}
        terminalreporter.stats["error"] = [r for r in errors if id(r) not in left_out]
        try:
            return (yield)
        finally:
            terminalreporter.stats["error"] = errors  # pytest's last line counts every one
            terminalreporter.write_line(
                f"... and {len(hidden):,} more prompt errors not listed above (the first {self.SHOWN_ERRORS} are; -vv lists "
                "all): the summary's errors column counts them, the gate names the most common error, and the results "
                "JSON has each one", yellow=True)




def _nothing_ran(coordinator: Coordinator) -> str:
    """What a session in which no prompt test ran says about the calls made meanwhile (paid for)."""
    head = "orbench: no prompt test ran: nothing was judged or compared and no results file was written; "
    if coordinator.draining is not None:
        return (head + f"the fetch process (pid {coordinator.draining}) stores the replies it was asked for by itself, "
                "and the next run reuses them")
    unstored = coordinator.unstored  # --orbench-batch: stopped while its batch was open, not answered
    stored = len(coordinator.paid) - unstored
    said = [f"{stored} replies fetched meanwhile are stored, and the next run reuses them"] if stored else []
    if unstored:
        said.append(f"{unstored} requests wait in provider batches that are still open: the next run with this store "
                    "collects them (they are not submitted again)")
    return head + "; ".join(said) if said else ("orbench: no prompt ran: nothing was asked, judged or compared; no "
                                                "results file was written")
