"""The enabled run's hooks object: the session's parts made at configure (datasets, baseline, judge, store keys,
the fetch), and pytest's hooks handed to them; the results are `results.RunResults`'s job."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Generator
from typing import Any

import pytest

from pytest_orbench.analysis.baseline import BaselineError, check_comparable, load_baseline
from pytest_orbench.core.datasets.loading import load_dataset
from pytest_orbench.core.datasets.pinned import default_cache_dir
from pytest_orbench.core.datasets.prompts import Dataset, DatasetError, check_unique_ids
from pytest_orbench.core.datasets.sampling import stratified_sample
from pytest_orbench.core.records import BaselineDocument
from pytest_orbench.fetch.coordinator import Coordinator
from pytest_orbench.judging.adaptation import adapt, label_problem
from pytest_orbench.judging.keyword_weights import load_model
from pytest_orbench.judging.labels import Label, LabelsError, labelled, load_labels
from pytest_orbench.judging.registry import adaptable, make_judge
from pytest_orbench.render.terminal import header_line
from pytest_orbench.run.collection import collect, select
from pytest_orbench.run.dry_run import dry_run
from pytest_orbench.run.fetch_start import FetchStart
from pytest_orbench.run.handover import RecordHandover, ReportRelease, release_item
from pytest_orbench.run.items import PromptItem
from pytest_orbench.run.keys import PromptKeys
from pytest_orbench.run.metadata import RunFacts
from pytest_orbench.run.progress import ProgressDisplay
from pytest_orbench.run.prompt_run import PromptRun
from pytest_orbench.run.reply_judge import ReplyJudge
from pytest_orbench.run.results import RunResults
from pytest_orbench.run.settings import Settings
from pytest_orbench.run.terminal_summary import ErrorDigest, GateCount


class OrbenchPlugin:
    """Session state for an enabled run, in config.stash; identical collection on every xdist worker."""

    def __init__(self, config: pytest.Config, settings: Settings, selected: list[str] | None = None) -> None:
        self.config = config
        self.settings = settings
        self.selected = [s.replace("\\", "/") for s in selected or []]  # node ids given as arguments
        workerinput: dict[str, Any] = getattr(config, "workerinput", {})
        self.is_worker = bool(workerinput)
        baseline: BaselineDocument | None = None
        if settings.baseline is not None and not settings.update_baseline:
            try:
                baseline = load_baseline(settings.baseline)
            except BaselineError as exc:
                raise pytest.UsageError(f"pytest-orbench: {exc}") from None
        # Resolved once on the controller and handed to workers, so every process samples alike.
        # A sampled run against a sampled baseline reuses its seed: both then draw the same prompts.
        seed = workerinput.get("orbench_seed", settings.seed)
        if seed is None and settings.sample and baseline is not None:
            seed = baseline["run"].get("seed")
        self.seed: int = seed if seed is not None else random.randrange(2**31)
        self.run_id: str = workerinput.get("orbench_run") or uuid.uuid4().hex
        labels: list[Label] = []  # your labelled replies (judge_labels), which the judge adapts to
        keyword_model = None
        if settings.judge_labels is not None:
            try:  # checked at configure; read again here, so a file changed since is checked again
                labels = labelled(load_labels(settings.judge_labels))
                problem = label_problem(labels, adaptable(settings.judge))
                if problem:
                    raise LabelsError(f"judge labels file {settings.judge_labels}: {problem}")
                if adaptable(settings.judge):
                    keyword_model = adapt(load_model(), labels)  # deterministic: every xdist worker fits alike
            except LabelsError as exc:
                raise pytest.UsageError(f"pytest-orbench: {exc}") from None
        judge = make_judge(settings.judge, settings.judge_spec, keyword_model)
        datasets = self._load_datasets()
        if baseline is not None and dry_run(config):
            baseline = None  # --collect-only and the like compare nothing: exploring a new dataset needs no baseline
        started = time.time()
        self.facts = RunFacts(settings, judge, self.seed, datasets, baseline, labels, started)
        baseline_refused: dict[str, bool | None] = {}
        if baseline is not None:
            hashes = {p.id: p.prompt_sha256 for d in datasets for p in d.prompts}
            try:  # refuse an incomparable baseline before any endpoint call
                check_comparable(baseline, self.facts.run_meta(), hashes)
            except BaselineError as exc:
                raise pytest.UsageError(f"pytest-orbench: {exc}") from None
            baseline_refused = {p["id"]: p["refused"] for p in baseline["prompts"]}
        # Stored replies older than the max age at the session's start are asked again: one cutoff, decided
        # on the controller and handed to the workers, so that a worker never takes a reply the fetcher asks
        # again (nor waits for one it does not).
        self.fresh_after: float | None = workerinput.get(
            "orbench_fresh_after", None if settings.store_max_age is None else started - settings.store_max_age)
        # One process makes the calls: the xdist controller, or the only pytest process.
        self.coordinator = coordinator = Coordinator(settings, judge, self.run_id, fetches=not self.is_worker,
                                                     fresh_after=self.fresh_after)
        self.progress = ProgressDisplay(config, coordinator.progress, settings.progress_every)
        self.judging = ReplyJudge(judge, settings.judge, lambda: coordinator.store)
        handover = RecordHandover(self.is_worker)
        self.run = PromptRun(config, coordinator, self.progress, self.judging, handover, strict=settings.strict,
                             baseline_refused=baseline_refused, digest=bool(labels))
        self.keys = PromptKeys(settings, datasets)
        self.fetch = FetchStart(config, self.facts, coordinator, self.progress, self.keys, baseline_refused)
        if not self.is_worker:
            coordinator.on_wait = self.progress.waiting
            # The records come to the controller in the test reports.
            results = RunResults(self.facts, self.fetch, self.progress, handover)
            config.pluginmanager.register(results, "orbench-results")
            # (pluggy calls the later registered wrapper outside: the gate's line, then the errors not listed)
            config.pluginmanager.register(GateCount(results), "orbench-gate-count")
            config.pluginmanager.register(ErrorDigest(), "orbench-error-digest")
            config.pluginmanager.register(ReportRelease(config), "orbench-report-release")
        self.fetch.at_configure(self.is_worker, self.selected)

    def _load_datasets(self) -> list[Dataset]:
        try:
            loaded = [load_dataset(spec, self.settings.data_dir, default_cache_dir()) for spec in self.settings.datasets]
            check_unique_ids(loaded)  # every row, not the sample: a collision is the files', whatever the seed
        except DatasetError as exc:
            raise pytest.UsageError(f"pytest-orbench: {exc}") from None
        if self.settings.sample:
            loaded = [Dataset(d.name, stratified_sample(d.prompts, self.settings.sample, self.seed, d.name), d.source, d.total)
                      for d in loaded]
        return loaded

    def pytest_report_header(self, config: pytest.Config) -> str:
        return header_line(self.facts.run_meta())

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["orbench_seed"] = self.seed
        node.workerinput["orbench_run"] = self.run_id
        node.workerinput["orbench_fresh_after"] = self.fresh_after

    @pytest.hookimpl(tryfirst=True)  # before -k / -m deselection sees the item list
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
        collect(session, self.facts.datasets, self.keys, self.run, items)
        if self.selected:
            select(config, items, self.selected, self.facts.datasets)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            # Every report is made and logged: the record's JSON string leaves the item, kept to the session's
            # end otherwise (handover.ReportRelease releases the reports' copies).
            if isinstance(item, PromptItem):
                release_item(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        if not dry_run(session.config) and not self.config.pluginmanager.hasplugin("dsession"):
            nodeids = [i.nodeid for i in session.items if isinstance(i, PromptItem)]
            self.fetch.start(nodeids)
        try:
            return (yield)
        finally:
            self.progress.stop()
            self.judging.save()
            note = self.coordinator.stopping()
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if note is not None and reporter is not None:  # Ctrl-C, -x: the wait that follows is not a hang
                self._uncapture()
                if self.config.get_terminal_writer().width_of_current_line:
                    reporter.write("\n")  # after xdist's progress characters, on a line of its own
                reporter.write_line(note, yellow=True)
            self.coordinator.stop()

    def _uncapture(self) -> None:
        """pytest's output capture suspended for real. A Ctrl-C that lands inside pytest's own resume of it (between
        its dup2 of the terminal's descriptor and the state it then records) leaves the descriptor pointed at the
        capture file while pytest believes the capture suspended: the note that the wait for the replies in flight is
        not a hang reached the terminal only once pytest handled the interrupt, after that wait (a silent minute).
        Resumed, then suspended: a no-op when pytest's state is right, and the state made right when it is not."""
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        if capman is not None:
            capman.resume_global_capture()
            capman.suspend_global_capture()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Whatever ended the session (a usage error during collection, an internal error), no fetch
        process outlives it (stop is idempotent)."""
        self.progress.stop()
        self.coordinator.stop()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller fetches for every worker: the first worker's collection names the prompts."""
        if not dry_run(self.config):
            self.fetch.start(ids)
