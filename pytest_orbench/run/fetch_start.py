"""Starting the fetch once per session, and the cost checks before it (--orbench-max-cost, --orbench-estimate)."""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

import pytest

from pytest_orbench.core.store import Store
from pytest_orbench.core.store_database import StoreError
from pytest_orbench.fetch.coordinator import Coordinator
from pytest_orbench.fetch.plan import Plan, Request
from pytest_orbench.run.collection import selects_every_prompt
from pytest_orbench.run.dry_run import dry_run
from pytest_orbench.run.fetch_end import FetchEnd
from pytest_orbench.run.keys import PromptKeys
from pytest_orbench.run.metadata import RunFacts
from pytest_orbench.run.progress import ProgressDisplay

if TYPE_CHECKING:
    from pytest_orbench.run.estimate import Part


class FetchStart:
    """When the calls start (at configure when every prompt is certainly selected, else after collection), and
    what the run would cost first."""

    def __init__(self, config: pytest.Config, facts: RunFacts, coordinator: Coordinator, progress: ProgressDisplay,
                 keys: PromptKeys, baseline_refused: Mapping[str, bool | None]) -> None:
        self.config = config
        self.facts = facts
        self.settings = facts.settings
        self.coordinator = coordinator
        self.progress = progress
        self.keys = keys
        self.baseline_refused = baseline_refused
        # The prompts selected to run (after -k, -m, --deselect, --lf, node ids), once collection is over;
        # None until then. A run that stopped after all of them ran checked everything it selected.
        self.scheduled: set[str] | None = None
        self._begun = False
        self._line: str | None = None  # what the fetch will do, shown once collection is over
        self._announced = False

    def at_configure(self, is_worker: bool, selected: list[str]) -> None:
        """Opens the store, checks the cost limit, and starts the calls when nothing can deselect a prompt
        (else reads ahead what is stored: `Coordinator.early`)."""
        config, settings = self.config, self.settings
        if not is_worker and not dry_run(config):
            try:  # a read-only folder or a full disk: one usage error now, not a traceback (or lost replies) later
                # kept open for the preview and the fetch (opened once); a store locked by another process is
                # waited for, and said so now rather than after the wait
                self.coordinator.open_store(on_locked=_say_now)
            except StoreError as exc:
                raise pytest.UsageError(unusable_store(exc)) from None
        try:
            if not dry_run(config) and not settings.estimate:
                every = self.keys.every()
                plan = None
                if settings.max_cost is not None and not is_worker:
                    plan = self.coordinator.preview(every)  # one read of the store for the check and the early start
                    self._check_max_cost(plan)
                if not is_worker and selects_every_prompt(config, selected):
                    self.begin(every, announce=False, preview=plan)  # nothing can deselect a prompt: calls start now
                else:
                    self.coordinator.early(every, plan)
        except StoreError as exc:  # damaged where the opening's check did not look (a page written since)
            self.coordinator.stop()
            raise pytest.UsageError(unusable_store(exc)) from None
        except BaseException:
            # Not registered yet, so no pytest_unconfigure of ours will close the store or stop a fetch.
            self.coordinator.stop()
            raise

    def schedule(self, nodeids: Iterable[str]) -> None:
        """Remember which prompts were selected to run (every xdist worker collects the same)."""
        if self.scheduled is None:
            self.scheduled = {self.keys.prompt_ids[n] for n in nodeids if n in self.keys.prompt_ids}

    def _parts(self, plan: Plan) -> list[Part]:
        from pytest_orbench.run.estimate import run_parts  # (runs that check a cost: the prices, the tokens)

        return run_parts(self.settings, self.facts.judge, plan, self.keys, self.facts.baseline, self.baseline_refused)

    def _check_max_cost(self, plan: Plan) -> None:
        """Refuse to start when the run's estimate (every prompt of the run, before -k deselection) is over
        --orbench-max-cost, or has no known price."""
        from pytest_orbench.run.estimate import over_limit

        problem = over_limit(self.settings, self._parts(plan))
        if problem is not None:
            raise pytest.UsageError(f"pytest-orbench: {problem}")

    def start(self, nodeids: list[str]) -> None:
        """The prompts selected to run, scheduled and fetched for (after collection)."""
        self.schedule(nodeids)
        self.begin(self.keys.of_nodes(nodeids))

    def begin(self, requests: list[Request], announce: bool = True, preview: Plan | None = None) -> None:
        """Start the fetch for these requests, once per session (at configure when every prompt is
        certainly selected, else after collection); the line saying so is shown after collection.
        `preview`: the coordinator's preview of exactly these requests, if read already."""
        if self._begun:
            self._announce()
            return
        self._begun = True
        if self.settings.estimate:
            from pytest_orbench.run.estimate import lines

            parts = self._parts(self.coordinator.preview(requests))
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            for text in lines(parts, self.settings.estimate_output_tokens):
                if terminal is not None:
                    terminal.write_line(text)
            self.coordinator.stop()
            pytest.exit("orbench: estimate only (--orbench-estimate): nothing was called", returncode=0)
        if not requests and self.coordinator.fetches:
            self.coordinator.stop()
            return
        try:
            self._line = self.coordinator.begin(requests, preview)
        except StoreError as exc:  # writable a moment ago (checked at configure): the disk filled up since
            self.coordinator.stop()
            pytest.exit(unusable_store(exc), returncode=pytest.ExitCode.USAGE_ERROR)
        if announce:
            self._announce()

    def _announce(self) -> None:
        if self._announced:
            return
        self._announced = True
        line, self._line = self._line, None
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if line is not None and reporter is not None:
            if self.config.get_terminal_writer().width_of_current_line:
                reporter.write("\n")  # xdist's "ready: 1/2 workers" status stays on its own line
            reporter.write_line(line)
        if self.coordinator.jobs and self.config.pluginmanager.hasplugin("dsession"):
            self.progress.watch_idle()  # the workers wait where this process cannot see it

    def fetch_end(self, ran: Collection[str]) -> FetchEnd:
        """The calls paid for and not run (for prompts other than `ran`), once the fetch stopped."""
        coordinator = self.coordinator
        return FetchEnd(not_run=len(coordinator.paid - self.keys.keys_of(ran)), unstored=coordinator.unstored,
                        draining=coordinator.draining)

    def store(self, open_it: bool = False) -> Store | None:
        """The run's store: while it is open (None once the fetch stopped), or opened again (`open_it`)."""
        return self.coordinator.open_store() if open_it else self.coordinator.store


def unusable_store(exc: StoreError) -> str:
    if exc.says_fix:
        return f"pytest-orbench: {exc} (store: in orbench.yaml)"
    return (f"pytest-orbench: {exc}; point --orbench-store (store: in orbench.yaml) at a folder you can write to, "
            "on a disk with free space")


def _say_now(text: str) -> None:
    """A line for you at configure, before pytest's terminal reporter exists (and before any capture)."""
    sys.stderr.write(f"orbench: {text}\n")
    sys.stderr.flush()
