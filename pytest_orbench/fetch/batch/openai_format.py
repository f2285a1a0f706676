"""The OpenAI-format batch API (OpenAI, Azure, vLLM, litellm proxy) through litellm's batch calls
(create_file, create_batch, retrieve_batch, file_content): JSONL request lines, and the reading of
the output and error files into reply records and per-request problems."""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any

from pytest_orbench.calls.client import call_with_retries
from pytest_orbench.calls.errors import RETRY_STATUSES, EndpointError, _chain, describe_failure
from pytest_orbench.calls.litellm_api import _import_litellm
from pytest_orbench.calls.prices import Price, price_of
from pytest_orbench.calls.reply import Reply, filtered_reply, no_visible_text, read_message
from pytest_orbench.calls.scrubbing import hide, scrub, secrets_of
from pytest_orbench.core.endpoint import ModelSpec, provider_of, redact_url

# Providers whose batches litellm submits in OpenAI's JSONL format (Vertex AI, Bedrock and Anthropic
# take other request files and storage buckets: not supported yet).
PROVIDERS = ("openai", "azure", "hosted_vllm", "litellm_proxy")
MAX_BYTES = 190_000_000  # OpenAI: 200 MB per input file, with room to spare
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
# Chat completion parameters that go into each request line; other litellm_kwargs (custom pricing,
# litellm switches) are litellm's own and are not sent.
BODY_PARAMS = frozenset(("temperature max_tokens max_completion_tokens top_p seed stop presence_penalty frequency_penalty "
                         "logit_bias logprobs top_logprobs n response_format reasoning_effort user service_tier tools "
                         "tool_choice parallel_tool_calls").split())
CALL_PARAMS = ("api_version", "organization", "extra_headers")  # litellm_kwargs for the batch calls themselves
CONTENT_FILTER = ("content_filter", "content_policy_violation")


class NoVisibleText(ValueError):
    """A reply that stopped at max_tokens before any text (calls.reply.no_visible_text)."""


