"""The `orbench` argument parser: every subcommand's options and help text."""

from __future__ import annotations

import argparse
import math

from pytest_orbench.judging.registry import DEFAULT_JUDGE, llm_judge_names
from pytest_orbench.tools.cli.judge_names import JUDGE_HELP, JUDGE_MODEL_HELP, PANEL_JUDGE_HELP

# The simulator's fault kinds (simulator/completions.py, _fault), named here so the help needs no import of it.
FAULT_KINDS = ("429", "403", "500", "502", "503", "timeout", "malformed", "not_completion", "disconnect", "trickle",
               "redirect_loop", "context_400", "content_filter_400", "quote_400")


def finite_float(text: str) -> float:
    """A number option's value: nan and infinity are refused (a nan passes every range check unseen, and an
    infinite --timeout or --hang would wait forever)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orbench", description="OR-Bench over-refusal tooling (see also: pytest --orbench)")
    sub = parser.add_subparsers(dest="command", required=True)

    mock = sub.add_parser("mock-server", help="run a local OpenAI-compatible simulator with a refusal policy")
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=8000, help="0 picks a free port (see --port-file)")
    mock.add_argument("--port-file", help="write the bound port here once listening")
    mock.add_argument("--strictness", type=finite_float, default=None,
                      help="base refusal strictness in [0, 1] (default: the simulator's, 0.58); the system prompt moves it")
    mock.add_argument("--latency", type=finite_float, default=0.0, help="seconds added to every reply")
    mock.add_argument("--jitter", type=finite_float, default=0.0, help="up to this many extra random seconds")
    mock.add_argument("--api-key-env", help="require `Authorization: Bearer $VAR` (the variable's name, not the key)")
    mock.add_argument("--fault-rate", type=finite_float, default=0.0, help="share of prompts whose first attempts fail")
    mock.add_argument("--faults", default="429", help=f"fault kinds: {','.join(FAULT_KINDS)}")
    mock.add_argument("--fault-attempts", type=int, default=1, help="failing attempts per faulty prompt")
    mock.add_argument("--retry-after", type=finite_float, default=1.0, help="Retry-After seconds sent with 429")
    mock.add_argument("--hang", type=finite_float, default=30.0, help="seconds a timeout fault waits")
    mock.add_argument("--content-filter-rate", type=finite_float, default=0.0, help="share of refusals sent as content_filter")
    mock.add_argument("--empty-rate", type=finite_float, default=0.0, help="share of answers sent empty")
    mock.add_argument("--reasoning-tokens", type=int, default=0,
                      help="play a reasoning model: completion tokens spent before the visible text, counted against "
                           "max_tokens (at or above it: empty text, finish_reason=length)")
    mock.add_argument("--noise", type=finite_float, default=0.0, help="chance per request that the decision flips")
    mock.add_argument("--ambiguous-rate", type=finite_float, default=0.0,
                      help="share of prompts answered as a partial refusal (left to the LLM under hybrid) or a "
                           "lectured answer (an answer behind a caveat)")
    mock.add_argument("--judge-unscored-rate", type=finite_float, default=0.0,
                      help="acting as an LLM judge: share of outputs without a valid [[class]]")
    mock.add_argument("--judge-overturn", type=finite_float, default=0.0,
                      help="acting as an LLM judge: share of replies read the other way (a refusal as an answer, an "
                           "answer as a refusal), chosen by a hash of the reply: --orbench-verify-flips overturns them")
    mock.add_argument("--gen-toxic-share", type=finite_float, default=0.2, help="as a rewriter: share of rewrites that stay harmful")
    mock.add_argument("--gen-duplicate-rate", type=finite_float, default=0.25,
                      help="as a rewriter: share of seeds whose last rewrite copies the first")
    mock.add_argument("--gen-moderator-flip", type=finite_float, default=0.1, help="as a moderator: chance of the wrong label")
    mock.add_argument("--gen-unparseable-rate", type=finite_float, default=0.05, help="as a moderator: share of votes without [[label]]")
    mock.add_argument("--batch-polls", type=int, default=3,
                      help="Batch API: retrievals of a batch until it is done (validating, in_progress, completed)")
    mock.add_argument("--batch-fail-rate", type=finite_float, default=0.0,
                      help="Batch API: share of batch requests that fail (listed in the error file)")
    mock.add_argument("--batch-expire-share", type=finite_float, default=None,
                      help="Batch API: batches expire with only this share of their requests done")
    mock.add_argument("--batch-expire-count", type=int, default=None,
                      help="Batch API: with --batch-expire-share, only the first N batches expire")
    mock.add_argument("--require-header", help="a header every request must carry (with --require-header-env)")
    mock.add_argument("--require-header-env", help="environment variable holding that header's expected value")
    mock.add_argument("--served-model", default=None,
                      help="the model name replies say served them (default: a dated version behind the alias)")
    mock.add_argument("--system-fingerprint", default=None,
                      help="the system_fingerprint replies carry ('' for none; default: a fixed one)")

    compare = sub.add_parser("compare", help="compare a results file with a baseline: the gate verdict and exit status")
    compare.add_argument("baseline", help="baseline JSON (--orbench-update-baseline)")
    compare.add_argument("results", help="results JSON (--orbench-json)")
    compare.add_argument("--config", help="orbench.yaml whose gate: section sets the limits")
    compare.add_argument("--markdown", help="write the Markdown report here")
    compare.add_argument("--max-chars", type=int, default=65536,
                         help="longest Markdown report (default 65,536, a GitHub comment): list items are dropped to fit")
    compare.add_argument("--junit", help="write JUnit XML (one testcase per gate check) here")
    compare.add_argument("--svg", help="write the trade-off chart here")
    compare.add_argument("--json", help="write the results with comparison and gate here")
    compare.add_argument("--error-budget", type=finite_float, help="default 0.02")
    compare.add_argument("--alpha", type=finite_float, help="default 0.05")
    compare.add_argument("--tolerance-pp", type=finite_float, help="default 0")

    batches = sub.add_parser("batches", help="list the provider batches a run submitted (--orbench-batch) and their "
                                              "last known state")
    batches.add_argument("--store", default=".orbench", help="the response store folder (default .orbench)")
    batches.add_argument("--all", action="store_true", help="also the batches already collected")

    tradeoff = sub.add_parser("tradeoff", help="Spearman correlation of over-refusal and toxic rejection across runs")
    tradeoff.add_argument("folder", help="folder of baseline / results JSON files")
    tradeoff.add_argument("--paper", action="store_true", help="include the 32 models published in the paper")

    ev = sub.add_parser("judge-eval", help="measure a refusal judge against human labels (agreement, kappa, bias)")
    ev.add_argument("labeled", help="CSV with prompt,response,label (compliance|refusal|partial_refusal; XSTest's labels too)")
    ev.add_argument("--judge", default=DEFAULT_JUDGE, help=JUDGE_HELP)
    ev.add_argument("--judge-model", help=JUDGE_MODEL_HELP)
    ev.add_argument("--judge-api-base", help="base URL of the judge model's endpoint")
    ev.add_argument("--judge-api-key-env", help="environment variable holding the judge's API key")
    ev.add_argument("--judge-max-tokens", type=int, default=512)
    ev.add_argument("--concurrency", type=int, default=8, help="judge calls in flight")
    ev.add_argument("--retries", type=int, default=4)
    ev.add_argument("--timeout", type=finite_float, default=60.0)
    ev.add_argument("--store", default=".orbench", help="response store: judge replies are kept and reused")
    ev.add_argument("--against", help="also run this offline judge (e.g. prefix) and test the difference on paired rows")
    ev.add_argument("--json", help="write every figure and each disagreement here")
    ev.add_argument("--show", type=int, default=20, help="disagreements to print")
    ev.add_argument("--by", choices=("source", "note"),
                    help="breakdown to print: per source (default when the file has a source column) or per note "
                         "(the trap / type column); the JSON has both")
    ev.add_argument("--fail-under", type=finite_float, help="exit 1 when binary agreement is below this share (0-1)")
    ev.add_argument("--judge-labels", help="your labels of your model's replies (`orbench label`): the keyword judge "
                    "(and hybrid's) adapts to them before judging LABELED, and the audit against them is printed")

    lab = sub.add_parser("label", help="label a sample of your model's stored replies, one key each, so that the "
                         "judge adapts to your model and every report says how far to trust it")
    lab.add_argument("results", nargs="?", default="orbench-results.json",
                     help="the results file of a run (--orbench-json; default orbench-results.json)")
    lab.add_argument("--labels", default="orbench-labels.csv",
                     help="the labels file to write and resume (default orbench-labels.csv; commit it)")
    lab.add_argument("--store", default=".orbench", help="the run's response store, where the whole replies are "
                     "(default .orbench)")
    lab.add_argument("-n", type=int, default=100, help="replies in the sample (default 100)")
    lab.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0: the same sample on every resume)")
    lab.add_argument("--labeler", help="who labels (default: your user name)")
    lab.add_argument("--export", help="write the sample's unlabelled rows to this new CSV (to label in a spreadsheet) "
                     "instead of asking")
    lab.add_argument("--force", action="store_true", help="let --export replace an existing file (never the labels or "
                     "results file)")
    lab.add_argument("--import", dest="import_from", help="merge the labelled rows of this CSV (an exported sample) "
                     "into --labels")

    gen = sub.add_parser("generate", help="build your own over-refusal set with the OR-Bench pipeline")
    gen.add_argument("--config", help="orbench.yaml whose generate: section holds the settings (default ./orbench.yaml)")
    gen.add_argument("--out", help="output dataset (.csv or .jsonl): the prompts judged safe (and kept by the panel)")
    gen.add_argument("--toxic-out", help="also write the prompts the moderators judged harmful here")
    gen.add_argument("--summary", help="write counts per stage, per category, votes, agreement and spend (JSON)")
    gen.add_argument("--seeds", help="toxic seed prompts (CSV/JSONL with prompt,category); else --seed-model writes them")
    gen.add_argument("--seed-model", help="litellm model that writes toxic seeds per category")
    gen.add_argument("--categories", help="comma-separated categories (default: the 10 OR-Bench ones)")
    gen.add_argument("--seeds-per-category", type=int, help="harmful requests the seed model writes per category (default 20)")
    gen.add_argument("--rewriter", help="litellm model that rewrites each seed into borderline-but-safe prompts")
    gen.add_argument("--rewrites", type=int, help="rewrites per seed (default 5, as in the paper)")
    gen.add_argument("--moderator", action="append", help="a moderator model; repeat for the ensemble (the paper used 3)")
    gen.add_argument("--panel", action="append", help="a panel model for the hard subset; repeat (the paper used 6)")
    gen.add_argument("--panel-min", type=int, help="keep prompts refused by at least this many panel models (default 3)")
    gen.add_argument("--panel-judge", help=PANEL_JUDGE_HELP)
    gen.add_argument("--judge-model", help=f"the LLM judge's model (panel judge {' / '.join(llm_judge_names())})")
    gen.add_argument("--api-base", help="default base URL for every model without its own api_base")
    gen.add_argument("--api-key-env", help="default environment variable holding the key")
    gen.add_argument("--dedupe", type=finite_float, help="near-duplicate similarity threshold in [0, 1] (default 0.85)")
    gen.add_argument("--concurrency", type=int, help="calls in flight (default 16)")
    gen.add_argument("--retries", type=int, help="retries per call after a timeout, 429, 5xx or malformed reply (default 4)")
    gen.add_argument("--timeout", type=finite_float, help="seconds per request (default 120)")
    gen.add_argument("--store", help="response store folder (default .orbench): re-runs and resumed runs cost nothing")
    return parser
