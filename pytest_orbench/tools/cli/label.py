"""`orbench label`: label a sample of a run's stored replies (or export / import the sample as CSV)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_orbench.tools.cli.option_checks import at_least, fail


def run(args: argparse.Namespace) -> int:
    from pytest_orbench.judging.labels import LabelsError
    from pytest_orbench.tools.labeling import LabelingError, default_labeler, run_label

    problem = at_least(args, "n", 1)
    if problem:
        return fail(problem)
    results = Path(args.results)
    if args.import_from is None and not results.is_file():
        return fail(f"no results file at {results}: run pytest --orbench with --orbench-json {results} first (its "
                     "replies are what you label), or name the file")
    try:
        return run_label(results, Path(args.store), Path(args.labels), args.n, args.seed,
                         args.labeler or default_labeler(), Path(args.export) if args.export else None,
                         Path(args.import_from) if args.import_from else None, force=args.force)
    except (LabelingError, LabelsError) as exc:
        return fail(str(exc))
