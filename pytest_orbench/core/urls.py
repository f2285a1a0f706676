"""Endpoint URLs, without pytest or litellm: checked before any call (api_base_problem), shown without
credentials or query (redact_url), and the values in them that may be credentials (url_secrets), which the
run scrubs wherever they turn up."""

from __future__ import annotations

import re
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit, urlunsplit

# The loopback interface by any of its names: one machine.
LOOPBACK = r"localhost|127(?:\.\d{1,3}){3}|::1"


# What a key looks like, whatever names it: provider key prefixes, bearer tokens, JWTs.
SECRET_VALUES = re.compile(
    r"^(?:bearer|basic|token)\s+\S{8,}|\b(?:sk|rk|pk)[-_](?:live[-_]|test[-_]|proj[-_]|ant[-_])?[A-Za-z0-9_-]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_\w{20,}|\bxox[abposr]-[A-Za-z0-9-]{10,}|\bAKIA[0-9A-Z]{16}\b"
    r"|\bAIza[0-9A-Za-z_-]{30,}|\bhf_[A-Za-z0-9]{20,}|\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}",
    re.IGNORECASE,
)

def is_loopback(host: str | None) -> bool:
    """A host name (no port) of this machine's loopback interface."""
    return host is not None and re.fullmatch(LOOPBACK, host, re.IGNORECASE) is not None


def redact_url(url: str | None) -> str | None:
    """Drop credentials, query and fragment from an endpoint URL before it is stored or shown."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address: its brackets are what tell it from the port
    try:
        port = parts.port
    except ValueError:  # a port that is no number (refused by api_base_problem): not shown, but no crash
        port = None
    if port:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# A URL inside any text (a value of litellm kwargs that holds one among words), of any scheme (https://, wss://,
# s3://), or percent-encoded whole (https%3A%2F%2F...): up to whitespace, a quote or an angle bracket, without the
# punctuation that ends a sentence around it.
URL_IN_TEXT = re.compile(r"\b[a-z][a-z0-9+.-]+(?:://|%3A%2F%2F)[^\s\"'<>`\\]*[^\s\"'<>`\\.,;:!?)\]]", re.IGNORECASE)


def _encoded(url: str) -> bool:
    return "://" not in url.split("%", 1)[0] and re.search("%3A%2F%2F", url, re.IGNORECASE) is not None


def text_urls(text: str) -> list[str]:
    """Every URL in a text, as written (one percent-encoded whole, decoded)."""
    return [unquote(url) if _encoded(url) else url for url in URL_IN_TEXT.findall(text)]


def redact_text(text: str) -> str:
    """A text with every URL in it as redact_url shows it (no credentials, query or fragment; one percent-encoded
    whole, encoded again)."""
    def shown(url: str) -> str:
        return quote(redact_url(unquote(url)) or "", safe="") if _encoded(url) else redact_url(url) or ""

    return URL_IN_TEXT.sub(lambda found: shown(found.group(0)), text)


# Query parameters that carry a credential: Azure's `api-key` and SAS `sig`, a gateway's `key=` / `token=`, a
# signed URL's `X-Amz-Signature` / `X-Goog-Signature` / `X-Amz-Credential` / `X-Amz-Security-Token`, Azure
# Functions' `code=`. A URL is shown, stored and echoed by gateways' errors: a key never goes there. Words found
# anywhere in the name; SECRET_QUERY_PARTS are words of the name (X-Amz-Sig, urlSig; not `design`); `code` is
# the whole name only (a `country_code=` or `lang_code=` is a parameter an endpoint reads from the query).
SECRET_QUERY = re.compile(r"key|token|secret|passw|passphrase|passcode|pwd|auth|credential|session|cookie|jwt|"
                          r"bearer|signature|hmac|^code$", re.IGNORECASE)
SECRET_QUERY_PARTS = frozenset({"sig", "pass", "pw", "otp"})


def secret_query_name(name: str) -> bool:
    """Whether a query parameter's name (decoded) says its value is a credential."""
    parts = {p.lower() for p in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)}
    return SECRET_QUERY.search(name) is not None or not parts.isdisjoint(SECRET_QUERY_PARTS)


