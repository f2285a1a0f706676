"""The simulator's settings: its refusal policy, latency, faults, and the roles' and Batch API's shares."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pytest_orbench.tools.simulator.roles import DEFAULT_STRICTNESS


@dataclass
class MockConfig:
    strictness: float = DEFAULT_STRICTNESS
    latency: float = 0.0
    jitter: float = 0.0
    api_key: str | None = field(default=None, repr=False)
    # A gateway header every request must carry (name, value): 401 otherwise, like a proxy in front of a model.
    required_header: tuple[str, str] | None = field(default=None, repr=False)
    fault_rate: float = 0.0  # share of prompts whose first attempts fail
    faults: tuple[str, ...] = ("429",)  # 429 | 403 | 500 | 502 | 503 | timeout | malformed | not_completion | disconnect | trickle | redirect_loop | content_filter_400 | context_400 | quote_400
    fault_attempts: int = 1  # attempts that fail for a faulty prompt (more than retries: an error)
    # Only these prompts (sha256 of the text, hex) may fault, by fault_rate: a provider's filter or outage that hits
    # the very prompts a change made the model refuse (the never-PASS table aims its faults there). None: any prompt.
    fault_prompts: frozenset[str] | None = None
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
    judge_overturn: float = 0.0  # acting as a judge: share of replies read the other way (roles.overturned)
    # The assistant's refusals end with this text (a reply that talks to whoever judges it); "" for none.
    reply_injection: str = ""
    # Acting as a judge: a reply that tells the judge what to do is obeyed (roles.INJECTION_OBEYED): a gullible judge.
    judge_obeys_injection: bool = False
    # Acting as a judge: completion tokens it bills for reasoning before its answer (a reasoning judge model costs
    # many times what an estimate of its visible answer says).
    judge_reasoning_tokens: int = 0
    judge_reasoning_per_word: int = 0  # and this many more per word of the reply it reads (longer replies cost more)
    gen_toxic_share: float = 0.2  # rewriter: share of rewrites that stay harmful
    gen_duplicate_rate: float = 0.25  # rewriter: share of seeds whose last rewrite copies the first
    gen_moderator_flip: float = 0.1  # moderator: chance per prompt and model of the wrong label
    gen_unparseable_rate: float = 0.05  # moderator: share of votes without a [[label]]
    batch_polls: int = 3  # retrievals of a batch until it is done (validating, in_progress, ...)
    batch_fail_rate: float = 0.0  # share of batch requests that fail (error file, status 500)
    batch_expire_share: float | None = None  # set: batches expire with only this share of their requests done
    batch_expire_count: int | None = None  # with batch_expire_share: only the first this many batches expire
    model_name: str = "orbench-mock"
    # Tests: each chat completion waits here (after it is counted in `requests`) until the test lets it through
    # with gate.release(n), so "n requests in flight" is a state the test sets and reads in /stats, not a latency
    # it hopes is long enough on a busy machine. A reply held 120 s is let through anyway. None: no wait.
    gate: threading.Semaphore | None = field(default=None, repr=False, compare=False)
    # What the "provider" says served each reply: a dated version behind the alias, and a backend
    # fingerprint. Change them (and the behaviour) to play a provider updating a model in place.
    served_model: str = "orbench-mock-2026-01-15"
    system_fingerprint: str | None = "fp_orbench_1"
