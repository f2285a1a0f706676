"""Each prompt's record carried to the results in its test's reports, and released once they are logged."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_orbench.core.records import REPORT_PROPERTY, PromptRecord, record_of, report_property


class RecordHandover:
    """The prompt records made in this process, until their reports reach the results."""

    def __init__(self, is_worker: bool) -> None:
        self.is_worker = is_worker
        self._made: dict[str, PromptRecord] = {}  # node id -> its record, until its report reaches the results

    def hand_over(self, item: pytest.Item, record: PromptRecord) -> None:
        """The prompt's record, for the results: as JSON in its test's reports (what xdist carries to the
        controller, and --junitxml shows); in the process that gathers the results (no xdist worker) also as
        it is, by node id, so that it is not decoded again (`take_record`)."""
        item.user_properties.append(report_property(record))
        if not self.is_worker:
            self._made[item.nodeid] = record

    def take_record(self, report: pytest.TestReport) -> PromptRecord | None:
        """The record a test report carries (made by `hand_over`), if any."""
        made = self._made.pop(report.nodeid, None)
        if made is not None:
            return made
        for name, value in report.user_properties:
            record = record_of(name, value)
            if record is not None:
                return record
        return None


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
