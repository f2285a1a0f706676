"""What the parent sends the fetch child (FetchFrame), and the pickled, length-prefixed frames that carry it."""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_orbench.core.endpoint import ModelSpec
    from pytest_orbench.fetch.batch.runner import BatchSettings
    from pytest_orbench.fetch.loop import Job
    from pytest_orbench.judging.keyword_weights import RefusalModel

_HEADER = struct.Struct("!I")


@dataclass(frozen=True)
class FetchFrame:
    """The work of a fetch child: where to store, what to ask, of which endpoints, judged how."""

    store: Path
    run_id: str
    retries: int
    shards: int  # fetch processes: the child and the copies it forks
    concurrency: int  # for all of them together
    configs: list[tuple[ModelSpec | None, str | None]]  # per Job.config: the endpoint and its system prompt
    max_age: float | None  # --orbench-store-max-age
    max_cost: float | None  # --orbench-max-cost, for all the fetch processes together
    judge: str | None  # the judge's name, when it asks an LLM
    judge_spec: ModelSpec | None  # its model, when it asks an LLM
    jobs: list[Job]
    # hybrid's keyword model, when judge_labels adapted it: the fetch process sends the same replies to the LLM
    keyword_model: RefusalModel | None
    batch: BatchSettings | None  # --orbench-batch


def write_frame(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message, or None at end of input."""
    data = read_raw(stream)
    return None if data is None else pickle.loads(data)


def read_raw(stream: IO[bytes]) -> bytes | None:
    """The next message's bytes, not unpickled, or None at end of input."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    return data if len(data) == size else None
