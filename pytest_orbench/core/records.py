"""The records that cross modules, typed: one prompt's record, a dataset's summary, the results document.

They are plain dicts at run time (TypedDicts): the per-prompt record travels from an xdist worker to
the controller inside a test report's `user_properties`, and the results document is written as JSON
and read back by `orbench compare` and the Action. The one boundary from JSON is `load_results`
(results files) and `baseline.load_baseline` (baselines); inside the process mypy checks every key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from pytest_orbench.core.document_checks import audit_problem, prompts_problem, run_problem, summaries_problem
from pytest_orbench.core.jsonfile import loads_document

RESULTS_SCHEMA = "pytest-orbench/results"
BASELINE_SCHEMA = "pytest-orbench/baseline"
RESULTS_SCHEMA_VERSION = 1
# Above this many prompts the results JSON keeps the summary, the gate and the prompts that matter (flips and
# errors) and every prompt's record goes, one per line, to a JSON Lines file beside it, which it names under
# `prompts_file` (at 80,000 prompts one JSON file was 100 MB, usable only with tools).
FULL_PROMPTS_MAX = 10_000
PROMPTS_SCHEMA = "pytest-orbench/prompts"  # the JSON Lines file: one prompt record (as in `prompts`) per line
PROMPTS_SCHEMA_VERSION = 1
REPORT_PROPERTY = "orbench"
# How the error of a prompt whose call was never made begins: the calls had stopped before it (a rejected key,
# a refused connection, the cost limit, an interruption). Counted apart from the replies that failed.
NOT_REQUESTED = "not requested: "


def report_property(record: PromptRecord) -> tuple[str, str]:
    """A prompt's record as a test report's user property: one JSON string. xdist serialises reports
    object by object in Python; one string costs a fraction of a dict of thirty entries, on the worker
    and on the controller alike (and --junitxml shows JSON rather than a Python repr)."""
    return REPORT_PROPERTY, json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def record_of(name: str, value: object) -> PromptRecord | None:
    """The record in a report's user property made by `report_property`, if this is one."""
    if name != REPORT_PROPERTY or not isinstance(value, str):
        return None
    return cast(PromptRecord, json.loads(value))


LIVE_BASE = "live base"  # run.compared_with when the gate compared with the live base asked in the same session


def against_live_base(run: Mapping[str, Any]) -> bool:
    """Whether the run was compared with its live base (asked in this session), not with a baseline file."""
    return run.get("compared_with") == LIVE_BASE


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int


class TrialVerdict(TypedDict):
    """One trial of a prompt asked several times (--orbench-trials)."""

    verdict: str
    refused: bool | None
    error: NotRequired[str]
    reply_key: NotRequired[str]  # the store key of this trial's reply
    reply_sha256: NotRequired[str]  # which reply that was


class Combined(TypedDict):
    """A prompt's verdict over its trials: refused when at least half of the scored trials refused."""

    verdict: str  # a judge.Verdict value
    refused: bool | None  # None: error or unscored
    refused_share: float | None
    refused_trials: int
    scored_trials: int
    trial_errors: int
    judge_reason: str
    error: str | None
    error_from: NotRequired[str]  # with an error verdict: "endpoint" (no reply) or "judge" (a reply, no judgement)
    reply_excerpt: str
    reply_key: NotRequired[str]  # the store key of the reply shown (its whole text is there): `orbench label`
    # With reply_key: which reply that was (reply_sha256), so that a later reply stored under the same key (asked
    # again once the store's max age passed) is never taken for the one judged here.
    reply_sha256: NotRequired[str]
    reply_digest: NotRequired[str]  # with judge_labels: labels.reply_digest of the prompt and the reply shown
    flip_verification: NotRequired[dict[str, Any]]  # --orbench-verify-flips, on a flipped prompt: both opinions
    flaky: NotRequired[bool]  # with trials: some refused, some answered
    trials: NotRequired[list[TrialVerdict]]


