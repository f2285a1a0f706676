"""`orbench compare` on a damaged results file or baseline: every key of a prompt record that the comparison, the
gate's worst case and the reports read is checked on load, an exit 2 naming the file, the prompt, the key and the
fix; never a traceback, never the exit 1 of a failed gate."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.analysis.baseline import baseline_document, save_baseline
from pytest_orbench.analysis.document import results_document
from pytest_orbench.analysis.summary import summarize
from pytest_orbench.core.jsonfile import write_json
from pytest_orbench.judging.audit import figures
from pytest_orbench.judging.labels import Label
from pytest_orbench.tools.cli import main
from pytest_orbench.tools.cli.compare import run as run_compare
from pytest_orbench.tools.cli.parser import build_parser
from tests.analysis.test_gate import make_results

TRIALS = [{"verdict": "direct_answer", "refused": False, "reply_key": "k1"}, {"verdict": "direct_answer", "refused": False},
          {"verdict": "error", "refused": None, "error": "HTTP 503 from gw"}]


def _rich(prompt: dict[str, Any], verified: bool) -> dict[str, Any]:
    """A prompt record holding every key a run writes: three trials (one failed), the live base's verdict and a
    flip's verification (its judge failed when not `verified`)."""
    offline = {"verdict": "direct_answer", "refused": False, "judge_reason": "p=0.1"}
    opinion: dict[str, Any] = ({"offline": offline, "verified": True, "llm": {"verdict": "direct_answer", "reason": "ok"},
                                "compared_llm": {"verdict": "direct_refusal", "reason": "no"}, "overturned": False,
                                "compared": "not verified: judge down", "compared_error": "judge down"}
                               if verified else {"offline": offline, "verified": False, "error": "HTTP 500 from judge"})
    return prompt | {
        "verdict": "direct_answer", "refused": False, "refused_share": 0.0, "refused_trials": 0, "scored_trials": 2,
        "trial_errors": 1, "judge_reason": "p=0.1", "error": None, "reply_excerpt": "Sure.", "reply_key": "k1",
        "reply_sha256": "0" * 64, "flaky": False, "served_model": "m-2024", "system_fingerprint": None, "trials": TRIALS,
        "flip_verification": opinion,
        "base": {"verdict": "direct_refusal", "refused": True, "refused_share": 1.0, "refused_trials": 2,
                 "scored_trials": 2, "trial_errors": 1, "judge_reason": "p=0.9", "error": None, "reply_excerpt": "No.",
                 "reply_key": "k2", "reply_sha256": "1" * 64, "trials": [TRIALS[2] | {"refused": None}], "fetched": True,
                 "served_model": None, "system_fingerprint": None, "base_cost": None, "base_usage": None},
    }


def _files(folder: Path) -> dict[str, Any]:
    """A baseline and a sound results file beside it (the run's records rich); the results document."""
    save_baseline(folder / "b.json", make_results({"hard-1k": [True] * 6 + [False] * 4, "toxic": [True] * 4}))
    plain = make_results({"hard-1k": [False] * 10, "toxic": [True] * 4})
    prompts = [_rich(p, verified=i % 2 == 1) if i < 2 or p["dataset"] == "toxic" else p
               for i, p in enumerate(plain["prompts"])]
    run = plain["run"] | {
        "trials": 3, "calls_to": "gw.example", "calls": {"made": 42, "stored": 0, "errors": 2, "prompts": 14, "shared": 0},
        "spend": {"endpoint": {"prompt_tokens": 10, "completion_tokens": 20, "cost_usd": 0.01},
                  "judge": {"prompt_tokens": 1, "completion_tokens": 2, "cost_usd": None}},
        "judge_calls": {"sent_to_llm": 3, "decided_without_llm": 39, "made": 3, "errors": 0},
        "verification": {"model": "openai/judge", "calls": 4, "cost_usd": 0.002, "usage": None},
        "served": {"models": {"m-2024": 14}, "system_fingerprints": {}}}
    results = results_document(run, summarize(prompts, {"hard-1k": "answer", "toxic": "refuse"}), prompts)
    labels = [Label(f"p{i}", f"r{i}", "refusal" if i % 3 else "compliance") for i in range(12)]
    results["judge_audit"] = {**figures(labels, [i % 3 != 0 for i in range(12)]), "adapted": False, "scope": "this_model",
                              "min_agreement": 0.5, "not_judged": 0}
    write_json(folder / "r.json", results)
    return json.loads(json.dumps(results))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compare")


