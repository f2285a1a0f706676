"""GitHub REST calls for the sticky comment: list (all pages), create, update; transient failures retried."""

from __future__ import annotations

import http.client
import json
import random
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from email.message import Message
from typing import Any

ATTEMPTS = 4  # per request, the first included
MAX_WAIT = 60.0  # seconds, one wait: a rate limit that resets later than this is reported, not waited out
MAX_TOTAL_WAIT = 120.0  # seconds, all the waits of one request


class GitHubError(Exception):
    """status 0: GitHub was not reached. `attempts`: how many times the request was sent."""

    def __init__(self, status: int, message: str, *, transient: bool = False, retry_in: float | None = None,
                 sent: bool = True) -> None:
        super().__init__(f"GitHub API {status}: {message}")
        self.status = status
        self.message = message
        self.attempts = 1
        self.transient = transient  # worth another attempt: 5xx, a lost connection, a rate limit
        self.retry_in = retry_in  # the wait GitHub asked for (rate limits); None: back off
        self.sent = sent  # False only when GitHub surely did not act on it (refused, rate-limited)

    def __str__(self) -> str:
        text = f"GitHub API {self.status}: {self.message}" if self.status else self.message
        return text + (f", after {self.attempts} attempts" if self.attempts > 1 else "")

    @property
    def token_cannot_write(self) -> bool:
        """The read-only token of a fork's pull request (or of a job without pull-requests: write)."""
        return self.status == 403 and "not accessible by integration" in self.message.lower()


def _rate_limit_wait(status: int, message: str, headers: Message) -> float | None:
    """Seconds to wait when a 403 / 429 is a rate limit, else None ("Rate limits for the REST API":
    Retry-After, or X-RateLimit-Remaining: 0 until X-RateLimit-Reset, else at least a minute)."""
    retry_after, remaining = headers.get("Retry-After"), headers.get("X-RateLimit-Remaining")
    if retry_after is not None and retry_after.strip().isdigit():
        return float(retry_after)
    if remaining == "0" and (headers.get("X-RateLimit-Reset") or "").strip().isdigit():
        return max(0.0, int(headers["X-RateLimit-Reset"]) - time.time())
    if status == 429 or "rate limit" in message.lower():
        return MAX_WAIT
    return None


def _backoff(attempt: int) -> float:
    """Seconds before attempt `attempt + 1` after a 5xx or a lost connection: 1, 2, 4 s less up to half (jitter)."""
    return float(2 ** (attempt - 1) * (0.5 + random.random() / 2))


