"""Settings: precedence, validation errors that name the fix, and an installed-but-off plugin costing nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")


def usage_error(result: pytest.RunResult, *patterns: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([f"*{p}*" for p in patterns])


def test_disabled_plugin_collects_nothing_and_imports_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    code = (
        "import sys, pytest\n"
        "ret = pytest.main(['-q', '-p', 'no:cacheprovider'])\n"
        "heavy = [m for m in ('litellm', 'pytest_orbench.calls.client', 'pytest_orbench.calls.litellm_api', 'pytest_orbench.runner', 'scipy', 'yaml',\n"
        "                     'pytest_orbench.run.settings', 'pytest_orbench.analysis.gate', 'pytest_orbench.analysis.baseline') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
        "sys.exit(ret)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert "HEAVY []" in proc.stdout


def test_precedence_cli_over_yaml_over_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\norbench_model = openai/from-ini\norbench_datasets = toxic\n")
    header = ["--orbench", "--collect-only", "-q", "-p", "no:cacheprovider"]
    assert "openai/from-ini" in pytester.runpytest(*header, "-v").stdout.str()
    pytester.makefile(".yaml", orbench="model: openai/from-yaml\n")
    result = pytester.runpytest(*header, "-v")
    assert "openai/from-yaml" in result.stdout.str() and "openai/from-ini" not in result.stdout.str()
    result = pytester.runpytest(*header, "-v", "--orbench-model", "openai/from-cli")
    assert "openai/from-cli" in result.stdout.str() and "openai/from-yaml" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*655 tests collected*"])  # datasets still from the ini


def test_gate_settings_follow_the_documented_precedence(pytester: pytest.Pytester) -> None:
    from pytest_orbench.run.setting_build import build_settings

    # Once the ini's orbench_alpha beat orbench.yaml's gate: {alpha: ...}, against "orbench.yaml > ini".
    pytester.makeini("[pytest]\norbench_alpha = 0.1\norbench_tolerance_pp = 3\n")
    pytester.makefile(".yaml", orbench="model: openai/x\ngate: {alpha: 0.2}\n")
    gate = build_settings(pytester.parseconfig("--orbench")).gate
    assert (gate.alpha, gate.tolerance_pp) == (0.2, 3.0)  # yaml over ini; the ini where yaml says nothing
    assert build_settings(pytester.parseconfig("--orbench", "--orbench-alpha", "0.3")).gate.alpha == 0.3


def test_pyproject_values_keep_their_toml_types(pytester: pytest.Pytester) -> None:
    from pytest_orbench.run.setting_build import build_settings

    # Once a TOML list under [tool.pytest.ini_options] (the natural `orbench_datasets = [...]`) went to a
    # 'string' ini option: pytest 9.2 warned that pytest 10 refuses it, and under filterwarnings = error
    # (this suite's own setting) the run died with an INTERNALERROR. An ini file's lines work too.
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\norbench_model = "openai/x"\n'
                               'orbench_datasets = ["toxic", "xstest-safe"]\norbench_sample = 5\n')
    settings = build_settings(pytester.parseconfig("--orbench"))
    assert ([d.name for d in settings.datasets], settings.sample) == (["toxic", "xstest-safe"], 5)
    (pytester.path / "pyproject.toml").unlink()
    pytester.makeini("[pytest]\norbench_model = openai/x\norbench_datasets =\n    toxic\n    hard-1k,xstest-safe\n")
    assert [d.name for d in build_settings(pytester.parseconfig("--orbench")).datasets] == ["toxic", "hard-1k", "xstest-safe"]


@pytest.mark.skipif(pytest.version_tuple < (9, 2), reason="[tool.pytest] with native TOML types and union ini types: pytest 9.2")
def test_native_toml_table_takes_numbers_and_booleans(pytester: pytest.Pytester) -> None:
    from pytest_orbench.run.setting_build import build_settings

    # pytest 9's [tool.pytest] table keeps TOML's types: `orbench_sample = 20` was refused as
    # "expects a string, got int", though the settings reference offers every key there.
    pytester.makepyprojecttoml('[tool.pytest]\norbench_model = "openai/x"\norbench_sample = 20\norbench_seed = 1\n'
                               'orbench_alpha = 0.1\norbench_tolerance_pp = 2\norbench_offline = true\n'
                               'orbench_datasets = ["toxic"]\n')
    settings = build_settings(pytester.parseconfig("--orbench"))
    assert (settings.sample, settings.seed, settings.gate.alpha, settings.gate.tolerance_pp, settings.offline) == (20, 1, 0.1, 2.0, True)
    assert [d.name for d in settings.datasets] == ["toxic"]
    pytester.makepyprojecttoml('[tool.pytest]\norbench_model = "openai/x"\norbench_sample = "many"\n')
    usage_error(pytester.runpytest("--orbench", "--collect-only"), "ini option 'orbench_sample' must be int, got 'many'")


def test_unknown_yaml_key_suggests_the_right_one(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", orbench="model: openai/x\nconcurency: 8\n")
    usage_error(pytester.runpytest("--orbench"), "unknown key 'concurency' in *orbench.yaml: did you mean 'concurrency'?")


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("model: openai/x\nconcurrency: eight\n", "'concurrency' must be an integer, got 'eight'"),
    ("model: openai/x\ntemperature: hot\n", "'temperature' must be a number"),
    ("model: openai/x\nrefresh: 1\n", "'refresh' must be true or false"),
    ("model: openai/x\nlitellm_kwargs: [1]\n", "'litellm_kwargs' must be a mapping"),
    ("model: openai/x\nlitellm_kwargs: {api_key: sk-abc}\n", "litellm_kwargs.api_key looks like a secret"),
    ("- just\n- a list\n", "must be a mapping of settings"),
    ("model: [unclosed\n", "is not valid YAML"),
    ("model: openai/x\ntarget: app:f\n", "both a model and a target are set"),
    ("datasets: toxic\n", "set exactly one endpoint"),
    ("model: openai/x\ndatasets: hard-1k,nope\n", "unknown dataset 'nope'"),
    ("model: openai/x\nconcurrency: 0\n", "concurrency must be at least 1"),
    # Once accepted: an infinite timeout failed every call as "cannot connect to ...: cannot convert float
    # infinity to integer"; a nan max_cost passed every comparison, so no call was ever stopped by it.
    ("model: openai/x\ntimeout: .inf\n", "orbench.yaml key 'timeout' must be a finite number, got inf"),
    ("model: openai/x\nmax_cost: .nan\n", "orbench.yaml key 'max_cost' must be a finite number, got nan"),
    ("model: openai/x\nbase: {temperature: .nan}\n", "base: key 'temperature' must be a finite number, got nan"),
    ("model: openai/x\nsystem_prompt: hi\nsystem_prompt_file: s.txt\n", "both system_prompt and system_prompt_file"),
    ("model: openai/x\njudge: gpt4\n", "unknown judge 'gpt4'"),
    # Once accepted (undocumented): every run rewrote the baseline and, updating, compared with nothing (ungated).
    ("model: openai/x\nbaseline: b.json\nupdate_baseline: true\n",
     "update_baseline in *orbench.yaml: the baseline is rewritten only on request; pass --orbench-update-baseline"),
])
def test_bad_settings_are_usage_errors(pytester: pytest.Pytester, yaml_text: str, message: str) -> None:
    pytester.makefile(".yaml", orbench=yaml_text)
    usage_error(pytester.runpytest("--orbench"), message)


def test_bad_cli_values(pytester: pytest.Pytester) -> None:
    usage_error(pytester.runpytest("--orbench", "--orbench-model", "openai/x", "--orbench-concurrency", "many"),
                "--orbench-concurrency must be int, got 'many'")
    usage_error(pytester.runpytest("--orbench", "--orbench-model", "openai/x", "--orbench-timeout", "nan"),
                "--orbench-timeout must be a finite number, got 'nan'")
    usage_error(pytester.runpytest("--orbench", "--orbench-model", "openai/x", "--orbench-offline", "--orbench-refresh"),
                "contradict each other")
    usage_error(pytester.runpytest("--orbench", "--orbench-config", "missing.yaml"), "--orbench-config missing.yaml: no such file")
    # Once accepted, and printed raw by `orbench label` (a window title set, the screen cleared).
    usage_error(pytester.runpytest("--orbench", "--orbench-model", "openai/\x1b]0;owned\x07\x1b[2Jx"),
                "--orbench-model 'openai/?U+001B?]0;owned?U+0007??U+001B??2Jx' holds control or invisible characters*")


def test_missing_api_key_fails_before_any_call(pytester: pytest.Pytester, mock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    result = pytester.runpytest(*mock_args(mock))
    usage_error(result, "no API key for model 'openai/orbench-mock': set OPENAI_API_KEY*")
    usage_error(pytester.runpytest(*mock_args(mock, "--orbench-api-key-env", "MY_KEY")), "api_key_env names $MY_KEY, which is not set*")
    assert stats(mock.url)["requests"] == 0
    # Offline needs no key: nothing will be called.
    assert pytester.runpytest(*mock_args(mock, "--orbench-offline", "--collect-only")).ret == 0


def test_an_estimate_needs_no_key_but_a_model_string_that_names_a_provider(pytester: pytest.Pytester, mock: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # --orbench-estimate calls nothing: it once refused to run without the keys the calls would need (the
    # model's, the judge's, the live base's, a variable litellm_kwargs name), before anyone had decided to pay.
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    pytester.makefile(".yaml", orbench="judge_litellm_kwargs:\n  api_key: {env: UNSET_JUDGE_KEY}\n")
    args = mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "3", "--orbench-judge", "hybrid",
                     "--orbench-judge-model", "anthropic/claude-3-5-haiku-20241022", "--orbench-base-model", "openai/other",
                     "--orbench-base-api-base", mock.url, "--orbench-api-key-env", "UNSET_MODEL_KEY")
    estimate = pytester.runpytest(*args, "--orbench-estimate")
    assert estimate.ret == pytest.ExitCode.OK, estimate.stdout.str() + estimate.stderr.str()
    estimate.stdout.fnmatch_lines(["orbench estimate (no call made;*", "  endpoint openai/orbench-mock: 3 calls*",
                                   "  live base openai/other: 3 calls*", "  judge anthropic/claude-3-5-haiku-20241022:*"])
    usage_error(pytester.runpytest(*args), "api_key_env names $UNSET_MODEL_KEY, which is not set*")  # the run needs them
    # What an estimate can still tell without a key is still told before it: a model litellm cannot route.
    usage_error(pytester.runpytest("--orbench", "--orbench-model", "nonsense-model", "--orbench-estimate"),
                "model 'nonsense-model': litellm cannot tell which provider serves it*")
    assert stats(mock.url)["requests"] == 0


def test_unreadable_system_prompt_file(pytester: pytest.Pytester, mock: Any) -> None:
    usage_error(pytester.runpytest(*mock_args(mock, "--orbench-system-prompt-file", "nope.txt")),
                "--orbench-system-prompt-file nope.txt: cannot read it (No such file or directory)")
    pytester.path.joinpath("bad.txt").write_bytes(b"\xff\xfe\x00bad")
    usage_error(pytester.runpytest(*mock_args(mock, "--orbench-system-prompt-file", "bad.txt")), "cannot read it (not UTF-8 text)")
    assert stats(mock.url)["requests"] == 0


def test_a_system_prompt_under_a_key_of_a_config_file(pytester: pytest.Pytester, mock: Any) -> None:
    # Teams keep the prompt in their app's config: sent whole, the YAML's other keys were part of the system
    # prompt, and a change of its temperature was reported as a system-prompt change.
    import hashlib

    pytester.mkdir("config").joinpath("bot.yaml").write_text(
        "temperature: 0\nprompts:\n  support: You are a support assistant.\n", encoding="utf-8")
    usage_error(pytester.runpytest(*mock_args(mock, "--orbench-system-prompt-file", "config/bot.yaml")),
                "--orbench-system-prompt-file config/bot.yaml: config/bot.yaml is a YAML file, and sent whole its other "
                "keys would be part of the system prompt: name the key that holds the prompt*")
    usage_error(pytester.runpytest(*mock_args(mock, "--orbench-system-prompt-file", "config/bot.yaml#prompts.sales")),
                "*config/bot.yaml has no 'prompts.sales'*")
    assert stats(mock.url)["requests"] == 0
    sha = hashlib.sha256(b"You are a support assistant.").hexdigest()[:12]
    pytester.makefile(".yaml", orbench="system_prompt_file: config/bot.yaml#prompts.support\n")
    result = pytester.runpytest(*mock_args(mock, "--collect-only"))
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines([f"*system prompt {sha} (config/bot.yaml#prompts.support)*"])


def test_yaml_paths_are_relative_to_the_yaml_file(pytester: pytest.Pytester) -> None:
    conf = pytester.mkdir("conf")
    conf.joinpath("system.txt").write_text("Be careful.", encoding="utf-8")
    conf.joinpath("orbench.yaml").write_text("model: openai/x\nsystem_prompt_file: system.txt\ndatasets: toxic\n", encoding="utf-8")
    result = pytester.runpytest("--orbench", "--orbench-config", "conf/orbench.yaml", "--collect-only", "-v")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*system prompt * (system.txt)*"])


def test_seed_is_printed_and_reproduces_the_sample(pytester: pytest.Pytester) -> None:
    args = ("--orbench", "--orbench-model", "openai/x", "--orbench-sample", "20", "--collect-only")
    first = pytester.runpytest(*args)
    seed = next(line for line in first.stdout.lines if line.startswith("orbench:")).split("seed ")[1].split(" ")[0]
    again = pytester.runpytest(*args, "--orbench-seed", seed)
    items = [line.strip() for line in first.stdout.lines if "<PromptItem" in line]
    assert len(items) == 40  # 20 per dataset
    assert items == [line.strip() for line in again.stdout.lines if "<PromptItem" in line]
    other = pytester.runpytest(*args, "--orbench-seed", str(int(seed) + 1))
    assert items != [line.strip() for line in other.stdout.lines if "<PromptItem" in line]


@pytest.mark.parametrize(("text", "seconds"), [
    ("7d", 7 * 86400), ("12h", 43200), ("30m", 1800), ("45s", 45), ("0", 0), ("never", None), ("1.5h", 5400), ("2w", 14 * 86400),
])
def test_store_max_age(text: str, seconds: float | None) -> None:
    from pytest_orbench.core.durations import format_age, parse_age

    assert parse_age(text) == seconds
    if seconds is not None and seconds:
        assert parse_age(format_age(seconds)) == seconds


@pytest.mark.parametrize("text", ["7 days", "-1d", "soon", ""])
def test_store_max_age_errors_name_the_forms(text: str) -> None:
    from pytest_orbench.core.durations import parse_age

    with pytest.raises(ValueError, match="7d, 12h, 30m, 45s"):
        parse_age(text)


@pytest.mark.parametrize("value", [7, "7", "1.5"])
def test_an_age_without_a_unit_is_refused_not_taken_as_seconds(value: Any) -> None:
    # `store_max_age: 7` in orbench.yaml was 7 seconds: every reply asked, and paid for, again.
    from pytest_orbench.core.durations import parse_age

    with pytest.raises(ValueError, match=rf"^--orbench-store-max-age '?{value}'? has no unit: write {value}d, {value}h, "
                                         rf"{value}m or {value}s \(0 always asks again; never: no limit\)$"):
        parse_age(value)


@pytest.mark.parametrize(("kwargs", "path"), [
    ({"extra_headers": {"Authorization": "Bearer abc123def456ghi"}}, "litellm_kwargs.extra_headers.Authorization"),
    ({"extra_headers": {"X-Api-Key": "plain"}}, "litellm_kwargs.extra_headers.X-Api-Key"),
    ({"extra_headers": {"X-Team": "sk-proj-abcdefghijklmnopqrstuv"}}, "litellm_kwargs.extra_headers.X-Team"),
    ({"metadata": {"tags": ["ok", "ghp_abcdefghijklmnopqrstuvwxyz012345"]}}, "litellm_kwargs.metadata.tags[1]"),
    ({"default_headers": {"Cookie": "session=1"}}, "litellm_kwargs.default_headers.Cookie"),
])
def test_literal_credentials_anywhere_in_kwargs_are_found(kwargs: dict[str, Any], path: str) -> None:
    from pytest_orbench.core.endpoint import literal_secrets

    assert literal_secrets(kwargs, "litellm_kwargs") == [path]


def test_env_references_and_plain_headers_are_not_secrets_and_never_public() -> None:
    from pytest_orbench.core.endpoint import ModelSpec, literal_secrets, public_kwargs
    from pytest_orbench.core.store import response_key

    kwargs = {"extra_headers": {"Authorization": {"env": "GATEWAY_TOKEN"}, "X-Team": "search"}, "top_p": 0.5}
    assert literal_secrets(kwargs, "litellm_kwargs") == []
    assert public_kwargs(kwargs) == {"extra_headers": ["Authorization", "X-Team"], "top_p": 0.5}
    spec = ModelSpec("openai/m", params=public_kwargs(kwargs), call_kwargs=kwargs)
    import os

    os.environ["GATEWAY_TOKEN"] = "tok-123456"
    try:
        sent = spec.request_kwargs()
    finally:
        del os.environ["GATEWAY_TOKEN"]
    assert sent["extra_headers"] == {"Authorization": "tok-123456", "X-Team": "search"} and sent["top_p"] == 0.5
    assert "tok-123456" not in repr(spec)
    # Values read from the environment are not part of the key (a rotated token asks nothing again); values
    # written in the settings are, hashed (a routing header can change the reply); names always are.
    rotated = {**kwargs, "extra_headers": {"Authorization": {"env": "OTHER"}, "X-Team": "search"}}
    assert ModelSpec("openai/m", params=public_kwargs(rotated), call_kwargs=rotated).key(prompt="p") == spec.key(prompt="p")
    routed = {**kwargs, "extra_headers": {"Authorization": {"env": "GATEWAY_TOKEN"}, "X-Team": "billing"}}
    assert ModelSpec("openai/m", params=public_kwargs(routed), call_kwargs=routed).key(prompt="p") != spec.key(prompt="p")
    assert "billing" not in json.dumps(public_kwargs(routed))  # hashed into the key, never stored or shown
    renamed = {**kwargs, "extra_headers": {"X-Other": "search"}}
    assert ModelSpec("openai/m", params=public_kwargs(renamed)).key(prompt="p") != spec.key(prompt="p")
    # Settings without written header values keep the keys they had (no store is emptied by this).
    plain = ModelSpec("openai/m", params={"top_p": 0.5})
    assert plain.key(prompt="p") == response_key({"model": "openai/m", "api_base": None, "params": {"top_p": 0.5},
                                                  "prompt": "p"})


@pytest.mark.parametrize(("args", "message"), [
    (["--orbench-json", "out"], "--orbench-json *out is a folder: give the path of a file to write*"),
    (["--orbench-markdown", "out"], "--orbench-markdown *out is a folder*"),
    (["--orbench-svg", "notes.txt/chart.svg"], "--orbench-svg *chart.svg: *notes.txt is a file, not a folder*"),
    (["--orbench-json", "r.json", "--orbench-junit", "r.json"],
     "--orbench-json and --orbench-junit both name *r.json: the second would replace the first*"),
    (["--orbench-baseline", "b.json", "--orbench-json", "b.json"],
     "--orbench-json *b.json is the input file given as --orbench-baseline: writing it would replace that file*"),
    (["--orbench-system-prompt-file", "notes.txt", "--orbench-markdown", "notes.txt"],
     "*is the input file given as --orbench-system-prompt-file*"),
    (["--orbench-baseline", "out", "--orbench-update-baseline"], "--orbench-baseline (--orbench-update-baseline) *out is a folder*"),
    (["--orbench-baseline", "results.json", "--orbench-update-baseline"],
     "--orbench-update-baseline would replace *results.json, which is a results file (--orbench-json): give the baseline's own path*"),
    (["--orbench-baseline", "notes.txt", "--orbench-update-baseline"], "*notes.txt, which is not a pytest-orbench baseline*"),
    (["--orbench-store", "notes.txt"], "--orbench-store *notes.txt is a file: the response store is a folder*"),
])
def test_files_the_run_would_write_are_checked_before_any_call(pytester: pytest.Pytester, mock: Any,
                                                               args: list[str], message: str) -> None:
    # Once: a traceback (or INTERNALERROR) after every call was paid for, or a results file, a config or the
    # baseline silently replaced.
    pytester.mkdir("out")
    pytester.path.joinpath("notes.txt").write_text("Be brief.", encoding="utf-8")
    results = '{"schema": "pytest-orbench/results", "prompts": []}\n'
    pytester.path.joinpath("results.json").write_text(results, encoding="utf-8")
    pytester.path.joinpath("b.json").write_text('{"schema": "pytest-orbench/baseline"}', encoding="utf-8")
    result = pytester.runpytest(*mock_args(mock, "--orbench-sample", "2", *args))
    usage_error(result, message)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert stats(mock.url)["requests"] == 0
    assert pytester.path.joinpath("results.json").read_text(encoding="utf-8") == results
    assert pytester.path.joinpath("notes.txt").read_text(encoding="utf-8") == "Be brief."


def test_a_damaged_baseline_is_still_replaced_on_request(pytester: pytest.Pytester, mock: Any) -> None:
    conflicted = '<<<<<<< HEAD\n{"schema": "pytest-orbench/baseline", "prompts": [\n=======\n>>>>>>> main\n'
    pytester.path.joinpath("b.json").write_text(conflicted, encoding="utf-8")
    args = ("--orbench-datasets", "toxic", "--orbench-sample", "3", "--orbench-seed", "1")
    assert pytester.runpytest(*mock_args(mock, *args, "--orbench-baseline", "b.json", "--orbench-update-baseline")).ret == 0
    assert '"schema": "pytest-orbench/baseline"' in pytester.path.joinpath("b.json").read_text(encoding="utf-8")


def test_the_node_id_the_docs_show_selects_its_test(pytester: pytest.Pytester) -> None:
    import re

    from tests.conftest import REPO

    # Once the docs (and the error for an unknown id) showed orbench/hard-1k::privacy-0042, which is no test.
    documented = re.findall(r"pytest --orbench (orbench/\S+::\S+)", (REPO / "docs" / "settings.md").read_text(encoding="utf-8"))
    assert documented
    for node_id in documented:
        result = pytester.runpytest("--orbench", "--orbench-model", "openai/x", "-p", "no:cacheprovider", "--collect-only",
                                    "-q", node_id)
        assert result.ret == 0, result.stderr.str()
        result.stdout.fnmatch_lines([node_id, "1/* tests collected*"])


def test_a_live_base_sent_elsewhere_than_the_run_is_refused_unless_said(pytester: pytest.Pytester,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The run is served at a local api_base; the base names another model of the same provider and no
    # api_base, so its calls went to OpenAI's public API (paid, or a 404 for a local model's name).
    for var in ("OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(var, raising=False)
    head = ["--orbench", "--orbench-model=openai/new", "--orbench-api-base=http://127.0.0.1:8000/v1?k=pw-in-the-query",
            "--orbench-datasets=toxic", "--orbench-sample=2", "--orbench-seed=1", "--collect-only", "-p", "no:cacheprovider"]
    refused = pytester.runpytest(*head, "--orbench-base-model=openai/old")
    usage_error(refused, "the live base openai/old has no api_base of its own, so its calls would go to openai's own "
                         "API while the run's go to 127.0.0.1:8000 (api_base): set --orbench-base-api-base=URL "
                         "(base.api_base in orbench.yaml) to where openai/old is served, e.g. "
                         "--orbench-base-api-base=http://127.0.0.1:8000/v1, or --orbench-base-api-base= (base: "
                         "{api_base: null}) to send the base's calls to openai's default endpoint on purpose")
    assert "pw-in-the-query" not in refused.stdout.str() + refused.stderr.str()
    # Said explicitly (a head behind a proxy, the base at the provider), the run says where each side goes.
    for said in (["--orbench-base-model=openai/old", "--orbench-base-api-base="],
                 ["--orbench-base-model=openai/old", "--orbench-base-api-base=https://gw.example/v1"]):
        result = pytester.runpytest(*head, *said)
        assert result.ret == pytest.ExitCode.OK, result.stderr.str()
        where = "gw.example" if said[-1].endswith("/v1") else "openai's own API"
        result.stdout.fnmatch_lines([f"orbench: openai/new | *| live base openai/old, system prompt none | calls to "
                                     f"127.0.0.1:8000 (run), {where} (live base) | *"])
    (pytester.path / "orbench.yaml").write_text("base: {model: openai/old, api_base: null}\n", encoding="utf-8")
    assert pytester.runpytest(*head).ret == pytest.ExitCode.OK
    # The provider's base URL variable naming the run's own server by another loopback name: one server.
    (pytester.path / "orbench.yaml").unlink()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    assert pytester.runpytest(*head, "--orbench-base-model=openai/old").ret == pytest.ExitCode.OK
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8001/v1")  # another port: another server
    assert pytester.runpytest(*head, "--orbench-base-model=openai/old").ret == pytest.ExitCode.USAGE_ERROR
    monkeypatch.delenv("OPENAI_BASE_URL")
    # Another provider has its own endpoint: not refused.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
    assert pytester.runpytest(*head, "--orbench-base-model=anthropic/claude-x").ret == pytest.ExitCode.OK


def test_a_live_base_whose_endpoint_is_in_its_litellm_kwargs_is_not_refused(pytester: pytest.Pytester,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # litellm.acompletion takes the endpoint as api_base= or base_url= among the kwargs: a base that names its own
    # there is not sent to the provider, and the header says where its calls go.
    for var in ("OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("BASE_GATEWAY", "http://10.0.0.7:9000/v1")
    head = ["--orbench", "--orbench-model=openai/new", "--orbench-api-base=http://127.0.0.1:8000/v1",
            "--orbench-datasets=toxic", "--orbench-sample=2", "--orbench-seed=1", "--collect-only", "-p", "no:cacheprovider"]
    for kwargs, where in (("{api_base: 'http://127.0.0.1:8001/v1'}", "127.0.0.1:8001"),
                          ("{base_url: {env: BASE_GATEWAY}}", "10.0.0.7:9000")):
        (pytester.path / "orbench.yaml").write_text(f"base: {{model: openai/old, litellm_kwargs: {kwargs}}}\n",
                                                    encoding="utf-8")
        result = pytester.runpytest(*head)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
        result.stdout.fnmatch_lines([f"*| calls to 127.0.0.1:8000 (run), {where} (live base) |*"])


@pytest.mark.parametrize(("flag", "url", "message"), [
    ("--orbench-api-base", "http://127.0.0.1:/v1",
     "--orbench-api-base (api_base: in orbench.yaml) (http://127.0.0.1:) has ':' and no port after it, which would call "
     "port 80: give the port, or leave the ':' out"),
    ("--orbench-api-base", "https://gw.example:80a/v1?tenant=s3cret",
     "--orbench-api-base (api_base: in orbench.yaml) (https://gw.example:...) has a port that is not a number*"),
    ("--orbench-api-base", "localhost:8000/v1",
     "--orbench-api-base (api_base: in orbench.yaml) is not an http:// or https:// URL with a host: write it as "
     "http://HOST:PORT/v1"),
    ("--orbench-base-api-base", "http://[::1]:/v1", "--orbench-base-api-base (http://::1:) has ':' and no port after it*"),
])
def test_an_api_base_that_cannot_be_called_as_written_is_a_usage_error(pytester: pytest.Pytester, flag: str, url: str,
                                                                      message: str) -> None:
    # http://127.0.0.1:/v1 (a port left out of a template) dialled port 80 and reported its connection errors.
    args = ["--orbench", "--orbench-model=openai/m", "--orbench-datasets=toxic", "--collect-only", "-p", "no:cacheprovider"]
    if flag == "--orbench-base-api-base":
        args += ["--orbench-api-base=http://127.0.0.1:8000/v1", "--orbench-base-model=openai/old"]
    result = pytester.runpytest(*args, f"{flag}={url}")
    usage_error(result, message)
    assert "s3cret" not in result.stderr.str() and "pw@" not in result.stderr.str()
