"""What went wrong in a call: EndpointError, and describe_failure, which reads what happened from an exception chain."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
from collections.abc import Callable
from typing import Any

# Statuses worth another attempt: rate limits, overload, server faults, gateway timeouts.
RETRY_STATUSES = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}
MAX_BACKOFF = 60.0


class EndpointError(Exception):
    """A failed attempt. `fatal` errors (bad key, unknown model) stop the whole run's calls;
    `unreachable` ones (connection refused, DNS, TLS) stop them when nothing has got through yet;
    `unusable` ones (a reply with no text at max_tokens: the run's settings, not the prompt) stop them
    when the first few replies all are, and none was usable. `sent`: False when the request never left (litellm
    or the HTTP client refused to build it): no call was made. `status`: the HTTP status the server sent. `gist`:
    the message without the request's own words (a 400 that quotes the prompt back), which says whether two
    prompts met the same error."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None, fatal: bool = False,
                 unreachable: bool = False, unusable: bool = False, timed_out: bool = False, sent: bool = True,
                 status: int | None = None, gist: str | None = None):
        super().__init__(message)
        self.gist = message if gist is None else gist
        self.retryable = retryable
        self.retry_after = retry_after
        self.fatal = fatal
        self.unreachable = unreachable
        self.unusable = unusable
        self.timed_out = timed_out  # no answer within the timeout (a hung endpoint, while nothing answers)
        self.sent = sent
        self.status = status

    def worth_retrying(self, answered: int) -> bool:
        """Whether another attempt may help, `answered` calls to this endpoint having come back: after one,
        a refused connection is a blip; before any, the endpoint cannot be reached (refused, DNS, TLS)."""
        return not (self.unreachable and answered == 0)

    def ends_calls(self, answered: int) -> bool:
        """Whether no more calls are made to this endpoint: a rejected key, or an endpoint that cannot be
        reached or never answers while none of its calls has been answered."""
        return self.fatal or ((self.unreachable or self.timed_out) and answered == 0)


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found and len(found) < 12:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _where(chain: list[BaseException], api_base: str | None) -> str:
    for exc in chain:
        host, port = getattr(exc, "host", None), getattr(exc, "port", None)
        if host:
            return f"{host}:{port}" if port else str(host)
    if api_base:
        from urllib.parse import urlsplit

        parts = urlsplit(api_base)
        if parts.hostname:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            return f"{parts.hostname}:{port}"
    return "the endpoint"


# litellm's words for a reply it could not read as a chat completion, and what they mean.
_MALFORMED = {
    "Empty or invalid response from LLM endpoint": "empty or not a chat completion",
    "Invalid response object": "not a chat completion",
    "provider returned 'choices'": "no list of choices",
}


# What the HTTP clients say when they refuse to build a request (aiohttp, httpx): a local error, never retried.
_LOCAL = ("Cannot combine AUTHORIZATION header", "Invalid header value", "Illegal header value",
          "Request URL is missing an 'http://' or 'https://' protocol", "Invalid non-printable ASCII character in URL")


def _unchanged(text: str) -> str:
    return text


Hide = Callable[[str], str]  # a text without the run's secrets (calls.scrubbing.hide with the caller's)


