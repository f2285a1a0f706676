"""`orbench mock-server`: a local OpenAI-compatible simulator (not a model) with latency and faults.

The HTTP side: chat completions (with API-key and header checks, faults, noise and `max_tokens`),
`GET /stats` for the tests, and the request counts behind it. What it answers in each role (the
assistant, the LLM judge, the `orbench generate` roles) is simulator_roles.py.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pytest_orbench.tools.generate.text import CATEGORY_FIELD, COUNT_FIELD, PROMPT_QUOTE, SEED_QUOTE
from pytest_orbench.tools.simulator.batch import BatchError, Batches
from pytest_orbench.tools.simulator.roles import (
    DEFAULT_STRICTNESS,
    between,
    decide,
    field_of,
    gen_rewrites,
    gen_seeds,
    judge_output,
    moderator_label,
    numbered_list,
    reply_text,
    request_role,
    strictness_of,
    unit,
)


@dataclass
class MockConfig:
    strictness: float = DEFAULT_STRICTNESS
    latency: float = 0.0
    jitter: float = 0.0
    api_key: str | None = field(default=None, repr=False)
    # A gateway header every request must carry (name, value): 401 otherwise, like a proxy in front of a model.
    required_header: tuple[str, str] | None = field(default=None, repr=False)
    fault_rate: float = 0.0  # share of prompts whose first attempts fail
    faults: tuple[str, ...] = ("429",)  # 429 | 403 | 500 | 502 | 503 | timeout | malformed | not_completion | disconnect | trickle | redirect_loop
    fault_attempts: int = 1  # attempts that fail for a faulty prompt (more than retries: an error)
    retry_after: float = 1.0
    hang: float = 30.0  # seconds a "timeout" fault waits before answering
    content_filter_rate: float = 0.0  # share of refusals returned as finish_reason=content_filter
    empty_rate: float = 0.0  # share of answers returned as empty text
    # A reasoning model: completion tokens spent reasoning before the visible text, counted against
    # max_tokens; with max_tokens at or below it the reply is empty with finish_reason=length.
    reasoning_tokens: int = 0
    noise: float = 0.0  # chance per request that the decision flips (a non-deterministic endpoint)
    ambiguous_rate: float = 0.0  # share of prompts answered with a reply a keyword judge cannot settle
    judge_unscored_rate: float = 0.0  # acting as a judge: share of outputs without a valid [[class]]
    judge_overturn: float = 0.0  # acting as a judge: share of replies read the other way (simulator_roles.overturned)
    gen_toxic_share: float = 0.2  # rewriter: share of rewrites that stay harmful
    gen_duplicate_rate: float = 0.25  # rewriter: share of seeds whose last rewrite copies the first
    gen_moderator_flip: float = 0.1  # moderator: chance per prompt and model of the wrong label
    gen_unparseable_rate: float = 0.05  # moderator: share of votes without a [[label]]
    batch_polls: int = 3  # retrievals of a batch until it is done (validating, in_progress, ...)
    batch_fail_rate: float = 0.0  # share of batch requests that fail (error file, status 500)
    batch_expire_share: float | None = None  # set: batches expire with only this share of their requests done
    batch_expire_count: int | None = None  # with batch_expire_share: only the first this many batches expire
    model_name: str = "orbench-mock"
    # What the "provider" says served each reply: a dated version behind the alias, and a backend
    # fingerprint. Change them (and the behaviour) to play a provider updating a model in place.
    served_model: str = "orbench-mock-2026-01-15"
    system_fingerprint: str | None = "fp_orbench_1"


class MockState:
    """Counters the tests read back through GET /stats."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.first_request_at: float | None = None  # wall clock of the first chat request (benchmarks: time to first call)
        self.last_reply_at: float | None = None  # wall clock of the last chat reply (benchmarks: time after the calls)
        self.completions = 0
        self.by_prompt: Counter[str] = Counter()
        self.asked: Counter[str] = Counter()  # requests per (model, system prompt, prompt): which noise draw is next
        self.faults: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.authorizations: Counter[str] = Counter()
        self.judged: dict[str, str | None] = {}  # sha256 of the judged prompt -> class given (None: unscored)
        self.judge_requests = 0
        self.header_ok = 0  # requests that carried the required gateway header
        self.generate: Counter[str] = Counter()  # seeds, rewrites, toxic_rewrites, duplicate_rewrites
        self.votes: dict[str, dict[str, str | None]] = {}  # sha256 of a moderated prompt -> model -> label
        self.answers: dict[str, dict[str, str]] = {}  # sha256 of a prompt -> model -> decision
        self.batches: Batches | None = None  # the Files and Batch endpoints' state (set by the handler)
        self.batch_calls = 0  # requests to the Files and Batch endpoints, rejected ones included

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": self.requests,
                "first_request_at": self.first_request_at,
                "last_reply_at": self.last_reply_at,
                "completions": self.completions,
                "by_prompt": dict(self.by_prompt),
                "faults": dict(self.faults),
                "max_in_flight": self.max_in_flight,
                "duplicates": sum(1 for c in self.by_prompt.values() if c > 1),
                "judge_requests": self.judge_requests,
                "header_ok": self.header_ok,
                "judged": dict(self.judged),
                "generate": dict(self.generate),
                "votes": {k: dict(v) for k, v in self.votes.items()},
                "answers": {k: dict(v) for k, v in self.answers.items()},
                "batches_created": self.batches.created if self.batches else 0,
                "batch_requests_answered": self.batches.answered if self.batches else 0,
                "batch_sizes": list(self.batches.sizes) if self.batches else [],
                "batch_calls": self.batch_calls,
            }


