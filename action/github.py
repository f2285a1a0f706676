"""GitHub REST calls for the sticky comment: list (all pages), create, update."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

BOT_LOGIN = "github-actions[bot]"  # the author of comments made with the workflow's GITHUB_TOKEN


class GitHubError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"GitHub API {status}: {message}")
        self.status = status


class GitHub:
    """A minimal client over urllib; the token is sent, never logged or shown in errors."""

    def __init__(self, api_url: str, token: str | None, repository: str, timeout: float = 30.0) -> None:
        self.api_url = api_url.rstrip("/")
        self._token = token
        self.repository = repository
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"GitHub({self.api_url!r}, repository={self.repository!r})"

    def request(self, method: str, url: str, body: dict[str, Any] | None = None) -> tuple[Any, dict[str, str]]:
        if not url.startswith("http"):
            url = self.api_url + url
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
                   "User-Agent": "pytest-orbench-action"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = json.dumps(body).encode() if body is not None else None
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
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
                message = detail
            raise GitHubError(exc.code, str(message)[:300]) from None
        except (urllib.error.URLError, OSError) as exc:
            raise GitHubError(0, f"cannot reach {self.api_url}: {getattr(exc, 'reason', exc)}") from None

    def viewer_login(self) -> str:
        """Who comments with this token; GITHUB_TOKEN cannot call /user and is github-actions[bot]."""
        try:
            user, _ = self.request("GET", "/user")
            return str(user["login"])
        except (GitHubError, KeyError, TypeError):
            return BOT_LOGIN

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

    def create_comment(self, number: int, body: str) -> dict[str, Any]:
        comment, _ = self.request("POST", f"/repos/{self.repository}/issues/{number}/comments", {"body": body})
        return dict(comment)

    def update_comment(self, comment_id: int, body: str) -> dict[str, Any]:
        comment, _ = self.request("PATCH", f"/repos/{self.repository}/issues/comments/{comment_id}", {"body": body})
        return dict(comment)
