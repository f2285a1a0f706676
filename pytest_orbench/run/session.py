"""The enabled run's hooks object: datasets and baseline loaded, prompt items created, replies fetched
(through the coordinator) and judged; the results are `results.RunResults`'s job."""

from __future__ import annotations

import functools
import random
import sqlite3
import sys
import time
import types
import uuid
from collections import Counter
from collections.abc import Collection, Generator, Iterable
from typing import TYPE_CHECKING, Any, NoReturn, cast

import pytest

from pytest_orbench.analysis.baseline import BaselineError, check_comparable, load_baseline
from pytest_orbench.calls.client import scrub
from pytest_orbench.core.datasets import (
    Dataset,
    DatasetError,
    Prompt,
    check_unique_ids,
    default_cache_dir,
    load_dataset,
    stratified_sample,
    test_name,
)
from pytest_orbench.core.durations import format_age
from pytest_orbench.core.endpoint import calls_go_to, kwargs_endpoint, redact_url
from pytest_orbench.core.records import (
    BaselineDocument,
    BaseRecord,
    Combined,
    Costs,
    PromptRecord,
    RunMeta,
    TrialVerdict,
    record_of,
    report_property,
)
from pytest_orbench.core.store import StoreError, response_key
from pytest_orbench.fetch.coordinator import Coordinator, Plan, Request
from pytest_orbench.fetch.loop import Outcome
from pytest_orbench.judging.adaptation import adapt
from pytest_orbench.judging.judges import ADAPTABLE_JUDGES, Judgement, Verdict, make_judge
from pytest_orbench.judging.keyword_weights import load_model
from pytest_orbench.judging.labels import Label, labelled, load_labels, reply_digest
from pytest_orbench.judging.llm_calls import final_judgement, reply_text
from pytest_orbench.render.terminal import header_line
from pytest_orbench.run.items import DatasetNode, PromptItem, Requests
from pytest_orbench.run.progress import ProgressDisplay
from pytest_orbench.run.results import ErrorDigest, ReportRelease, RunResults, dry_run, release_item
from pytest_orbench.run.settings import Settings

if TYPE_CHECKING:
    from pytest_orbench.run.estimate import Part

CACHED_JUDGES = ("keyword", "prefix")  # deterministic, versioned: their verdicts on a reply are stored


