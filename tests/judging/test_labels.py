"""Judge labels: the labels file, the judge adapted to it, the audit, and `orbench label` (through a real
pseudo-terminal), end to end against the simulator."""

from __future__ import annotations

import csv
import json
import math
import os
import pty
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.core.store import Store
from pytest_orbench.judging.adaptation import Example, adapt, cross_validated, examples_of, fit
from pytest_orbench.judging.audit import figures
from pytest_orbench.judging.keyword_judge import KeywordJudge
from pytest_orbench.judging.keyword_weights import RefusalModel, load_model
from pytest_orbench.judging.labels import Label, LabelsError, labels_digest, load_labels, reply_digest, save_labels
from pytest_orbench.judging.llm_calls import reply_text
from pytest_orbench.tools.cli import main
from pytest_orbench.tools.label_screen import visible
from pytest_orbench.tools.labeling import Candidate, draw
from pytest_orbench.tools.simulator.roles import decide
from tests.conftest import load, mock_args, stats

TOPICS = ("bake bread", "fix a bike chain", "grow tomatoes", "tie a bowline", "brew coffee", "paint a fence",
          "train a puppy", "file taxes", "clean a carburettor", "learn chess openings", "write a cover letter",
          "plan a garden", "sharpen a knife", "knit a scarf", "change a tyre", "make kimchi")


def house_style(topic: str, refuse: bool) -> str:
    """A model whose refusals are rebuttals the shipped judge reads as answers ("X is not inherently ...")."""
    if refuse:
        return (f"Asking how to {topic} is not inherently wrong, but providing step-by-step detail here is not "
                "something this assistant does. Consider the general principles of responsible behaviour.")
    return f"To {topic}: 1. Gather what you need. 2. Follow the steps in order. 3. Check the result twice."


def house_labels(n: int, **extra: Any) -> list[Label]:
    rows = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)] + f" (case {i})"
        refuse = i % 2 == 0
        rows.append(Label(f"How do I {topic}?", house_style(topic, refuse), "refusal" if refuse else "compliance",
                          id=f"case-{i}", model="openai/house", **extra))
    return rows


# --- the labels file -------------------------------------------------------------------------------------

def test_labels_round_trip_and_the_digest_names_what_decides(tmp_path: Path) -> None:
    rows = house_labels(6, stratum="unsure", stratum_share=0.25, labeler="ann", labeled_at="2026-11-26T10:00:00Z")
    path = tmp_path / "labels.csv"
    save_labels(path, rows)
    back = load_labels(path)
    assert [(r.prompt, r.response, r.label, r.stratum, r.stratum_share, r.labeler) for r in back] == \
        [(r.prompt, r.response, r.label, r.stratum, r.stratum_share, r.labeler) for r in rows]
    assert back[0].reply_sha256 == reply_digest(rows[0].prompt, rows[0].response)
    # Order, who and when do not change the judge; a label does.
    reordered = [Label(r.prompt, r.response, r.label) for r in reversed(rows)]
    assert labels_digest(reordered) == labels_digest(rows)
    flipped = [Label(rows[0].prompt, rows[0].response, "compliance"), *rows[1:]]
    assert labels_digest(flipped) != labels_digest(rows)


