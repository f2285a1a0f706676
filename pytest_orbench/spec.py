"""ModelSpec: one litellm model and how to call it (the endpoint under test, a judge, a pipeline stage)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_orbench.store import response_key


@dataclass(frozen=True)
class ModelSpec:
    model: str
    api_base: str | None = None
    params: dict[str, Any] = field(default_factory=dict)  # temperature, max_tokens, litellm kwargs (no secrets)
    timeout: float = 60.0
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None  # named only to scrub its value from error messages

    def key(self, **request: Any) -> str:
        """Store key of one request to this model: everything that determines the reply, no secrets."""
        from pytest_orbench.settings import redact_url

        return response_key({"model": self.model, "api_base": redact_url(self.api_base), "params": self.params, **request})
