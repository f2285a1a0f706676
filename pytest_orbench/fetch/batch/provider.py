"""The provider interface of --orbench-batch: what a provider's batch API does for the runner, and which
one serves a model. A provider is one module (today openai_format) and a line in provider_for and batch_problem."""

from __future__ import annotations

from typing import Any, Protocol

from pytest_orbench.core.endpoint import ModelSpec, provider_of
from pytest_orbench.fetch.batch.openai_format import PROVIDERS, OpenAIFormat


class BatchProvider(Protocol):
    """One configuration's endpoint, as the batch runner (runner.BatchPhase) uses it."""

    name: str  # where its batches can be retrieved: kept with each batch in the store, to resume it
    max_bytes: int  # bytes per request file
    terminal: frozenset[str]  # the statuses of a batch that is over

    def line(self, key: str, prompt: str) -> bytes: ...

    async def submit(self, data: bytes) -> tuple[str, str, str]: ...

    async def retrieve(self, batch_id: str) -> Any: ...

    def progress(self, batch: Any) -> tuple[str, dict[str, Any]]: ...

    async def download(self, batch: Any) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]: ...

    def interpret(self, output: dict[str, dict[str, Any]], errors: dict[str, dict[str, Any]],
                  batch_id: str) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, tuple[str, bool]]]: ...

    def batch_errors(self, batch: Any) -> str: ...


def provider_for(spec: ModelSpec, system_prompt: str | None, retries: int) -> BatchProvider:
    """The batch API of `spec`'s endpoint (batch_problem found it supported)."""
    return OpenAIFormat(spec, system_prompt, retries)


def batch_problem(model: str) -> str | None:
    """Why `model` cannot be asked through a provider batch, or None."""
    provider = provider_of(model)
    if provider in PROVIDERS:
        return None
    if not provider:
        return (f"--orbench-batch submits OpenAI-format batch files through litellm, for {', '.join(PROVIDERS)} models; "
                f"{model!r} names no provider: write it as provider/model (e.g. openai/{model}) or run without "
                "--orbench-batch")
    return (f"--orbench-batch submits OpenAI-format batch files through litellm, for {', '.join(PROVIDERS)} models; "
            f"{model!r} is a model of {provider}, whose batch API is not supported: run it without --orbench-batch")
