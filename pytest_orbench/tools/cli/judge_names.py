"""The judge names the `orbench` subcommands take: as their help lists them, and which of them call a model."""

from __future__ import annotations

from pytest_orbench import DEFAULT_JUDGE

BUILTIN_NAMES = "keyword | llm | hybrid | prefix"
# judge-eval --judge, generate --panel-judge
JUDGE_HELP = f"{BUILTIN_NAMES} | package.module:function (default: the plugin's, {DEFAULT_JUDGE})"
PANEL_JUDGE_HELP = f"judge of the panel's replies: {BUILTIN_NAMES} | pkg.mod:fn (default keyword)"
MODEL_JUDGES = ("llm", "hybrid")  # the judges that call a model: --judge-model, a response store, litellm
OFFLINE_JUDGES = "keyword, prefix or package.module:function"  # what judge-eval --against takes