class BaseRecord(Combined):
    """The same prompt under the live base configuration (--orbench-base-*)."""

    fetched: bool
    served_model: str | None
    system_fingerprint: str | None
    base_cost: float | None
    base_usage: Usage | None


class Costs(TypedDict):
    """What one prompt cost in this run: endpoint calls and judge calls paid for now (None: price unknown)."""

    cost: float | None
    usage: Usage | None
    judge_llm: bool
    judge_fetched: bool
    judge_cost: float | None
    judge_usage: Usage | None
    # This prompt's replies (every trial, and the live base's) that went to the LLM judge, that the judge
    # decided without it, the judge calls paid for now (replies judged alike share one) and those left
    # without a judgement.
    judge_sent: int
    judge_decided: int
    judge_calls_made: int
    judge_errors: int


class PromptRecord(Combined, Costs):
    """One prompt test's result, as in the results file's `prompts` list."""

    id: str
    dataset: str
    category: str
    expected: str  # "answer" | "refuse"
    prompt_sha256: str
    prompt: str
    matched: bool | None  # the behaviour matched the expectation
    from_store: bool
    fetched: bool
    calls_made: int
    calls_stored: int
    shared_reply_with: NotRequired[str]  # an earlier prompt with the same text: its reply, counted there
    finish_reason: NotRequired[str | None]
    served_model: NotRequired[str | None]
    system_fingerprint: NotRequired[str | None]
    stored_at: NotRequired[float | None]
    base: NotRequired[BaseRecord]


class RunMeta(TypedDict, total=False):
    """What a run was (the results' and the baseline's `run`): every key optional, as files written by
    older versions, `orbench compare` and the live base's own run carry a subset."""

    endpoint: str
    model: str | None
    target: str | None
    api_base: str | None
    calls_to: str  # where the calls go: api_base's host, or the provider's own API (spec.calls_go_to)
    params: dict[str, Any]
    system_prompt_sha256: str | None
    system_prompt_source: str | None
    judge: dict[str, Any]  # id, version, model
    revision: str | None
    store_max_age: str
    seed: int
    sample: int | None
    trials: int
    base: dict[str, Any]  # the live base's endpoint facts and what differs
    datasets: dict[str, dict[str, Any]]  # per dataset: source file, sha256, revision, total, selected, expected
    calls: dict[str, int]  # made, stored (per reply), errors (prompts with no reply; not_requested: never asked); prompts, shared (prompts whose reply another's call made)
    spend: dict[str, dict[str, Any]]  # endpoint / base / judge: tokens and cost_usd (None: price unknown)
    judge_calls: dict[str, int]  # sent_to_llm, decided_without_llm, made, errors (per reply, the live base's too)
    verification: dict[str, Any]  # --orbench-verify-flips: the judge model, the calls made now, their cost
    served: dict[str, dict[str, int]]  # models and system fingerprints the provider reported, with counts
    started: str
    duration_seconds: float
    compared_with: str | None
    baseline_update: dict[str, Any]  # path, written, reason
    stopped: str  # why the run stopped before every selected prompt ran (-x, Ctrl-C, a crash): never a pass


class RateBlock(TypedDict):
    """Rates over the scored prompts of a dataset or a category."""

    n: int  # scored prompts (errors and unscored excluded)
    refused: int
    errors: int
    unscored: int
    filtered: int
    empty: int
    rejection_rate: float | None
    acceptance_rate: float | None
    ci95: list[float | None]
    flaky: int
    flaky_prompts: list[str]
    verdicts: dict[str, int]


class DatasetSummary(RateBlock):
    expected: str
    total: int  # prompts of the dataset in this run, errors included
    categories: dict[str, RateBlock]
    comparison: NotRequired[Comparison]  # with a baseline


class PairedBlock(TypedDict):
    """A paired comparison of one dataset (or category) with the baseline: baseline.paired_block."""

    n: int  # prompts scored in both runs
    baseline_refused: int
    refused: int
    newly_refused: int
    newly_answered: int
    baseline_rate: float | None
    rate: float | None
    delta: float
    delta_ci95: list[float]
    p_value: float  # one-sided, in the regression direction
    test: str
    direction: str  # "more refusals" | "fewer refusals"
    regressed: int
    improved: int
    detectable: float  # the smallest regression this sample detects (power 0.8; alpha / regression checks in a gate)
    p_mc_error: NotRequired[float]
    p_adjusted: NotRequired[float]  # Holm across the run's regression checks (gate.assess)


