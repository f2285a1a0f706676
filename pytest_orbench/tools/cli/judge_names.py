"""The judge names the `orbench` subcommands take, as their help lists them: read from the judges' registry."""

from __future__ import annotations

from pytest_orbench.judging.registry import (
    CUSTOM,
    DEFAULT_JUDGE,
    judge_names,
    llm_judge_names,
    names_help,
    offline_judge_names,
)

# judge-eval --judge, generate --panel-judge
JUDGE_HELP = f"{names_help()} (default: the plugin's, {DEFAULT_JUDGE})"
PANEL_JUDGE_HELP = f"judge of the panel's replies: {' | '.join(judge_names())} | pkg.mod:fn (default keyword)"
JUDGE_MODEL_HELP = f"litellm model string of the LLM judge ({' / '.join(llm_judge_names())})"
OFFLINE_JUDGES = f"{', '.join(offline_judge_names())} or {CUSTOM}"  # what judge-eval --against takes
