"""The store keys of every prompt's replies: a trial each under the configuration tested and the live base."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pytest_orbench.core.datasets.prompts import Dataset, Prompt, test_name
from pytest_orbench.core.endpoint import redact_url, unshown_key_fields
from pytest_orbench.core.store import response_key
from pytest_orbench.fetch.plan import Request
from pytest_orbench.run.settings import Settings


@dataclass(frozen=True, slots=True)
class Requests:
    """One prompt test's replies: a trial each under the configuration tested, and under the live base."""

    head: list[Request]
    base: list[Request]

    @property
    def all(self) -> list[Request]:
        return [*self.head, *self.base]


def nodeid(dataset: Dataset, prompt: Prompt) -> str:
    """A prompt test's node id."""
    return f"orbench/{dataset.name}::{test_name(prompt)}"


class PromptKeys:
    """Every prompt test's requests (by node id), and which prompt each node id is."""

    def __init__(self, settings: Settings, datasets: list[Dataset]) -> None:
        self.settings = settings
        self._key_fields: dict[tuple[int, int], dict[str, Any]] = {}  # (configuration, trial) -> what keys hash
        self.requests: dict[str, Requests] = {}  # node id -> every call its test needs
        self.prompt_ids: dict[str, str] = {}  # node id -> prompt id
        for d in datasets:
            for p in d.prompts:
                node = nodeid(d, p)
                self.requests[node], self.prompt_ids[node] = self._requests(p), p.id

    def request(self, prompt: Prompt, trial: int = 0, config: int = 0) -> Request:
        """The prompt's store key: everything that determines its reply (never a secret). Trials of one
        prompt are separate replies (trial index in the key); identical configurations share keys."""
        fields = self._key_fields.get((config, trial))
        if fields is None:  # the same for every prompt: made once per configuration and trial
            s = self.settings if config == 0 else self.settings.base
            assert s is not None
            fields = self._key_fields[(config, trial)] = {
                "target": s.target, "model": s.model, "api_base": redact_url(s.api_base),
                "params": s.params, "system_prompt": s.system_prompt, "trial": trial,
                # A new revision of the application behind `target:` (or of anything else the user names)
                # is asked again; without one the keys stay as they were.
                **({"revision": s.revision} if s.revision else {}),
                **unshown_key_fields(s.api_base, s.litellm_kwargs),  # (routing headers, a deployment in a query)
            }
        return Request(response_key({**fields, "prompt": prompt.text}), prompt.text, config)

    def _requests(self, prompt: Prompt) -> Requests:
        trials = range(self.settings.trials)
        return Requests([self.request(prompt, t) for t in trials],
                        [self.request(prompt, t, 1) for t in trials] if self.settings.base is not None else [])

    def every(self) -> list[Request]:
        """Every request of the run (every prompt, before any deselection)."""
        return [r for item in self.requests.values() for r in item.all]

    def of_nodes(self, nodeids: Collection[str]) -> list[Request]:
        """The requests of these prompt tests (node ids that name none are left out)."""
        return [r for i in nodeids if i in self.requests for r in self.requests[i].all]

    def keys_of(self, prompt_ids: Collection[str]) -> set[str]:
        """The store keys of these prompts' replies (every trial, the live base's too)."""
        return {r.key for node, requests in self.requests.items() if self.prompt_ids[node] in prompt_ids
                for r in requests.all}
