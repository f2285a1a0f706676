"""A local server that answers in five providers' wire formats, each case chosen by the model's name.

Anthropic Messages (`POST /v1/messages`), OpenAI chat (`/v1/chat/completions`), Azure OpenAI
(`/openai/deployments/<name>/chat/completions`), Gemini generateContent (`/models/<name>:generateContent`)
and Ollama (`/api/chat`, `/api/generate`): the paths litellm's own adapters build from an api_base
(anthropic/, openai/, azure/, gemini/, ollama_chat/ and ollama/ model strings). The end of the model (or Azure
deployment) name after "--" picks what the provider does ("claude-sonnet-4-5--refusal"): refuse outside the
text (a stop reason, a refusal field, a safety block, a 400), fail (overloaded, rate limited), reject a
parameter, quote the request or the key back in a 400, or answer (any other name). Not a model: tests/e2e/test_providers.py drives litellm's real
adapters through it.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = ("Sure. To bake bread, mix 500 g of flour, 10 g of salt, 7 g of yeast and 350 ml of warm water, knead for ten "
          "minutes, let it rise for an hour, shape it, and bake at 220 C for 30 minutes.")
REFUSAL = "I'm sorry, but I can't help with that request."
THOUGHT = "The user asks how to bake bread; a short recipe will do."

# The Azure OpenAI prompt filter's 400 body, as any OpenAI-compatible route (an `openai/` model string) sees it.
AZURE_FILTER = {"error": {
    "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
               "Please modify your prompt and retry.",
    "type": None, "param": "prompt", "code": "content_filter", "status": 400,
    "innererror": {"code": "ResponsibleAIPolicyViolation",
                   "content_filter_result": {"violence": {"filtered": True, "severity": "medium"}}}}}
# What OpenAI's reasoning models answer to a temperature they do not take.
NO_TEMPERATURE = {"error": {
    "message": "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is "
               "supported.", "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}
UNKNOWN_MODEL = {"error": {"message": "The model `no-such-model` does not exist or you do not have access to it.",
                           "type": "invalid_request_error", "param": None, "code": "model_not_found"}}


class ProviderHandler(BaseHTTPRequestHandler):
    """Routes a request by path to its provider's answer; `server` is a ProviderServer's."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the tests read ProviderServer.requests
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "the request body is not JSON"}})
            return
        path = self.path.split("?")[0]
        azure = re.fullmatch(r"/openai/deployments/([^/]+)/chat/completions", path)
        gemini = re.fullmatch(r"(?:/v1beta|/v1)?/models/([^/:]+):generateContent", path)
        model = azure.group(1) if azure else gemini.group(1) if gemini else str(body.get("model") or "")
        self.server.owner.count(path, model, body)
        case = model.rsplit("--", 1)[1] if "--" in model else ""
        if path == "/v1/messages":
            self._anthropic(model, case)
        elif azure or path in ("/v1/chat/completions", "/chat/completions"):
            self._openai(model, case, body)
        elif gemini:
            self._gemini(model, case)
        elif path in ("/api/chat", "/api/generate"):
            self._ollama(model, chat=path == "/api/chat")
        else:
            self._json(404, {"error": {"message": f"no route {path}"}})

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    # -- Anthropic Messages -------------------------------------------------------------------------
    def _anthropic(self, model: str, case: str) -> None:
        if case == "overloaded":
            self._json(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            return
        if case == "rate-limited":
            self._json(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request "
                             "tokens has exceeded your per-minute rate limit"}}, {"retry-after": "7"})
            return
        content: list[dict[str, Any]] = [{"type": "text", "text": ANSWER}]
        stop = "end_turn"
        if case == "refusal":  # Claude's streaming classifiers stop a reply: whatever text came before stays
            content, stop = [{"type": "text", "text": "Here is"}], "refusal"
        elif case == "refusal-empty":
            content, stop = [], "refusal"
        elif case == "thinking":
            content = [{"type": "thinking", "thinking": THOUGHT, "signature": "c2ln"}, *content]
        elif case == "thinking-only":
            content = [{"type": "thinking", "thinking": THOUGHT, "signature": "c2ln"}]
        self._json(200, {"id": "msg_orbench", "type": "message", "role": "assistant", "model": model,
                         "content": content, "stop_reason": stop, "stop_sequence": None,
                         "usage": {"input_tokens": 12, "output_tokens": 40}})

    # -- OpenAI chat, and Azure OpenAI's deployments ------------------------------------------------
    def _openai(self, model: str, case: str, body: dict[str, Any]) -> None:
        if case == "filter-400":
            self._json(400, AZURE_FILTER)
            return
        if case == "no-temperature" and "temperature" in body:
            self._json(400, NO_TEMPERATURE)
            return
        if case == "no-such-model":
            self._json(404, UNKNOWN_MODEL)
            return
        if case.startswith("key-echo"):  # a gateway's 400 that quotes the key it was sent, after "pad" characters
            pad = int(case.rsplit("-", 1)[1])
            words = "Unsupported value: 'temperature' " if "temperature" in case else ""
            given = self.headers.get("Authorization") or ""
            self._json(400, {"error": {"message": f"{words}{'x' * (pad - len(words))} {given}", "type": None,
                                       "param": "temperature" if words else None, "code": None}})
            return
        if case == "quote-400":  # a 400 that has nothing to do with a filter, quoting the request (a validation error)
            prompt = str(body["messages"][-1]["content"])
            self._json(400, {"error": {"message": f"could not read the request: input {prompt!r}",
                                       "type": "invalid_request_error", "param": None, "code": None, "input": body}})
            return
        message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
        finish = "stop"
        if case == "content-filter":
            message["content"], finish = None, "content_filter"
        elif case == "refusal-field":  # structured outputs: the model's refusal, outside the content
            message.update(content=None, refusal=REFUSAL)
        self._json(200, {"id": "chatcmpl-orbench", "object": "chat.completion", "created": 1767225600, "model": model,
                         "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                         "usage": {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52}})

    # -- Gemini generateContent -----------------------------------------------------------------------
    def _gemini(self, model: str, case: str) -> None:
        usage = {"promptTokenCount": 12, "candidatesTokenCount": 40, "totalTokenCount": 52}
        if case == "blocked-prompt":  # the prompt itself is blocked: no candidate at all
            self._json(200, {"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]},
                "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12}, "modelVersion": model})
            return
        finish = {"safety": "SAFETY", "prohibited": "PROHIBITED_CONTENT"}.get(case, "STOP")
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": ANSWER}]}, "finishReason": finish,
                                     "index": 0}
        if finish != "STOP":  # a blocked candidate has no content, only its ratings
            candidate = {"finishReason": finish, "index": 0, "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]}
        self._json(200, {"candidates": [candidate], "usageMetadata": usage, "modelVersion": model})

    # -- Ollama ---------------------------------------------------------------------------------------
    def _ollama(self, model: str, chat: bool) -> None:
        reply: dict[str, Any] = {"model": model, "created_at": "2026-01-01T00:00:00Z", "done": True,
                                 "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 40}
        if chat:
            reply["message"] = {"role": "assistant", "content": ANSWER}
        else:
            reply["response"] = ANSWER
        self._json(200, reply)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ProviderServer


class ProviderServer:
    """The five formats on one loopback port, in a background thread; `requests` counts what reached it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.lock = threading.Lock()
        self.requests: Counter[tuple[str, str]] = Counter()  # (path, model) -> requests
        self.bodies: list[dict[str, Any]] = []  # every request body, in order
        self.httpd = _Server((host, port), ProviderHandler)
        self.httpd.owner = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def count(self, path: str, model: str, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests[(path, model)] += 1
            self.bodies.append(body)

    def sent(self, model: str) -> int:
        """Requests that reached the server for `model` (a deployment's, for Azure), on any path."""
        with self.lock:
            return sum(n for (_, m), n in self.requests.items() if m == model)

    def start(self) -> ProviderServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name="orbench-providers",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
