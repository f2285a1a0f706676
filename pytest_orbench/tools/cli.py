"""The `orbench` command: mock-server, and the commands that work on results files."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_orbench import DEFAULT_JUDGE
from pytest_orbench.core.dependencies import CompromisedDependency, compromised_problem

if TYPE_CHECKING:
    from pytest_orbench.core.records import ResultsDocument
    from pytest_orbench.judging.labels import Label

# The simulator's fault kinds (simulator.Handler._fault), named here so the help needs no import of it.
FAULT_KINDS = ("429", "403", "500", "502", "503", "timeout", "malformed", "not_completion", "disconnect", "trickle",
               "redirect_loop")


def _mock_server(args: argparse.Namespace) -> int:
    from pytest_orbench.tools.simulator.server import MockConfig, MockServer  # only this subcommand needs the simulator

    defaults = MockConfig()
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = sorted(set(faults) - set(FAULT_KINDS))
    if unknown:
        print(f"orbench mock-server: unknown fault kind(s) {unknown}; use {','.join(FAULT_KINDS)}", file=sys.stderr)
        return 2
    problem = _mock_problem(args)
    if problem:
        print(f"orbench mock-server: {problem}", file=sys.stderr)
        return 2
    config = MockConfig(
        strictness=defaults.strictness if args.strictness is None else args.strictness, latency=args.latency, jitter=args.jitter,
        api_key=os.environ.get(args.api_key_env) if args.api_key_env else None,
        fault_rate=args.fault_rate, faults=faults, fault_attempts=args.fault_attempts,
        retry_after=args.retry_after, hang=args.hang, content_filter_rate=args.content_filter_rate,
        empty_rate=args.empty_rate, reasoning_tokens=args.reasoning_tokens, noise=args.noise, ambiguous_rate=args.ambiguous_rate,
        judge_unscored_rate=args.judge_unscored_rate, judge_overturn=args.judge_overturn,
        gen_toxic_share=args.gen_toxic_share,
        gen_duplicate_rate=args.gen_duplicate_rate, gen_moderator_flip=args.gen_moderator_flip,
        gen_unparseable_rate=args.gen_unparseable_rate, batch_polls=args.batch_polls,
        batch_fail_rate=args.batch_fail_rate, batch_expire_share=args.batch_expire_share,
        batch_expire_count=args.batch_expire_count,
        served_model=defaults.served_model if args.served_model is None else args.served_model,
        system_fingerprint=(defaults.system_fingerprint if args.system_fingerprint is None
                            else args.system_fingerprint or None),
        required_header=((args.require_header, os.environ.get(args.require_header_env, ""))
                         if args.require_header and args.require_header_env else None),
    )
    try:
        server = MockServer(config, host=args.host, port=args.port)
    except (OSError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"orbench mock-server: cannot listen on {args.host}:{args.port} ({reason}); pick another --port "
              "(0: any free port, written to --port-file) or --host", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"orbench mock-server (a simulator, not a model) listening on {server.url}", flush=True)
    if args.port_file:
        with open(args.port_file, "w", encoding="utf-8") as fh:
            fh.write(str(server.httpd.server_address[1]))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


RATES = ("fault_rate", "content_filter_rate", "empty_rate", "noise", "ambiguous_rate", "judge_unscored_rate", "judge_overturn",
         "gen_toxic_share", "gen_duplicate_rate", "gen_moderator_flip", "gen_unparseable_rate", "batch_fail_rate",
         "batch_expire_share", "strictness")


def _mock_problem(args: argparse.Namespace) -> str | None:
    """The simulator's options checked before it listens: shares in [0, 1], a port that exists, a key
    variable that is set (an unset one would silently accept any key), a --port-file that can be written."""
    from pytest_orbench.core.jsonfile import output_problem

    for name in RATES:
        value = getattr(args, name)
        if value is not None and not 0 <= value <= 1:
            return f"--{name.replace('_', '-')} is a share between 0 and 1, got {value}"
    for name in ("latency", "jitter", "retry_after", "hang"):
        if getattr(args, name) < 0:
            return f"--{name.replace('_', '-')} must be 0 or more seconds, got {getattr(args, name)}"
    if not 0 <= args.port <= 65535:
        return f"--port must be between 0 and 65535 (0: any free port, written to --port-file), got {args.port}"
    for flag, var in (("--api-key-env", args.api_key_env), ("--require-header-env", args.require_header_env)):
        if var and not os.environ.get(var):
            return f"{flag} names ${var}, which is not set: export {var}=... first"
    if bool(args.require_header) != bool(args.require_header_env):
        return "--require-header and --require-header-env go together: the header's name and the variable holding its value"
    return output_problem({"--port-file": Path(args.port_file) if args.port_file else None})


def _fail(message: str) -> int:
    print(f"orbench: {message}", file=sys.stderr)
    return 2


def _at_least(args: argparse.Namespace, name: str, low: int) -> str | None:
    """The problem with an integer option below its smallest sensible value, or above the largest the plugin's
    setting of the same name takes (options.RANGES): None when there is none."""
    from pytest_orbench.run.options import RANGES

    value = getattr(args, name)
    high = RANGES.get(name, (low, float("inf")))[1]
    if value is not None and value < low:
        return f"--{name.replace('_', '-')} must be at least {low}, got {value}"
    if value is not None and value > high:
        return f"--{name.replace('_', '-')} must be between {low} and {high:g}, got {value}"
    return None


def _load_results(path: Path) -> ResultsDocument:
    from pytest_orbench.core.records import ResultsError, load_results

    try:
        data = load_results(path)
    except ResultsError as exc:
        raise ValueError(f"{exc}; results files are written by pytest --orbench --orbench-json") from None
    # A results file may already hold a comparison with another baseline, or with the live base its run
    # asked: start from the run alone. The drift (that live base against that run's baseline) goes too.
    data.pop("gate", None)
    data.pop("changes", None)
    data.pop("drift", None)
    for summary in data["datasets"].values():
        summary.pop("comparison", None)
    return data


def _batches(args: argparse.Namespace) -> int:
    """The store's provider batches: what is still open (the next run polls it, not submits it again)."""
    from datetime import UTC, datetime

    from pytest_orbench.core.store import STORE_FILE, Store
    from pytest_orbench.render.terminal import term_safe

    folder = Path(args.store)
    if not (folder / STORE_FILE).is_file():
        return _fail(f"no response store in {folder}: give the folder your runs use (--store; pytest's "
                     "--orbench-store, default .orbench in the rootdir)")
    store = Store(folder, check=True)
    try:
        rows = store.batches(collected=args.all)
    finally:
        store.close()
    if not rows:
        print(f"no {'' if args.all else 'open '}batches in {folder}")
        return 0
    print("batch  endpoint  status  requests done/total  prompts  submitted (UTC)")
    for row in rows:
        counts = row["counts"]
        done = f"{counts.get('completed', 0)}/{counts.get('total') or row['prompts']}"
        when = datetime.fromtimestamp(row["created"], UTC).strftime("%Y-%m-%d %H:%M")
        state = term_safe(row["status"], 40) + (" (collected)" if row["collected"] else "")
        print(f"{term_safe(row['id'], 80)}  {term_safe(row['endpoint'], 120)}  {state}  {done}  {row['prompts']}  {when}")
    open_ones = sum(not r["collected"] for r in rows)
    if open_ones:
        print(f"{open_ones} open: the next run with this store (and --orbench-batch) polls them instead of "
              "submitting their prompts again")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from pytest_orbench.analysis.baseline import BaselineError, load_baseline
    from pytest_orbench.analysis.document import assess
    from pytest_orbench.analysis.gate import GateConfigError, parse_gate
    from pytest_orbench.core.jsonfile import output_problem
    from pytest_orbench.render.outputs import write_outputs
    from pytest_orbench.render.terminal import gate_lines, terminal_lines
    from pytest_orbench.run.options import MIN_MARKDOWN_CHARS
    from pytest_orbench.run.settings import load_yaml_file

    paths = {k: Path(v) if v else None for k, v in (("json", args.json), ("markdown", args.markdown),
                                                    ("svg", args.svg), ("junit", args.junit))}
    problem = output_problem({f"--{k}": v for k, v in paths.items()},
                             {"BASELINE": Path(args.baseline), "RESULTS": Path(args.results),
                              "--config": Path(args.config) if args.config else None})
    if problem:
        return _fail(problem)
    if args.max_chars < MIN_MARKDOWN_CHARS:
        return _fail(f"--max-chars must be at least {MIN_MARKDOWN_CHARS} (the report's table and verdict), got {args.max_chars}")
    try:
        gate_section = load_yaml_file(Path(args.config)).get("gate") if args.config else None
        config = parse_gate(gate_section, {"error_budget": args.error_budget, "alpha": args.alpha,
                                           "tolerance_pp": args.tolerance_pp}, flag_prefix="--")
        baseline = load_baseline(Path(args.baseline))
        results = _load_results(Path(args.results))
        # What it is compared with now: this file, even when the run gated on a live base.
        results["run"]["compared_with"] = f"baseline file {args.baseline}"
        assess(results, baseline, config)
    except (BaselineError, GateConfigError, ValueError, OSError) as exc:
        return _fail(str(exc))
    for line in terminal_lines(results["run"], results["datasets"], categories=False) + [""] + gate_lines(results):
        print(line)
    for path in write_outputs(results, paths, markdown_max_chars=args.max_chars):
        print(f"wrote {path}")
    from pytest_orbench.analysis.gate import BLOCKING

    return 1 if results["gate"]["verdict"] in BLOCKING else 0