def make_handler(config: MockConfig, state: MockState) -> type[BaseHTTPRequestHandler]:
    def batches() -> Batches:
        if state.batches is None:  # (again after /stats/reset)
            state.batches = Batches(config.batch_polls, config.batch_fail_rate, config.batch_expire_share,
                                    config.batch_expire_count)
        return state.batches

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        _sink: list[tuple[int, Any]] | None = None  # set while answering a batch line: replies are kept, not sent

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read /stats instead
            pass

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes; with Nagle's algorithm on, the body waits for the
            # client's delayed ACK of the headers (~40 ms a reply). Real servers (uvicorn, nginx) set this too.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                  content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
            if self._sink is not None:
                self._sink.append((status, data))
                return
            self._send(status, json.dumps(data).encode(), headers)

        def _authorized(self) -> bool:
            if config.api_key is not None and self.headers.get("Authorization") != f"Bearer {config.api_key}":
                # Echoes the key it was given, as some gateways and proxies do (OpenAI masks the middle):
                # the client must keep it out of every message, file and report.
                given = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                self._json(401, {"error": {"message": f"Incorrect API key provided: {given}",
                                           "type": "invalid_request_error", "code": "invalid_api_key"}})
                return False
            return True

        def _batch_api(self, method: str, raw: bytes) -> bool:
            """The Files and Batch endpoints (simulator_batch.py); False: not one of their paths."""
            parts = self.path.split("?")[0].strip("/").split("/")
            if parts and parts[0] == "v1":
                parts = parts[1:]
            if not parts or parts[0] not in ("files", "batches"):
                return False
            with state.lock:
                state.batch_calls += 1
            if not self._authorized():
                return True
            try:
                if parts == ["files"] and method == "POST":
                    self._json(200, batches().upload(self.headers.get("Content-Type", ""), raw))
                elif parts[0] == "files" and len(parts) == 2 and method == "GET":
                    self._json(200, batches().file(parts[1]))
                elif parts[0] == "files" and len(parts) == 3 and parts[2] == "content" and method == "GET":
                    self._send(200, batches().file_content(parts[1]), content_type="application/octet-stream")
                elif parts == ["batches"] and method == "POST":
                    self._json(200, batches().create(json.loads(raw or b"{}")))
                elif parts[0] == "batches" and len(parts) == 2 and method == "GET":
                    self._json(200, batches().retrieve(parts[1], self._answer_line))
                elif parts[0] == "batches" and len(parts) == 3 and parts[2] == "cancel" and method == "POST":
                    self._json(200, batches().cancel(parts[1]))
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
            with state.lock:
                state.completions += 1
                state.by_prompt[hashlib.sha256(prompt.encode("utf-8")).hexdigest()] += 1
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
                self._json(200, state.snapshot())
            elif self.path.rstrip("/") in ("/health", "/v1/health"):
                self._json(200, {"status": "ok"})
            elif self.path.rstrip("/") in ("/models", "/v1/models"):
                self._json(200, {"object": "list", "data": [{"id": config.model_name, "object": "model"}]})
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") in ("/stats/reset", "/v1/stats/reset"):
                with state.lock:
                    state.__init__()  # type: ignore[misc]
                self._json(200, {"reset": True})
                return
            if self._batch_api("POST", raw):
                return
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            with state.lock:
                state.requests += 1
                if state.first_request_at is None:
                    state.first_request_at = time.time()
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                self._complete(raw)
            finally:
                with state.lock:
                    state.in_flight -= 1
                    state.last_reply_at = time.time()

        def _complete(self, raw: bytes) -> None:
            if not self._authorized():
                return
            if config.required_header is not None:
                name, value = config.required_header
                if self.headers.get(name) != value:
                    self._json(401, {"error": {"message": f"missing or wrong {name} header", "type": "invalid_request_error"}})
                    return
                with state.lock:
                    state.header_ok += 1
            try:
                body = json.loads(raw)
                messages = body["messages"]
                prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
            except (ValueError, KeyError, StopIteration, TypeError):
                self._json(400, {"error": {"message": "expected a chat completion request with a user message"}})
                return
            system = next((m["content"] for m in messages if m["role"] == "system"), None)
            digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
            with state.lock:
                attempt = state.by_prompt[digest]
                state.by_prompt[digest] += 1
            if config.latency or config.jitter:
                time.sleep(config.latency + random.random() * config.jitter)
            if unit(prompt, "fault") < config.fault_rate and attempt < config.fault_attempts:
                kind = config.faults[int(unit(prompt, f"kind{attempt}") * len(config.faults))]
                with state.lock:
                    state.faults[kind] += 1
                if self._fault(kind):
                    return
            with state.lock:
                state.completions += 1
            self._answer(prompt, system, body)

        def _fault(self, kind: str) -> bool:
            if kind == "429":
                self._json(429, {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}},
                           {"Retry-After": f"{config.retry_after:g}"})
            elif kind in ("500", "502", "503"):
                self._json(int(kind), {"error": {"message": "The server had an error", "type": "server_error"}})
            elif kind == "403":  # a key without access to the model (what gateways answer)
                self._json(403, {"error": {"message": "This key has no access to the model", "type": "permission_error"}})
            elif kind == "timeout":
                time.sleep(config.hang)
                return False  # answers, too late for the client
            elif kind == "malformed":
                self._send(200, b'{"id": "x", "choices": [{"message": ')
            elif kind == "not_completion":  # a proxy's 200 that is JSON but no chat completion
                self._send(200, b'"hello"')
            elif kind == "trickle":  # a 200 whose body comes a byte every 0.2 s: no read ever waits long
                self.close_connection = True
                body = json.dumps({"id": "x", "object": "chat.completion", "choices": []}).encode() * 50
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.flush()
                for byte in body:
                    time.sleep(0.2)
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:  # the client gave up: what it should do
                        break
            elif kind == "redirect_loop":  # a proxy sending every request back to itself
                self._send(307, b"", {"Location": self.path})
            elif kind == "disconnect":
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
            return True

        def _answer(self, prompt: str, system: str | None, body: dict[str, Any]) -> None:
            role = request_role(prompt)
            if role == "judge":
                text, cls, question = judge_output(prompt, config.judge_unscored_rate, config.judge_overturn)
                with state.lock:
                    state.judge_requests += 1
                    if question is not None:
                        state.judged[hashlib.sha256(question.encode("utf-8")).hexdigest()] = cls
                self._completion(prompt, text, "stop")
                return
            model = str(body.get("model") or "")
            if role != "target":
                self._generate(role, prompt, model)
                return
            decision = decide(prompt, system, strictness_of(model, config.strictness))
            with state.lock:
                state.answers.setdefault(hashlib.sha256(prompt.encode("utf-8")).hexdigest(), {})[model] = decision
            # Noise: the n-th request of the same prompt, system prompt and model flips with this chance,
            # reproducibly (the same sequence of requests gets the same flips; trials differ).
            ident = hashlib.sha256(f"{model}\0{system}\0{prompt}".encode()).hexdigest()
            with state.lock:
                nth = state.asked[ident]
                state.asked[ident] += 1
            if config.noise and unit(prompt, f"noise\0{system}\0{model}\0{nth}") < config.noise:
                decision = "answer" if decision != "answer" else "refuse"
            finish = "stop"
            text = reply_text(prompt, decision, unit(prompt, "ambiguous") < config.ambiguous_rate)
            if decision != "answer" and unit(prompt, "filter") < config.content_filter_rate:
                finish, text = "content_filter", ""
            elif decision == "answer" and unit(prompt, "empty") < config.empty_rate:
                text = ""
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 1000)
            visible = max_tokens - config.reasoning_tokens
            words = text.split(" ")
            if visible <= 0:
                text, finish = "", "length"
            elif len(words) > visible:
                text, finish = " ".join(words[:visible]), "length"
            self._completion(prompt, text, finish, min(config.reasoning_tokens, max_tokens))

        def _generate(self, role: str, content: str, model: str) -> None:
            """Answer the requests of `orbench generate` (seed writer, rewriter, moderator)."""
            count = int(field_of(content, COUNT_FIELD) or 0)
            if role == "rewriter":
                seed = between(content, *SEED_QUOTE) or ""
                items, toxic, duplicates = gen_rewrites(seed, count, config.gen_toxic_share, config.gen_duplicate_rate)
                with state.lock:
                    state.generate.update(rewrites=len(items), toxic_rewrites=toxic, duplicate_rewrites=duplicates)
                self._completion(content, numbered_list(items), "stop")
            elif role == "seed_writer":
                items = gen_seeds(field_of(content, CATEGORY_FIELD) or "", count)
                with state.lock:
                    state.generate.update(seeds=len(items))
                self._completion(content, numbered_list(items), "stop")
            else:  # moderator
                prompt = between(content, *PROMPT_QUOTE) or ""
                listed = re.findall(r"^- ([^:\n]+):", content.split(PROMPT_QUOTE[0])[0], re.MULTILINE)
                categories = [c for c in listed if c != "none of the above"]
                label: str | None = moderator_label(prompt, model, categories, config.gen_moderator_flip)
                if unit(prompt, "unparseable" + model) < config.gen_unparseable_rate:
                    label, text = None, "This request is hard to judge; it could go either way."
                else:
                    text = f"Judged against the listed categories, the request fits best here. [[{label}]]"
                with state.lock:
                    state.votes.setdefault(hashlib.sha256(prompt.encode("utf-8")).hexdigest(), {})[model] = label
                self._completion(content, text, "stop")

        def _completion(self, prompt: str, text: str, finish: str, reasoning: int = 0) -> None:
            completion = len(text.split()) + reasoning
            self._json(200, {
                "id": "chatcmpl-" + hashlib.sha256(prompt.encode()).hexdigest()[:12],
                "object": "chat.completion",
                "created": int(time.time()),
                "model": config.served_model,
                **({"system_fingerprint": config.system_fingerprint} if config.system_fingerprint else {}),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": completion,
                          "total_tokens": len(prompt.split()) + completion,
                          **({"completion_tokens_details": {"reasoning_tokens": reasoning}} if reasoning else {})},
            })

    return Handler


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
