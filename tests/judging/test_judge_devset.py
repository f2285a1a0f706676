"""The shipped keyword judge against real human-labelled replies (../shared/judge-data, not in the repo).

CI has the folder beside the checkout; elsewhere these tests are skipped with the reason. The ChatGPT
replies (refusal-dev-chatgpt.csv, the fourth source) are checked when that file is there too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_orbench.judging.keyword_judge import KeywordJudge
from pytest_orbench.tools.judge_eval import evaluate, judge_examples, load_labeled

ROOT = Path(__file__).resolve().parent.parent.parent
DEV = ROOT.parent / "shared" / "judge-data" / "refusal-dev.csv"
CHATGPT = ROOT.parent / "shared" / "judge-data" / "refusal-dev-chatgpt.csv"
pytestmark = pytest.mark.skipif(not DEV.is_file(), reason=f"no human-labelled dev set at {DEV}")
needs_chatgpt = pytest.mark.skipif(not CHATGPT.is_file(), reason=f"no ChatGPT replies at {CHATGPT}")
# Floors a little under the figures in docs/judges.md (keyword v12.cacf3d49, trained on all four sources).
FITTED = {"do-not-answer": 0.98, "orfuzz-user-study": 0.96, "rbr-gold": 0.93, "chatgpt-refusals": 0.88}
# Leave-one-source-out: fit on the other sources, measure on this one. rbr-gold's deflections and
# ChatGPT's "As an AI ..." in answers and deflections alike are the known weak spots of a lexical judge.
LOSO = {"do-not-answer": 0.96, "orfuzz-user-study": 0.90, "rbr-gold": 0.80, "chatgpt-refusals": 0.77}


def check_fitted(path: Path, sources: set[str]) -> None:
    judge = KeywordJudge()
    examples = load_labeled(path)
    result = evaluate(examples, judge_examples(judge, examples), judge.meta())
    assert set(result["by_source"]) == sources
    for source, figures in result["by_source"].items():
        assert figures["binary_agreement"]["value"] >= FITTED[source], source
        assert abs(figures["bias"]["value"]) <= 0.03, source
        # hybrid: what the keyword side decides alone agrees >= 97%, and at most 30% goes to the LLM
        assert figures["confidence"]["confident_agreement"]["value"] >= 0.97, source
        assert figures["confidence"]["not_confident_share"] <= 0.30, source


def test_shipped_judge_agrees_with_people_on_every_source() -> None:
    check_fitted(DEV, {"do-not-answer", "orfuzz-user-study", "rbr-gold"})


@needs_chatgpt
def test_shipped_judge_agrees_with_people_on_chatgpt_replies() -> None:
    check_fitted(CHATGPT, {"chatgpt-refusals"})


@pytest.mark.slow
def test_leave_one_source_out_floors(tmp_path: Path) -> None:
    # Regression floors for generalisation, on every source whose file is here (the script's default
    # is both files; without the ChatGPT replies the three older sources are measured among themselves).
    out = tmp_path / "loso.json"
    files = [f for path in (DEV, CHATGPT) if path.is_file() for f in ("--data", str(path))]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "train_judge.py"), "--loso", "--json", str(out), *files],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    figures = {s: f["keyword"]["binary_agreement"]["value"] for s, f in report["sources"].items()}
    prefix = {s: f["prefix"]["binary_agreement"]["value"] for s, f in report["sources"].items()}
    expected = {"do-not-answer", "orfuzz-user-study", "rbr-gold"} | ({"chatgpt-refusals"} if CHATGPT.is_file() else set())
    assert set(figures) == expected
    assert all(figures[s] >= LOSO[s] for s in expected), figures
    assert all(figures[s] > prefix[s] for s in expected)
    assert set(report["data"]["files"]) == {p.name for p in (DEV, CHATGPT) if p.is_file()}