class OpenAIFormat:
    """litellm's batch calls in OpenAI's format against one configuration's endpoint: request lines,
    submission, polling, and the reading of output and error files."""

    max_bytes = MAX_BYTES
    terminal = TERMINAL

    def __init__(self, spec: ModelSpec, system_prompt: str | None, retries: int) -> None:
        self.spec, self.system_prompt, self.retries = spec, system_prompt, retries
        self.secrets = secrets_of(spec)  # a reply that echoes the key is never stored with it
        self.provider = provider_of(spec.model)
        self.name = f"{self.provider} {redact_url(spec.api_base) or 'default'}"  # where its batches can be retrieved
        kwargs = spec.request_kwargs()
        self.common: dict[str, Any] = {"custom_llm_provider": self.provider,
                                       **{k: kwargs[k] for k in CALL_PARAMS if k in kwargs}}
        if spec.api_base:
            self.common["api_base"] = spec.api_base
        if spec.api_key:
            self.common["api_key"] = spec.api_key
        self.params = {k: v for k, v in kwargs.items() if k in BODY_PARAMS}
        if isinstance(kwargs.get("extra_body"), dict):
            self.params.update(kwargs["extra_body"])
        self.model = spec.model.split("/", 1)[1] if "/" in spec.model else spec.model

    def line(self, key: str, prompt: str) -> bytes:
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        body = {"model": self.model, "messages": messages, **self.params}
        request = {"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body}
        return (json.dumps(request, ensure_ascii=False) + "\n").encode("utf-8")

    def record(self, body: dict[str, Any], batch_id: str) -> dict[str, Any]:
        """A reply record from a batch's output line, as a synchronous call stores it (plus its batch id)."""
        try:
            choice = body["choices"][0]
            message = choice["message"]
            # As a synchronous call reads it (calls.reply.read_message): the refusal field, reasoning without text.
            text, finish = read_message(message.get("content"), message.get("refusal"),
                                        message.get("reasoning_content") or message.get("reasoning"),
                                        choice.get("finish_reason"))
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed reply in batch {batch_id} (no choices): {exc}") from None
        cut = no_visible_text(text, finish, self.params.get("max_tokens"))
        if cut is not None:
            raise NoVisibleText(cut)
        usage = body.get("usage") or {}
        prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        fingerprint = body.get("system_fingerprint")
        record = Reply(hide(str(text), self.secrets), finish, body.get("model"), prompt_tokens, completion_tokens,
                       self.cost(prompt_tokens, completion_tokens),
                       fingerprint if isinstance(fingerprint, str) and fingerprint else None).record()
        record["batch_id"] = batch_id
        return record

    @cached_property
    def price(self) -> Price | None:
        return price_of(self.spec.model, self.spec.call_kwargs)

    def cost(self, prompt_tokens: Any, completion_tokens: Any) -> float | None:
        """USD at the batch price (litellm's table, or *_batches custom pricing); the synchronous price
        when no batch price is listed (an upper bound); None without a price."""
        price = self.price
        if price is None or not isinstance(prompt_tokens, int) or not isinstance(completion_tokens, int):
            return None
        return price.cost(prompt_tokens, completion_tokens, batch=True)

    async def _call(self, what: str, name: str, **kwargs: Any) -> Any:
        """One litellm batch call, retried on transient failures like a completion (an endpoint that
        cannot be reached is not waited for: a poll that meets one is repeated at the next poll anyway)."""
        call = getattr(_import_litellm(), name)

        async def attempt(_: None) -> Any:
            try:
                return await call(**kwargs, **self.common)
            except Exception as exc:  # noqa: BLE001 - mapped onto what happened, as for completions
                # litellm's batch calls raise the OpenAI SDK's own exceptions: a rejected key by class name
                auth = any(type(e).__name__ in ("AuthenticationError", "PermissionDeniedError") for e in _chain(exc))
                failure = describe_failure(exc, self.spec.api_base, self.spec.timeout)
                raise EndpointError(f"{what} failed: {scrub(self.spec, str(failure))}",
                                    retryable=failure.retryable and not auth, retry_after=failure.retry_after,
                                    fatal=auth, unreachable=failure.unreachable) from None

        result, _, _ = await call_with_retries(attempt, None, self.retries, should_retry=lambda e: not e.unreachable)
        return result

    async def submit(self, data: bytes) -> tuple[str, str, str]:
        """(batch id, input file id, status) of a new batch of these request lines."""
        uploaded = await self._call("uploading the batch file", "acreate_file",
                                    file=("pytest-orbench-batch.jsonl", data), purpose="batch")
        batch = await self._call("creating the batch", "acreate_batch", completion_window="24h",
                                 endpoint="/v1/chat/completions", input_file_id=uploaded.id,
                                 metadata={"created_by": "pytest-orbench"})
        return str(batch.id), str(uploaded.id), str(batch.status)

    async def retrieve(self, batch_id: str) -> Any:
        return await self._call(f"retrieving batch {batch_id}", "aretrieve_batch", batch_id=batch_id)

    async def lines(self, file_id: str | None) -> dict[str, dict[str, Any]]:
        """A batch output or error file, by custom_id."""
        if not file_id:
            return {}
        content = await self._call(f"downloading file {file_id}", "afile_content", file_id=file_id)
        found: dict[str, dict[str, Any]] = {}
        for text in bytes(content.content).decode("utf-8").splitlines():
            if text.strip():
                line = json.loads(text)
                found[str(line.get("custom_id"))] = line
        return found

    def progress(self, batch: Any) -> tuple[str, dict[str, Any]]:
        """A retrieved batch's status and request counts."""
        counts: Any = getattr(batch, "request_counts", None)
        return str(batch.status), counts.model_dump() if hasattr(counts, "model_dump") else dict(counts or {})

    async def download(self, batch: Any) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """A finished batch's output and error lines, by custom_id."""
        output = await self.lines(getattr(batch, "output_file_id", None))
        errors = await self.lines(getattr(batch, "error_file_id", None))
        return output, errors

    def interpret(self, output: dict[str, dict[str, Any]], errors: dict[str, dict[str, Any]],
                  batch_id: str) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, tuple[str, bool]]]:
        """The reply records of a batch's lines, and the problem of each request without one (what
        happened, worth another batch)."""
        records: list[tuple[str, dict[str, Any]]] = []
        problems: dict[str, tuple[str, bool]] = {}
        for key, line in output.items():
            response = line.get("response") or {}
            if response.get("status_code") == 200:
                try:
                    records.append((key, self.record(response.get("body") or {}, batch_id)))
                    continue
                except ValueError as exc:
                    problems[key] = (str(exc), not isinstance(exc, NoVisibleText))  # another batch would say the same
            else:
                errors.setdefault(key, line)
        for key, line in errors.items():
            if _filtered(line):
                records.append((key, {**filtered_reply().record(), "batch_id": batch_id}))
            else:
                problems.setdefault(key, _problem(line, batch_id))
        return records, problems

    @staticmethod
    def batch_errors(batch: Any) -> str:
        """What a failed batch says went wrong (": ..."), or ""."""
        errors = getattr(batch, "errors", None)
        data = getattr(errors, "data", None) or (errors.get("data") if isinstance(errors, dict) else None) or []
        messages = [str(getattr(e, "message", None) or (e.get("message") if isinstance(e, dict) else e)) for e in data]
        return (": " + "; ".join(messages)[:300]) if messages else ""


def _filtered(line: dict[str, Any]) -> bool:
    """A request the provider's content filter refused with an error: a filtered reply, as in a synchronous run."""
    body = (line.get("response") or {}).get("body") or {}
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get("code") in CONTENT_FILTER


def _problem(line: dict[str, Any], batch_id: str) -> tuple[str, bool]:
    """What happened to one failed request line, and whether another batch may succeed."""
    error = line.get("error")
    if isinstance(error, dict) and error.get("code") == "batch_expired":
        return f"batch {batch_id} expired before this request ran", True
    response = line.get("response") or {}
    status = response.get("status_code")
    body = response.get("body") or {}
    message = body.get("error", {}).get("message") if isinstance(body, dict) and isinstance(body.get("error"), dict) \
        else None
    if isinstance(status, int):
        transient = status in RETRY_STATUSES or status >= 500
        return f"HTTP {status} in batch {batch_id}: {' '.join(str(message or 'no message').split())[:300]}", transient
    if isinstance(error, dict):
        return f"batch {batch_id} request failed: {error.get('code')}: {error.get('message')}", True
    return f"batch {batch_id} returned a line without a response", True

