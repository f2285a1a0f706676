"""Every URL an endpoint is called at passes one check (no user:password@, no key in the query string), wherever it
is set; the values in URLs are secrets the run scrubs, whatever the case or the whitespace an echo gives them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_orbench.calls.scrubbing import hide, secrets_of
from pytest_orbench.core.endpoint import ModelSpec, public_kwargs, secret_problem, shown_params, unshown_key_fields
from pytest_orbench.core.urls import api_base_problem, url_secrets

SECRET = "Zq7secretvalue42"


@pytest.mark.parametrize(("url", "name"), [
    (f"https://gw.example/v1?api-key={SECRET}", "api-key"),
    (f"https://gw.example/v1?api_key={SECRET}", "api_key"),
    (f"https://gw.example/v1?api-version=2024-06-01&key={SECRET}", "key"),
    (f"https://gw.example/v1?access_token={SECRET}", "access_token"),
    (f"https://store.example/v1?sv=2024&sig={SECRET}", "sig"),
    (f"https://func.example/api?code={SECRET}", "code"),
    (f"https://gw.example/v1?X%2DAPI%2DKey={SECRET}", "X-API-Key"),
    (f"https://gw.example/v1?jwt={SECRET}", "jwt"),
    # A signed URL's signature and credentials: a word of the name, not the whole name.
    (f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature={SECRET}", "X-Amz-Signature"),
    (f"https://storage.googleapis.com/b/k?X-Goog-Signature={SECRET}", "X-Goog-Signature"),
    (f"https://b.s3.amazonaws.com/k?X-Amz-Credential={SECRET}", "X-Amz-Credential"),
    (f"https://b.s3.amazonaws.com/k?X-Amz-Security-Token={SECRET}", "X-Amz-Security-Token"),
    (f"https://cdn.example/k?Expires=1&Signature={SECRET}", "Signature"),
    (f"https://gw.example/v1?urlSig={SECRET}", "urlSig"),
    (f"https://gw.example/v1?x_pw={SECRET}", "x_pw"),
])
def test_a_key_in_the_query_string_is_refused_saying_where_keys_go(url: str, name: str) -> None:
    problem = api_base_problem(url)
    assert problem is not None and SECRET not in problem
    assert f"has a credential in its query string ({name}=...)" in problem
    assert "api_key_env" in problem and f"{{extra_headers: {{{name}: {{env: VAR}}}}}}" in problem


def test_a_key_in_the_path_is_refused() -> None:
    problem = api_base_problem("https://gw.example/sk-proj-0123456789abcdefXYZ/v1")
    assert problem is not None and "has what looks like a key in its path or query" in problem
    assert "0123456789abcdef" not in problem


@pytest.mark.parametrize("url", ["https://gw.example/v1?api-version=2024-06-01", "https://gw.example/v1?tenant=team-a",
                                 "http://127.0.0.1:8000/v1", "https://gw.example/v1?design=a&country_code=fr&X-Amz-Date=1"])
def test_a_query_without_credentials_is_accepted(url: str) -> None:
    assert api_base_problem(url) is None


@pytest.mark.parametrize(("kwargs", "where"), [
    ({"api_base": f"http://user:{SECRET}@gw.example/v1"}, "litellm_kwargs.api_base (http://gw.example) has credentials"),
    ({"base_url": f"https://gw.example/v1?api-key={SECRET}"}, "litellm_kwargs.base_url (https://gw.example) has a "
                                                               "credential in its query string (api-key=...)"),
    ({"api_base": {"env": "ORBENCH_TEST_BASE"}}, "litellm_kwargs.api_base ($ORBENCH_TEST_BASE) (https://gw.example) "
                                                 "has a credential in its query string (token=...)"),
    ({"extra_body": {"callback": f"https://hook.example/x?sig={SECRET}"}},
     "litellm_kwargs.extra_body.callback (https://hook.example) has a credential in its query string (sig=...)"),
    ({"api_base": "gw.example:8000/v1"}, "litellm_kwargs.api_base is not an http:// or https:// URL with a host"),
    ({"fallbacks": [{"api_base": f"https://gw.example/v1?X-Amz-Signature={SECRET}"}]},
     "litellm_kwargs.fallbacks[0].api_base (https://gw.example) has a credential in its query string "
     "(X-Amz-Signature=...)"),
    ({"extra_body": {"note": f"post it to https://hook.example/x?X-Goog-Signature={SECRET}, then stop"}},
     "litellm_kwargs.extra_body.note (https://hook.example) has a credential in its query string (X-Goog-Signature=...)"),
    ({"extra_body": {"upload": f"https%3A%2F%2Fbucket.example%2Fk%3FX-Amz-Signature%3D{SECRET}"}},
     "litellm_kwargs.extra_body.upload (https://bucket.example) has a credential in its query string "
     "(X-Amz-Signature=...)"),
    ({"extra_body": {"upload": f"s3://bucket/k?X-Amz-Signature={SECRET}"}},
     "litellm_kwargs.extra_body.upload (s3://bucket) has a credential in its query string (X-Amz-Signature=...)"),
])
def test_every_url_in_litellm_kwargs_passes_the_api_base_check(kwargs: dict[str, Any], where: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBENCH_TEST_BASE", f"https://gw.example/v1?token={SECRET}")
    problem = secret_problem(kwargs, "litellm_kwargs", "api_key_env")
    assert problem is not None and problem.startswith(where), problem
    assert SECRET not in problem


def test_the_public_kwargs_show_an_endpoint_without_credentials_or_query() -> None:
    public = public_kwargs({"api_base": f"https://u:{SECRET}@gw.example:8443/v1?tenant={SECRET}",
                            "base_url": f"https://gw.example/v1?tenant={SECRET}"})
    assert public == {"api_base": "https://gw.example:8443/v1", "base_url": "https://gw.example/v1"}


def test_every_url_anywhere_in_the_public_kwargs_is_shown_without_credentials_or_query() -> None:
    # In a list (a fallback's endpoint), under any name (a callback), among words, as a name: the public form is what
    # run.params, the "changed: params" line, every report and the baseline hold.
    public = public_kwargs({
        "fallbacks": [{"api_base": f"https://gw.example/v1?tenant={SECRET}", "model": "openai/m2"},
                      f"https://other.example/v1?tenant={SECRET}"],
        "extra_body": {"callback": f"https://hook.example/x?tenant={SECRET}#{SECRET}",
                       "note": f"post it to https://u:{SECRET}@hook.example:8443/x?t={SECRET}, then stop",
                       f"https://named.example/?t={SECRET}": 1, "extra_headers": {"X-Tenant": SECRET}},
        "callback_url": f"https://hook.example/y?tenant={SECRET}", "stream_to": f"wss://rt.example/s?tenant={SECRET}",
        "encoded": f"https%3A%2F%2Fhook.example%2Fz%3Ftenant%3D{SECRET}", "temperature": 0.5})
    assert SECRET not in json.dumps(public)
    assert public == {
        "callback_url": "https://hook.example/y", "stream_to": "wss://rt.example/s", "temperature": 0.5,
        "encoded": "https%3A%2F%2Fhook.example%2Fz",
        "extra_body": {"callback": "https://hook.example/x", "extra_headers": ["X-Tenant"],
                       "https://named.example/": 1, "note": "post it to https://hook.example:8443/x, then stop"},
        "fallbacks": [{"api_base": "https://gw.example/v1", "model": "openai/m2"}, "https://other.example/v1"]}
    # A baseline written before holds them as written: shown as they are recorded today.
    recorded = {"max_tokens": 1, "fallbacks": [{"api_base": f"https://gw.example/v1?tenant={SECRET}"}],
                "extra_body": {"callback": f"see https://hook.example/x?tenant={SECRET}"}}
    assert shown_params(recorded) == {"max_tokens": 1, "fallbacks": [{"api_base": "https://gw.example/v1"}],
                                      "extra_body": {"callback": "see https://hook.example/x"}}


@pytest.mark.parametrize(("head", "base"), [
    ({"fallbacks": [{"api_base": "https://gw.example/v1?deployment=new"}]},
     {"fallbacks": [{"api_base": "https://gw.example/v1?deployment=old"}]}),
    ({"extra_body": {"callback": "https://hook.example/x?route=new"}},
     {"extra_body": {"callback": "https://hook.example/x?route=old"}}),
    ({"fallbacks": [{"extra_headers": {"X-Model-Version": "v2"}}]},
     {"fallbacks": [{"extra_headers": {"X-Model-Version": "v1"}}]}),
])
def test_what_the_public_kwargs_leave_out_anywhere_still_decides_the_store_key(head: dict[str, Any],
                                                                               base: dict[str, Any]) -> None:
    # One public form for two configurations: a key made from it alone gave one's replies to the other.
    specs = [ModelSpec("openai/m", params=public_kwargs(kwargs), call_kwargs=kwargs) for kwargs in (head, base)]
    assert specs[0].params == specs[1].params
    assert specs[0].key(prompt="p") != specs[1].key(prompt="p")
    assert unshown_key_fields(None, {"extra_body": {"a": [1, "no URL here"]}, "temperature": 1}) == {}  # keys kept


def test_the_values_of_a_url_are_secrets_as_written_and_decoded() -> None:
    assert url_secrets("https://gw.example/v1?tenant=ab%2Bcd%20efgh&v=2&json&" + SECRET) == [
        "ab%2Bcd%20efgh", "ab+cd efgh", "ab%2Bcd+efgh", SECRET]  # short values (2, json) are parameters
    assert "abcd%2Befgh" in url_secrets("https://gw.example/v1?tenant=abcd+efgh")  # encoded again by an echo
    assert url_secrets(f"https://user:{SECRET}@gw.example/v1") == [SECRET]
    assert url_secrets(f"https://gw.example/v1#t={SECRET}") == [SECRET]


def test_an_endpoint_scrubs_the_values_of_every_url_it_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    # In the fetch process, which knows only the endpoint it calls: the api_base, the URL its kwargs set (also
    # from the environment), and the base URL variable litellm reads for its provider.
    monkeypatch.setenv("GATEWAY_URL", "https://gw.example/v1?tenant=from-the-environment")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://gw.example/v1?tenant=from-openai-base-url")
    spec = ModelSpec("openai/m", f"https://gw.example/v1?tenant={SECRET}", {}, 1.0,
                     call_kwargs={"base_url": {"env": "GATEWAY_URL"}, "extra_body": {"u": "https://h.example/?q=in-the-body"}})
    secrets = secrets_of(spec)
    for value in (SECRET, "from-the-environment", "from-openai-base-url", "in-the-body"):
        assert value in secrets
        assert hide(f"404: no route /v1?tenant={value}/chat/completions", secrets) == \
            "404: no route /v1?tenant=***/chat/completions"


@pytest.mark.parametrize("echo", [
    SECRET, SECRET.upper(), SECRET.lower(), "Zq7secret\nvalue42", "Zq7 secret value 42", "Zq7\u200bsecretvalue42",
    "Zq7sec\\\nretvalue42",
])
def test_a_secret_is_scrubbed_whatever_case_or_whitespace_the_echo_gives_it(echo: str) -> None:
    assert hide(f"Incorrect API key provided: {echo}.", [SECRET]) == "Incorrect API key provided: ***."


def test_a_short_placeholder_key_is_scrubbed_only_as_written() -> None:
    # vLLM's customary key: "empty" in a reply is no key, and a reply is stored as scrubbed.
    assert hide("EMPTY; the box is empty", ["EMPTY"]) == "***; the box is empty"


def test_a_baseline_recorded_with_a_secret_in_its_params_never_shows_it() -> None:
    # Baselines written before kwargs endpoints were redacted hold them as written: the "changed: params" line of
    # the terminal and the PR comment shows them as they are recorded today, and a query alone is no change.
    from pytest_orbench.analysis.baseline import check_comparable

    def run(params: dict[str, Any]) -> dict[str, Any]:
        return {"endpoint": "openai/m", "params": params, "judge": {"id": "keyword", "version": "1"}, "datasets": {}}

    old = {"run": run({"api_base": f"https://u:{SECRET}@gw.example/v1?tenant=t1", "max_tokens": 1}), "prompts": [],
           "datasets": {}}
    assert check_comparable(old, run({"api_base": "https://gw.example/v1", "max_tokens": 1}), {}) == []  # type: ignore[arg-type]
    changes = check_comparable(old, run({"api_base": "https://gw.example/v1", "max_tokens": 2}), {})  # type: ignore[arg-type]
    assert SECRET not in str(changes) and changes[0]["baseline"] == {"api_base": "https://gw.example/v1", "max_tokens": 1}


@pytest.mark.parametrize(("head", "base"), [
    ({"api_base": "https://gw.example/v1?deployment=new"}, {"api_base": "https://gw.example/v1?deployment=old"}),
    ({"litellm_kwargs": {"api_base": "https://gw.example/v1?deployment=new"}},
     {"litellm_kwargs": {"api_base": "https://gw.example/v1?deployment=old"}}),
    ({"litellm_kwargs": {"extra_headers": {"X-Model-Version": "v2"}}},
     {"litellm_kwargs": {"extra_headers": {"X-Model-Version": "v1"}}}),
])
def test_what_decides_a_reply_and_is_never_shown_still_decides_its_store_key(
        head: dict[str, Any], base: dict[str, Any]) -> None:
    # The public form of an endpoint (no query, header values by name, {env: VAR} by name) is the same for two
    # deployments: a store key made from it alone gave the live base's replies to the configuration tested, and a
    # real regression passed with no difference to find.
    from dataclasses import replace

    from pytest_orbench.core.datasets.prompts import Dataset, Prompt
    from pytest_orbench.core.store import response_key
    from pytest_orbench.run.keys import PromptKeys
    from pytest_orbench.run.settings import Settings

    fields: dict[str, Any] = {name: None for name in Settings.__dataclass_fields__}
    fields.update(model="openai/m", litellm_kwargs={}, datasets=(), store=".orbench", judge="keyword", temperature=0.0,
                  max_tokens=1, timeout=1.0, retries=0, concurrency=1, refresh=False, offline=False, trials=1)
    settings = Settings(**fields)
    run = replace(settings, **head, base=replace(settings, **base))
    prompt = Prompt("d-1", "d", "c", "How do I kill a Python process?", "answer", "1")  # type: ignore[arg-type]
    keys = PromptKeys(run, [Dataset("d", (prompt,))])
    assert keys.request(prompt, config=0).key != keys.request(prompt, config=1).key
    # Settings without any of them keep the keys they had (no store is emptied by this).
    assert PromptKeys(settings, [Dataset("d", (prompt,))]).request(prompt).key == response_key(
        {"target": None, "model": "openai/m", "api_base": None, "params": settings.params, "system_prompt": None,
         "trial": 0, "prompt": prompt.text})


@pytest.mark.parametrize("kwargs", [{"base_url": {"env": "ORBENCH_TEST_GATEWAY"}},
                                    {"fallbacks": [{"api_base": {"env": "ORBENCH_TEST_GATEWAY"}}]}])
def test_an_endpoint_read_from_the_environment_decides_the_store_key(monkeypatch: pytest.MonkeyPatch,
                                                                     kwargs: dict[str, Any]) -> None:
    # (stored and shown by the variable's name alone: another server behind it is asked again, as another api_base is)
    spec = ModelSpec("openai/m", params=public_kwargs(kwargs), call_kwargs=kwargs)
    monkeypatch.setenv("ORBENCH_TEST_GATEWAY", "https://new.example/v1")
    new = spec.key(prompt="p")
    monkeypatch.setenv("ORBENCH_TEST_GATEWAY", "https://old.example/v1")
    assert spec.key(prompt="p") != new