@pytest.mark.parametrize(("text", "message"), [
    ("prompt,label\nhi,refusal\n", "lacks column(s) response"),
    ("prompt,response,label\nhi,Sure.,maybe\n", "row 1 (line 2): label 'maybe' is not one of compliance"),
    ("prompt,response,label,stratum_share\nhi,Sure.,refusal,1.5\n", "stratum_share '1.5' is not a share in (0, 1]"),
    ("prompt,response,label,stratum\nhi,Sure.,refusal,lucky\n", "stratum 'lucky' is not one of flip"),
    ("prompt,response,label\nhi,,refusal\n", "has an empty response"),
])
def test_a_bad_labels_file_names_the_row_and_the_fix(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "labels.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(LabelsError, match=re.escape(message)):
        load_labels(path)


def test_the_last_label_of_a_reply_wins_and_spellings_are_read(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("prompt,response,label\nhi,No.,refusal\nhi,No.,Answer\nho,Maybe later.,Partial Refusal\n", encoding="utf-8")
    rows = load_labels(path)
    assert [(r.prompt, r.label) for r in rows] == [("hi", "compliance"), ("ho", "partial_refusal")]


# --- the adapted judge ------------------------------------------------------------------------------------

def test_the_adapted_judge_learns_a_models_own_refusals_and_stays_anchored() -> None:
    shipped = load_model()
    train, test = house_labels(40), house_labels(80)[40:]
    before = sum(KeywordJudge().judge(r.prompt, r.response).verdict.refused == r.refused for r in test) / len(test)
    model = adapt(shipped, train)
    after = sum(KeywordJudge(model).judge(r.prompt, r.response).verdict.refused == r.refused for r in test) / len(test)
    assert before <= 0.75 and after == 1.0, (before, after)  # the shipped judge reads the rebuttals as answers
    assert model.version == f"{shipped.version}+labels.{labels_digest(train)}"
    assert adapt(shipped, train) == model  # deterministic
    # The anchor: with an overwhelming pull the weights stay the shipped ones.
    intercept, weights = fit(shipped, examples_of(train), strength=1e9)
    assert abs(intercept - shipped.intercept) < 1e-6
    assert all(abs(weights[f] - w) < 1e-6 for f, w in shipped.weights.items())


def objective_gradient(base: Any, examples: list[Example], intercept: float, weights: dict[str, float],
                       strength: float) -> float:
    """|gradient| of the fit's objective (the labels' log-loss plus the pull towards `base`) at a result,
    written out plainly: zero at the optimum."""
    vocabulary = sorted({f for e in examples for f in e.features})
    gradient = {f: strength * (weights[f] - base.weights.get(f, 0.0)) for f in vocabulary}
    bias = strength * (intercept - base.intercept)
    for e in examples:
        z = intercept + sum(weights[f] for f in e.features)
        residual = 1 / (1 + math.exp(-z)) - e.refused
        bias += residual
        for f in e.features:
            gradient[f] += residual
    return math.sqrt(bias ** 2 + sum(g * g for g in gradient.values()))


def test_the_fit_never_solves_in_the_labels_space_and_reaches_the_optimum() -> None:
    # Each Newton step solved an n x n system (57 s for 2,000 labels, 74.5 GiB asked for 100,000): 3,000
    # labelled replies of a few features each are now fitted in a few MB, to the same optimum.
    rng = random.Random(0)
    shipped = load_model()
    names = sorted(shipped.weights)[:40] + [f"new:{i}" for i in range(20)]
    examples = [Example(frozenset(rng.sample(names, 5)), rng.random() < 0.4) for _ in range(3000)]
    tracemalloc.start()
    try:
        intercept, weights = fit(shipped, examples)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, f"{peak / 2**20:.0f} MiB"
    assert objective_gradient(shipped, examples, intercept, weights, 0.5) / 0.5 < 1e-6  # within 1e-6 of the optimum
    assert {f: w for f, w in weights.items() if f not in names} == \
        {f: w for f, w in shipped.weights.items() if f not in names}  # what the labels do not show stays shipped


def test_cross_validated_scores_never_come_from_the_row_itself() -> None:
    # Every row's label contradicts the words of its reply: a judge fitted on all of them would "agree"
    # (memorised); scored out of fold, it cannot.
    shipped = load_model()
    rows = [Label(f"Tell me about {t} ({i})?", f"Here is everything about {t}, step by step.", "refusal")
            for i, t in enumerate(TOPICS)]
    in_sample = KeywordJudge(RefusalModel("in-sample", *fit(shipped, examples_of(rows)), shipped.threshold, shipped.band, {}))
    assert all(in_sample.judge(r.prompt, r.response).verdict.refused for r in rows)
    out_of_fold = cross_validated(shipped, rows)
    assert len(out_of_fold) == len(rows) and all(0 <= p <= 1 for p in out_of_fold)
    assert out_of_fold == pytest.approx(cross_validated(shipped, list(reversed(rows)))[::-1])  # folds by reply


# --- the audit ----------------------------------------------------------------------------------------------

def test_the_audit_weighs_each_stratum_by_its_share_of_the_run() -> None:
    # 10 unsure replies labelled (the judge right on 5) standing for 10% of the run, 10 confident ones (all
    # right) standing for 90%: the run's agreement is 0.1 * 0.5 + 0.9 * 1.0 = 95%, not the sample's 75%.
    unsure = [Label(f"p{i}", f"r{i}", "refusal", stratum="unsure", stratum_share=0.1) for i in range(10)]
    sure = [Label(f"q{i}", f"s{i}", "compliance", stratum="answer", stratum_share=0.9) for i in range(10)]
    result = figures(unsure + sure, [i < 5 for i in range(10)] + [False] * 10)
    assert result["agreement"]["value"] == pytest.approx(0.95)
    assert result["agreeing"] == 15 and result["labelled"] == 20
    assert result["strata"]["unsure"] == {"labelled": 10, "share": 0.1, "agreement": 0.5}
    assert result["bias"]["value"] == pytest.approx(-0.05)  # the judge misses refusals of the unsure 10%
    lo, hi = result["agreement"]["ci95"]
    assert lo < 0.95 < hi and result["n_effective"] < 20
    # Without recorded strata every row counts alike, and the report says so.
    plain = figures([Label(r.prompt, r.response, r.label) for r in unsure + sure], [i < 5 for i in range(10)] + [False] * 10)
    assert plain["agreement"]["value"] == 0.75 and plain["weighting"].startswith("equal")


# --- what the judge may learn from, and whose replies the audit speaks of (issue 41) ----------------------

def clear_labels(n: int, *, swapped: bool = False, model: str = "openai/house", **extra: Any) -> list[Label]:
    """Replies the shipped judge reads right: plain refusals and plain answers, alternately (labelled the other
    way round when `swapped`)."""
    rows = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)] + f" (case {i})"
        refuse = i % 2 == 0
        reply = ("I'm sorry, but I can't help with that. I won't provide instructions for this." if refuse else
                 f"To {topic}: 1. Gather what you need. 2. Follow the steps in order. 3. Check the result twice.")
        rows.append(Label(f"How do I {topic}?", reply, "refusal" if refuse != swapped else "compliance",
                          id=f"case-{i}", model=model, **extra))
    return rows


@pytest.mark.parametrize("label", ["refusal", "partial_refusal", "compliance"])
def test_labels_of_one_kind_teach_no_judge_and_are_refused(label: str) -> None:
    # 40 labels "refusal" made the adapted judge call "The capital of France is Paris." a refusal.
    rows = [Label(r.prompt, r.response, label) for r in clear_labels(40)]
    with pytest.raises(LabelsError, match=r"all 40 labels are (refusal or partial_refusal|compliance): labels of one "
                                          r"kind cannot teach the judge .* Label replies of both kinds"):
        adapt(load_model(), rows)
    from pytest_orbench.judging.adaptation import label_problem

    assert label_problem(rows, adapts=False) == label_problem(rows, adapts=True)  # nor audit a judge that does not adapt


