"""`orbench compare`: a results file against a baseline file, the gate verdict and its exit status."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_orbench.tools.cli.option_checks import fail

if TYPE_CHECKING:
    from pytest_orbench.core.records import ResultsDocument


def run(args: argparse.Namespace) -> int:
    from pytest_orbench.analysis.baseline import BaselineError, load_baseline
    from pytest_orbench.analysis.document import assess, mark_stopped
    from pytest_orbench.analysis.gate import GateConfigError, parse_gate
    from pytest_orbench.core.jsonfile import output_problem
    from pytest_orbench.render.outputs import write_outputs
    from pytest_orbench.render.terminal import gate_lines, terminal_lines
    from pytest_orbench.run.options import MIN_MARKDOWN_CHARS
    from pytest_orbench.run.setting_sources import load_yaml_file

    paths = {k: Path(v) if v else None for k, v in (("json", args.json), ("markdown", args.markdown),
                                                    ("svg", args.svg), ("junit", args.junit))}
    problem = output_problem({f"--{k}": v for k, v in paths.items()},
                             {"BASELINE": Path(args.baseline), "RESULTS": Path(args.results),
                              "--config": Path(args.config) if args.config else None})
    if problem:
        return fail(problem)
    if args.max_chars < MIN_MARKDOWN_CHARS:
        return fail(f"--max-chars must be at least {MIN_MARKDOWN_CHARS} (the report's table and verdict), got {args.max_chars}")
    try:
        gate_section = load_yaml_file(Path(args.config)).get("gate") if args.config else None
        config = parse_gate(gate_section, {"error_budget": args.error_budget, "alpha": args.alpha,
                                           "tolerance_pp": args.tolerance_pp}, flag_prefix="--")
        baseline = load_baseline(Path(args.baseline))
        results = _load_results(Path(args.results))
        # What it is compared with now: this file, even when the run gated on a live base.
        results["run"]["compared_with"] = f"baseline file {args.baseline}"
        assess(results, baseline, config)
        stopped = results["run"].get("stopped")
        if stopped:  # the run stopped early: what did not run was not checked, whatever it is compared with
            mark_stopped(results["gate"], str(stopped), stored=int((results["run"].get("calls") or {}).get(
                "fetched_not_run") or 0))
    except (BaselineError, GateConfigError, ValueError, OSError) as exc:
        return fail(str(exc))
    for line in terminal_lines(results["run"], results["datasets"], categories=False) + [""] + gate_lines(results):
        print(line)
    for path in write_outputs(results, paths, markdown_max_chars=args.max_chars):
        print(f"wrote {path}")
    from pytest_orbench.analysis.gate import BLOCKING

    return 1 if results["gate"]["verdict"] in BLOCKING else 0



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
    # Its flips were verified against that reference, not this baseline: their verdicts stay (an unverified flip
    # still counts against the change), the tallies go.
    data["run"].pop("verification", None)
    for summary in data["datasets"].values():
        summary.pop("comparison", None)
    return data