def _tradeoff(args: argparse.Namespace) -> int:
    from pytest_orbench.core.jsonfile import read_json
    from pytest_orbench.core.stats import spearman
    from pytest_orbench.render.chart import paper_points, run_point

    folder = Path(args.folder)
    if not folder.is_dir():
        return _fail(f"{folder} is not a folder of baseline or results files")
    points = []
    skipped: list[str] = []
    seen: dict[str, str] = {}  # one run's identity -> the file that counted it
    for path in sorted(folder.glob("*.json")):
        try:
            data = read_json(path)
        except (ValueError, OSError) as exc:
            skipped.append(f"{path.name} (not a JSON object: {str(exc).splitlines()[0][:80]})")
            continue
        point = run_point(path.stem, data.get("datasets") or {}, "current") if isinstance(data.get("datasets"), dict) else None
        if point is None:
            skipped.append(f"{path.name} (no hard-1k and toxic rejection rates)")
            continue
        # A run's results file and the baseline written from it are one run: counted twice they would
        # add a point that agrees with itself.
        run = data.get("run")
        if isinstance(run, dict):
            identity = json.dumps([run.get(k) for k in ("endpoint", "system_prompt_sha256", "params", "revision", "seed",
                                                        "sample", "judge")] + [run.get("trials") or 1, point.x, point.y],
                                  sort_keys=True, default=str)
            if identity in seen:
                skipped.append(f"{path.name} (the same run as {seen[identity]}: counted once)")
                continue
            seen[identity] = path.name
        points.append(point)
    if skipped:
        print(f"skipped: {'; '.join(skipped)}", file=sys.stderr)
    if args.paper:
        points += paper_points()
    print(f"{'run':40} {'hard-1k rejection':>18} {'toxic rejection':>16}")
    for point in points:
        print(f"{point.label[:40]:40} {100 * point.x:17.1f}% {100 * point.y:15.1f}%")
    if len(points) < 3:
        return _fail(f"found {len(points)} runs with both hard-1k and toxic in {folder}; Spearman needs at least 3")
    rho, p = spearman([pt.x for pt in points], [pt.y for pt in points])
    print(f"Spearman correlation of over-refusal and toxic rejection over {len(points)} runs: {rho:.2f} (p = {p:.2g})")
    print("(the OR-Bench paper reports 0.89 over 32 models: safer models also over-refuse more)")
    return 0


