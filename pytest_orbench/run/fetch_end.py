"""What the results read of the fetch once it stopped: the calls paid for, and those no test ran for."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from pytest_orbench.core.store import Store


@dataclass(frozen=True, slots=True)
class FetchEnd:
    """The fetch after it stopped."""

    not_run: int  # calls paid for in this session for prompts whose tests did not run (-x, Ctrl-C)
    unstored: int  # of those: requests in provider batches still open (--orbench-batch), collected by the next run
    draining: int | None  # the fetch process that stores the replies in flight by itself (a second Ctrl-C), if any


class Fetched(Protocol):
    """What the results ask of the session's fetch (fetch_start.FetchStart)."""

    scheduled: set[str] | None  # the prompts selected to run, once collection is over

    def fetch_end(self, ran: Collection[str]) -> FetchEnd: ...
    def store(self, open_it: bool = False) -> Store | None: ...
