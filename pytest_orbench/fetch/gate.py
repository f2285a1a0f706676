"""Who may call an endpoint now: its first call goes alone (Gate), until the endpoint has shown it takes calls."""

from __future__ import annotations

import asyncio

from pytest_orbench.calls.errors import EndpointError


class Gate:
    """A configuration's calls go one at a time until the endpoint has shown it takes them (a reply, or a failure
    another attempt may mend: a 429, a 5xx, a timeout); then all at once, `concurrency` at a time. A misconfigured
    run (a rejected key or parameter, an unknown model, an endpoint that cannot be reached) sends one request, or
    loop.REJECTED_STOP, not as many as the concurrency allows at the start."""

    def __init__(self) -> None:
        self.opened = False
        self.lock = asyncio.Lock()

    async def enter(self) -> Turn:
        """Wait for this call's turn."""
        if self.opened:
            return Turn(self, False)
        await self.lock.acquire()
        if self.opened:
            self.lock.release()
            return Turn(self, False)
        return Turn(self, True)


class Turn:
    """One call's pass through its configuration's gate: `alone` until it is `done`."""

    def __init__(self, gate: Gate, alone: bool) -> None:
        self.gate, self.alone = gate, alone

    def done(self, open_it: bool) -> None:
        """The call that went alone is done, or has shown what it had to: the next call goes, or (`open_it`) all do."""
        if self.alone:
            self.alone = False
            self.gate.opened = self.gate.opened or open_it
            self.gate.lock.release()


def rejection(exc: EndpointError) -> bool:
    """An HTTP 4xx that another attempt would not mend (not a 429): the endpoint rejected the request as sent."""
    return not exc.retryable and exc.status is not None and 400 <= exc.status < 500