def test_too_few_labels_do_not_adapt_the_judge() -> None:
    from pytest_orbench.judging.adaptation import MIN_LABELS, label_problem

    rows = clear_labels(MIN_LABELS)
    with pytest.raises(LabelsError, match=f"{MIN_LABELS - 1} labels .* are too few to adapt the keyword judge to"):
        adapt(load_model(), rows[:-1])
    assert adapt(load_model(), rows).version.endswith(labels_digest(rows))
    assert label_problem(rows[:2], adapts=False) is None  # a judge that does not learn: its audit's interval says it


def test_labels_the_shipped_judge_reads_the_other_way_round_are_refused() -> None:
    from pytest_orbench.judging.adaptation import label_problem

    swapped = clear_labels(40, swapped=True)
    with pytest.raises(LabelsError, match=r"the shipped keyword judge agrees with only 0 of these 40 labels \(0.0%, at "
                                          r"most 8.8% at 95%; kappa -1.00\): far less than chance, as when refusal and "
                                          r"compliance are swapped"):
        adapt(load_model(), swapped)
    assert label_problem(clear_labels(40), adapts=True) is None
    # A model whose refusals the shipped judge misreads (kappa near 0, not below): its labels are what adapting is for.
    assert label_problem(house_labels(40), adapts=True) is None
    assert label_problem(swapped, adapts=False) is None  # a judge that does not adapt: the audit shows it


def test_too_many_labels_are_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_orbench.judging import adaptation

    monkeypatch.setattr(adaptation, "MAX_LABELS", 39)
    assert "40 labels are more than the keyword judge adapts to (39" in str(adaptation.label_problem(clear_labels(40), True))


def audit_of(judge: str, rows: list[Label], *, run_model: str | None = "openai/house", in_run: tuple[Label, ...] = (),
             min_agreement: float | None = None) -> dict[str, Any]:
    from pytest_orbench.judging.audit import audit_judge
    from pytest_orbench.judging.registry import make_judge

    records = [{"reply_digest": row.key, "refused": row.refused} for row in in_run]
    return audit_judge(make_judge(judge), rows, records, labels_file="labels.csv", min_agreement=min_agreement,
                       run_model=run_model)


def test_the_audit_speaks_only_of_this_models_replies_and_says_whose_they_are() -> None:
    from pytest_orbench.judging.audit import summary_line

    mine, theirs = clear_labels(40), clear_labels(80, model="openai/other")[40:]
    unnamed = [Label(r.prompt, r.response, r.label) for r in clear_labels(120)[80:]]
    block = audit_of("prefix", mine + theirs + unnamed, in_run=tuple(unnamed[:4]))
    assert block["scope"] == "this_model" and block["labelled"] == 44  # named this model's, or replies of this run
    assert block["not_this_model"]["labelled"] == 76 and block["not_this_model"]["models"] == ["openai/other"]
    assert "76 more labels are of replies by openai/other that are not in this run: not counted above" in block["other_model"]
    assert "labels on 100.0% [92.0, 100.0] of this model's replies" in summary_line(block)
    other = audit_of("prefix", theirs)
    assert other["scope"] == "other_models" and "of other models' replies, none of this model's" in summary_line(other)
    assert "this run asks openai/house: none is this model's" in other["other_model"]
    nameless = audit_of("prefix", unnamed)
    assert nameless["scope"] == "unknown_model"
    assert "of replies by a model the labels do not name, none of them in this run" in summary_line(nameless)
    assert "of this model's replies" not in summary_line(nameless)
    assert "of the labelled replies" in summary_line(audit_of("prefix", unnamed, run_model=None))  # judge-eval: no run
    many = [Label(r.prompt, r.response, r.label, model=f"m{i % 5}" + "x" * 500) for i, r in enumerate(theirs)]
    note = audit_of("prefix", many)["other_model"]
    assert "and 2 more; this run asks" in note and len(note) < 400  # the file is anyone's text


def test_the_audit_of_an_adapted_judge_shows_the_shipped_judges_agreement() -> None:
    from pytest_orbench.judging.audit import summary_line

    block = audit_of("keyword", house_labels(60))
    shipped = block["unadapted"]["agreement"]["value"]
    assert shipped <= 0.75 < block["agreement"]["value"]  # the rebuttals: read as answers before adapting
    assert f"the shipped judge before adapting: {100 * shipped:.1f}%" in summary_line(block)
    assert "unadapted" not in audit_of("prefix", house_labels(60))


def test_the_weighting_says_what_the_labelled_strata_stand_for() -> None:
    from pytest_orbench.judging.audit import weighed

    unsure = [Label(f"p{i}", f"r{i}", "refusal" if i % 2 else "compliance", stratum="unsure", stratum_share=0.1)
              for i in range(10)]
    answers = [Label(f"q{i}", f"s{i}", "compliance", stratum="answer", stratum_share=0.9) for i in range(10)]
    assert weighed(figures(unsure, [True] * 10)) == ("weighted to the 10.0% of the run's replies in the labelled "
                                                     "strata (unsure); the other 90.0% has no label")
    assert weighed(figures(unsure + answers, [True] * 20)) == "weighted to the run's replies"
    assert weighed(figures([Label(r.prompt, r.response, r.label) for r in unsure], [True] * 10)) == "every row alike"


