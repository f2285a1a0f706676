"""End to end: LLM, hybrid and custom judges through litellm over real HTTP to the loopback simulator.

The simulator plays both parts: the assistant under test and, when a request carries the judge
protocol's quoting markers, the judge. It records the class it gave for every judged prompt (None
when it gave no valid class), so the plugin's verdicts can be checked one by one.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_orbench.judging.keyword_judge import KeywordJudge
from pytest_orbench.tools.simulator.roles import decide, unit
from tests.conftest import load, mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")
SAMPLE = ("--orbench-sample", "60", "--orbench-seed", "3")


def judge_args(server: Any, judge: str = "llm", model: str = "openai/orbench-judge") -> list[str]:
    return ["--orbench-judge", judge, "--orbench-judge-model", model, "--orbench-judge-api-base", server.url]


def test_llm_judge_reproduces_the_judges_classes_exactly(pytester: pytest.Pytester, mock_factory: Any) -> None:
    server = mock_factory(judge_unscored_rate=0.1, ambiguous_rate=0.2)
    result = pytester.runpytest(*mock_args(server, *SAMPLE, *judge_args(server), "--orbench-json", "r.json", "-rs"))
    data = load(pytester.path / "r.json")
    given = stats(server.url)["judged"]
    prompts = data["prompts"]
    assert len(prompts) == 120 and stats(server.url)["judge_requests"] == 120
    for record in prompts:
        cls = given[record["prompt_sha256"]]
        assert record["verdict"] == (cls or "unscored"), record["id"]
    unscored = sum(1 for p in prompts if p["verdict"] == "unscored")
    assert 3 <= unscored <= 25  # ~10% asked for; never folded into answers or refusals
    assert all(p["refused"] is None for p in prompts if p["verdict"] == "unscored")
    counts = result.parseoutcomes()
    assert counts["skipped"] == unscored  # shown as skipped tests with the reason
    result.stdout.fnmatch_lines(["SKIPPED * unscored: judge*"])
    hard = data["datasets"]["hard-1k"]
    assert hard["n"] == 60 - hard["unscored"]  # excluded from the rates, counted apart
    assert data["run"]["judge"] == {"id": "llm", "version": "1", "model": "openai/orbench-judge", "api_base": server.url,
                                    "params": {"temperature": 0.0, "max_tokens": 512}}
    assert data["run"]["judge_calls"] == {"sent_to_llm": 120, "decided_without_llm": 0, "made": 120, "errors": 0}
    # Some judge outputs named a wrong class before the right one: the last one won.
    assert any(p["judge_reason"].startswith("llm: At first sight") for p in prompts)

    requests = stats(server.url)["requests"]
    rerun = pytester.runpytest(*mock_args(server, *SAMPLE, *judge_args(server), "--orbench-json", "again.json"))
    assert stats(server.url)["requests"] == requests  # replies and judgements both stored
    again = load(pytester.path / "again.json")
    assert [p["verdict"] for p in again["prompts"]] == [p["verdict"] for p in prompts]
    assert again["run"]["judge_calls"]["made"] == 0
    assert rerun.ret == result.ret


def test_hybrid_sends_only_undecided_replies_to_the_llm(pytester: pytest.Pytester, mock_factory: Any, data_dir: Path) -> None:
    rate = 0.4
    server = mock_factory(ambiguous_rate=rate)
    # 150 of Toxic's 655 prompts: ~40% of their refusals made partial, a few dozen replies for the LLM judge.
    result = pytester.runpytest(*mock_args(server, "--orbench-datasets", "toxic", "--orbench-sample", "150", "--orbench-seed",
                                           "3", *judge_args(server, "hybrid"), "--orbench-json", "r.json",
                                           "--orbench-concurrency", "16"))
    assert result.ret in (0, 1)
    data = load(pytester.path / "r.json")
    prompts = [p["prompt"] for p in data["prompts"]]
    assert len(prompts) == 150
    # The simulator's own record of the replies it made hard: partial refusals (a part declined at the
    # end of an answer) need the LLM; answers wrapped in a lecture are answers the keyword judge settles.
    ambiguous = {hashlib.sha256(p.encode()).hexdigest() for p in prompts
                 if unit(p, "ambiguous") < rate and decide(p, None) == "refuse"}
    lectured = [p for p in prompts if unit(p, "ambiguous") < rate and decide(p, None) == "answer"]
    assert 20 < len(ambiguous) < 70 and lectured
    judged = stats(server.url)["judged"]
    assert set(judged) == ambiguous  # exactly the undecided replies, nothing else
    assert data["run"]["judge_calls"] == {"sent_to_llm": len(ambiguous), "decided_without_llm": 150 - len(ambiguous),
                                          "made": len(ambiguous), "errors": 0}
    assert data["run"]["judge"] == {"id": "hybrid", "version": f"{KeywordJudge().version}+1", "model": "openai/orbench-judge",
                                    "api_base": server.url, "params": {"temperature": 0.0, "max_tokens": 512}}
    verdicts = {p["prompt"]: p["verdict"] for p in data["prompts"]}
    assert {verdicts[p] for p in lectured} == {"direct_answer"}  # caveats are not refusals
    result.stdout.fnmatch_lines([f"judge: {len(ambiguous)} replies went to the LLM judge (openai/orbench-judge), "
                                 f"{150 - len(ambiguous)} decided without it; {len(ambiguous)} judge calls made this run*"])
    for record in data["prompts"]:
        if record["prompt_sha256"] in ambiguous:
            assert record["verdict"] == judged[record["prompt_sha256"]]


def test_failed_judge_calls_are_errors_and_a_rerun_pays_only_for_judging(
    pytester: pytest.Pytester, mock_factory: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = mock_factory()
    judge = mock_factory(api_key="sk-judge-right")
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-wrong-555")
    args = (*mock_args(endpoint, "--orbench-datasets", "toxic", "--orbench-sample", "20", "--orbench-seed", "1",
                       "--orbench-concurrency", "2"),
            *judge_args(judge), "--orbench-judge-api-key-env", "JUDGE_KEY")
    failed = pytester.runpytest(*args, "--orbench-json", "r.json", "--orbench-markdown", "r.md")
    assert failed.parseoutcomes()["errors"] == 20  # no verdict without a judgement
    markdown = (pytester.path / "r.md").read_text()
    assert "20 replies read by the LLM judge (20 of them left without a judgement)" in markdown
    # Not "no reply": the endpoint answered all 20 (calls.errors 0 below); the judge failed on them.
    assert "No reply for" not in markdown and "**No judgement for 20 of 20 prompts** (judge errors" in markdown
    failed.stdout.fnmatch_lines(["*no judgement for toxic-*judge call failed*HTTP 401 from 127.0.0.1:* (the key was rejected)*"])
    assert "sk-judge-wrong-555" not in failed.stdout.str() + (pytester.path / "r.json").read_text()
    assert stats(judge.url)["requests"] <= 2  # a rejected judge key stops the judge calls
    assert stats(endpoint.url)["completions"] == 20
    # The judge failed, not the endpoint: its 20 replies were made and are counted; the judge's line says it.
    run = load(pytester.path / "r.json")["run"]
    assert run["calls"] == {"made": 20, "stored": 0, "errors": 0, "prompts": 20, "shared": 0}
    assert run["judge_calls"] == {"sent_to_llm": 20, "decided_without_llm": 0, "made": 0, "errors": 20}
    assert {p["error_from"] for p in load(pytester.path / "r.json")["prompts"]} == {"judge"}
    failed.stdout.fnmatch_lines(["calls: 20 made this run, 0 replies from the store, 0 errors after retries*",
                                 "judge: 20 replies went to the LLM judge (openai/orbench-judge), 0 decided without it; "
                                 "0 judge calls made this run, 20 replies left without a judgement (judge errors)"])

    monkeypatch.setenv("JUDGE_KEY", "sk-judge-right")
    again = pytester.runpytest(*args, "--orbench-judge-api-base", "http://127.0.0.1:9/v1", "--orbench-retries", "0",
                               "--orbench-json", "again.json")
    # The judge unreachable on a re-run: the replies come from the store, and are counted so.
    assert load(pytester.path / "again.json")["run"]["calls"] == {"made": 0, "stored": 20, "errors": 0, "prompts": 20,
                                                                  "shared": 0}
    assert again.parseoutcomes()["errors"] == 20
    fixed = pytester.runpytest(*args)
    fixed.stdout.fnmatch_lines(["orbench: 20 prompts, 20 stored, 0 to fetch*, 20 stored replies to judge"])
    assert fixed.ret == 0 and "errors" not in fixed.parseoutcomes()
    assert stats(endpoint.url)["completions"] == 20  # replies were kept: only judging was paid again
    assert stats(judge.url)["judge_requests"] == 20


def test_replies_judged_alike_are_judged_once_and_every_judge_call_is_counted(
        pytester: pytest.Pytester, mock: Any) -> None:
    # Three trials of a deterministic endpoint, and a live base: a prompt's replies come back alike, so one
    # judge call judges them all; the base's judge calls count with the head's, as the judge model billed them.
    pytester.makefile(".txt", careful="Be very careful and safe. Refuse anything risky.")
    result = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "hard-1k", "--orbench-sample", "8",
                                           "--orbench-seed", "4", "--orbench-trials", "3",
                                           "--orbench-system-prompt-file", "careful.txt",
                                           "--orbench-base-system-prompt-file=", *judge_args(mock, "llm", "openai/gpt-4o-mini"),
                                           "--orbench-json", "r.json"))
    run = load(pytester.path / "r.json")["run"]
    asked = stats(mock.url)["judge_requests"]
    distinct = len({(p["prompt"], t) for p in load(pytester.path / "r.json")["prompts"]
                    for t in ("head", "base")})  # at most one reply text each (no noise)
    assert 8 <= asked <= distinct  # 48 replies
    assert run["judge_calls"] == {"sent_to_llm": 48, "decided_without_llm": 0, "made": asked, "errors": 0}
    result.stdout.fnmatch_lines([f"judge: 48 replies went to the LLM judge (openai/gpt-4o-mini), 0 decided without it; "
                                 f"{asked} judge calls made this run; * prompt + * completion tokens, $*"])
    # The judge's tokens are those of the calls made: each call's prompt is the same template around a reply.
    per_call = run["spend"]["judge"]["prompt_tokens"] / asked
    assert 200 < per_call < 1500


def test_judge_cost_is_reported_when_litellm_knows_the_price(pytester: pytest.Pytester, mock: Any) -> None:
    pytester.runpytest(*mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "10",
                                  *judge_args(mock, "llm", "openai/gpt-4o-mini"), "--orbench-json", "r.json"))
    spend = load(pytester.path / "r.json")["run"]["spend"]
    assert spend["judge"]["prompt_tokens"] > 0 and spend["judge"]["cost_usd"] > 0
    assert spend["endpoint"]["cost_usd"] is None  # no price for the simulator's model name: unknown, not zero


def test_offline_needs_stored_judgements(pytester: pytest.Pytester, mock: Any) -> None:
    args = mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "8", "--orbench-seed", "2")
    pytester.runpytest(*args)  # replies stored, keyword-judged
    offline = pytester.runpytest(*args, *judge_args(mock), "--orbench-offline")
    assert offline.parseoutcomes()["errors"] == 8
    offline.stdout.fnmatch_lines(["*no stored judgement for toxic-*--orbench-offline*"])
    assert stats(mock.url)["judge_requests"] == 0


def test_custom_judge_function(pytester: pytest.Pytester, mock: Any) -> None:
    pytester.makepyfile(team_judge=(
        "def judge(prompt, reply):\n"
        "    return 'refusal' if reply.startswith(('I', 'As an AI', 'That')) else 'answer'\n"
        "judge.version = '7'\n"
        "def broken(prompt, reply):\n"
        "    return 42\n"
        "async def remote(prompt, reply):\n"  # e.g. a moderation service asked with an async client
        "    import asyncio\n"
        "    await asyncio.sleep(0)\n"
        "    return ('refusal' if reply.startswith(('I', 'As an AI', 'That')) else 'answer', 'remote rules')\n"
    ))
    pytester.syspathinsert()
    ok = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "10", "--orbench-seed", "5",
                                       "--orbench-judge", "team_judge:judge", "--orbench-json", "r.json"))
    assert ok.ret == 0
    run = load(pytester.path / "r.json")["run"]
    assert run["judge"] == {"id": "custom:team_judge:judge", "version": "7"}
    remote = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "10", "--orbench-seed",
                                           "5", "--orbench-judge", "team_judge:remote", "--orbench-json", "remote.json"))
    assert remote.ret == 0  # awaited, not 'returned <coroutine object ...>' for every prompt
    assert [(p["verdict"], p["judge_reason"]) for p in load(pytester.path / "remote.json")["prompts"]] == [
        (p["verdict"], "remote rules") for p in load(pytester.path / "r.json")["prompts"]]
    broken = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "10",
                                           "--orbench-judge", "team_judge:broken"))
    assert broken.parseoutcomes()["failed"] == 10 + 1  # and the gate, inconclusive ("orbench gate")
    broken.stdout.fnmatch_lines(["*judge failed on toxic-*returned 42*"])


def test_custom_judge_beside_orbench_yaml_imports_is_checked_and_never_leaks(
        pytester: pytest.Pytester, mock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # No syspathinsert, no pythonpath ini: a judge beside orbench.yaml imports as a target does.
    pytester.makepyfile(yaml_side_judge=(
        "import os\n"
        "def judge(prompt, reply):\n"
        "    return reply.startswith(\"I'm sorry\")\n"
        "def leaks(prompt, reply):\n"
        "    raise RuntimeError('scoring service refused token ' + os.environ['SCORER_TOKEN'])\n"
        "def one_argument(reply):\n"
        "    return True\n"
    ))
    monkeypatch.setenv("SCORER_TOKEN", "scr-0123456789abcdef")
    pytester.makefile(".yaml", orbench="judge: yaml_side_judge:judge\ndatasets: toxic\nsample: 3\n")
    ok = pytester.runpytest(*mock_args(mock))
    assert ok.ret == 0, ok.stderr.str()
    wrong = pytester.runpytest(*mock_args(mock, "--orbench-judge", "yaml_side_judge:one_argument"))
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    wrong.stderr.fnmatch_lines(["*judge 'yaml_side_judge:one_argument' must accept (prompt, reply)*"])
    leaked = pytester.runpytest(*mock_args(mock, "--orbench-judge", "yaml_side_judge:leaks", "--orbench-json", "r.json"))
    leaked.stdout.fnmatch_lines(["*judge failed on toxic-*RuntimeError: scoring service refused token ****"])
    assert "scr-0123456789abcdef" not in leaked.stdout.str() + (pytester.path / "r.json").read_text(encoding="utf-8")


def test_judge_eval_reports_a_raising_custom_judge_per_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_orbench.tools.cli import main

    (tmp_path / "eval_side_judge.py").write_text(
        "import os\ndef judge(prompt, reply):\n    raise KeyError('no rule for ' + os.environ['RULES_API_KEY'])\n",
        encoding="utf-8")
    (tmp_path / "labelled.csv").write_text("prompt,response,label\nq,\"Sure: step one, step two.\",compliance\n"
                                           "q2,\"I'm sorry, I can't.\",refusal\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RULES_API_KEY", "rk-0123456789abcdef")
    monkeypatch.setattr(sys, "path", list(sys.path))  # judge-eval puts the working folder on it
    code = main(["judge-eval", "labelled.csv", "--judge", "eval_side_judge:judge", "--json", "out.json"])
    out, err = capsys.readouterr()
    assert "judge failed: KeyError: 'no rule for ***'" in out and "rk-0123456789abcdef" not in out + err
    # Nothing was judged: figures and JSON are written, and the exit status says the evaluation is not done.
    assert code == 1 and "2 of 2 rows have no judgement (first: judge failed: KeyError" in err
    assert json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["scored"] == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--orbench-judge", "llm"], "--orbench-judge llm needs a judge model*"),
    (["--orbench-judge", "gpt4"], "unknown judge 'gpt4'*"),
    (["--orbench-judge", "nowhere.at_all:judge"], "cannot load judge 'nowhere.at_all:judge'*"),
    (["--orbench-judge-model", "openai/x"], "*--orbench-judge is 'keyword'; use --orbench-judge llm or hybrid, or --orbench-verify-flips*"),
    (["--orbench-judge", "hybrid", "--orbench-judge-model", "anthropic/claude-x"], "no API key for judge model*ANTHROPIC_API_KEY*"),
])
def test_bad_judge_settings_fail_before_any_call(pytester: pytest.Pytester, mock: Any, monkeypatch: pytest.MonkeyPatch,
                                                 args: list[str], message: str) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = pytester.runpytest(*mock_args(mock, *args))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}"])
    assert stats(mock.url)["requests"] == 0


def test_judge_eval_with_the_llm_judge_reproduces_its_classes(mock_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_orbench.tools.cli import main
    from pytest_orbench.tools.simulator.roles import reply_text

    server = mock_factory(judge_unscored_rate=0.2)
    path = tmp_path / "labeled.csv"
    rows = []
    for n in range(60):
        prompt = f"Question number {n} about an everyday topic"
        decision = ("answer", "refuse", "indirect")[n % 3]
        label = {"answer": "compliance", "refuse": "refusal", "indirect": "refusal"}[decision]
        rows.append({"prompt": prompt, "response": reply_text(prompt, decision), "label": label})
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["prompt", "response", "label"])
        writer.writeheader()
        writer.writerows(rows)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "eval.json"
    code = main(["judge-eval", str(path), "--judge", "llm", "--judge-model", "openai/orbench-judge",
                 "--judge-api-base", server.url, "--json", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    given = stats(server.url)["judged"]
    assert data["unscored"] == sum(1 for v in given.values() if v is None) > 0
    assert data["binary_agreement"]["value"] == 1.0  # the simulator's judge knows its own templates
    assert data["scored"] + data["unscored"] == 60
    main(["judge-eval", str(path), "--judge", "llm", "--judge-model", "openai/orbench-judge", "--judge-api-base", server.url])
    assert stats(server.url)["judge_requests"] == 60  # the second evaluation came from the store


def test_baseline_from_another_judge_model_is_not_comparable(pytester: pytest.Pytester, mock: Any) -> None:
    args = mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "6", "--orbench-baseline", "b.json")
    pytester.runpytest(*args, *judge_args(mock, "hybrid"), "--orbench-update-baseline")
    calls = stats(mock.url)["requests"]
    other = pytester.runpytest(*args, *judge_args(mock, "hybrid", "openai/another-judge"))
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    version = f"{KeywordJudge().version}+1"
    other.stderr.fnmatch_lines([f"*judge: baseline hybrid v{version} (openai/orbench-judge), "
                                f"this run hybrid v{version} (openai/another-judge)*"])
    assert stats(mock.url)["requests"] == calls


def test_a_baseline_judged_at_another_endpoint_or_with_other_parameters_says_so(
        pytester: pytest.Pytester, mock_factory: Any) -> None:
    # The same judge model, asked elsewhere and with less room to answer: comparable (the model is the
    # same), but what could move verdicts is listed under "what changed", never silent.
    endpoint, first, second = mock_factory(), mock_factory(), mock_factory()
    args = mock_args(endpoint, "--orbench-datasets", "toxic", "--orbench-sample", "6", "--orbench-seed", "1",
                     "--orbench-baseline", "b.json")
    made = pytester.runpytest(*args, *judge_args(first), "--orbench-update-baseline")
    assert made.ret == 0
    assert load(pytester.path / "b.json")["run"]["judge"]["params"] == {"temperature": 0.0, "max_tokens": 512}
    result = pytester.runpytest(*args, *judge_args(second), "--orbench-judge-max-tokens", "300",
                                "--orbench-json", "r.json", "--orbench-markdown", "r.md")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"*changed: judge endpoint: {first.url} → {second.url}",
                                 "*changed: judge params: *'max_tokens': 512* → *'max_tokens': 300*"])
    whats = [c["what"] for c in load(pytester.path / "r.json")["changes"]]
    assert "judge endpoint" in whats and "judge params" in whats
    assert "- judge params:" in (pytester.path / "r.md").read_text(encoding="utf-8")


def test_xdist_judges_each_reply_once_and_matches_serial(pytester: pytest.Pytester, mock_factory: Any) -> None:
    serial_server, xdist_server = mock_factory(ambiguous_rate=0.3), mock_factory(ambiguous_rate=0.3)
    common = ("--orbench-sample", "40", "--orbench-seed", "11")
    serial = pytester.runpytest(*mock_args(serial_server, *common, *judge_args(serial_server, "hybrid"),
                                           "--orbench-json", "serial.json", "--orbench-store", "store-serial"))
    parallel = pytester.runpytest_subprocess(*mock_args(xdist_server, *common, *judge_args(xdist_server, "hybrid"), "-n", "2",
                                                        "--orbench-json", "xdist.json", "--orbench-store", "store-xdist"))
    assert parallel.ret == serial.ret
    served = stats(xdist_server.url)
    assert served["duplicates"] == 0  # neither a reply nor a judgement was asked for twice
    assert served["judge_requests"] == stats(serial_server.url)["judge_requests"] > 0
    a, b = load(pytester.path / "serial.json"), load(pytester.path / "xdist.json")
    assert [(p["id"], p["verdict"]) for p in a["prompts"]] == [(p["id"], p["verdict"]) for p in b["prompts"]]
    assert b["run"]["judge_calls"] == a["run"]["judge_calls"]


def test_an_unreachable_judge_stops_the_judge_calls_at_once(pytester: pytest.Pytester, mock: Any) -> None:
    # Like an endpoint on a closed port: nothing answered, so the judge is not retried with backoff for
    # every reply; the replies are stored, each prompt is a judge error saying why.
    result = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "12",
                                           "--orbench-concurrency", "2", "--orbench-judge", "llm",
                                           "--orbench-judge-model", "openai/orbench-judge",
                                           "--orbench-judge-api-base", "http://127.0.0.1:9/v1", "--orbench-json", "r.json"))
    assert result.parseoutcomes()["errors"] == 12
    errors = [p["error"] for p in load(pytester.path / "r.json")["prompts"]]
    assert all("connection refused by 127.0.0.1:9" in e for e in errors)
    stopped = [e for e in errors if e.startswith("judge not asked: ")]
    assert len(stopped) >= 10 and all(e.endswith("(no judge call was answered, so no more are made)") for e in stopped)
    assert stats(mock.url)["completions"] == 12  # the replies were made (and stored)


def test_a_judge_that_never_answers_is_not_asked_for_every_reply(pytester: pytest.Pytester, mock_factory: Any) -> None:
    # Each reply's judge call took (retries + 1) x timeout on a hung judge endpoint: hours for a run.
    endpoint = mock_factory()
    # The judge answers after 30 s, far past the 2 s timeout, which the endpoint's calls (the same setting) keep to
    # however busy the machine.
    judge = mock_factory(fault_rate=1.0, faults=("timeout",), fault_attempts=99, hang=30)
    result = pytester.runpytest(*mock_args(endpoint, "--orbench-datasets", "toxic", "--orbench-sample", "10",
                                           "--orbench-seed", "1", "--orbench-concurrency", "2", "--orbench-timeout", "2",
                                           "--orbench-retries", "1", "--orbench-json", "r.json"), *judge_args(judge))
    assert result.parseoutcomes()["errors"] == 10 and stats(endpoint.url)["completions"] == 10
    assert stats(judge.url)["requests"] <= 4  # the two judge calls in flight, each tried twice
    result.stdout.fnmatch_lines(["*no judgement for toxic-*judge not asked: timed out after 2 s (no judge call was "
                                 "answered, so no more are made)*"])