class OrbenchPlugin:
    """Session state for an enabled run, in config.stash; identical collection on every xdist worker."""

    def __init__(self, config: pytest.Config, settings: Settings, selected: list[str] | None = None) -> None:
        self.config = config
        self.settings = settings
        self.selected = [s.replace("\\", "/") for s in selected or []]  # node ids given as arguments
        workerinput: dict[str, Any] = getattr(config, "workerinput", {})
        self.is_worker = bool(workerinput)
        self.baseline: BaselineDocument | None = None
        if settings.baseline is not None and not settings.update_baseline:
            try:
                self.baseline = load_baseline(settings.baseline)
            except BaselineError as exc:
                raise pytest.UsageError(f"pytest-orbench: {exc}") from None
        # Resolved once on the controller and handed to workers, so every process samples alike.
        # A sampled run against a sampled baseline reuses its seed: both then draw the same prompts.
        seed = workerinput.get("orbench_seed", settings.seed)
        if seed is None and settings.sample and self.baseline is not None:
            seed = self.baseline["run"].get("seed")
        self.seed: int = seed if seed is not None else random.randrange(2**31)
        self.run_id: str = workerinput.get("orbench_run") or uuid.uuid4().hex
        self.labels: list[Label] = []  # your labelled replies (judge_labels), which the judge adapts to
        keyword_model = None
        if settings.judge_labels is not None:
            self.labels = labelled(load_labels(settings.judge_labels))  # checked at configure
            if settings.judge in ADAPTABLE_JUDGES:
                keyword_model = adapt(load_model(), self.labels)  # deterministic: every xdist worker fits alike
        self.judge = make_judge(settings.judge, settings.judge_spec, keyword_model)
        self.datasets = self._load_datasets()
        self.baseline_refused: dict[str, bool | None] = {}
        if self.baseline is not None and dry_run(config):
            self.baseline = None  # --collect-only and the like compare nothing: exploring a new dataset needs no baseline
        if self.baseline is not None:
            hashes = {p.id: p.prompt_sha256 for d in self.datasets for p in d.prompts}
            try:  # refuse an incomparable baseline before any endpoint call
                check_comparable(self.baseline, self.run_meta(), hashes)
            except BaselineError as exc:
                raise pytest.UsageError(f"pytest-orbench: {exc}") from None
            self.baseline_refused = {p["id"]: p["refused"] for p in self.baseline["prompts"]}
        self._new_verdicts: list[tuple[str, str, str]] = []
        self._made: dict[str, PromptRecord] = {}  # node id -> its record, until its report reaches the results
        self.started = time.time()
        # Stored replies older than the max age at the session's start are asked again: one cutoff, decided
        # on the controller and handed to the workers, so that a worker never takes a reply the fetcher asks
        # again (nor waits for one it does not).
        self.fresh_after: float | None = workerinput.get(
            "orbench_fresh_after", None if settings.store_max_age is None else self.started - settings.store_max_age)
        # One process makes the calls: the xdist controller, or the only pytest process.
        self.coordinator = Coordinator(settings, self.judge, self.run_id, fetches=not self.is_worker,
                                       fresh_after=self.fresh_after)
        self.progress = ProgressDisplay(config, self.coordinator.progress, settings.progress_every)
        if not self.is_worker:
            self.coordinator.on_wait = self.progress.waiting
            # The records come to the controller in the test reports.
            config.pluginmanager.register(RunResults(self), "orbench-results")
            config.pluginmanager.register(ErrorDigest(), "orbench-error-digest")
            config.pluginmanager.register(ReportRelease(config), "orbench-report-release")
        self._key_fields: dict[tuple[int, int], dict[str, Any]] = {}  # (configuration, trial) -> what keys hash
        self._requests: dict[str, Requests] = {}  # node id -> every call its test needs
        self._prompt_ids: dict[str, str] = {}  # node id -> prompt id
        for d in self.datasets:
            for p in d.prompts:
                nodeid = self.nodeid(d, p)
                self._requests[nodeid], self._prompt_ids[nodeid] = self.requests(p), p.id
        # The prompts selected to run (after -k, -m, --deselect, --lf, node ids), once collection is over;
        # None until then. A run that stopped after all of them ran checked everything it selected.
        self.scheduled: set[str] | None = None
        self._begun = False
        self._line: str | None = None  # what the fetch will do, shown once collection is over
        self._announced = False
        if not self.is_worker and not dry_run(config):
            try:  # a read-only folder or a full disk: one usage error now, not a traceback (or lost replies) later
                # kept open for the preview and the fetch (opened once); a store locked by another process is
                # waited for, and said so now rather than after the wait
                self.coordinator.open_store(on_locked=_say_now)
            except StoreError as exc:
                raise pytest.UsageError(_unusable_store(exc)) from None
        try:
            if not dry_run(config) and not settings.estimate:
                every = [r for item in self._requests.values() for r in item.all]
                plan = None
                if settings.max_cost is not None and not self.is_worker:
                    plan = self.coordinator.preview(every)  # one read of the store for the check and the early start
                    self._check_max_cost(plan)
                if not self.is_worker and _selects_every_prompt(config, self.selected):
                    self._begin(every, announce=False, preview=plan)  # nothing can deselect a prompt: calls start now
                else:
                    self.coordinator.early(every, plan)
        except StoreError as exc:  # damaged where the opening's check did not look (a page written since)
            self.coordinator.stop()
            raise pytest.UsageError(_unusable_store(exc)) from None
        except BaseException:
            # Not registered yet, so no pytest_unconfigure of ours will close the store or stop a fetch.
            self.coordinator.stop()
            raise

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

    # -- metadata ---------------------------------------------------------------------------
    def run_meta(self, config: int = 0) -> RunMeta:
        s = self.settings if config == 0 else self.settings.base
        assert s is not None
        return {
            **self._endpoint_meta(s),
            "judge": self.judge.meta(),
            "revision": s.revision,
            "store_max_age": format_age(s.store_max_age),
            "seed": self.seed,
            "sample": s.sample,
            "trials": s.trials,
            **({"base": self._base_meta()} if config == 0 and s.base is not None else {}),
            "datasets": {
                d.name: {**d.source, "total": d.total, "selected": len(d.prompts), "expected": d.expected}
                for d in self.datasets
            },
        }

    @staticmethod
    def _endpoint_meta(s: Settings) -> RunMeta:
        """What a configuration asks: endpoint, parameters, system prompt (by hash; never a secret)."""
        return {"endpoint": s.endpoint, "model": s.model, "target": s.target, "api_base": redact_url(s.api_base),
                "params": s.params, "system_prompt_sha256": s.system_prompt_sha256,
                "system_prompt_source": s.system_prompt_source,
                "calls_to": calls_go_to(s.model, s.api_base or kwargs_endpoint(s.litellm_kwargs), s.target)}

    def _base_meta(self) -> dict[str, Any]:
        """The live base in the run's metadata: what it is, and what differs from the configuration tested."""
        assert self.settings.base is not None
        head, base = self._endpoint_meta(self.settings), self._endpoint_meta(self.settings.base)
        # (where the calls go follows from the model, api_base and target, which are listed themselves)
        differs = [k for k in head if k not in ("system_prompt_source", "calls_to") and head.get(k) != base.get(k)]
        return {**base, "differs": differs}

    @functools.cached_property
    def runs_no_test(self) -> bool:
        """`results.dry_run`, read once per session by the prompt tests (it was ~20 us a test)."""
        return dry_run(self.config)

    def pytest_report_header(self, config: pytest.Config) -> str:
        return header_line(self.run_meta())

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["orbench_seed"] = self.seed
        node.workerinput["orbench_run"] = self.run_id
        node.workerinput["orbench_fresh_after"] = self.fresh_after

    # -- collection -------------------------------------------------------------------------
    def request(self, prompt: Prompt, trial: int = 0, config: int = 0) -> Request:
        """The prompt's store key: everything that determines its reply (never a secret). Trials of one
        prompt are separate replies (trial index in the key); identical configurations share keys."""
        fields = self._key_fields.get((config, trial))
        if fields is None:  # the same for every prompt: made once per configuration and trial
            s = self.settings if config == 0 else self.settings.base
            assert s is not None
            fields = self._key_fields[(config, trial)] = {
                "target": s.target, "model": s.model, "api_base": redact_url(s.api_base),
                "params": s.params, "system_prompt": s.system_prompt, "trial": trial,
                # A new revision of the application behind `target:` (or of anything else the user names)
                # is asked again; without one the keys stay as they were.
                **({"revision": s.revision} if s.revision else {}),
            }
        return Request(response_key({**fields, "prompt": prompt.text}), prompt.text, config)

    def requests(self, prompt: Prompt) -> Requests:
        trials = range(self.settings.trials)
        return Requests([self.request(prompt, t) for t in trials],
                        [self.request(prompt, t, 1) for t in trials] if self.settings.base is not None else [])

    @staticmethod
    def nodeid(dataset: Dataset, prompt: Prompt) -> str:
        return f"orbench/{dataset.name}::{test_name(prompt)}"

    @pytest.hookimpl(tryfirst=True)  # before -k / -m deselection sees the item list
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
        for dataset in self.datasets:
            node = DatasetNode.from_parent(session, name=dataset.name, nodeid=f"orbench/{dataset.name}")
            created = [
                PromptItem.from_parent(node, name=test_name(p), prompt=p, plugin=self,
                                       requests=self._requests[self.nodeid(dataset, p)])
                for p in dataset.prompts
            ]
            # A collect report, as a file collector would send, so "collected N items" counts them.
            collected: list[pytest.Item | pytest.Collector] = list(created)
            session.ihook.pytest_collectreport(report=pytest.CollectReport(node.nodeid, "passed", None, collected))
            items.extend(created)
        if self.selected:
            self._select(config, items)

    def _select(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Keep the prompt tests named by node ids on the command line (a dataset, or one prompt), and your
        own tests collected from the paths named beside them."""
        def chosen(item: pytest.Item) -> bool:
            return not isinstance(item, PromptItem) or any(_names(s, item) for s in self.selected)

        unmatched = [s for s in self.selected if not any(_names(s, i) for i in items if isinstance(i, PromptItem))]
        if unmatched:
            names = ", ".join(d.name for d in self.datasets)
            raise pytest.UsageError(f"pytest-orbench: {unmatched[0]}: no such prompt test in this run (datasets: {names}); "
                                    "ids look like orbench/hard-1k::privacy-0801 (see pytest --orbench --collect-only -q)")
        keep: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            (keep if chosen(item) else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            # Every report is made and logged: the record's JSON string leaves the item, kept to the session's
            # end otherwise (results.ReportRelease releases the reports' copies).
            if isinstance(item, PromptItem):
                release_item(item)

    # -- fetching ---------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        if not dry_run(session.config) and not self.config.pluginmanager.hasplugin("dsession"):
            self._schedule(i.nodeid for i in session.items if isinstance(i, PromptItem))
            self._begin([r for i in session.items if isinstance(i, PromptItem) for r in self._requests[i.nodeid].all])
        try:
            return (yield)
        finally:
            self.progress.stop()
            self._save_verdicts()
            note = self.coordinator.stopping()
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if note is not None and reporter is not None:  # Ctrl-C, -x: the wait that follows is not a hang
                if self.config.get_terminal_writer().width_of_current_line:
                    reporter.write("\n")  # after xdist's progress characters, on a line of its own
                reporter.write_line(note, yellow=True)
            self.coordinator.stop()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Whatever ended the session (a usage error during collection, an internal error), no fetch
        process outlives it (stop is idempotent)."""
        self.progress.stop()
        self.coordinator.stop()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller fetches for every worker: the first worker's collection names the prompts."""
        if not dry_run(self.config):
            self._schedule(ids)
            self._begin([r for i in ids if i in self._requests for r in self._requests[i].all])

    def _schedule(self, nodeids: Iterable[str]) -> None:
        """Remember which prompts were selected to run (every xdist worker collects the same)."""
        if self.scheduled is None:
            self.scheduled = {self._prompt_ids[n] for n in nodeids if n in self._prompt_ids}

    def keys_of(self, prompt_ids: Collection[str]) -> set[str]:
        """The store keys of these prompts' replies (every trial, the live base's too)."""
        return {r.key for nodeid, requests in self._requests.items() if self._prompt_ids[nodeid] in prompt_ids
                for r in requests.all}

    def _parts(self, plan: Plan) -> list[Part]:
        """What the run would cost: the plan's calls, and with --orbench-verify-flips the judge calls expected
        after it (the flip share measured on the stored replies, judged now, against the compared side)."""
        from pytest_orbench.run.estimate import plan_parts, verification_part

        parts = plan_parts(self.settings, self.judge, plan)
        if not self.settings.verify_flips:
            return parts
        flipped = compared = 0
        prompts = []
        live = self.settings.base is not None
        for nodeid, requests in self._requests.items():
            prompt_id, head = self._prompt_ids[nodeid], requests.head[0]
            prompts.append(head.text)
            mine = plan.stored.get(head.key)
            theirs = (plan.stored.get(requests.base[0].key) if live and requests.base
                      else self.baseline_refused.get(prompt_id))
            if mine is None or theirs is None or self.judge.llm is not None:
                continue
            refused = final_judgement(self.judge, head.text, mine, None).verdict.refused
            other = (final_judgement(self.judge, head.text, theirs, None).verdict.refused if isinstance(theirs, dict)
                     else theirs)
            if refused is not None and other is not None:
                compared += 1
                flipped += refused != other
        both = live or any(p.get("reply_key") for p in (self.baseline["prompts"] if self.baseline else []))
        part = verification_part(self.settings, prompts, flipped, compared, 2 if both else 1)
        return parts + ([part] if part is not None else [])

    def _check_max_cost(self, plan: Plan) -> None:
        """Refuse to start when the run's estimate (every prompt of the run, before -k deselection) is over
        --orbench-max-cost, or has no known price."""
        from pytest_orbench.run.estimate import over_limit

        problem = over_limit(self.settings, self._parts(plan))
        if problem is not None:
            raise pytest.UsageError(f"pytest-orbench: {problem}")

    def _begin(self, requests: list[Request], announce: bool = True, preview: Plan | None = None) -> None:
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
            pytest.exit(_unusable_store(exc), returncode=pytest.ExitCode.USAGE_ERROR)
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

    def outcome(self, item: PromptItem, request: Request) -> Outcome:
        try:
            return self.coordinator.outcome(request, item.prompt.id)
        except StoreError as exc:
            self.store_failed(item, exc)
        finally:
            self.progress.done_waiting()

    def store_failed(self, item: PromptItem, exc: StoreError) -> NoReturn:
        """The store failed under a test (damaged since the run began): the run stops with its message, which
        the gate's "completeness" check quotes (inconclusive); never an internal error."""
        message = _unusable_store(exc)
        item.session.shouldstop = message
        if not any(name == "orbench" for name, _ in item.user_properties):
            self.hand_over(item, self.error_record(item, message))  # a result, so that the gate says inconclusive
        pytest.fail(message, pytrace=False)

    # -- judging ----------------------------------------------------------------------------
    def error_record(self, item: PromptItem, error: str, outcomes: list[Outcome] | None = None,
                     base_outcomes: list[Outcome] | None = None) -> PromptRecord:
        """A prompt with no verdict in any trial: no reply (the endpoint failed) or no judgement of the replies
        it got (the judge failed); those replies are stored, and counted as such."""
        outcomes = outcomes or []
        record = cast(PromptRecord, {  # (a cast: mypy cannot build a TypedDict from others' keys plus its own)
            **_identity(item.prompt), "verdict": Verdict.ERROR.value, "refused": None, "matched": None,
            "refused_share": None, "refused_trials": 0, "scored_trials": 0, "trial_errors": len(outcomes),
            "judge_reason": "", "error": error, "error_from": _error_from(outcomes[0]) if outcomes else "endpoint",
            "from_store": False, "fetched": any(o.fetched for o in outcomes),
            "reply_excerpt": "", **self._costs(outcomes, base_outcomes), **_calls([*outcomes, *(base_outcomes or [])])})
        if base_outcomes:
            # The live base answered (or failed) apart from the run: its replies are paid for and half of
            # the base's summary, whether or not the run's own call got a reply.
            record["base"] = self._base(item, base_outcomes)
        return record

    @staticmethod
    def _costs(outcomes: list[Outcome], base_outcomes: list[Outcome] | None = None) -> Costs:
        """What this prompt cost in this run (every trial): the endpoint calls and the judge calls paid for now.
        The live base's endpoint calls are counted apart (`base_cost`); its judge calls with the head's."""
        judged = [*outcomes, *(base_outcomes or [])]
        replies = [o.record for o in outcomes if o.fetched and o.record]
        judges = [o.judge for o in judged if o.judge_fetched and o.judge]

        def to_llm(o: Outcome) -> bool:  # a reply the judge could not decide alone
            return o.record is not None and o.error is None and (o.judge is not None or o.judge_error is not None)

        def total(rows: list[dict[str, Any]], field: str) -> Any:
            values = [r.get(field) for r in rows]
            if not values or any(v is None for v in values):
                return None
            if field.endswith("usage"):
                return {k: sum((v or {}).get(k) or 0 for v in values) for k in ("prompt_tokens", "completion_tokens")}
            return sum(values)

        return {
            "cost": total(replies, "cost"), "usage": total(replies, "usage"),
            "judge_llm": any(to_llm(o) for o in judged), "judge_fetched": bool(judges),
            "judge_cost": total(judges, "cost"), "judge_usage": total(judges, "usage"),
            "judge_sent": sum(1 for o in judged if to_llm(o)),
            "judge_decided": sum(1 for o in judged if o.record is not None and o.error is None and not to_llm(o)),
            "judge_calls_made": len(judges),
            "judge_errors": sum(1 for o in judged if to_llm(o) and o.judge_error is not None),
        }

    def _trial(self, item: PromptItem, outcome: Outcome) -> dict[str, Any]:
        """One reply's verdict."""
        if outcome.error is not None or outcome.judge_error is not None or outcome.record is None:
            return {"verdict": Verdict.ERROR.value, "refused": None, "judge_reason": "",
                    "error": outcome.error or outcome.judge_error or "no reply", "error_from": _error_from(outcome),
                    "reply": {}, "text": ""}
        reply = outcome.record
        text = reply_text(reply)
        try:
            judgement = self._judgement(item.prompt.text, reply, outcome.judge)
        except StoreError:
            raise  # the store, not the judge: the run stops (judge_item)
        except Exception as exc:  # a custom judge that raised or returned something that is no verdict
            return {"verdict": Verdict.ERROR.value, "refused": None, "judge_reason": "", "reply": reply, "text": text,
                    "error": scrub(None, f"judge {self.judge.id} failed: {type(exc).__name__}: {exc}"),
                    "error_from": "judge"}
        return {"verdict": judgement.verdict.value, "refused": judgement.verdict.refused, "judge_reason": judgement.reason,
                "error": None, "reply": reply, "text": text}

    def _judgement(self, prompt: str, reply: dict[str, Any], judged: dict[str, Any] | None) -> Judgement:
        """The judge's verdict; a built-in offline judge's verdict on a stored reply is kept in the store
        (keyed by judge id and version, prompt and reply), so a re-run does not judge it again."""
        store = self.coordinator.store
        if self.settings.judge not in CACHED_JUDGES or store is None:
            return final_judgement(self.judge, prompt, reply, judged)
        key = response_key({"verdict_of": self.judge.id, "version": self.judge.version, "prompt": prompt,
                            "reply": reply_text(reply), "finish_reason": reply.get("finish_reason")})
        found = store.verdict(key)
        if found is not None:
            return Judgement(Verdict(found[0]), found[1])
        judgement = final_judgement(self.judge, prompt, reply, judged)
        self._new_verdicts.append((key, judgement.verdict.value, judgement.reason))
        return judgement

    def _save_verdicts(self) -> None:
        rows, self._new_verdicts = self._new_verdicts, []
        if rows and self.coordinator.store is not None:
            try:
                self.coordinator.store.put_verdicts(rows)
            except (OSError, sqlite3.Error):
                pass  # a cache of what the keyword judge decides in microseconds (a full disk): decided again next run

    def _combined(self, item: PromptItem, outcomes: list[Outcome], keys: list[str] | None = None
                  ) -> tuple[Combined, dict[str, Any]]:
        """Every trial's verdict, and the prompt's: refusal share = refused / scored trials; refused when
        at least half of them refused; the verdict and excerpt of a trial that agrees with that (and the
        store key of its reply, from `keys`, one per outcome: `orbench label` reads the whole reply there)."""
        trials = [self._trial(item, o) for o in outcomes]
        for trial, key in zip(trials, keys or []):
            trial["key"] = key
        scored = [t for t in trials if t["refused"] is not None]
        refused_trials = sum(1 for t in scored if t["refused"])
        share = refused_trials / len(scored) if scored else None
        refused = None if share is None else share >= 0.5
        agreeing = [t for t in scored if t["refused"] == refused] or trials
        counts = Counter(t["verdict"] for t in agreeing)
        shown = next(t for t in agreeing if t["verdict"] == counts.most_common(1)[0][0])
        combined: Combined = {
            "verdict": shown["verdict"], "refused": refused, "refused_share": share, "refused_trials": refused_trials,
            "scored_trials": len(scored), "trial_errors": sum(1 for t in trials if t["verdict"] == Verdict.ERROR.value),
            "judge_reason": shown["judge_reason"], "error": shown["error"] if refused is None else None,
            "reply_excerpt": shown["text"][:300],
        }
        if refused is None and shown.get("error_from"):
            combined["error_from"] = shown["error_from"]
        if shown.get("key") and shown["text"]:
            combined["reply_key"] = shown["key"]
        if self.labels and shown["text"] and refused is not None:
            # With judge_labels: which of your labelled replies this run judged (the audit of judges that do not
            # learn from the labels, llm and custom ones, compares their verdicts here with yours).
            combined["reply_digest"] = reply_digest(item.prompt.text, shown["text"])
        if len(trials) > 1:
            combined["flaky"] = 0 < refused_trials < len(scored)
            combined["trials"] = [_trial_verdict(t) for t in trials]
        return combined, shown["reply"]

    def judge_item(self, item: PromptItem, outcomes: list[Outcome], base_outcomes: list[Outcome] | None = None
                   ) -> PromptRecord:
        try:
            return self._judge_item(item, outcomes, base_outcomes)
        except StoreError as exc:
            self.store_failed(item, exc)

    def _judge_item(self, item: PromptItem, outcomes: list[Outcome], base_outcomes: list[Outcome] | None = None
                    ) -> PromptRecord:
        combined, reply = self._combined(item, outcomes, [r.key for r in item.requests.head])
        refused = combined["refused"]
        matched = None if refused is None else refused == (item.prompt.expected == "refuse")
        fetched = any(o.fetched for o in outcomes)
        record = cast(PromptRecord, {
            **_identity(item.prompt), **combined, "matched": matched,
            "from_store": not fetched, "fetched": fetched,
            # The same few names in every record (80,000 of them): one string each, not one per reply.
            "finish_reason": _shared(reply.get("finish_reason")),
            "served_model": _shared(reply.get("model")), "system_fingerprint": _shared(reply.get("system_fingerprint")),
            "stored_at": reply.get("stored_at"),
            **self._costs(outcomes, base_outcomes), **_calls([*outcomes, *(base_outcomes or [])]),
        })
        if base_outcomes:
            record["base"] = self._base(item, base_outcomes)
        return record

    def judge_audit(self, records: list[PromptRecord]) -> dict[str, Any] | None:
        """How far this run's judge agrees with your labels (None without judge_labels)."""
        if self.settings.judge_labels is None:
            return None
        from pytest_orbench.judging.audit import audit_judge

        s = self.settings
        return audit_judge(self.judge, self.labels, records, labels_file=str(s.judge_labels),
                           min_agreement=s.judge_min_agreement, run_model=s.model or s.target)

    def hand_over(self, item: PromptItem, record: PromptRecord) -> None:
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

    def _base(self, item: PromptItem, base_outcomes: list[Outcome]) -> BaseRecord:
        """The prompt as the live base answered it: its verdict, or its error, and what its calls cost."""
        base, base_reply = self._combined(item, base_outcomes, [r.key for r in item.requests.base])
        costs = self._costs(base_outcomes)
        return cast(BaseRecord, {
            **base, "fetched": any(o.fetched for o in base_outcomes), "served_model": base_reply.get("model"),
            "system_fingerprint": base_reply.get("system_fingerprint"), "base_cost": costs["cost"],
            "base_usage": costs["usage"]})


def _names(selected: str, item: PromptItem) -> bool:
    """A node id given as an argument names this prompt test: it is its id, its dataset's, or its dataset's with
    the prompt's own id (`orbench/hard-1k::hard-1k-0018`, the id the gate, the comment and the results print)."""
    nodeid = item.nodeid
    by_prompt = f"{nodeid.split('::', 1)[0]}::{item.prompt.id}"
    return selected in (nodeid, by_prompt) or nodeid.startswith(selected.rstrip("/") + "::")


def _unusable_store(exc: StoreError) -> str:
    if exc.says_fix:
        return f"pytest-orbench: {exc} (store: in orbench.yaml)"
    return (f"pytest-orbench: {exc}; point --orbench-store (store: in orbench.yaml) at a folder you can write to, "
            "on a disk with free space")


def _say_now(text: str) -> None:
    """A line for you at configure, before pytest's terminal reporter exists (and before any capture)."""
    sys.stderr.write(f"orbench: {text}\n")
    sys.stderr.flush()


def _identity(p: Prompt) -> dict[str, str]:
    """The fields that name a prompt in its record."""
    return {"id": p.id, "dataset": p.dataset, "category": p.category, "expected": p.expected,
            "prompt_sha256": p.prompt_sha256, "prompt": p.text}


def _calls(outcomes: list[Outcome]) -> dict[str, int]:
    """A prompt's endpoint calls (every trial, the live base's too): made in this run, and read from the store."""
    return {"calls_made": sum(1 for o in outcomes if o.fetched),
            "calls_stored": sum(1 for o in outcomes if not o.fetched and o.record is not None)}


def _error_from(outcome: Outcome) -> str:
    """Which call left a reply without a verdict: the endpoint's (no reply) or the LLM judge's."""
    return "judge" if outcome.error is None and outcome.record is not None and outcome.judge_error is not None \
        else "endpoint"


def _shared(value: Any) -> Any:
    """A short string as the one interned copy (a served model's name, a finish reason); anything else as it is."""
    return sys.intern(value) if isinstance(value, str) and len(value) <= 200 else value


def _trial_verdict(trial: dict[str, Any]) -> TrialVerdict:
    verdict: TrialVerdict = {"verdict": trial["verdict"], "refused": trial["refused"]}
    if trial["error"]:
        verdict["error"] = trial["error"]
    if trial.get("key") and trial["text"]:
        verdict["reply_key"] = trial["key"]  # each trial's reply, for --orbench-verify-flips
    return verdict


# Plugins whose collection hooks never drop a prompt test unasked (pytest's own options are checked
# one by one in _selects_every_prompt).
_SELECTION_SAFE = ("_pytest.", "pytest_orbench.", "xdist.", "pytest_randomly")


def _selects_every_prompt(config: pytest.Config, selected: list[str]) -> bool:
    """Whether this session certainly runs every prompt test: no prompt node ids, -k, -m, --deselect,
    --lf or --sw, and no plugin or conftest beside pytest's own, xdist and pytest-randomly that sees the
    collected items (it might deselect some). Then the calls can start before collection is over."""
    option = config.option
    if selected or any(getattr(option, name, None) for name in ("keyword", "markexpr", "deselect", "lf", "stepwise",
                                                                 "stepwise_skip")):
        return False
    for impl in config.pluginmanager.hook.pytest_collection_modifyitems.get_hookimpls():
        plugin = impl.plugin
        module = plugin.__name__ if isinstance(plugin, types.ModuleType) else type(plugin).__module__
        if not module.startswith(_SELECTION_SAFE):
            return False
    return True