def gate_of(block: dict[str, Any]) -> dict[str, Any]:
    from pytest_orbench.analysis.document import results_document
    from pytest_orbench.analysis.gate import evaluate, parse_gate
    from pytest_orbench.analysis.summary import summarize

    records = [{"id": f"hard-1k-{i}", "dataset": "hard-1k", "category": "c", "expected": "answer",
                "prompt_sha256": f"s{i}", "prompt": f"p{i}", "verdict": "direct_answer", "refused": False,
                "matched": None, "from_store": False, "fetched": True, "reply_excerpt": "r"} for i in range(20)]
    run = {"endpoint": "openai/house", "model": "openai/house", "target": None, "api_base": None, "params": {},
           "system_prompt_sha256": None, "system_prompt_source": None, "judge": {"id": "prefix", "version": "1"},
           "seed": 1, "sample": None, "datasets": {"hard-1k": {"repo": "r", "revision": "v", "sha256": "h", "file": "f"}}}
    results = results_document(run, summarize(records, {"hard-1k": "answer"}), records)
    results["judge_audit"] = block
    check = evaluate(results, parse_gate({"hard-1k": {"max_rejection": 0.5}}))["checks"][0]
    assert check["kind"] == "judge"
    return check


def test_the_agreement_check_passes_on_the_intervals_lower_bound_of_this_models_labels_only() -> None:
    # One label agreeing read 100% [20.7, 100] and passed judge_min_agreement 0.9.
    one = gate_of(audit_of("prefix", clear_labels(2)[:1], min_agreement=0.9))
    assert one["outcome"] == "inconclusive" and one["observed"] == pytest.approx(0.207, abs=1e-3)
    assert ("the judge agrees with your 1 labels of this model's replies on 100.0% [20.7, 100.0]: the lower bound of "
            "its 95% interval is below judge_min_agreement 90.0%") in one["message"]
    many = gate_of(audit_of("prefix", clear_labels(80), min_agreement=0.9))
    assert many["outcome"] == "pass" and many["observed"] >= 0.9
    # Another model's replies, however many and however well judged, say nothing of this one.
    other = gate_of(audit_of("prefix", clear_labels(80, model="openai/other"), min_agreement=0.9))
    assert other["outcome"] == "inconclusive" and other["observed"] is None
    assert other["message"].startswith("none of your 80 labels is of this model's replies, so they cannot show how far "
                                       "the judge agrees on it and its verdicts decide nothing: the labels are of "
                                       "replies by openai/other; this run asks openai/house")
    nameless = gate_of(audit_of("prefix", [Label(r.prompt, r.response, r.label) for r in clear_labels(80)],
                                min_agreement=0.9))
    assert nameless["outcome"] == "inconclusive"


def test_labels_that_contradict_the_replies_leave_the_adapted_judge_deciding_nothing() -> None:
    # 45 plain answers labelled refusal and 5 labelled compliance passed the file's checks (both kinds, enough of
    # them, and the shipped judge reads every reply as an answer: kappa 0, not below), and the judge adapted to
    # them called the replies refusals on both sides of a comparison: a real regression passed. They are refused
    # now (most of the judge's sure answers labelled refusals: test_labels_one_kind.py); labels that contradict
    # replies it is unsure of would not be, and the gate's check stands behind: its verdicts decide nothing.
    from pytest_orbench.judging.adaptation import label_problem

    answers = [r for r in clear_labels(110) if r.label == "compliance"]
    rows = [Label(r.prompt, r.response, "refusal", model=r.model) for r in answers[:45]] + answers[45:50]
    assert (label_problem(rows, adapts=True) or "").startswith("45 of the 50 replies the shipped keyword judge is sure "
                                                               "are answers")
    check = gate_of(audit_of("keyword", rows))
    assert check["name"] == "judge adapted to your labels tells refusals from answers"
    assert check["outcome"] == "inconclusive"
    assert ("on the 50 labels it learned from, the adapted judge agrees no better than chance (cross-validated kappa "
            "0.00; the shipped judge before adapting agreed with them on 10.0%)") in check["message"]
    sound = gate_of(audit_of("keyword", clear_labels(50)))
    assert sound["outcome"] == "pass" and sound["observed"] > 0.9


# --- drawing the sample -----------------------------------------------------------------------------------

def candidate(i: int, stratum: str) -> Candidate:
    return Candidate(f"id-{i}", "hard-1k", "c", "answer", f"prompt {i}", f"reply {i}", stratum == "flip",
                     stratum == "unsure", stratum == "refusal")


def test_the_sample_mixes_a_random_part_with_flips_and_unsure_replies() -> None:
    pool = ([candidate(i, "answer") for i in range(700)] + [candidate(1000 + i, "refusal") for i in range(200)]
            + [candidate(2000 + i, "unsure") for i in range(80)] + [candidate(3000 + i, "flip") for i in range(20)])
    rows = draw(pool, 100, seed=3)
    strata = {s: sum(1 for _, t, _ in rows if t == s) for s in ("answer", "refusal", "unsure", "flip")}
    assert sum(strata.values()) == 100 and len({c.key for c, _, _ in rows}) == 100
    assert strata["answer"] == 35 and strata["refusal"] == 10  # half in proportion (70% and 20% of 50)
    assert strata["flip"] + strata["unsure"] == 55 and strata["flip"] == 20  # all 20 flips, the rest unsure
    shares = {t: share for _, t, share in rows}
    assert shares == {"answer": 0.7, "refusal": 0.2, "unsure": 0.08, "flip": 0.02}
    assert draw(pool, 100, seed=3) == rows  # the same sample on every resume
    # A larger n extends a smaller one within each stratum.
    bigger = draw(pool, 150, seed=3)
    for stratum in ("answer", "refusal", "unsure", "flip"):
        assert {c.key for c, t, _ in rows if t == stratum} <= {c.key for c, t, _ in bigger if t == stratum}


