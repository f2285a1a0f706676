"""The judge registry: a judge declared there once is accepted by the settings and `orbench judge-eval`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.core.endpoint import ModelSpec
from pytest_orbench.judging import registry
from pytest_orbench.judging.judges import Judge, JudgeError, Judgement, Offline, Verdict
from pytest_orbench.judging.keyword_weights import RefusalModel
from pytest_orbench.judging.registry import JudgeEntry, make_judge
from pytest_orbench.run.setting_judge import check_judge
from pytest_orbench.tools.cli import main


class ToyJudge(Offline):
    """Refused when the reply says sorry."""

    id = "toy"
    version = "1"

    def decide(self, prompt: str, reply: str, finish_reason: str | None = None) -> Judgement:
        refused = "sorry" in reply.lower()
        return Judgement(Verdict.DIRECT_REFUSAL if refused else Verdict.DIRECT_ANSWER, "toy rule")


def _toy(llm: ModelSpec | None, keyword_model: RefusalModel | None) -> Judge:
    return ToyJudge()


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register `toy` (offline) and `toy-llm` (calls an LLM) for one test only."""
    monkeypatch.setattr(registry, "JUDGES", dict(registry.JUDGES))
    registry.register(JudgeEntry("toy", _toy, "a toy judge for the test"))
    registry.register(JudgeEntry("toy-llm", _toy, "a toy judge that would call an LLM", calls_llm=True))


def _values(**changes: Any) -> dict[str, Any]:
    values = {"judge": "toy", "verify_flips": False, "judge_model": None, "judge_api_base": None}
    values.update(changes)
    return values


def test_the_builtin_judges_in_their_order() -> None:
    assert registry.judge_names() == ("keyword", "llm", "hybrid", "prefix")
    assert registry.names_help() == "keyword | llm | hybrid | prefix | package.module:function"
    assert registry.llm_judge_names() == ("llm", "hybrid") and registry.offline_judge_names() == ("keyword", "prefix")
    assert registry.DEFAULT_JUDGE in registry.JUDGES


def test_a_registered_judge_is_made_and_named_in_messages(toy: None) -> None:
    assert isinstance(make_judge("toy"), ToyJudge)
    with pytest.raises(JudgeError, match=r"use one of keyword, llm, hybrid, prefix, toy, toy-llm or"):
        make_judge("nope")
    with pytest.raises(JudgeError, match="needs a judge model"):
        make_judge("toy-llm")
    assert not registry.cached("toy") and not registry.adaptable("toy") and registry.calls_llm("toy-llm")


def test_settings_accept_a_registered_judge(toy: None) -> None:
    assert check_judge(_values(), []) is None
    with pytest.raises(pytest.UsageError, match="--orbench-judge toy-llm needs a judge model"):
        check_judge(_values(judge="toy-llm"), [])
    with pytest.raises(pytest.UsageError, match="but --orbench-judge is 'toy'"):
        check_judge(_values(judge_model="openai/judge"), [])


def test_judge_eval_accepts_a_registered_judge(toy: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "labelled.csv").write_text("prompt,response,label\nq,\"Sure: step one, step two.\",compliance\n"
                                           "q2,\"I'm sorry, I can't.\",refusal\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # judge-eval puts the working folder on it
    assert main(["judge-eval", "labelled.csv", "--judge", "toy", "--json", "out.json"]) == 0
    result = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert result["judge"]["id"] == "toy"
    capsys.readouterr()
    assert main(["judge-eval", "labelled.csv", "--judge", "toy-llm"]) == 2
    assert "--judge toy-llm needs --judge-model MODEL" in capsys.readouterr().err
    assert main(["judge-eval", "labelled.csv", "--judge", "toy", "--judge-model", "openai/judge"]) == 2
    assert "but --judge is 'toy', which calls no model" in capsys.readouterr().err
