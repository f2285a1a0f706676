"""A loopback HTTP server standing in for the parts of GitHub's REST API the Action uses."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Failure:
    """What the next matching requests get instead of an answer; `after`: the request is carried out
    first (GitHub created the comment, then its proxy answered 502)."""

    status: int
    body: Any = None  # a str is sent as it is (an HTML error page), anything else as JSON
    headers: dict[str, str] = field(default_factory=dict)
    method: str | None = None
    after: bool = False


class FakeGitHub:
    """Issue comments with real pagination (Link headers), a read-only mode, a body-size limit and
    injected failures (`fail_next`)."""

    def __init__(self, repository: str = "acme/bot", token: str = "ghs_test_token_123") -> None:
        self.repository = repository
        self.token = token
        self.comments: dict[int, dict[str, Any]] = {}
        self.next_id = 1000
        self.read_only = False
        self.author = "github-actions[bot]"  # who the token comments as (a GitHub App's token: its own bot)
        self.max_body = 65536
        self.requests: list[tuple[str, str, str]] = []  # method, path, body
        self.authorizations: list[str | None] = []
        self.failures: list[Failure] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
                html = isinstance(data, str)
                body = data.encode() if html else json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if html else "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode() if length else ""
                outer.requests.append((method, self.path, raw))
                outer.authorizations.append(self.headers.get("Authorization"))
                if self.headers.get("Authorization") != f"Bearer {outer.token}":
                    self._send(401, {"message": "Bad credentials"})
                    return
                failure = outer._failure(method)
                if failure is None:
                    outer.route(self, method, raw)
                    return
                if failure.after:
                    outer.route(_Unanswered(self.path), method, raw)
                self._send(failure.status, failure.body, failure.headers)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()  # quick stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail_next(self, count: int, status: int, body: Any = None, headers: dict[str, str] | None = None,
                  method: str | None = None, after: bool = False) -> None:
        """Answer the next `count` requests (of `method`, if given) with this status, body and headers."""
        body = {"message": f"HTTP {status}"} if body is None else body
        self.failures += [Failure(status, body, dict(headers or {}), method, after) for _ in range(count)]

    def _failure(self, method: str) -> Failure | None:
        with self.lock:
            for i, failure in enumerate(self.failures):
                if failure.method in (None, method):
                    return self.failures.pop(i)
        return None

    def add_comment(self, number: int, body: str, login: str) -> dict[str, Any]:
        self.next_id += 1
        comment = {"id": self.next_id, "issue": number, "body": body,
                   "user": {"login": login, "type": "Bot" if login.endswith("[bot]") else "User"},
                   "html_url": f"https://github.com/{self.repository}/pull/{number}#issuecomment-{self.next_id}"}
        self.comments[self.next_id] = comment
        return comment

    def _writable(self, handler: Any, raw: str) -> str | None:
        """The comment body to write, or None after answering 403 (read-only) / 422 (too long)."""
        if self.read_only:
            handler._send(403, {"message": "Resource not accessible by integration"})
            return None
        body: str = json.loads(raw)["body"]
        if len(body) > self.max_body:
            handler._send(422, {"message": "Validation Failed", "errors": [{"field": "body", "code": "too_long"}]})
            return None
        return body

    def route(self, handler: Any, method: str, raw: str) -> None:
        parts = urlsplit(handler.path)
        repo = re.escape(self.repository)
        if method == "GET" and parts.path == "/user":
            # Like GITHUB_TOKEN: an installation token cannot read /user.
            handler._send(403, {"message": "Resource not accessible by integration"})
            return
        match = re.fullmatch(rf"/repos/{repo}/issues/(\d+)/comments", parts.path)
        if match and method == "GET":
            number = int(match.group(1))
            query = parse_qs(parts.query)
            per_page, page = int(query.get("per_page", ["30"])[0]), int(query.get("page", ["1"])[0])
            mine = [c for c in self.comments.values() if c["issue"] == number]
            chunk = mine[(page - 1) * per_page: page * per_page]
            headers = {}
            if page * per_page < len(mine):
                headers["Link"] = f'<{self.url}{parts.path}?per_page={per_page}&page={page + 1}>; rel="next"'
            handler._send(200, chunk, headers)
            return
        if match and method == "POST":
            body = self._writable(handler, raw)
            if body is not None:
                handler._send(201, self.add_comment(int(match.group(1)), body, self.author))
            return
        match = re.fullmatch(rf"/repos/{repo}/issues/comments/(\d+)", parts.path)
        if match and method == "PATCH":
            body = self._writable(handler, raw)
            if body is None:
                return
            comment = self.comments[int(match.group(1))]
            comment["body"] = body
            handler._send(200, comment)
            return
        handler._send(404, {"message": "Not Found"})


class _Unanswered:
    """Stands in for the handler when a request is carried out but its answer is replaced by a failure."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _send(self, *args: Any) -> None:
        pass