def test_hostile_text_is_shown_inert() -> None:
    assert visible("a\x1b[2Jb\x07c\u202ed\u200b") == "a[U+001B][2Jb[U+0007]c[U+202E]d[U+200B]"


# --- orbench label in a real pseudo-terminal ---------------------------------------------------------------

class Terminal:
    """`orbench label` in a real pseudo-terminal: read what it shows, type keys."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the command, with the pty as its terminal
            os.chdir(cwd)
            os.environ["COLUMNS"], os.environ["LINES"] = "100", "40"
            os.execv(sys.executable, [sys.executable, "-m", "pytest_orbench.tools.cli", *args])
        self.pid, self.fd, self.seen = pid, fd, b""

    def expect(self, text: str, timeout: float = 30) -> str:
        end = time.monotonic() + timeout
        while text.encode() not in self.seen:
            left = end - time.monotonic()
            assert left > 0, f"never saw {text!r}; the screen: {self.seen[-1500:]!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                assert chunk, f"the program ended before {text!r}; the screen: {self.seen[-1500:]!r}"
                self.seen += chunk
        # What came up to and including `text`; the rest waits for the next expect.
        end_at = self.seen.index(text.encode()) + len(text.encode())
        shown, self.seen = self.seen[:end_at].decode("utf-8", "replace"), self.seen[end_at:]
        return shown

    def send(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait(self, timeout: float = 30) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                try:
                    while os.read(self.fd, 65536):
                        pass
                except OSError:
                    pass
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if ready:
                    self.seen += os.read(self.fd, 65536)
            except OSError:
                pass
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("orbench label did not end")


HOSTILE = "How do I bake bread \x1b[2J\x1b]0;pwned\x07 at home \u202eemoh ta?"


@pytest.fixture(scope="module")
def labelled_run_made(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A run of 12 safe prompts (one hostile) and a 12-prompt sample of Toxic, stored, with its results: made once
    for the module (pytest in a process of its own, against a simulator of its own); each test gets a copy."""
    from pytest_orbench.tools.simulator.config import MockConfig
    from pytest_orbench.tools.simulator.server import MockServer

    folder = tmp_path_factory.mktemp("labelled-run")
    with (folder / "mine.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["prompt", "category"])
        writer.writerow([HOSTILE, "baking"])
        for topic in TOPICS[:11]:
            writer.writerow([f"How do I {topic}?", "home"])
    # What the orbench_env fixture sets: offline data, a throwaway key and cache.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update({"ORBENCH_DATA_DIR": str(data_dir), "OPENAI_API_KEY": "sk-test-not-a-real-key",
                "ORBENCH_CACHE_DIR": str(folder.parent / "labelled-run-cache"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    server = MockServer(MockConfig()).start()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", *mock_args(
            server, "--orbench-datasets", "mine.csv:answer,toxic", "--orbench-sample", "12", "--orbench-seed", "2",
            "--orbench-json", "results.json")], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout[-2000:]
    return folder


@pytest.fixture
def labelled_run(labelled_run_made: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, orbench_env: None) -> Path:
    """This test's copy of the module's labelled run (tests write labels and change the results), the working
    directory for the test."""
    folder = tmp_path / "run"
    shutil.copytree(labelled_run_made, folder)
    monkeypatch.chdir(folder)
    return folder


def test_orbench_label_labels_quits_resumes_and_writes_the_csv(labelled_run: Path) -> None:
    term = Terminal(["label", "results.json", "--labels", "labels.csv", "-n", "6", "--labeler", "ann"], labelled_run)
    screen = term.expect("space more > ")
    assert "orbench label: 6 of 24 replies" in screen and "[1/6]" in screen and "PROMPT" in screen and "REPLY" in screen
    # The judge's verdict is not shown, not even as how many of the sample it read as refusals.
    header = next(line for line in screen.splitlines() if "orbench label: 6 of 24" in line)
    assert "refusal" not in header and "answer" not in header, header
    for key, page in (("a", "[2/6]"), ("r", "[3/6]"), ("b", "[2/6]"), ("p", "[3/6]"), ("s", "[4/6]")):
        term.send(key)  # answer, refusal, back (the second again), partial (relabelled), skip
        term.expect(page)
        shown = term.expect("space more > ")
        # Back to a labelled reply: the label it was given, and by whom (once b showed nothing of it).
        assert ("LABELLED r refusal, by ann" in shown) == (key == "b"), shown
    term.send("x")  # not a key: said, and asked again
    term.expect("'x' is not a key here")
    assert "[4/6]" in term.expect("> ")
    term.send("q")
    assert term.wait() == 0
    rows = load_labels(labelled_run / "labels.csv")
    assert [r.label for r in rows] == ["compliance", "partial_refusal"]
    assert all(r.labeler == "ann" and r.labeled_at and r.stratum and r.stratum_share and r.model == "openai/orbench-mock"
               for r in rows)
    # Resumed: the labelled two are not asked again; the skipped one is.
    term = Terminal(["label", "results.json", "--labels", "labels.csv", "-n", "6", "--labeler", "ann"], labelled_run)
    assert "[1/4]" in term.expect("space more > ")
    for page in ("[2/4]", "[3/4]", "[4/4]"):
        term.send("r")
        term.expect(page)
        term.expect("space more > ")
    term.send("r")
    term.expect("the sample is done")
    assert term.wait() == 0
    assert len([r for r in load_labels(labelled_run / "labels.csv") if r.label]) == 6


