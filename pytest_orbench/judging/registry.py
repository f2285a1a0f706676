"""The judges by name: each declared once (factory, whether it calls an LLM, help), and `make_judge`.

Cheap to import (the options' help of every pytest run and the `orbench` command read it): the judge
modules are imported only when a judge is made. Adding a judge is one `JudgeEntry` here plus its module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_orbench.judging.judges import JudgeError  # (judges.py imports nothing heavy either)

if TYPE_CHECKING:
    from pytest_orbench.core.endpoint import ModelSpec
    from pytest_orbench.judging.judges import Judge
    from pytest_orbench.judging.keyword_weights import RefusalModel

DEFAULT_JUDGE = "keyword"  # the plugin's, the Action's and `orbench judge-eval`'s default judge
CUSTOM = "package.module:function"  # a user's judge function, named by its import path


Factory = Callable[["ModelSpec | None", "RefusalModel | None"], "Judge"]


@dataclass(frozen=True)
class JudgeEntry:
    name: str
    factory: Factory  # (judge model or None, adapted keyword model or None) -> the judge
    help: str
    calls_llm: bool = False  # needs a judge model (judge_spec), costs judge calls
    unsure_only: bool = False  # calls the LLM only on replies it is unsure of: a cost estimate is at most
    adaptable: bool = False  # its keyword model learns from judge_labels (adaptation.py)
    cached: bool = False  # deterministic and versioned: its verdicts on a reply are stored


def _keyword(llm: ModelSpec | None, keyword_model: RefusalModel | None) -> Judge:
    from pytest_orbench.judging.keyword_judge import KeywordJudge

    return KeywordJudge(keyword_model)


def _llm(llm: ModelSpec | None, keyword_model: RefusalModel | None) -> Judge:
    from pytest_orbench.judging.llm_judge import LLMJudge

    assert llm is not None
    return LLMJudge(llm)


def _hybrid(llm: ModelSpec | None, keyword_model: RefusalModel | None) -> Judge:
    from pytest_orbench.judging.llm_judge import HybridJudge

    assert llm is not None
    return HybridJudge(llm, keyword_model)


def _prefix(llm: ModelSpec | None, keyword_model: RefusalModel | None) -> Judge:
    from pytest_orbench.judging.prefix_judge import PrefixJudge

    return PrefixJudge()


# In this order in help and messages.
JUDGES: dict[str, JudgeEntry] = {e.name: e for e in (
    JudgeEntry("keyword", _keyword, "stance words weighed by a model fitted to human labels; offline and free",
               adaptable=True, cached=True),
    JudgeEntry("llm", _llm, "the OR-Bench protocol: every reply with text goes to the judge model", calls_llm=True),
    JudgeEntry("hybrid", _hybrid, "keyword first; the replies it is unsure of go to the judge model",
               calls_llm=True, unsure_only=True, adaptable=True),
    JudgeEntry("prefix", _prefix, "the plain baseline: a stock refusal opening is a refusal", cached=True),
)}


def register(entry: JudgeEntry) -> None:
    """Declare a judge: `make_judge`, the settings and `orbench judge-eval` accept its name from then on."""
    JUDGES[entry.name] = entry


def judge_names() -> tuple[str, ...]:
    return tuple(JUDGES)


def names_help(separator: str = " | ") -> str:
    """'keyword | llm | hybrid | prefix | package.module:function', for option help."""
    return separator.join((*JUDGES, CUSTOM))


def _flag(name: str, attribute: str) -> bool:
    entry = JUDGES.get(name)
    return entry is not None and bool(getattr(entry, attribute))


def calls_llm(name: str) -> bool:
    """Whether the judge named `name` needs a judge model (and costs judge calls); False for custom judges."""
    return _flag(name, "calls_llm")


def unsure_only(name: str) -> bool:
    return _flag(name, "unsure_only")


def adaptable(name: str) -> bool:
    return _flag(name, "adaptable")


def cached(name: str) -> bool:
    return _flag(name, "cached")


def llm_judge_names() -> tuple[str, ...]:
    return tuple(name for name, entry in JUDGES.items() if entry.calls_llm)


def offline_judge_names() -> tuple[str, ...]:
    return tuple(name for name, entry in JUDGES.items() if not entry.calls_llm)


def make_judge(name: str, llm: ModelSpec | None = None, keyword_model: RefusalModel | None = None) -> Judge:
    """A judge by name; `llm` is required for judges that call an LLM; `keyword_model` replaces the shipped
    weights of the adaptable ones (the model adapted to judge_labels). JudgeError names what is missing."""
    entry = JUDGES.get(name)
    if entry is not None:
        if entry.calls_llm and llm is None:
            raise JudgeError(f"judge {name!r} needs a judge model: set --orbench-judge-model (judge_model:)")
        return entry.factory(llm, keyword_model)
    if ":" in name:
        module_name, _, attr = name.partition(":")
        if not module_name or not attr:
            raise JudgeError(f"judge {name!r} must be {', '.join(JUDGES)} or '{CUSTOM}'")
        from pytest_orbench.judging.custom_judge import CustomJudge

        return CustomJudge(name)
    raise JudgeError(f"unknown judge {name!r}: use one of {', '.join(JUDGES)} or '{CUSTOM}'")
