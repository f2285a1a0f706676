"""The simulator's counters, which the tests read back through GET /stats."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from pytest_orbench.tools.simulator.batch import Batches


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
        self.held = 0  # chat requests waiting at the config's gate (tests)
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
                "held": self.held,
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
