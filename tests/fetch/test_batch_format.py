"""Batch output read as a synchronous call's reply: the refusal field, reasoning without text, a content filter's error
(fetch/batch/openai_format.py; the batch flow itself is tests/e2e/test_e2e_batch.py)."""

from __future__ import annotations

from typing import Any

from pytest_orbench.core.endpoint import ModelSpec
from pytest_orbench.fetch.batch.openai_format import OpenAIFormat


def line(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 5}}
    return {"response": {"status_code": 200, "body": body}}


def test_batch_lines_are_read_as_a_synchronous_reply_would_be() -> None:
    batches = OpenAIFormat(ModelSpec("openai/m", "http://127.0.0.1:9/v1", {"max_tokens": 100}), None, 0)
    output = {"refused": line({"content": None, "refusal": "I can't help with that."}),
              "thought": line({"content": None, "reasoning_content": "Let me think."}),
              "answered": line({"content": "An answer."})}
    errors = {"filtered": {"response": {"status_code": 400, "body": {"error": {
        "code": "content_filter", "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
                                             "content management policy."}}}}}
    records, problems = batches.interpret(output, errors, "batch_1")
    read = {key: (record["text"], record["finish_reason"]) for key, record in records}
    assert read == {"refused": ("I can't help with that.", "refusal"), "thought": ("", "reasoning_only"),
                    "answered": ("An answer.", "stop"), "filtered": ("", "content_filter_error")}
    assert problems == {}
    # An error response bills nothing: a cost of None would make the whole run's spend unknown.
    assert {key: (record["cost"], record["usage"]) for key, record in records}["filtered"] == (
        0.0, {"prompt_tokens": 0, "completion_tokens": 0})