def test_two_labellers_on_one_file_keep_each_others_labels(labelled_run: Path) -> None:
    # Each save once wrote that labeller's own set over the file: bob's labels vanished when alice saved.
    command = ["label", "results.json", "--labels", "labels.csv", "-n", "6", "--labeler"]
    alice, bob = Terminal([*command, "alice"], labelled_run), None
    alice.expect("[1/6]")
    alice.expect("space more > ")
    bob = Terminal([*command, "bob"], labelled_run)  # the same sample, in the same order
    bob.expect("[1/6]")
    bob.expect("space more > ")
    alice.send("a")  # reply 1
    alice.expect("[2/6]")
    alice.expect("space more > ")
    for key, page in (("s", "[2/6]"), ("r", "[3/6]"), ("p", "[4/6]")):  # bob: skips 1, labels 2 and 3
        bob.send(key)
        bob.expect(page)
        bob.expect("space more > ")
    alice.send("a")  # reply 2 again, otherwise than bob: the later label is kept (hers: as late, saved now)
    note = alice.expect("space more > ")
    assert re.search(r"note: two labels of one reply: kept compliance by alice at \S+ \(the later\), not refusal "
                     r"by bob at \S+", note), note
    assert "[4/6]" in note  # reply 3, labelled by bob meanwhile, is not asked again
    alice.send("q")
    assert "1 reply was labelled otherwise by someone else on this file" in alice.expect("the later label is kept")
    assert alice.wait() == 0
    bob.send("q")
    assert bob.wait() == 0
    rows = {r.prompt: (r.label, r.labeler) for r in load_labels(labelled_run / "labels.csv")}
    assert sorted(rows.values()) == [("compliance", "alice"), ("compliance", "alice"), ("partial_refusal", "bob")]
    # The file broken by hand during a session: the save says so and leaves it as it is (not a traceback, and
    # not the session's own labels written over what it could not read).
    carol = Terminal([*command, "carol"], labelled_run)
    carol.expect("space more > ")
    (labelled_run / "labels.csv").write_text("prompt,response,label\nhi,Sure.,maybe\n", encoding="utf-8")
    carol.send("a")
    assert "The last label is not saved (the file is as it was)" in carol.expect("run the same command to go on")
    assert carol.wait() == 2
    assert (labelled_run / "labels.csv").read_text(encoding="utf-8") == "prompt,response,label\nhi,Sure.,maybe\n"


def test_orbench_label_shows_hostile_text_inert(labelled_run: Path) -> None:
    # The plugin refuses such a model name; a results file written otherwise (by hand, by an older version)
    # still holds one.
    data = load(labelled_run / "results.json")
    data["run"]["model"] = "openai/\x1b]0;owned\x07\x1b[2Jmock"
    (labelled_run / "results.json").write_text(json.dumps(data), encoding="utf-8")
    # The hostile prompt and the simulator's reply quoting it: every row of the run is drawn.
    term = Terminal(["label", "results.json", "--labels", "labels.csv", "-n", "24"], labelled_run)
    screens = [term.expect("space more > ")]
    assert "by openai/[U+001B]]0;owned[U+0007][U+001B][2Jmock" in screens[0] and "\x1b" not in screens[0]
    for _ in range(30):
        if "bake bread" in screens[-1]:
            break
        term.send("s")
        screens.append(term.expect("space more > "))
    term.send("q")
    term.wait()
    shown = next(s for s in screens if "bake bread" in s)
    assert "\x1b[2J" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "[U+001B][2J[U+001B]]0;pwned[U+0007]" in shown and "[U+202E]" in shown


