"""`orbench generate`: the generate settings from orbench.yaml and the flags, then the pipeline run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from pytest_orbench.tools.cli.option_checks import fail


def run(args: argparse.Namespace) -> int:
    from pytest_orbench.run.setting_sources import load_yaml_file
    from pytest_orbench.tools.generate.config import GenerateError, build_config
    from pytest_orbench.tools.generate.outputs import run_generate, summary_lines

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    config_path = Path(args.config) if args.config else Path("orbench.yaml")
    values: dict[str, Any] = {}
    base = Path.cwd()
    try:
        if args.config or config_path.is_file():
            section = load_yaml_file(config_path).get("generate") or {}
            if not isinstance(section, dict):
                return fail(f"generate: in {config_path} must be a mapping")
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
        return fail(str(exc))
    from pytest_orbench.core.store_database import store_problem

    # Like the other flag paths, --store is relative to where you are; store: in orbench.yaml to that file.
    store = Path(args.store).resolve() if args.store else base / str(values.get("store") or ".orbench")
    problem = store_problem(store, "--store")
    if problem:
        return fail(problem)
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