class Undecided(TypedDict):
    """A prompt of the comparison without a usable verdict on one side or both, and why."""

    id: str
    side: str  # run | compared | both
    why: str


class WorstCase(TypedDict):
    """The comparison with every undecided prompt counted against the change (baseline.worst_pair)."""

    n: int
    regressed: int
    improved: int
    delta: float
    p_value: float
    test: str
    undecided: list[Undecided]


class Comparison(PairedBlock):
    """A dataset's comparison: the paired block, which prompts moved, and each category's block."""

    newly_refused_ids: list[str]
    newly_answered_ids: list[str]
    categories: dict[str, PairedBlock]
    not_in_baseline: NotRequired[int]  # this run's prompts of the dataset that the baseline lacks: not compared
    not_run: NotRequired[int]  # the run's prompts of the dataset that pytest did not run (deselected, stopped)
    worst_case: NotRequired[WorstCase]  # with undecided prompts: what the gate must also pass on


class GateCheck(TypedDict):
    """One check of the gate: an error budget, an absolute limit or a regression test."""

    name: str
    dataset: str
    kind: str  # errors | max_rejection | min_rejection | regression
    observed: float | None
    limit: float
    outcome: str  # pass | fail | inconclusive
    message: str
    p_value: NotRequired[float]
    alpha: NotRequired[float]
    p_adjusted: NotRequired[float]
    worst_case: NotRequired[dict[str, Any]]  # the check with every undecided prompt counted against the change
    tolerance_pp: NotRequired[float]  # while deciding (gate._decide_regressions), then dropped
    comparison: NotRequired[Comparison]  # while deciding, then dropped
    replied: NotRequired[int]  # while deciding: the dataset's prompts with a verdict, then dropped
    base_replied: NotRequired[int | None]  # while deciding: the same under the live base (None: no live base)


class GateResult(TypedDict):
    verdict: str  # pass | fail | inconclusive | ungated
    passed: bool
    checks: list[GateCheck]
    warnings: list[str]
    note: NotRequired[str]
    compared: NotRequired[list[str]]
    not_compared: NotRequired[list[str]]
    baseline_only: NotRequired[list[str]]


class ResultsDocument(TypedDict):
    """The results file (--orbench-json); `gate`, `comparison` etc. are added by gate.assess."""

    schema: str
    schema_version: int
    plugin_version: str
    run: RunMeta
    datasets: dict[str, DatasetSummary]
    prompts: list[PromptRecord]
    gate: NotRequired[GateResult]
    changes: NotRequired[list[dict[str, Any]]]  # with a baseline: what differs from its run (baseline.check_comparable)
    base: NotRequired[dict[str, Any]]
    drift: NotRequired[dict[str, Any]]
    # With judge_labels: how far the judge agrees with your labels (audit.audit_judge); None without them.
    judge_audit: NotRequired[dict[str, Any] | None]


class BaselinePrompt(TypedDict):
    """One prompt's verdict as a committed baseline records it (no prompt text, no reply)."""

    id: str
    dataset: str
    category: str
    prompt_sha256: str
    verdict: str
    refused: bool | None
    refused_share: NotRequired[float | None]
    refused_trials: NotRequired[int]
    scored_trials: NotRequired[int]
    reply_key: NotRequired[str]  # the store key of the reply judged: --orbench-verify-flips re-judges it if stored
    reply_sha256: NotRequired[str]  # which reply that was: verification re-judges only that very reply


class BaselineDocument(TypedDict):
    """A committed baseline (--orbench-update-baseline): the run's identity, aggregates, each prompt's verdict."""

    schema: str
    schema_version: int
    plugin_version: str
    run: RunMeta
    datasets: dict[str, dict[str, Any]]
    prompts: list[BaselinePrompt]


