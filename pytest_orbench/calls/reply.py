"""The typed reply of one call (Reply), and what a reply cut at max_tokens before any text means."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Reply:
    text: str
    finish_reason: str | None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None  # USD, when litellm knows the model's price
    system_fingerprint: str | None = None  # the provider's backend configuration, when it reports one

    def __post_init__(self) -> None:
        # Half a surrogate pair (a JSON "\ud800" escape in a reply) is no text: UTF-8 cannot hold it, so storing the
        # reply would fail and end the fetch. It reads as U+FFFD, as an invalid character is shown anywhere.
        for name in ("text", "model", "system_fingerprint", "finish_reason"):
            value = getattr(self, name)
            if isinstance(value, str) and _SURROGATE.search(value):
                object.__setattr__(self, name, _SURROGATE.sub("\ufffd", value))

    def record(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "model": self.model,  # the model the provider says served the reply (may differ from the alias)
            "system_fingerprint": self.system_fingerprint,
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens},
            "cost": self.cost,
        }


def no_visible_text(text: str | None, finish: str | None, max_tokens: Any) -> str | None:
    """What happened when a reply stopped at the token limit before any visible text, or None.

    A reasoning model counts its reasoning against max_tokens; at the paper's 1,000 it can spend all of
    them before writing anything, and the provider answers "" with finish_reason=length. That is neither
    a refusal (empty replies count as refusals) nor an answer: asking again gives the same, so it is an
    error of that prompt that names the fix."""
    if finish != "length" or (text and text.strip()):
        return None
    limit = f" ({max_tokens})" if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else ""
    return (f"no reply text: the model reached max_tokens{limit} before writing any (finish_reason=length; a "
            "reasoning model spends tokens on reasoning first); raise --orbench-max-tokens")
