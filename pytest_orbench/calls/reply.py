"""The typed reply of one call (Reply); how a provider's message becomes its text and finish value (read_message),
including what a provider says outside the text; what a reply cut at max_tokens before any text means."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")

# Finish values the plugin itself writes, for what a provider says outside the reply's text; judging.judges.delivery
# gives each its verdict and reason. A provider's own finish_reason ("stop", "length", "content_filter") is kept as sent.
FILTERED_REQUEST = "content_filter_error"  # the content filter refused the request with an error (an HTTP 400), no reply
REFUSAL_FIELD = "refusal"  # the model's refusal field (OpenAI's message.refusal, content null): its words are the text
REASONING_ONLY = "reasoning_only"  # finish_reason=stop with reasoning but no visible text


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


def filtered_reply() -> Reply:
    """The reply of a request the provider's content filter refused with an error (FILTERED_REQUEST): no text, and
    nothing billed, as for any error response (no usage is sent). A cost of None would say "no price known" and
    make the whole run's spend unknown, and with it what --orbench-max-cost leaves for verification."""
    return Reply("", FILTERED_REQUEST, prompt_tokens=0, completion_tokens=0, cost=0.0)


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


def read_message(content: Any, refusal: Any, reasoning: Any, finish: str | None) -> tuple[str, str | None]:
    """The reply's text and finish value from a provider's message: its content; the model's refusal field with no
    content, whose words are kept as the text under REFUSAL_FIELD (a refusal); REASONING_ONLY for a reply that ended
    normally (finish_reason=stop) with reasoning and no visible text, which is not the same as an empty reply.
    Content and a refusal both (no provider sends them so): the judge reads the two, no word of either is lost,
    and neither an answer is called a refusal nor a refusal an answer without a reading."""
    text = content if isinstance(content, str) else ""
    if isinstance(refusal, str) and refusal.strip():
        return (f"{text}\n\n{refusal}", finish) if text.strip() else (refusal, REFUSAL_FIELD)
    if finish == "stop" and not text.strip() and reasoning:
        return text, REASONING_ONLY
    return text, finish
