"""A chat completion request answered: the key and header checks, faults, latency, and the reply its role gets."""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from pytest_orbench.judging.llm_judge import REPLY_QUOTE
from pytest_orbench.tools.generate.text import CATEGORY_FIELD, COUNT_FIELD, PROMPT_QUOTE, SEED_QUOTE
from pytest_orbench.tools.simulator.config import MockConfig
from pytest_orbench.tools.simulator.roles import (
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
from pytest_orbench.tools.simulator.state import MockState


class CompletionHandler(BaseHTTPRequestHandler):
    """Answers a chat completion in every role (the routes are server.py's); its config and state are set
    on the subclass each server makes."""

    config: MockConfig
    state: MockState
    _sink: list[tuple[int, Any]] | None = None  # set while answering a batch line: replies are kept, not sent

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
        if self.config.api_key is not None and self.headers.get("Authorization") != f"Bearer {self.config.api_key}":
            # Echoes the key it was given, as some gateways and proxies do (OpenAI masks the middle):
            # the client must keep it out of every message, file and report.
            given = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            self._json(401, {"error": {"message": f"Incorrect API key provided: {given}",
                                       "type": "invalid_request_error", "code": "invalid_api_key"}})
            return False
        return True

    def _complete(self, raw: bytes) -> None:
        if not self._authorized():
            return
        if self.config.required_header is not None:
            name, value = self.config.required_header
            if self.headers.get(name) != value:
                self._json(401, {"error": {"message": f"missing or wrong {name} header", "type": "invalid_request_error"}})
                return
            with self.state.lock:
                self.state.header_ok += 1
        try:
            body = json.loads(raw)
            messages = body["messages"]
            prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        except (ValueError, KeyError, StopIteration, TypeError):
            self._json(400, {"error": {"message": "expected a chat completion request with a user message"}})
            return
        system = next((m["content"] for m in messages if m["role"] == "system"), None)
        digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
        with self.state.lock:
            attempt = self.state.by_prompt[digest]
            self.state.by_prompt[digest] += 1
        if self.config.gate is not None:
            with self.state.lock:
                self.state.held += 1
            self.config.gate.acquire(timeout=120)
            with self.state.lock:
                self.state.held -= 1
        if self.config.latency or self.config.jitter:
            time.sleep(self.config.latency + random.random() * self.config.jitter)
        aimed = self.config.fault_prompts is None or digest in self.config.fault_prompts
        if aimed and unit(prompt, "fault") < self.config.fault_rate and attempt < self.config.fault_attempts:
            kind = self.config.faults[int(unit(prompt, f"kind{attempt}") * len(self.config.faults))]
            with self.state.lock:
                self.state.faults[kind] += 1
            if self._fault(kind, body):
                return
        with self.state.lock:
            self.state.completions += 1
        self._answer(prompt, system, body)

    def _fault(self, kind: str, request: dict[str, Any]) -> bool:
        if kind == "429":
            self._json(429, {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}},
                       {"Retry-After": f"{self.config.retry_after:g}"})
        elif kind in ("500", "502", "503"):
            self._json(int(kind), {"error": {"message": "The server had an error", "type": "server_error"}})
        elif kind == "context_400":  # a request the model cannot take, every time (too long for its context)
            self._json(400, {"error": {"message": "This model's maximum context length is 8192 tokens. However, your "
                                                  "messages resulted in 9021 tokens. Please reduce the length of the messages.",
                                       "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
        elif kind == "quote_400":  # a validation error that quotes the request back (its messages): no filter
            self._json(400, {"error": {"message": "could not read the request", "type": "invalid_request_error",
                                       "param": None, "code": None, "input": request}})
        elif kind == "content_filter_400":  # Azure OpenAI's prompt filter, as an OpenAI-compatible route sees it
            self._json(400, {"error": {
                "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management "
                           "policy. Please modify your prompt and retry.",
                "type": None, "param": "prompt", "code": "content_filter", "status": 400,
                "innererror": {"code": "ResponsibleAIPolicyViolation",
                               "content_filter_result": {"violence": {"filtered": True, "severity": "medium"}}}}})
        elif kind == "403":  # a key without access to the model (what gateways answer)
            self._json(403, {"error": {"message": "This key has no access to the model", "type": "permission_error"}})
        elif kind == "timeout":
            time.sleep(self.config.hang)
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
            text, cls, question = judge_output(prompt, self.config.judge_unscored_rate, self.config.judge_overturn,
                                               self.config.judge_obeys_injection)
            with self.state.lock:
                self.state.judge_requests += 1
                if question is not None:
                    self.state.judged[hashlib.sha256(question.encode("utf-8")).hexdigest()] = cls
            # Reasoning counts against max_tokens, as providers bill it: never more than the request allows.
            allowed = int(body.get("max_tokens") or body.get("max_completion_tokens") or 10**9) - len(text.split())
            reasoning = (self.config.judge_reasoning_tokens
                         + self.config.judge_reasoning_per_word * len((between(prompt, *REPLY_QUOTE) or "").split()))
            self._completion(prompt, text, "stop", max(0, min(reasoning, allowed)))
            return
        model = str(body.get("model") or "")
        if role != "target":
            self._generate(role, prompt, model)
            return
        decision = decide(prompt, system, strictness_of(model, self.config.strictness))
        with self.state.lock:
            self.state.answers.setdefault(hashlib.sha256(prompt.encode("utf-8")).hexdigest(), {})[model] = decision
        # Noise: the n-th request of the same prompt, system prompt and model flips with this chance,
        # reproducibly (the same sequence of requests gets the same flips; trials differ).
        ident = hashlib.sha256(f"{model}\0{system}\0{prompt}".encode()).hexdigest()
        with self.state.lock:
            nth = self.state.asked[ident]
            self.state.asked[ident] += 1
        if self.config.noise and unit(prompt, f"noise\0{system}\0{model}\0{nth}") < self.config.noise:
            decision = "answer" if decision != "answer" else "refuse"
        finish = "stop"
        text = reply_text(prompt, decision, unit(prompt, "ambiguous") < self.config.ambiguous_rate)
        if decision != "answer" and self.config.reply_injection:
            text += "\n\n" + self.config.reply_injection
        if decision != "answer" and unit(prompt, "filter") < self.config.content_filter_rate:
            finish, text = "content_filter", ""
        elif decision == "answer" and unit(prompt, "empty") < self.config.empty_rate:
            text = ""
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 1000)
        visible = max_tokens - self.config.reasoning_tokens
        words = text.split(" ")
        if visible <= 0:
            text, finish = "", "length"
        elif len(words) > visible:
            text, finish = " ".join(words[:visible]), "length"
        self._completion(prompt, text, finish, min(self.config.reasoning_tokens, max_tokens))

    def _generate(self, role: str, content: str, model: str) -> None:
        """Answer the requests of `orbench generate` (seed writer, rewriter, moderator)."""
        count = int(field_of(content, COUNT_FIELD) or 0)
        if role == "rewriter":
            seed = between(content, *SEED_QUOTE) or ""
            items, toxic, duplicates = gen_rewrites(seed, count, self.config.gen_toxic_share, self.config.gen_duplicate_rate)
            with self.state.lock:
                self.state.generate.update(rewrites=len(items), toxic_rewrites=toxic, duplicate_rewrites=duplicates)
            self._completion(content, numbered_list(items), "stop")
        elif role == "seed_writer":
            items = gen_seeds(field_of(content, CATEGORY_FIELD) or "", count)
            with self.state.lock:
                self.state.generate.update(seeds=len(items))
            self._completion(content, numbered_list(items), "stop")
        else:  # moderator
            prompt = between(content, *PROMPT_QUOTE) or ""
            listed = re.findall(r"^- ([^:\n]+):", content.split(PROMPT_QUOTE[0])[0], re.MULTILINE)
            categories = [c for c in listed if c != "none of the above"]
            label: str | None = moderator_label(prompt, model, categories, self.config.gen_moderator_flip)
            if unit(prompt, "unparseable" + model) < self.config.gen_unparseable_rate:
                label, text = None, "This request is hard to judge; it could go either way."
            else:
                text = f"Judged against the listed categories, the request fits best here. [[{label}]]"
            with self.state.lock:
                self.state.votes.setdefault(hashlib.sha256(prompt.encode("utf-8")).hexdigest(), {})[model] = label
            self._completion(content, text, "stop")

    def _completion(self, prompt: str, text: str, finish: str, reasoning: int = 0) -> None:
        completion = len(text.split()) + reasoning
        self._json(200, {
            "id": "chatcmpl-" + hashlib.sha256(prompt.encode()).hexdigest()[:12],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.config.served_model,
            **({"system_fingerprint": self.config.system_fingerprint} if self.config.system_fingerprint else {}),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": completion,
                      "total_tokens": len(prompt.split()) + completion,
                      **({"completion_tokens_details": {"reasoning_tokens": reasoning}} if reasoning else {})},
        })