class GitHub:
    """A minimal client over urllib; the token is sent, never logged or shown in errors."""

    def __init__(self, api_url: str, token: str | None, repository: str, timeout: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, attempts: int = ATTEMPTS) -> None:
        self.api_url = api_url.rstrip("/")
        self._token = token
        self.repository = repository
        self.timeout = timeout
        self.sleep = sleep
        self.attempts = attempts

    def __repr__(self) -> str:
        return f"GitHub({self.api_url!r}, repository={self.repository!r})"

    def request(self, method: str, url: str, body: dict[str, Any] | None = None,
                recover: Callable[[], Any] | None = None) -> tuple[Any, dict[str, str]]:
        """One call, retried on 5xx, lost connections, 429 and rate-limit 403s; other 4xx raise at once.
        A POST is not idempotent: after a failure GitHub may have acted on (5xx, timeout) it is sent
        again only when `recover()` finds no trace of the first one; what it finds is returned instead."""
        if not url.startswith("http"):
            url = self.api_url + url
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
                   "User-Agent": "pytest-orbench-action"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = json.dumps(body).encode() if body is not None else None
        if data is not None:
            headers["Content-Type"] = "application/json"
        waited, attempt = 0.0, 1
        while True:
            try:
                return self._send(urllib.request.Request(url, data=data, headers=headers, method=method))
            except GitHubError as exc:
                exc.attempts = attempt
                wait = _backoff(attempt) if exc.retry_in is None else exc.retry_in
                ambiguous = method == "POST" and exc.sent  # GitHub may have created it: resend only if not
                if (not exc.transient or attempt >= self.attempts or waited + wait > MAX_TOTAL_WAIT
                        or (ambiguous and recover is None)):
                    raise
            self.sleep(wait)
            waited, attempt = waited + wait, attempt + 1
            if ambiguous and recover is not None:
                found = recover()
                if found is not None:
                    return found, {}

    def _send(self, request: urllib.request.Request) -> tuple[Any, dict[str, str]]:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                payload = resp.read()
                return (json.loads(payload) if payload else None), dict(resp.headers.items())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            exc.close()
            try:
                message = json.loads(detail).get("message", detail)
            except (ValueError, AttributeError):
                # A proxy's HTML error page (502, 504) says less than its status line.
                message = exc.reason if detail.lstrip().startswith("<") else detail
            message = self._scrub(str(message)[:300])
            if exc.code >= 500:  # a 503 may say when to come back; capped like a rate limit's wait
                after = (exc.headers.get("Retry-After") or "").strip()
                raise GitHubError(exc.code, message, transient=True,
                                  retry_in=min(float(after), MAX_WAIT) if after.isdigit() else None) from None
            wait = _rate_limit_wait(exc.code, message, exc.headers) if exc.code in (403, 429) else None
            if wait is not None and wait > MAX_WAIT:
                message += f"; the rate limit resets in {wait:.0f} s"
            limited = wait is not None and wait <= MAX_WAIT
            # A rate-limited request was turned away before GitHub acted on it: safe to resend, even a POST.
            raise GitHubError(exc.code, message, transient=limited, retry_in=wait, sent=not limited) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            # Refused or unresolved: the request never left, so even a POST may be resent. A timeout or a
            # dropped connection may have come after GitHub acted on it.
            unsent = isinstance(reason, ConnectionRefusedError | socket.gaierror)
            raise GitHubError(0, f"cannot reach {self.api_url}: {self._scrub(str(reason))}",
                              transient=True, sent=not unsent) from None

    def _scrub(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text

    def viewer_login(self) -> str | None:
        """Who comments with this token; None for an installation token (the workflow's GITHUB_TOKEN, a GitHub
        App's), which cannot read /user: its comments are by the app's bot account (github-actions[bot],
        your-app[bot]), whose name the token cannot look up."""
        try:
            user, _ = self.request("GET", "/user")
            return str(user["login"])
        except (GitHubError, KeyError, TypeError):
            return None

    def comments(self, number: int) -> list[dict[str, Any]]:
        """Every comment on the issue / PR, following the Link header across pages of 100."""
        url: str | None = f"/repos/{self.repository}/issues/{number}/comments?per_page=100"
        found: list[dict[str, Any]] = []
        while url:
            page, headers = self.request("GET", url)
            found.extend(page or [])
            link = headers.get("Link") or headers.get("link") or ""
            match = re.search(r'<([^>]+)>;\s*rel="next"', link)
            url = match.group(1) if match else None
        return found

    def create_comment(self, number: int, body: str,
                       ours: Callable[[list[dict[str, Any]]], dict[str, Any] | None] | None = None) -> dict[str, Any]:
        """A new comment. Creating one is not idempotent: after a failure GitHub may have acted on (a 5xx,
        a timeout) it is posted again only when `ours` finds no comment of ours among the PR's comments,
        listed afresh, so a retry never leaves two; without `ours` such a failure is not retried."""
        recover = (lambda: ours(self.comments(number))) if ours is not None else None
        comment, _ = self.request("POST", f"/repos/{self.repository}/issues/{number}/comments", {"body": body},
                                  recover=recover)
        return dict(comment)

    def update_comment(self, comment_id: int, body: str) -> dict[str, Any]:
        comment, _ = self.request("PATCH", f"/repos/{self.repository}/issues/comments/{comment_id}", {"body": body})
        return dict(comment)
