"""Every URL the run will call passes the api_base check wherever it is set, a usage error naming the setting
before any call; a system prompt holding a secret of the run is warned of before any call, without the value."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import load, mock_args, stats

pytestmark = pytest.mark.usefixtures("orbench_env")
SECRET = "Pw9-never-shown-4711"


@pytest.mark.parametrize(("yaml", "env", "message"), [
    ("litellm_kwargs: {{api_base: 'http://user:{secret}@{host}/v1'}}", {},
     "litellm_kwargs.api_base (http://127.0.0.1) has credentials in it (user:password@)"),
    ("litellm_kwargs: {{base_url: '{url}?api-key={secret}'}}", {},
     "litellm_kwargs.base_url (http://127.0.0.1) has a credential in its query string (api-key=...)"),
    ("litellm_kwargs: {{api_base: {{env: GW_URL}}}}", {"GW_URL": "http://user:{secret}@{host}/v1"},
     "litellm_kwargs.api_base ($GW_URL) (http://127.0.0.1) has credentials in it"),
    ("judge: llm\njudge_model: openai/judge\njudge_litellm_kwargs: {{api_base: '{url}?token={secret}'}}", {},
     "judge_litellm_kwargs.api_base (http://127.0.0.1) has a credential in its query string (token=...)"),
    ("judge: llm\njudge_model: openai/judge\njudge_api_base: '{url}?api_key={secret}'", {},
     "--orbench-judge-api-base (judge_api_base: in orbench.yaml) (http://127.0.0.1) has a credential in its query "
     "string (api_key=...)"),
    ("base: {{model: openai/old, api_base: '{url}?key={secret}'}}", {},
     "base.api_base (http://127.0.0.1) has a credential in its query string (key=...)"),
    ("base: {{litellm_kwargs: {{base_url: 'http://user:{secret}@{host}/v1'}}}}", {},
     "base.litellm_kwargs.base_url (http://127.0.0.1) has credentials in it"),
    ("litellm_kwargs: {{extra_body: {{callback: 'https://b.s3.amazonaws.com/h?X-Amz-Signature={secret}'}}}}", {},
     "litellm_kwargs.extra_body.callback (https://b.s3.amazonaws.com) has a credential in its query string "
     "(X-Amz-Signature=...)"),
    ("", {"OPENAI_BASE_URL": "{url}?api-key={secret}"},
     "$OPENAI_BASE_URL, which litellm reads as the endpoint of the model openai/orbench-mock (no api_base is set), "
     "(http://127.0.0.1) has a credential in its query string (api-key=...)"),
])
def test_every_url_the_run_calls_is_checked_wherever_it_is_set(pytester: pytest.Pytester, mock: Any,
                                                               monkeypatch: pytest.MonkeyPatch, yaml: str,
                                                               env: dict[str, str], message: str) -> None:
    # A password or key in any of them landed in run.params of the results and the baseline, the "changed: params"
    # line, and (echoed by a gateway's 404) every report.
    host = mock.url.split("//")[1].split("/")[0]
    fill = {"secret": SECRET, "host": host, "url": mock.url}
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(**fill))
    api_base = "" if "OPENAI_BASE_URL" in env else f"api_base: {mock.url}\n"  # (the variable: read without one)
    pytester.makefile(".yaml", orbench=f"model: openai/orbench-mock\n{api_base}" + yaml.format(**fill))
    result = pytester.runpytest("--orbench", "--orbench-sample", "3", "--orbench-datasets", "toxic", "-p",
                                "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([f"*{message}*"])
    assert SECRET not in result.stdout.str() + result.stderr.str()
    assert stats(mock.url)["requests"] == 0


def test_a_system_prompt_holding_a_secret_of_the_run_is_warned_of_before_any_call(pytester: pytest.Pytester,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY", "gw-header-value-31337")
    pytester.makefile(".yaml", orbench="""
        model: openai/orbench-mock
        api_base: http://127.0.0.1:9/v1
        system_prompt: "You are helpful. Internal note: SK-TEST-NOT-A-REAL-KEY"
        litellm_kwargs: {extra_headers: {X-Gateway: {env: GATEWAY}}}
        base:
          system_prompt: "Old prompt; gateway gw-header-value-31337."
    """)
    result = pytester.runpytest("--orbench", "--orbench-datasets", "toxic", "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stderr.fnmatch_lines([
        "orbench: warning: the system prompt (inline) holds the value of $OPENAI_API_KEY, a secret of this run: it is "
        "sent to the endpoint with every prompt*take it out of the system prompt*",
        "orbench: warning: the live base's system prompt (base: inline) holds the value of $GATEWAY, a secret*",
    ])
    out = result.stdout.str() + result.stderr.str()
    assert "sk-test-not-a-real-key" not in out.lower() and "gw-header-value-31337" not in out  # never the value
    pytester.makefile(".yaml", orbench="model: openai/orbench-mock\napi_base: http://127.0.0.1:9/v1\n"
                                       "system_prompt: Be helpful.\n")
    quiet = pytester.runpytest("--orbench", "--orbench-datasets", "toxic", "--collect-only", "-p", "no:cacheprovider")
    assert "warning" not in quiet.stderr.str()


def test_no_value_of_a_url_anywhere_in_litellm_kwargs_reaches_a_report(pytester: pytest.Pytester, mock: Any) -> None:
    # A fallback's endpoint (in a list) and a callback URL (under another name): their query values were kept whole in
    # run.params, so on the "changed: params" line, in the results JSON, the Markdown, the HTML page and the baseline.
    value = "tenant-Zq8v2KpL9w"
    common = mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "3", "--orbench-baseline", "b.json")
    assert pytester.runpytest(*common, "--orbench-update-baseline").ret == pytest.ExitCode.OK
    pytester.makefile(".yaml", orbench=f"""
        litellm_kwargs:
          fallbacks:
            - api_base: "{mock.url}?tenant={value}"
          extra_body:
            callback: "https://hook.example/x?tenant={value}"
    """)
    result = pytester.runpytest(*common, "--orbench-json", "r.json", "--orbench-markdown", "r.md", "--orbench-html",
                                "r.html")
    assert (pytester.path / "r.json").is_file(), result.stdout.str()
    result.stdout.fnmatch_lines(["*changed: params*'callback': 'https://hook.example/x'*"])
    updated = pytester.runpytest(*mock_args(mock, "--orbench-datasets", "toxic", "--orbench-sample", "3",
                                            "--orbench-baseline", "b2.json", "--orbench-update-baseline"))
    assert updated.ret == pytest.ExitCode.OK, updated.stdout.str()
    written = {name: (pytester.path / name).read_text(encoding="utf-8") for name in ("r.json", "r.md", "r.html", "b2.json")}
    outputs = {**written, "terminal": result.stdout.str() + result.stderr.str(), "update": updated.stdout.str()}
    assert [name for name, text in outputs.items() if value in text] == []
    assert load(pytester.path / "b2.json")["run"]["params"]["fallbacks"] == [{"api_base": mock.url}]