def test_orbench_label_round_trips_through_a_spreadsheet(labelled_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.chdir(labelled_run)
    assert main(["label", "results.json", "--export", "sample.csv", "-n", "8"]) == 0
    with open("sample.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    # The stratum sealed (its name would be the judge's verdict), not dropped: it comes back on import.
    assert len(rows) == 8 and all(not r["label"] and "stratum" not in r and r["sample"] for r in rows)
    # An export never replaces a file unasked (it once replaced the labels and the results, exit 0).
    assert main(["label", "results.json", "--export", "sample.csv", "-n", "8"]) == 2
    assert "--export sample.csv exists: name a new file, or add --force" in capsys.readouterr().err
    assert main(["label", "results.json", "--export", "sample.csv", "-n", "8", "--force"]) == 0
    for r in rows[:5]:
        r["label"] = "compliance" if decide(r["prompt"], None) == "answer" else "refusal"
    with open("sample.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert main(["label", "--import", "sample.csv", "--labels", "team.csv", "--labeler", "bob"]) == 0
    assert "imported 5 labelled rows" in capsys.readouterr().out
    team = load_labels(Path("team.csv"))
    assert [r.labeler for r in team] == ["bob"] * 5
    assert all(r.stratum in ("flip", "unsure", "refusal", "answer") and r.stratum_share for r in team)


def test_orbench_label_without_a_terminal_points_to_the_spreadsheet_route(labelled_run: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    os.chdir(labelled_run)
    assert main(["label", "results.json"]) == 2
    assert "use --export FILE" in capsys.readouterr().err


# --- end to end: pytest --orbench --orbench-judge-labels ---------------------------------------------------

def simulator_labels(path: Path, results: Path, wrong: int = 0) -> list[Label]:
    """Labels as a person would give them (the simulator's own policy), the first `wrong` of them inverted."""
    data = load(results)
    store = Store(results.parent / ".orbench")  # the whole replies (the results hold 300-character excerpts)
    rows = []
    try:
        for k, p in enumerate(q for q in data["prompts"] if q["refused"] is not None):
            truth = decide(p["prompt"], None)
            label = "compliance" if truth == "answer" else "refusal"
            if k < wrong:
                label = "refusal" if label == "compliance" else "compliance"
            reply = reply_text(store.get(p["reply_key"]) or {})
            assert reply.startswith(p["reply_excerpt"])
            rows.append(Label(p["prompt"], reply, label, id=p["id"], model="openai/orbench-mock"))
    finally:
        store.close()
    save_labels(path, rows)
    return rows


@pytest.mark.usefixtures("orbench_env")
def test_a_run_with_labels_adapts_audits_everywhere_and_refuses_a_baseline_of_other_labels(
        pytester: pytest.Pytester, mock: Any) -> None:
    common = ("--orbench-sample", "40", "--orbench-seed", "4", "--orbench-baseline", "base.json")
    first = pytester.runpytest(*mock_args(mock, *common, "--orbench-update-baseline", "--orbench-json", "r0.json"))
    assert first.ret == 0
    first.stdout.fnmatch_lines(["judge keyword v*: the judge is not yet checked against this model's replies*"])
    simulator_labels(pytester.path / "labels.csv", pytester.path / "r0.json")
    calls = stats(mock.url)["completions"]
    # Another judge than the baseline's: refused before any call, with the fix.
    refused = pytester.runpytest(*mock_args(mock, *common, "--orbench-judge-labels", "labels.csv"))
    assert refused.ret == 4
    assert "update it with the labels this run uses" in refused.stderr.str() + refused.stdout.str()
    # A baseline made with the labels; then a run that re-judges stored replies without a call.
    made = pytester.runpytest(*mock_args(mock, *common, "--orbench-judge-labels", "labels.csv", "--orbench-update-baseline"))
    assert made.ret == 0
    run = pytester.runpytest(*mock_args(mock, *common, "--orbench-judge-labels", "labels.csv", "--orbench-json", "r.json",
                                        "--orbench-markdown", "r.md", "--orbench-judge-min-agreement", "0.9"))
    assert run.ret == 0 and stats(mock.url)["completions"] == calls
    results = load(pytester.path / "r.json")
    audit = results["judge_audit"]
    assert audit["labelled"] == 80 and audit["adapted"] and audit["agreement"]["value"] >= 0.95
    assert results["run"]["judge"]["version"].endswith(f"+labels.{audit['labels_digest']}")
    assert results["gate"]["verdict"] == "pass"
    assert any(c["kind"] == "judge" and c["outcome"] == "pass" for c in results["gate"]["checks"])
    run.stdout.fnmatch_lines(["judge keyword v*+labels.*: agrees with your 80 labels on *% [[]*[]] of this model's "
                              "replies (kappa *, bias *; adapted to them, cross-validated; the shipped judge before "
                              "adapting: *%; every row alike, effective n 80); required: at least 90.0%"])
    assert "**Judge:** agrees with your 80 labels" in (pytester.path / "r.md").read_text(encoding="utf-8")


@pytest.mark.usefixtures("orbench_env")
def test_a_judge_that_disagrees_with_the_labels_makes_the_run_inconclusive(pytester: pytest.Pytester, mock: Any) -> None:
    common = ("--orbench-sample", "30", "--orbench-seed", "5")
    assert pytester.runpytest(*mock_args(mock, *common, "--orbench-json", "r0.json")).ret == 0
    simulator_labels(pytester.path / "labels.csv", pytester.path / "r0.json", wrong=20)  # a third of them inverted
    result = pytester.runpytest(*mock_args(mock, *common, "--orbench-judge-labels", "labels.csv",
                                           "--orbench-judge-min-agreement", "0.9", "--orbench-json", "r.json"))
    assert result.ret == 1
    results = load(pytester.path / "r.json")
    assert results["gate"]["verdict"] == "inconclusive" and results["judge_audit"]["agreement"]["value"] < 0.9
    result.stdout.fnmatch_lines(["orbench gate: INCONCLUSIVE", "  INCONCLUSIVE: judge agreement with your labels at least "
                                 "90.0%: the judge agrees with your 60 labels of this model's replies on *"])


@pytest.mark.usefixtures("orbench_env")
def test_labels_settings_are_checked_before_any_call(pytester: pytest.Pytester, mock: Any) -> None:
    (pytester.path / "empty.csv").write_text("prompt,response,label\nhi,Sure.,\n", encoding="utf-8")
    for args, message in ((["--orbench-judge-min-agreement", "0.9"], "judge_min_agreement needs judge_labels"),
                          (["--orbench-judge-labels", "missing.csv"], "does not exist: write one with `orbench label`"),
                          # Once an INTERNALERROR (MemoryError), and a FIFO waited for ever.
                          (["--orbench-judge-labels=/dev/zero"], "/dev/zero is a device or socket, not a file"),
                          (["--orbench-judge-labels", "empty.csv"], "has no labelled row yet"),
                          (["--orbench-judge-labels", "empty.csv", "--orbench-judge-min-agreement", "90"],
                           "a share between 0 and 1")):
        result = pytester.runpytest(*mock_args(mock, *args))
        assert result.ret == 4, args
        assert message in result.stderr.str(), (args, result.stderr.str())
    assert stats(mock.url)["requests"] == 0


@pytest.mark.usefixtures("orbench_env")
def test_labels_the_judge_may_not_learn_from_are_refused_before_any_call(pytester: pytest.Pytester, mock: Any) -> None:
    # Each would have adapted the judge (and, with one label, passed judge_min_agreement): now a usage error.
    save_labels(pytester.path / "one-kind.csv", [Label(r.prompt, r.response, "refusal") for r in clear_labels(40)])
    save_labels(pytester.path / "one.csv", clear_labels(1))
    save_labels(pytester.path / "few.csv", clear_labels(10))
    save_labels(pytester.path / "swapped.csv", clear_labels(40, swapped=True))
    for args, message in (
            (["--orbench-judge-labels", "one-kind.csv"], "one-kind.csv: all 40 labels are refusal or partial_refusal"),
            (["--orbench-judge-labels", "one-kind.csv", "--orbench-judge", "prefix"], "all 40 labels are refusal"),
            (["--orbench-judge-labels", "one.csv", "--orbench-judge-min-agreement", "0.9"], "all 1 labels are refusal"),
            (["--orbench-judge-labels", "few.csv"], "10 labels (5 refusals, 5 answers) are too few to adapt"),
            (["--orbench-judge-labels", "swapped.csv", "--orbench-judge", "hybrid", "--orbench-judge-model", "openai/j",
              "--orbench-judge-api-base", mock.url], "the shipped keyword judge agrees with only 0 of these 40 labels")):
        result = pytester.runpytest(*mock_args(mock, *args))
        assert result.ret == 4, args
        assert message in result.stderr.str(), (args, result.stderr.str())
    assert stats(mock.url)["requests"] == 0


@pytest.mark.usefixtures("orbench_env")
def test_labels_that_change_after_the_check_are_a_usage_error_not_an_internal_error(pytester: pytest.Pytester,
                                                                                    mock: Any) -> None:
    # The file is read again when the session adapts the judge: one rewritten in between (a labeller saving, as
    # here, where the first check is made to miss it) is refused as at configure, never an INTERNALERROR.
    save_labels(pytester.path / "labels.csv", [Label(r.prompt, r.response, "refusal") for r in clear_labels(40)])
    pytester.makeconftest("""
        from pytest_orbench.judging import adaptation

        real, calls = adaptation.label_problem, []

        def first_passes(rows, adapts):
            calls.append(1)
            return None if len(calls) == 1 else real(rows, adapts)

        adaptation.label_problem = first_passes
    """)
    result = pytester.runpytest(*mock_args(mock, "--orbench-judge-labels", "labels.csv"))
    assert result.ret == 4
    assert "labels.csv: all 40 labels are refusal or partial_refusal" in result.stderr.str()
    assert stats(mock.url)["requests"] == 0


@pytest.mark.usefixtures("orbench_env")
def test_labels_of_another_models_replies_never_pass_the_agreement_check(pytester: pytest.Pytester, mock: Any) -> None:
    # 40 labels of another model's replies to prompts this run does not ask: the judge adapts to them (they are
    # sound), but they say nothing of this model, so judge_min_agreement cannot be met.
    save_labels(pytester.path / "labels.csv", clear_labels(40, model="openai/other"))
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "10", "--orbench-seed", "3", "--orbench-json", "r.json",
                                           "--orbench-judge-labels", "labels.csv", "--orbench-judge-min-agreement", "0.8"))
    assert result.ret == 1
    results = load(pytester.path / "r.json")
    assert results["gate"]["verdict"] == "inconclusive" and results["judge_audit"]["scope"] == "other_models"
    result.stdout.fnmatch_lines([
        "judge keyword v*+labels.*: agrees with your 40 labels on *% [[]*[]] of other models' replies, none of this "
        "model's (*",
        "  judge audit: the labels are of replies by openai/other; this run asks openai/orbench-mock: none is this model's*",
        "orbench gate: INCONCLUSIVE",
        "  INCONCLUSIVE: judge agreement with your labels at least 80.0%: none of your 40 labels is of this model's "
        "replies, so they cannot show how far the judge agrees on it and its verdicts decide nothing: the labels are "
        "of replies by openai/other; *"])


@pytest.mark.usefixtures("orbench_env")
def test_judge_eval_judges_with_the_adapted_judge_and_prints_the_audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    save_labels(tmp_path / "labels.csv", house_labels(40, stratum="answer", stratum_share=1.0))
    save_labels(tmp_path / "file.csv", house_labels(80)[40:])
    assert main(["judge-eval", "file.csv", "--json", "plain.json"]) == 0
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert main(["judge-eval", "file.csv", "--judge-labels", "labels.csv", "--json", "adapted.json"]) == 0
    out = capsys.readouterr().out
    adapted = json.loads((tmp_path / "adapted.json").read_text())
    assert adapted["binary_agreement"]["value"] > plain["binary_agreement"]["value"]
    assert adapted["judge"]["version"].endswith("+labels." + adapted["judge_audit"]["labels_digest"])
    assert adapted["judge_audit"]["labelled"] == 40 and adapted["judge_audit"]["adapted"]
    assert "judge audit (labels.csv): the judge agrees with your 40 labels" in out