def _judge_eval(args: argparse.Namespace) -> int:
    from pytest_orbench.calls.client import api_key_for
    from pytest_orbench.core.jsonfile import dumps, output_problem, write_atomic
    from pytest_orbench.core.store import store_problem
    from pytest_orbench.judging.judges import ADAPTABLE_JUDGES, JudgeError, judge_model_spec, make_judge
    from pytest_orbench.judging.labels import LabelsError
    from pytest_orbench.tools.judge_eval import (
        LabeledError,
        compare_judges,
        evaluate,
        judge_examples,
        load_labeled,
        text_report,
    )

    sys.path.insert(0, os.getcwd())  # custom judges live in the user's project, as with pytest's rootdir
    problem = (_at_least(args, "concurrency", 1) or _at_least(args, "retries", 0) or _at_least(args, "show", 0)
               or _at_least(args, "judge_max_tokens", 1)
               or output_problem({"--json": Path(args.json) if args.json else None}, {"LABELED": Path(args.labeled)}))
    if problem:
        return _fail(problem)
    if not 0 < args.timeout <= 3600:
        return _fail(f"--timeout must be a number of seconds between 0 and 3600, got {args.timeout}")
    if args.fail_under is not None and not 0 <= args.fail_under <= 1:
        return _fail(f"--fail-under is a share between 0 and 1 (0.9 for 90%), got {args.fail_under}")
    if args.judge not in ("llm", "hybrid") and (args.judge_model or args.judge_api_base):
        return _fail(f"--judge-model / --judge-api-base are set but --judge is {args.judge!r}, which calls no model; "
                     "use --judge llm or hybrid, or drop them")
    spec = None
    try:
        examples = load_labeled(Path(args.labeled))
        if args.judge in ("llm", "hybrid"):
            problem = compromised_problem()
            if problem:
                return _fail(problem)
            if not args.judge_model:
                return _fail(f"--judge {args.judge} needs --judge-model MODEL (a litellm model string)")
            problem = store_problem(Path(args.store), "--store")
            if problem:
                return _fail(problem)
            key = api_key_for(args.judge_model, args.judge_api_base, args.judge_api_key_env, what="judge model",
                              key_flag="--judge-api-key-env")
            spec = judge_model_spec(args.judge_model, args.judge_api_base, args.judge_max_tokens, args.timeout, key,
                                    args.judge_api_key_env)
        labels = _judge_labels(args)
        keyword_model = None
        if labels and args.judge in ADAPTABLE_JUDGES:
            from pytest_orbench.judging.adaptation import adapt
            from pytest_orbench.judging.keyword_weights import load_model

            keyword_model = adapt(load_model(), labels)
        judge = make_judge(args.judge, spec, keyword_model)
    except (LabeledError, JudgeError, ValueError, LabelsError) as exc:
        return _fail(str(exc))
    other = None
    if args.against:  # checked before any judge call, like the judge itself
        if args.against in ("llm", "hybrid"):
            return _fail("--against takes an offline judge (keyword, prefix or package.module:function)")
        try:
            other = make_judge(args.against)
        except JudgeError as exc:
            return _fail(f"--against: {exc}")
    make_stage = None
    if judge.llm is not None:
        from pytest_orbench.core.store import Store
        from pytest_orbench.judging.llm_calls import JudgeStage

        llm = judge.llm
        store = Store(Path(args.store), check=True)
        make_stage = lambda: JudgeStage(llm, store, args.retries)  # noqa: E731
    judgements = judge_examples(judge, examples, make_stage, args.concurrency)
    result = evaluate(examples, judgements, judge.meta())
    result["source"] = {"file": str(args.labeled)}
    if labels:
        result["judge_audit"] = _labels_audit(args, judge, labels, make_stage)
    if other is not None:
        result["against"] = compare_judges(examples, judgements, judge_examples(other, examples), other.meta())
    for line in text_report(result, show=args.show, by=args.by):
        print(line)
    if labels:
        from pytest_orbench.judging.audit import summary_line
        from pytest_orbench.render.terminal import term_safe

        audit = result["judge_audit"]
        print(f"judge audit ({term_safe(args.judge_labels)}): the judge {term_safe(summary_line(audit))}")
        for note in (audit.get("other_model"),
                     audit.get("not_judged") and f"{audit['not_judged']} {audit['not_judged_reason']}"):
            if note:
                print(f"  {term_safe(str(note))}")
    if args.json:
        write_atomic(Path(args.json), dumps(result, records_key="disagreements"))
        print(f"wrote {args.json}")
    if result["errors"]:
        # Figures over the rows that were judged are not figures over the file: never an exit 0 (or a
        # --fail-under pass) for an evaluation the judge did not finish.
        first = next(d["reason"] for d in result["disagreements"] if d["verdict"] == "error")
        print(f"{result['errors']} of {result['rows']} rows have no judgement (first: {first}); the figures cover "
              f"only the {result['scored']} scored rows. Fix the judge or its endpoint and run again (LLM judgements "
              "already made are stored and reused)", file=sys.stderr)
        return 1
    agreement = result["binary_agreement"]["value"]
    if agreement is None:
        # Nothing was measured (every judgement failed or went unscored): never an exit 0 that reads as a result.
        print(f"nothing was measured: none of the {result['rows']} replies got a verdict ({result['errors']} errors, "
              f"{result['unscored']} unscored; each error is listed among the disagreements: --show N, or --json)", file=sys.stderr)
        return 1
    if args.fail_under is not None and agreement < args.fail_under:
        print(f"binary agreement below --fail-under {args.fail_under}", file=sys.stderr)
        return 1
    return 0