def describe_failure(exc: BaseException, api_base: str | None, timeout: float, hide: Hide = _unchanged) -> EndpointError:
    """What actually happened, from the whole exception chain (litellm reports a refused connection as
    "HTTP 500 InternalServerError"): connection refused, DNS, TLS, TLS answering an http:// request,
    timed out, connection closed, malformed reply (not HTTP, not JSON), or the HTTP status the server
    really sent. The provider's words are cut to a length after `hide` took the secrets out: a key that an
    error body echoes across the cut would otherwise keep the part before it, which no scrub finds later."""
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    where = _where(chain, api_base)
    root = chain[-1]
    if isinstance(exc, TimeoutError):
        # Our own deadline on the whole request (asyncio.wait_for) ran out: whatever the call was doing when
        # it was cancelled (a read that failed, a connection being set up) is not what ended it.
        return EndpointError(f"timed out after {timeout:g} s", retryable=True, timed_out=True)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return EndpointError(f"connection refused by {where}", retryable=True, unreachable=True)
    if any(isinstance(e, socket.gaierror) for e in chain) or "ClientConnectorDNSError" in names:
        return EndpointError(f"DNS lookup failed for {where.rsplit(':', 1)[0]} ({root})", retryable=True, unreachable=True)
    if any(isinstance(e, ssl.SSLError) for e in chain) or "ClientConnectorCertificateError" in names:
        return EndpointError(f"TLS error with {where}: {root}", retryable=True, unreachable=True)
    if _tls_record(chain):
        # An http:// api_base on a TLS port: the server's first bytes (an alert, a handshake) are no HTTP
        # status line. The same for every call, as a TLS error is.
        fix = "use https:// in api_base" if api_base else "use https://"
        return EndpointError(f"the server at {where} answered in TLS, not HTTP (its first bytes are a TLS record): "
                             f"{fix}", retryable=True, unreachable=True)
    if "BadStatusLine" in names or any(re.search(r"illegal (status|request) line", str(e)) for e in chain):
        # Not a server that speaks HTTP (aiohttp quotes its first bytes; h11, litellm's httpx transport, says
        # only "illegal request line"): every call meets the same, as a refused connection does.
        return EndpointError(f"malformed reply (not HTTP) from {where}{_https_hint(api_base)}", retryable=True,
                             unreachable=True)
    if any(isinstance(e, json.JSONDecodeError) for e in chain):
        return EndpointError(f"malformed reply (not JSON) from {where}", retryable=True)
    if "Timeout" in names or "APITimeoutError" in names or any(isinstance(e, (TimeoutError, asyncio.TimeoutError))
                                                              for e in chain):
        return EndpointError(f"timed out after {timeout:g} s", retryable=True, timed_out=True)
    if names & {"ServerDisconnectedError", "ReadError", "RemoteProtocolError", "ClientOSError",
                "ClientPayloadError"} or any(isinstance(e, (ConnectionResetError, BrokenPipeError)) for e in chain):
        return EndpointError(f"connection to {where} closed before a reply{_https_hint(api_base)}", retryable=True)
    # A 200 whose body is not a chat completion: litellm raises these as "500" errors of its own.
    text = " ".join(str(exc).split())
    malformed = next((m for m in _MALFORMED if m in text), None)
    if malformed is not None:
        return EndpointError(f"malformed reply from {where} ({_MALFORMED[malformed]}): {_message(exc, hide)[:160]}",
                             retryable=True)
    if "TooManyRedirects" in names:
        return EndpointError(f"too many redirects from {where} (a redirect loop: check api_base)", retryable=True,
                             unreachable=True)
    local = next((e for e in chain if isinstance(e, (ValueError, TypeError)) and any(words in str(e) for words in _LOCAL)),
                 None)
    if local is not None and _sent_status(chain) is None:
        # The HTTP client refused to build the request (a header it cannot send, a URL it cannot use): nothing
        # reached the endpoint, and every retry would fail the same way.
        return EndpointError(f"the request to {where} could not be sent (a local error, not the endpoint's): "
                             f"{hide(' '.join(str(local).split()))[:200]}", retryable=False, fatal=True, sent=False)
    status = _sent_status(chain)
    if status is not None:
        if status in REJECTED:
            return EndpointError(f"HTTP {status} from {where} ({REJECTED[status]}): {_message(exc, hide)}", retryable=False,
                                 fatal=True, status=status)
        retryable = status in RETRY_STATUSES or status >= 500
        return EndpointError(f"HTTP {status} from {where}: {_message(exc, hide)}", retryable=retryable,
                             retry_after=_retry_after(exc), status=status)
    if names & {"APIConnectionError", "ConnectError", "ClientConnectorError"}:
        return EndpointError(f"cannot connect to {where}: {root}", retryable=True, unreachable=True)
    # litellm's own verdicts on a request it never sent (a key it found missing, a parameter it refuses)
    if type(exc).__name__ in ("AuthenticationError", "PermissionDeniedError", "NotFoundError"):
        return EndpointError(f"{type(exc).__name__}: {_message(exc, hide)}", retryable=False, fatal=True)
    if type(exc).__name__ == "UnsupportedParamsError":  # raised by litellm before sending (rejections.py names the fix)
        return EndpointError(f"{type(exc).__name__}: {_message(exc, hide)}", retryable=False, fatal=True, sent=False)
    if type(exc).__name__ == "BadRequestError":
        return EndpointError(f"{type(exc).__name__}: {_message(exc, hide)}", retryable=False)
    return EndpointError(f"{type(exc).__name__}: {_message(exc, hide)}", retryable=True, retry_after=_retry_after(exc))


# The first bytes of a TLS record: content type (change_cipher_spec, alert, handshake, application data),
# then protocol version 3.0-3.4 (RFC 8446 section 5.1); as the HTTP client quoted them (a bytes repr) or raw.
_TLS_RECORD = re.compile(r"\\x1[4-7]\\x03\\x0[0-4]|[\x14-\x17]\x03[\x00-\x04]")


def _https_hint(api_base: str | None) -> str:
    """For an http:// api_base whose server closed or answered no HTTP: a TLS server that gets plain HTTP
    often resets or closes without a byte, which nothing tells apart from a crashed server; hence "may"."""
    return " (or the endpoint may expect https://)" if (api_base or "").lower().startswith("http://") else ""


def _tls_record(chain: list[BaseException]) -> bool:
    """Whether the HTTP client failed to parse a status line that starts like a TLS record."""
    for exc in chain:
        text = str(exc)
        if ("status line" in text.lower() or "BadStatusLine" in type(exc).__name__) and _TLS_RECORD.search(text):
            return True
    return False


# Statuses that say every call will fail the same way: the run's calls stop at the first.
REJECTED = {401: "the key was rejected", 403: "the key has no access", 404: "no such model or URL"}


def _sent_status(chain: list[BaseException]) -> int | None:
    """The HTTP status a server really sent: httpx's HTTPStatusError or the OpenAI SDK's APIStatusError.
    litellm's own exceptions subclass the SDK's and carry a status too, 500 for errors that never reached
    a server (a refused connection, a redirect loop, a TLS handshake that timed out): those are not asked."""
    for exc in chain:
        if type(exc).__module__.split(".")[0] == "litellm":
            continue
        if type(exc).__name__ == "HTTPStatusError" or any(c.__name__ == "APIStatusError" for c in type(exc).__mro__):
            status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
            if isinstance(status, int):
                return status
    return None


def _message(exc: BaseException, hide: Hide = _unchanged) -> str:
    """The provider's words, without litellm's class-name prefixes or (`hide`) the run's secrets, cut to 300
    characters."""
    text = hide(" ".join(str(exc).split()))
    text = re.sub(r"^(?:litellm\.\w+: )?(?:\w+: )?(?:\w+(?:Exception|Error) - )?", "", text)
    return text[:300]


def _retry_after(exc: BaseException) -> float | None:
    headers: Any = getattr(exc, "litellm_response_headers", None) or getattr(exc, "headers", None)
    response = getattr(exc, "response", None)
    if not headers and response is not None:
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        return min(float(value), MAX_BACKOFF) if value is not None else None
    except (TypeError, ValueError):
        return None
