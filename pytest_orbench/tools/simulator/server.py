"""`orbench mock-server`: a local OpenAI-compatible simulator (not a model) with latency and faults.

The HTTP side: chat completions (with API-key and header checks, faults, noise and `max_tokens`),
`GET /stats` for the tests, and the request counts behind it. What it answers in each role (the
assistant, the LLM judge, the `orbench generate` roles) is roles.py; the chat
completion itself is completions.py.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pytest_orbench.tools.simulator.batch import BatchError, Batches
from pytest_orbench.tools.simulator.completions import CompletionHandler
from pytest_orbench.tools.simulator.config import MockConfig
from pytest_orbench.tools.simulator.state import MockState


class Handler(CompletionHandler):
    """The routes: chat completions, the Files and Batch endpoints, /stats, /stats/reset, /health, /models."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read /stats instead
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; with Nagle's algorithm on, the body waits for the
        # client's delayed ACK of the headers (~40 ms a reply). Real servers (uvicorn, nginx) set this too.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _batches(self) -> Batches:
        if self.state.batches is None:  # (again after /stats/reset)
            self.state.batches = Batches(self.config.batch_polls, self.config.batch_fail_rate,
                                         self.config.batch_expire_share, self.config.batch_expire_count)
        return self.state.batches

    def _batch_api(self, method: str, raw: bytes) -> bool:
        """The Files and Batch endpoints (batch.py); False: not one of their paths."""
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts and parts[0] == "v1":
            parts = parts[1:]
        if not parts or parts[0] not in ("files", "batches"):
            return False
        with self.state.lock:
            self.state.batch_calls += 1
        if not self._authorized():
            return True
        try:
            if parts == ["files"] and method == "POST":
                self._json(200, self._batches().upload(self.headers.get("Content-Type", ""), raw))
            elif parts[0] == "files" and len(parts) == 2 and method == "GET":
                self._json(200, self._batches().file(parts[1]))
            elif parts[0] == "files" and len(parts) == 3 and parts[2] == "content" and method == "GET":
                self._send(200, self._batches().file_content(parts[1]), content_type="application/octet-stream")
            elif parts == ["batches"] and method == "POST":
                self._json(200, self._batches().create(json.loads(raw or b"{}")))
            elif parts[0] == "batches" and len(parts) == 2 and method == "GET":
                self._json(200, self._batches().retrieve(parts[1], self._answer_line))
            elif parts[0] == "batches" and len(parts) == 3 and parts[2] == "cancel" and method == "POST":
                self._json(200, self._batches().cancel(parts[1]))
            else:
                self._json(404, {"error": {"message": f"no route {method} {self.path}"}})
        except BatchError as exc:
            self._json(exc.status, {"error": {"message": str(exc), "type": "invalid_request_error"}})
        except ValueError:
            self._json(400, {"error": {"message": "the request body is not JSON", "type": "invalid_request_error"}})
        return True

    def _answer_line(self, body: dict[str, Any]) -> tuple[int, Any]:
        """One batch line, answered as a synchronous call would be (faults and latency aside)."""
        try:
            messages = body["messages"]
            prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        except (KeyError, StopIteration, TypeError):
            return 400, {"error": {"message": "expected a chat completion request with a user message"}}
        system = next((m["content"] for m in messages if m["role"] == "system"), None)
        with self.state.lock:
            self.state.completions += 1
            self.state.by_prompt[hashlib.sha256(prompt.encode("utf-8")).hexdigest()] += 1
        self._sink = []
        try:
            self._answer(prompt, system, body)
            return self._sink[0]
        finally:
            self._sink = None

    def do_GET(self) -> None:
        if self._batch_api("GET", b""):
            return
        if self.path.rstrip("/") in ("/stats", "/v1/stats"):
            self._json(200, self.state.snapshot())
        elif self.path.rstrip("/") in ("/health", "/v1/health"):
            self._json(200, {"status": "ok"})
        elif self.path.rstrip("/") in ("/models", "/v1/models"):
            self._json(200, {"object": "list", "data": [{"id": self.config.model_name, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") in ("/stats/reset", "/v1/stats/reset"):
            with self.state.lock:
                self.state.__init__()  # type: ignore[misc]
            self._json(200, {"reset": True})
            return
        if self._batch_api("POST", raw):
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        with self.state.lock:
            self.state.requests += 1
            if self.state.first_request_at is None:
                self.state.first_request_at = time.time()
            self.state.in_flight += 1
            self.state.max_in_flight = max(self.state.max_in_flight, self.state.in_flight)
        try:
            self._complete(raw)
        finally:
            with self.state.lock:
                self.state.in_flight -= 1
                self.state.last_reply_at = time.time()


def make_handler(config: MockConfig, state: MockState) -> type[BaseHTTPRequestHandler]:
    """The handler class of one server: its config and its state, shared by every request."""
    return type("Handler", (Handler,), {"config": config, "state": state})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # benchmarks open dozens of connections at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that leaves without closing its keep-alive connection (a fetch process ending with
        os._exit) is not an error worth a traceback in the demo's output."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class MockServer:
    """The simulator on a loopback port, in a background thread (tests) or in the foreground (CLI)."""

    def __init__(self, config: MockConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config or MockConfig()
        self.state = MockState()
        self.httpd = _Server((host, port), make_handler(self.config, self.state))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> MockServer:
        # stop() waits for the serving loop to look up: every 50 ms, not the default 500 ms per stop.
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name="orbench-mock", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def serve_forever(self) -> None:
        self.httpd.serve_forever()
