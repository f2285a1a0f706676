"""No secret of the run in a crash's output, whatever the traceback style; credentials in api_base refused
before any call (litellm cannot send them from the URL); a request the HTTP client refuses is not retried."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from pytest_orbench.calls.errors import describe_failure
from pytest_orbench.core.endpoint import ModelSpec
from pytest_orbench.run.settings import Settings
from tests.conftest import stats

pytestmark = pytest.mark.usefixtures("orbench_env")
SECRETS = ("sk-secret-key-12345", "gw-secret-token-6789", "SECRETQUERY99", "hunter2pass")


def run(pytester: pytest.Pytester, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MYKEYVAR": SECRETS[0], "GATEWAY": SECRETS[1],
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=pytester.path, capture_output=True, text=True,
                          timeout=300, env=env)


def config(pytester: pytest.Pytester, api_base: str) -> None:
    pytester.makefile(".yaml", orbench=f"""
        model: openai/orbench-mock
        api_base: {api_base}
        api_key_env: MYKEYVAR
        litellm_kwargs:
          extra_headers:
            X-Gateway-Token: {{env: GATEWAY}}
    """)


@pytest.mark.parametrize("style", [["--full-trace"], ["-l"], ["--tb=long"], ["--full-trace", "-l"]])
def test_a_crash_shows_no_secret_of_the_run_in_any_traceback_style(pytester: pytest.Pytester, mock: Any,
                                                                   style: list[str]) -> None:
    # A crash inside the plugin, where the settings, the endpoint and the request are locals.
    pytester.makeconftest("""
        import pytest_orbench.fetch.coordinator as coordinator

        def boom(*args, **kwargs):
            raise RuntimeError("boom")

        coordinator.make_plan = boom
    """)
    config(pytester, f"{mock.url}?tenant={SECRETS[2]}")  # a value in the query string (one named like a key is refused)
    result = run(pytester, "--orbench", "--orbench-sample", "5", "--orbench-seed", "1", "-p", "no:cacheprovider", *style)
    out = result.stdout + result.stderr
    assert result.returncode == 3 and "INTERNALERROR" in out and "boom" in out
    if style == ["--full-trace", "-l"]:
        assert "Settings(model='openai/orbench-mock'" in out  # the locals are shown: without their secrets
    for secret in SECRETS:
        assert secret not in out, secret


def test_the_settings_and_an_endpoint_show_no_credentials_in_their_repr() -> None:
    spec = ModelSpec("openai/m", f"https://user:{SECRETS[3]}@gw.example/v1?token={SECRETS[2]}", {}, 30.0, SECRETS[0], "K")
    assert SECRETS[3] not in repr(spec) and SECRETS[2] not in repr(spec) and SECRETS[0] not in repr(spec)
    assert "https://gw.example/v1" in repr(spec)
    fields = {name: None for name in Settings.__dataclass_fields__}
    fields.update(model="openai/m", api_base=f"https://user:{SECRETS[3]}@gw.example/v1", api_key=SECRETS[0],
                  litellm_kwargs={"base_url": f"https://gw.example/v1?tenant={SECRETS[2]}",
                                  "extra_headers": {"X-Token": SECRETS[1]}}, datasets=(), store=".orbench", judge="keyword", temperature=0.0, max_tokens=1,
                  timeout=1.0, retries=0, concurrency=1, refresh=False, offline=False)
    shown = repr(Settings(**fields))
    assert SECRETS[3] not in shown and SECRETS[0] not in shown and "api_base='https://gw.example/v1'" in shown
    assert SECRETS[2] not in shown and SECRETS[1] not in shown and "'base_url': 'https://gw.example/v1'" in shown


def test_credentials_in_api_base_are_a_usage_error_before_any_call(pytester: pytest.Pytester, mock: Any) -> None:
    base = mock.url.replace("http://", f"http://user:{SECRETS[3]}@")
    for args in (["--orbench", "--orbench-model", "openai/orbench-mock", "--orbench-api-base", base],
                 ["--orbench", "--orbench-model", "openai/orbench-mock", "--orbench-judge", "llm",
                  "--orbench-judge-model", "openai/judge", "--orbench-judge-api-base", base]):
        result = run(pytester, *args, "--orbench-sample", "3", "-p", "no:cacheprovider")
        assert result.returncode == 4, result.stderr
        assert "has credentials in it (user:password@)" in result.stderr and "api_key_env" in result.stderr
        assert SECRETS[3] not in result.stdout + result.stderr
    assert stats(mock.url)["requests"] == 0


def test_a_request_the_http_client_refuses_to_build_is_not_retried() -> None:
    try:
        try:
            raise ValueError("Cannot combine AUTHORIZATION header with AUTH argument or credentials encoded in URL")
        except ValueError as inner:
            raise RuntimeError("litellm.APIConnectionError: OpenAIException - Connection error.") from inner
    except RuntimeError as exc:
        failure = describe_failure(exc, "http://127.0.0.1:9/v1", 5)
    assert not failure.retryable and failure.fatal
    assert str(failure).startswith("the request to 127.0.0.1:9 could not be sent (a local error, not the endpoint's)")