def _query_items(query: str) -> list[tuple[str, str | None]]:
    """A query string's items as written (not decoded): (name, value), value None for a bare item."""
    items: list[tuple[str, str | None]] = []
    for item in re.split(r"[&;]", query):
        name, eq, value = item.partition("=")
        if item:
            items.append((name, value if eq else None))
    return items


def api_base_problem(url: str | None, anywhere: bool = False) -> str | None:
    """What keeps an api_base from being called as written, with the fix (None: nothing). Shown without
    credentials or query: only the scheme and host are quoted (and a query parameter's name). `anywhere`: a URL
    met elsewhere in litellm kwargs (a callback in `extra_body`): of any scheme (wss://, s3://), and only an
    http(s) one is checked as an endpoint (its port); credentials and keys are refused in every one."""
    if not url:
        return None
    parts = urlsplit(url)
    web = parts.scheme in ("http", "https") and bool(parts.hostname)
    if not web and not anywhere:
        return "is not an http:// or https:// URL with a host: write it as http://HOST:PORT/v1"
    shown = f"{parts.scheme}://{parts.hostname or ''}"
    if parts.username is not None or parts.password is not None:
        # litellm cannot send credentials from the URL: every call failed locally ("Cannot combine AUTHORIZATION
        # header with AUTH argument or credentials encoded in URL"), and the URL itself is a secret in plain sight.
        return (f"({shown}) has credentials in it (user:password@): they cannot be sent from the URL, and a URL is "
                "shown and stored; remove them, and pass the key through an environment variable (api_key_env: / "
                "--orbench-api-key-env VAR) or as a header: litellm_kwargs: {extra_headers: {Authorization: "
                "{env: VAR}}}")
    secret = next((unquote_plus(name) for name, _ in _query_items(parts.query) if secret_query_name(unquote_plus(name))),
                  None)
    if secret is not None:
        # An endpoint's 404 often echoes the URL it was asked: the key would reach every report of the run.
        name = re.sub(r"[^\w.-]", "?", secret)[:40]
        return (f"({shown}) has a credential in its query string ({name}=...): a URL is shown and stored, and an "
                "endpoint's error may echo it; remove it, and pass the key through an environment variable (api_key_env: "
                "/ --orbench-api-key-env VAR) or as a header the endpoint reads: litellm_kwargs: {extra_headers: "
                f"{{{name}: {{env: VAR}}}}}}")
    if SECRET_VALUES.search(unquote(f"{parts.path}?{parts.query}")):
        return (f"({shown}) has what looks like a key in its path or query (sk-..., a JWT, ...): a URL is shown and "
                "stored; remove it, and pass the key through an environment variable (api_key_env: / "
                "--orbench-api-key-env VAR) or as a header: litellm_kwargs: {extra_headers: {Authorization: {env: VAR}}}")
    if not web:
        return None
    try:
        port = parts.port
    except ValueError:
        return f"({shown}:...) has a port that is not a number from 0 to 65535"
    if port is None and parts.netloc.endswith(":"):
        return f"({shown}:) has ':' and no port after it, which would call port {443 if parts.scheme == 'https' else 80}: " \
               "give the port, or leave the ':' out"
    return None


# A query value shorter than this is a parameter (json, true, 2), not a credential: it is not scrubbed from replies.
QUERY_SECRET_MIN = 8


def url_secrets(url: str | None) -> list[str]:
    """The values of an endpoint URL that may be credentials, as written and decoded: each query value (a bare
    item too), the fragment's, and the user:password. Scrubbed wherever they turn up (an error that echoes the URL)."""
    if not url:
        return []
    parts = urlsplit(url)
    items = _query_items(parts.query) + _query_items(parts.fragment)  # (a fragment is not sent: an error may quote it)
    written = [value if value is not None else name for name, value in items]
    written += [p for p in (parts.username, parts.password) if p]
    # (an echo may quote the value as the URL has it, decoded, or encoded again)
    found = [form for value in written for form in (value, unquote(value), unquote_plus(value),
                                                    quote(unquote(value), safe=""), quote_plus(unquote_plus(value)))]
    return [v for v in dict.fromkeys(found) if len(v) >= QUERY_SECRET_MIN]