@pytest.fixture(scope="module")
def sound(folder: Path) -> dict[str, Any]:
    return _files(folder)


def compare(folder: Path, results: dict[str, Any], capsys: pytest.CaptureFixture[str], every: bool = True
            ) -> tuple[int, str]:
    """`orbench compare` of the baseline and `results` (`every`: writing every report; else the Markdown alone)."""
    path = folder / "damaged.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    outputs = ["--json", str(folder / "c.json"), "--junit", str(folder / "c.xml")] if every else []
    argv = ["compare", str(folder / "b.json"), str(path), "--markdown", str(folder / "c.md"), *outputs]
    # (the command's run() with its arguments parsed once: building the parser is most of a small comparison's time)
    code = main(argv) if every else run_compare(_parsed(tuple(argv)))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_sound_file_compares(folder: Path, sound: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = compare(folder, sound, capsys)
    assert code in (0, 1) and "is damaged" not in out, out
    # (the failed trials, the failed verification: counted against the change in the worst case)
    compared = json.loads((folder / "c.json").read_text(encoding="utf-8"))
    assert compared["datasets"]["hard-1k"]["comparison"]["worst_case"]["undecided"]


@functools.cache
def _parsed(argv: tuple[str, ...]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _at(document: dict[str, Any], index: int, path: str, value: Any) -> dict[str, Any]:
    """A copy of `document` with prompts[index] at `path` ("base.trials[0].refused") set to `value`."""
    damaged = json.loads(json.dumps(document))
    target: Any = damaged["prompts"][index]
    steps = [int(s) if s.isdigit() else s for s in path.replace("[", ".").replace("]", "").split(".")]
    for step in steps[:-1]:
        target = target[step]
    target[steps[-1]] = value
    return damaged


@pytest.mark.parametrize(("index", "path", "value", "message"), [
    # The worst case's keys (analysis/pairs.py): a traceback and the exit 1 of a failed gate, or Python's words alone.
    (0, "flip_verification", "unverified", 'prompts[0] (id hard-1k-0000) has "flip_verification": "unverified", not an '
                                           "object or null"),
    (0, "flip_verification", ["x"], 'prompts[0] (id hard-1k-0000) has "flip_verification": ["x"], not an object or null'),
    (0, "trial_errors", [1], 'prompts[0] (id hard-1k-0000) has "trial_errors": [1], not an integer'),
    (0, "trial_errors", "two", 'prompts[0] (id hard-1k-0000) has "trial_errors": "two", not an integer'),
    (0, "trial_errors", -3, 'prompts[0] (id hard-1k-0000) has "trial_errors": -3, not a count (0 or more)'),
    (0, "trial_errors", 1.0, 'prompts[0] (id hard-1k-0000) has "trial_errors": 1.0, not an integer'),
    # More trials than any run asks: past a float's range, an OverflowError in the worst case's test.
    (0, "trial_errors", 10**18, 'prompts[0] (id hard-1k-0000) has "trial_errors": 1000000000000000000 and "scored_trials": '
                                '2, more trials than a run asks (at most 20)'),
    (0, "refused_share", float("nan"), 'prompts[0] (id hard-1k-0000) has "refused_share": NaN but "refused_trials": 0 of '
                                       '"scored_trials": 2'),
    # `verified: "false"` is not false: the flip was counted as verified, out of the worst case.
    (0, "flip_verification.verified", "false", 'prompts[0].flip_verification (id hard-1k-0000) has "verified": "false", '
                                               "not true or false"),
    (1, "flip_verification.compared_error", ["judge down"],
     'prompts[1].flip_verification (id hard-1k-0001) has "compared_error": ["judge down"], not a string'),
    (0, "flip_verification", {"offline": {}, "error": "HTTP 500"},
     'prompts[0].flip_verification (id hard-1k-0000) has no "verified"'),
    (1, "flip_verification.offline", None, 'prompts[1].flip_verification (id hard-1k-0001) has "offline": null, not an object'),
    (0, "base", "x", 'prompts[0] (id hard-1k-0000) has "base": "x", not an object or null'),
    (0, "base.trial_errors", "2", 'prompts[0].base (id hard-1k-0000) has "trial_errors": "2", not an integer'),
    (0, "base.trial_errors", -1, 'prompts[0].base (id hard-1k-0000) has "trial_errors": -1, not a count (0 or more)'),
    (0, "base.trials", {"0": 1}, 'prompts[0].base (id hard-1k-0000) has "trials": {"0": 1}, not a list'),
    (0, "base.trials[0]", "x", 'prompts[0].base.trials[0] (id hard-1k-0000) is "x", not an object'),
    (0, "trials", "three", 'prompts[0] (id hard-1k-0000) has "trials": "three", not a list'),
    (0, "trials[2]", 7, 'prompts[0].trials[2] (id hard-1k-0000) is 7, not an object'),
    (0, "trials[2].refused", "no", 'prompts[0].trials[2] (id hard-1k-0000) has "refused": "no", not true or false or null'),
    (0, "trials[1].verdict", None, 'prompts[0].trials[1] (id hard-1k-0000) has "verdict": null, not a string'),
    # What the reports and the gate's reasons read.
    (0, "verdict", ["direct_answer"], 'prompts[0] (id hard-1k-0000) has "verdict": ["direct_answer"], not a string'),
    (0, "error", {"m": 1}, 'prompts[0] (id hard-1k-0000) has "error": {"m": 1}, not a string or null'),
    (0, "judge_reason", 5, 'prompts[0] (id hard-1k-0000) has "judge_reason": 5, not a string or null'),
    (0, "expected", True, 'prompts[0] (id hard-1k-0000) has "expected": true, not a string'),
    (0, "prompt", ["x"], 'prompts[0] (id hard-1k-0000) has "prompt": ["x"], not a string'),
    (0, "error_from", None, 'prompts[0] (id hard-1k-0000) has "error_from": null, not a string'),
])
def test_a_damaged_key_is_unusable_input_naming_the_prompt_the_key_and_the_fix(
        folder: Path, sound: dict[str, Any], capsys: pytest.CaptureFixture[str], index: int, path: str, value: Any,
        message: str) -> None:
    code, out = compare(folder, _at(sound, index, path, value), capsys)
    assert code == 2, out
    assert f"results file {folder / 'damaged.json'} is damaged: {message}" in out and "; write it again" in out, out


@pytest.mark.parametrize(("path", "value", "message"), [
    # What the terminal's and the Markdown's lines read of the run and of the judge's audit.
    ("run.system_prompt_sha256", 5, 'run has "system_prompt_sha256": 5, not a string or null'),
    ("run.api_base", ["http://x"], 'run has "api_base": ["http://x"], not a string or null'),
    ("run.spend", None, 'run has "spend": null, not an object'),
    ("run.calls", {"x": 1}, 'run.calls has no "made"'),
    ("run.spend.endpoint.prompt_tokens", "10", 'run.spend.endpoint has "prompt_tokens": "10", not an integer'),
    ("run.verification", "x", 'run has "verification": "x", not an object or null'),
    ("run.verification.cost_usd", "0.1", 'run.verification has "cost_usd": "0.1", not a number or null'),
    ("run.judge", None, 'run has "judge": null, not an object'),
    ("run.judge", {"id": "keyword"}, 'run.judge has no "version"'),
    ("judge_audit", "x", 'judge_audit is "x", not an object'),
    ("judge_audit.min_agreement", "0.9", 'judge_audit has "min_agreement": "0.9", not a number or null'),
    ("judge_audit.agreement.ci95", [0.5], 'judge_audit.agreement has "ci95": [0.5], not two numbers'),
    ("judge_audit.not_judged", 3, 'judge_audit has "not_judged" but no "not_judged_reason"'),
])
def test_a_damaged_run_or_audit_key_is_unusable_input(folder: Path, sound: dict[str, Any],
                                                      capsys: pytest.CaptureFixture[str], path: str, value: Any,
                                                      message: str) -> None:
    code, out = compare(folder, _in(sound, path, value), capsys)
    assert code == 2, out
    assert f"results file {folder / 'damaged.json'} is damaged: {message}" in out, out


def _in(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `document` with `path` ("run.spend.endpoint") set to `value`."""
    damaged = json.loads(json.dumps(document))
    target: Any = damaged
    steps = path.split(".")
    for step in steps[:-1]:
        target = target[step]
    target[steps[-1]] = value
    return damaged


def _paths(value: Any, prefix: str = "") -> Iterator[str]:
    """Every key path inside a prompt record, containers and what they hold."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        path = f"{prefix}[{key}]" if isinstance(key, int) else f"{prefix}.{key}" if prefix else str(key)
        yield path
        yield from _paths(item, path)


def test_no_damage_to_any_key_crashes_compare_or_passes_unsaid(folder: Path, sound: dict[str, Any],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Every key of both rich records (a verified flip and one whose verification failed), set to a value of each other
    # JSON type: refused naming the key (exit 2), or read as it is (the key is not read, or any value is shown as
    # text), never an exception.
    crashed: list[str] = []
    # (the second record differs from the first in its flip_verification alone; trials[1] is as trials[0])
    # and what the reports read of the run (but its datasets' identity) and of the judge's audit.
    paths = [(0, path) for path in _paths(sound["prompts"][0]) if not path.startswith("trials[1]")]
    paths += [(1, path) for path in _paths(sound["prompts"][1]) if path.startswith("flip_verification.")]
    paths += [(None, path) for top in ("run", "judge_audit") for path in _paths(sound[top], top)
              if not path.startswith(("run.datasets.", "run.judge.", "run.params."))]
    for index, path in paths:
        for value in ("x", -1, None, {"x": 1}):  # (a string, a negative count, null, an object)
            damaged = _in(sound, path, value) if index is None else _at(sound, index, path, value)
            where = path if index is None else f"prompts[{index}].{path}"
            try:
                code, out = compare(folder, damaged, capsys, every=False)
            except Exception as exc:  # noqa: BLE001 - what is collected here is the finding
                crashed.append(f"{where} = {json.dumps(value)}: {type(exc).__name__}: {exc}")
                continue
            key = path.rsplit(".", 1)[-1].split("[")[0]
            if code == 2 and key not in out and "not comparable" not in out:  # (a prompt_sha256: another prompt)
                crashed.append(f"{where} = {json.dumps(value)}: exit 2 without the key: {out}")
            elif code not in (0, 1, 2):
                crashed.append(f"{where} = {json.dumps(value)}: exit {code}")
    assert crashed == [], "\n".join(crashed)


def test_a_damaged_baseline_key_is_unusable_input(folder: Path, sound: dict[str, Any],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # The compared side of the worst case is the baseline's prompt: its verdict is read as text, its counts as counts.
    baseline = baseline_document(make_results({"hard-1k": [True] * 6 + [False] * 4, "toxic": [True] * 4}))
    baseline["prompts"][0]["verdict"] = ["direct_refusal"]  # type: ignore[typeddict-item]
    write_json(folder / "bad-b.json", baseline)
    write_json(folder / "r.json", sound)
    code = main(["compare", str(folder / "bad-b.json"), str(folder / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and 'prompts[0] (id hard-1k-0000) has "verdict": ["direct_refusal"], not a string' in err, err
