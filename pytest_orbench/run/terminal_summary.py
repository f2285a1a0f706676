"""The run's summary in pytest's terminal: the results, the files written, the gate (counted as a failed test when
it does not pass); prompt errors listed once."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any, Protocol

import pytest

from pytest_orbench.analysis.gate import BLOCKING
from pytest_orbench.core import records as records_module
from pytest_orbench.core.records import ResultsDocument
from pytest_orbench.render.terminal import (
    drift_lines,
    gate_lines,
    gate_reason,
    judge_audit_lines,
    terminal_lines,
    xfail_line,
)
from pytest_orbench.run.fetch_end import FetchEnd
from pytest_orbench.run.settings import Settings


class Finished(Protocol):
    """What GateCount reads of the run's results (results.RunResults): the document, once the session finished."""

    results: ResultsDocument | None


def write_summary(terminalreporter: Any, results: ResultsDocument, settings: Settings, fetch: FetchEnd,
                  unwritten: dict[Path, str], forgiven_errors: int) -> None:
    """The "orbench summary" and "orbench gate" sections of a run that has results."""
    terminalreporter.write_sep("=", "orbench summary")
    for line in terminal_lines(results["run"], results["datasets"]) + drift_lines(results.get("drift")):
        terminalreporter.write_line(line)
    for line in judge_audit_lines(results):
        terminalreporter.write_line(line)
    if fetch.draining is not None:
        terminalreporter.write_line(f"orbench: a second interrupt ended the wait for the replies in flight: the fetch "
                                    f"process (pid {fetch.draining}) stores them by itself, and "
                                    "the next run reuses them; they are not counted here", yellow=True)
    for key, path in settings.outputs.items():
        if path is not None and path in unwritten:
            terminalreporter.write_line(f"NOT written: {path}: {unwritten[path]}", red=True, bold=True)
        elif path is not None:
            terminalreporter.write_line(f"wrote {path}")
            if key == "json" and len(results["prompts"]) > records_module.FULL_PROMPTS_MAX:
                terminalreporter.write_line(
                    f"wrote {path.parent / records_module.prompt_lines_name(path)}: every prompt's record, one per "
                    f"line ({path.name} keeps the summary, the gate and the flips and errors: over "
                    f"{records_module.FULL_PROMPTS_MAX:,} prompts it names this file instead of holding them all)")
    update = results["run"].get("baseline_update")
    if update and update["written"]:
        terminalreporter.write_line(f"baseline updated: {settings.baseline} (review and commit it)")
    elif update:
        terminalreporter.write_line(f"baseline NOT written: {update['reason']}; {settings.baseline} is unchanged",
                                    red=True, bold=True)
    xfailed = xfail_line(results, settings.strict, bool(terminalreporter.config.option.runxfail))
    if xfailed:
        terminalreporter.write_line(xfailed)
    lines = gate_lines(results)
    if lines:
        terminalreporter.write_sep("=", "orbench gate")
        verdict = results["gate"]["verdict"]
        for line in lines:
            terminalreporter.write_line(line, green=verdict == "pass", red=verdict in BLOCKING,
                                        yellow=verdict == "ungated", bold=line is lines[0])
    if forgiven_errors:
        terminalreporter.write_line(
            f"{forgiven_errors} endpoint errors are within the error budget "
            f"({100 * settings.gate.error_budget:.1f}%): the gate passed, so the run does not fail"
        )


class GateCount:
    """A failed or inconclusive gate as one failed test, "orbench gate": pytest's last line then counts it and
    is red (it was a green "1189 passed, 785 xfailed" above an exit status of 1), with -q, -qq and under xdist,
    and the short summary names the checks that did not pass. The line is ours, after pytest's own: pytest
    writes a test's node id relative to the directory it was started in ("../../tmp/x/orbench gate" when the
    rootdir is elsewhere, as in scripts/demo) and cuts its message at the terminal's width mid-word. Nothing
    else sees the test: the results, JUnit and the exit status are the gate's."""

    def __init__(self, results: Finished) -> None:
        self.results = results  # its `results`, once the session finished

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # around the terminal reporter's own: after its short summary
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None]:
        try:
            return (yield)
        finally:
            results = self.results.results
            if results is not None and results["gate"]["verdict"] in BLOCKING:
                self._count(terminalreporter, results)

    def _count(self, terminalreporter: Any, results: ResultsDocument) -> None:
        chars = getattr(terminalreporter, "reportchars", "fE")
        if "f" in chars:
            config = terminalreporter.config
            tw = config.get_terminal_writer()
            prefix = "FAILED orbench gate - "
            # As pytest does: the whole message on CI and with -vv, else within the terminal's width.
            whole = config.get_verbosity() >= 2 or any(os.environ.get(name) for name in ("CI", "BUILD_NUMBER"))
            reason = gate_reason(results, None if whole else tw.fullwidth - len(prefix) - 1)
            stats = terminalreporter.stats
            if not any(stats.get(kind) for char, kind in (("f", "failed"), ("E", "error"), ("x", "xfailed"),
                                                          ("X", "xpassed"), ("s", "skipped"), ("p", "passed"))
                       if char in chars):
                # (pytest wrote no short summary: nothing else in it)
                terminalreporter.write_sep("=", "short test summary info", cyan=True, bold=True)
            terminalreporter.write_line(f"{tw.markup('FAILED', red=True)} {tw.markup('orbench gate', bold=True)} - "
                                        f"{reason}")
        report = pytest.TestReport(nodeid="orbench gate", location=("orbench", None, "orbench gate"), keywords={},
                                   outcome="failed", longrepr=gate_reason(results), when="call")
        terminalreporter.stats.setdefault("failed", []).append(report)


def nothing_ran(fetch: FetchEnd) -> str:
    """What a session in which no prompt test ran says about the calls made meanwhile (paid for)."""
    head = "orbench: no prompt test ran: nothing was judged or compared and no results file was written; "
    if fetch.draining is not None:
        return (head + f"the fetch process (pid {fetch.draining}) stores the replies it was asked for by itself, "
                "and the next run reuses them")
    unstored = fetch.unstored  # --orbench-batch: stopped while its batch was open, not answered
    stored = fetch.not_run - unstored
    said = [f"{stored} replies fetched meanwhile are stored, and the next run reuses them"] if stored else []
    if unstored:
        said.append(f"{unstored} requests wait in provider batches that are still open: the next run with this store "
                    "collects them (they are not submitted again)")
    return head + "; ".join(said) if said else ("orbench: no prompt ran: nothing was asked, judged or compared; no "
                                                "results file was written")


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