class ResultsError(Exception):
    """A file that is not a pytest-orbench results document."""


def prompt_lines_name(path: Path) -> str:
    """The JSON Lines file beside results JSON `path`: r.json -> r.prompts.jsonl."""
    return (path.stem if path.suffix == ".json" else path.name) + ".prompts.jsonl"


def _prompt_lines(path: Path, described: Any) -> list[Any]:
    """Every prompt record of a results file written in two parts, from the JSON Lines file it names, checked
    against what the JSON says of it (schema, count, SHA-256): a file from another run is refused."""
    if (not isinstance(described, dict) or described.get("schema") != PROMPTS_SCHEMA
            or not isinstance(described.get("path"), str) or type(described.get("records")) is not int):
        raise ResultsError(f"{path}: `prompts_file` is damaged (schema {PROMPTS_SCHEMA!r}, path and records expected); "
                           "write it again")
    if described.get("schema_version") != PROMPTS_SCHEMA_VERSION:
        raise ResultsError(f"{path}: its prompts file has schema version {described.get('schema_version')!r}; this "
                           f"pytest-orbench reads version {PROMPTS_SCHEMA_VERSION}")
    name = Path(described["path"])
    if name.is_absolute() or len(name.parts) != 1:
        raise ResultsError(f"{path}: `prompts_file.path` must name a file beside it, got {described['path']!r}")
    lines_path = path.parent / name
    try:
        raw = lines_path.read_bytes()
    except OSError as exc:
        raise ResultsError(f"{path} keeps only the prompts that matter; every prompt's record is in {lines_path}, "
                           f"which cannot be read ({exc.strerror}): keep the two files together") from None
    if hashlib.sha256(raw).hexdigest() != described.get("sha256"):
        raise ResultsError(f"{lines_path} is not the prompts file {path} was written with (its SHA-256 differs): keep "
                           "the two files of one run together, or write them again")
    try:
        records = [loads_document(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{lines_path} is not JSON Lines: {exc}") from None
    if len(records) != described["records"]:
        raise ResultsError(f"{lines_path} holds {len(records)} records, {path} says {described['records']}")
    return records


def load_results(path: Path) -> ResultsDocument:
    """A results file written by `--orbench-json`, checked at the boundary (schema and the keys read)."""
    try:
        data = loads_document(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ResultsError(f"{path} is not JSON: {exc}") from None
    if isinstance(data, dict) and data.get("schema") == BASELINE_SCHEMA:
        raise ResultsError(f"{path} is a baseline (--orbench-update-baseline), not a results file (--orbench-json); "
                           "orbench compare takes the baseline first: orbench compare BASELINE.json RESULTS.json")
    if not isinstance(data, dict) or data.get("schema") != RESULTS_SCHEMA:
        raise ResultsError(f"{path} is not a pytest-orbench results file (schema {RESULTS_SCHEMA!r} expected)")
    if type(data.get("schema_version")) is not int or data["schema_version"] != RESULTS_SCHEMA_VERSION:
        raise ResultsError(f"{path} has results schema version {data.get('schema_version')!r}; this pytest-orbench "
                           f"reads version {RESULTS_SCHEMA_VERSION}")
    for key, kind in (("run", dict), ("datasets", dict), ("prompts", list)):
        if not isinstance(data.get(key), kind):
            raise ResultsError(f"{path}: `{key}` is missing or not a {kind.__name__}")
    if "prompts_file" in data:
        data["prompts"] = _prompt_lines(path, data["prompts_file"])
    # The keys the comparison, the gate and the reports read: a damaged file is refused here, not
    # met as a KeyError halfway through `orbench compare` or the Action.
    problem = (run_problem(data["run"], results=True) or summaries_problem(data["datasets"])
               or prompts_problem(data["prompts"]) or audit_problem(data.get("judge_audit")))
    if problem:
        raise ResultsError(f"results file {path} is damaged: {problem}; write it again")
    return cast(ResultsDocument, data)