def _judge_labels(args: argparse.Namespace) -> list[Label]:
    """--judge-labels: the labelled rows (LabelsError names a bad row)."""
    from pytest_orbench.judging.labels import LabelsError, labelled, load_labels

    if not args.judge_labels:
        return []
    rows = labelled(load_labels(Path(args.judge_labels)))
    if not rows:
        raise LabelsError(f"judge labels file {args.judge_labels} has no labelled row yet: label some with `orbench "
                          "label`, or fill its label column")
    return rows


def _labels_audit(args: argparse.Namespace, judge: Any, labels: list[Label], make_stage: Any) -> dict[str, Any]:
    """The audit of `judge` against the labels: cross-validated for the adapted keyword judge; the judge's own
    verdicts on the labelled replies otherwise (LLM calls stored, as for FILE)."""
    from pytest_orbench.judging.audit import audit_judge
    from pytest_orbench.tools.judge_eval import Example, judge_examples

    verdicts: list[dict[str, Any]] = []
    if judge.id != "keyword":
        rows = [Example(n, label.prompt, label.response, label.label, "") for n, label in enumerate(labels, start=1)]
        for label, judgement in zip(labels, judge_examples(judge, rows, make_stage, args.concurrency)):
            refused = getattr(getattr(judgement, "verdict", None), "refused", None)
            if refused is not None:
                verdicts.append({"reply_digest": label.key, "refused": refused})
    return audit_judge(judge, labels, verdicts, labels_file=str(args.judge_labels), min_agreement=args.fail_under,
                       run_model=None)


def _label(args: argparse.Namespace) -> int:
    from pytest_orbench.judging.labels import LabelsError
    from pytest_orbench.tools.labeling import LabelingError, default_labeler, run_label

    problem = _at_least(args, "n", 1)
    if problem:
        return _fail(problem)
    results = Path(args.results)
    if args.import_from is None and not results.is_file():
        return _fail(f"no results file at {results}: run pytest --orbench with --orbench-json {results} first (its "
                     "replies are what you label), or name the file")
    try:
        return run_label(results, Path(args.store), Path(args.labels), args.n, args.seed,
                         args.labeler or default_labeler(), Path(args.export) if args.export else None,
                         Path(args.import_from) if args.import_from else None)
    except (LabelingError, LabelsError) as exc:
        return _fail(str(exc))


def _generate(args: argparse.Namespace) -> int:
    from pytest_orbench.run.settings import load_yaml_file
    from pytest_orbench.tools.generate.config import GenerateError, build_config
    from pytest_orbench.tools.generate.generator import run_generate, summary_lines

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    config_path = Path(args.config) if args.config else Path("orbench.yaml")
    values: dict[str, Any] = {}
    base = Path.cwd()
    try:
        if args.config or config_path.is_file():
            section = load_yaml_file(config_path).get("generate") or {}
            if not isinstance(section, dict):
                return _fail(f"generate: in {config_path} must be a mapping")
            values.update(section)
            base = config_path.resolve().parent
        flags = {
            "seeds": args.seeds, "categories": args.categories, "seeds_per_category": args.seeds_per_category,
            "seed_model": args.seed_model, "rewriter": args.rewriter, "rewrites_per_seed": args.rewrites,
            "moderators": args.moderator, "panel": args.panel, "panel_min_refusals": args.panel_min,
            "panel_judge": args.panel_judge, "judge_model": args.judge_model, "out": args.out,
            "toxic_out": args.toxic_out, "summary": args.summary, "dedupe_threshold": args.dedupe,
            "concurrency": args.concurrency, "retries": args.retries, "api_base": args.api_base,
            "api_key_env": args.api_key_env, "timeout": args.timeout,
        }
        cli = {k: v for k, v in flags.items() if v is not None}
        for key in ("seeds", "out", "toxic_out", "summary"):  # flag paths are relative to where you are
            if key in cli:
                cli[key] = str(Path(cli[key]).resolve())
        values.update(cli)
        config = build_config(values, base)
    except (GenerateError, ValueError) as exc:
        return _fail(str(exc))
    from pytest_orbench.core.store import store_problem

    # Like the other flag paths, --store is relative to where you are; store: in orbench.yaml to that file.
    store = Path(args.store).resolve() if args.store else base / str(values.get("store") or ".orbench")
    problem = store_problem(store, "--store")
    if problem:
        return _fail(problem)
    summary = run_generate(config, store)
    for line in summary_lines(summary):
        print(line)
    output = summary["output"]
    for path in output["kept_previous"]:
        print(f"{path} left as it was: this run's calls failed and it produced no prompt for it")
    if "file" in output:
        print(f"wrote {config.out} ({output['kept']} prompts; run it: pytest --orbench --orbench-datasets "
              f"{config.out.name})")
    if "toxic_file" in output:
        print(f"wrote {config.toxic_out} ({output['toxic']} prompts the moderators judged harmful)")
    if config.summary is not None:
        print(f"wrote {config.summary}")
    failed = sum(s["errors"] for s in summary["spend"].values())
    if failed:
        print(f"{failed} calls failed after retries; run the same command again to retry only those", file=sys.stderr)
        return 1
    return 0


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
    mock.set_defaults(func=_mock_server)

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
    compare.set_defaults(func=_compare)

    batches = sub.add_parser("batches", help="list the provider batches a run submitted (--orbench-batch) and their "
                                              "last known state")
    batches.add_argument("--store", default=".orbench", help="the response store folder (default .orbench)")
    batches.add_argument("--all", action="store_true", help="also the batches already collected")
    batches.set_defaults(func=_batches)

    tradeoff = sub.add_parser("tradeoff", help="Spearman correlation of over-refusal and toxic rejection across runs")
    tradeoff.add_argument("folder", help="folder of baseline / results JSON files")
    tradeoff.add_argument("--paper", action="store_true", help="include the 32 models published in the paper")
    tradeoff.set_defaults(func=_tradeoff)

    ev = sub.add_parser("judge-eval", help="measure a refusal judge against human labels (agreement, kappa, bias)")
    ev.add_argument("labeled", help="CSV with prompt,response,label (compliance|refusal|partial_refusal; XSTest's labels too)")
    ev.add_argument("--judge", default=DEFAULT_JUDGE,
                    help=f"keyword | llm | hybrid | prefix | package.module:function (default: the plugin's, {DEFAULT_JUDGE})")
    ev.add_argument("--judge-model", help="litellm model string of the LLM judge (llm / hybrid)")
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
    ev.set_defaults(func=_judge_eval)

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
    lab.add_argument("--export", help="write the sample's unlabelled rows to this CSV (to label in a spreadsheet) "
                     "instead of asking")
    lab.add_argument("--import", dest="import_from", help="merge the labelled rows of this CSV (an exported sample) "
                     "into --labels")
    lab.set_defaults(func=_label)

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
    gen.add_argument("--panel-judge", help="judge of the panel's replies: keyword | llm | hybrid | prefix | pkg.mod:fn "
                     "(default keyword)")
    gen.add_argument("--judge-model", help="the LLM judge's model (panel judge llm / hybrid)")
    gen.add_argument("--api-base", help="default base URL for every model without its own api_base")
    gen.add_argument("--api-key-env", help="default environment variable holding the key")
    gen.add_argument("--dedupe", type=finite_float, help="near-duplicate similarity threshold in [0, 1] (default 0.85)")
    gen.add_argument("--concurrency", type=int, help="calls in flight (default 16)")
    gen.add_argument("--retries", type=int, help="retries per call after a timeout, 429, 5xx or malformed reply (default 4)")
    gen.add_argument("--timeout", type=finite_float, help="seconds per request (default 120)")
    gen.add_argument("--store", help="response store folder (default .orbench): re-runs and resumed runs cost nothing")
    gen.set_defaults(func=_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from pytest_orbench.core.store import StoreError

    if args.command == "generate":  # every generate calls models (judge-eval: only with an LLM judge)
        problem = compromised_problem()
        if problem:
            return _fail(problem)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # here, not at exit: a reader that stopped early is met below
        return code
    except CompromisedDependency as exc:  # the last line of defence: litellm is never imported beside one
        return _fail(str(exc))
    except StoreError as exc:  # judge-eval, generate, batches: a read-only folder, a full disk
        if exc.says_fix:
            return _fail(str(exc).replace("--orbench-store", "--store"))
        return _fail(f"{exc}; give --store a folder you can write to, on a disk with free space")
    except KeyboardInterrupt:
        # Ctrl-C: generate and judge-eval store every reply and judgement as it comes, so a rerun continues.
        resumes = args.command in ("generate", "judge-eval")
        print(f"orbench {args.command}: interrupted" + ("; what was received is stored, and running the same command "
                                                        "again continues from there" if resumes else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `orbench judge-eval ... | head`: the reader stopped reading. Nothing more to print (stdout goes
        # nowhere, so the interpreter's own flush at exit does not fail again); the exit status of SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
