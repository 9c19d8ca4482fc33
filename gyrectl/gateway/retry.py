"""What a call does after losing its server: the one retry rule of every API (pure decisions,
plus the little state one call keeps between its attempts).

* A server that is gone (refused, reset, silent) or answers garbage is marked down for every
  call: it is broken, and the coordinator re-routes its cell.
* A 5xx answer says little about the server (one request tripped it): only this call avoids
  that server; the others keep using it.
* A call ended on purpose (drain, removal, a coordinator's abort) may go back to the same
  server unless its own lease was cancelled (the server is leaving).
* A call whose client has already seen output that cannot be re-made elsewhere (its lease is
  no longer ``movable``) fails with its server: 502.

Every API runs its attempts through the one loop here::

    attempts = Attempts(pool, execution, max_attempts)
    async for attempt in attempts:       # ends when no attempt is left
        async with attempt as lease:     # a lost server is counted and the loop goes on
            ...                          # send to lease.server; return (or break) when done
    raise attempts.gave_up()             # 502 or 503

When no attempt is left, or no server is left after a server answered badly, the client gets
502 (the servers failed the call); when servers went away or are moving, 503 (try again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType

from gyrectl.gateway.errors import GatewayError, Loss, UpstreamLost, bad_gateway, unavailable
from gyrectl.gateway.pool import Lease, ServerPool

_ANSWERED = (Loss.GARBAGE, Loss.ERROR)


@dataclass(frozen=True)
class Retry:
    exclude: bool
    """This call does not go back to that server (unless no other one is left)."""
    mark_down: bool
    """No call goes to that server until the coordinator adds it again."""


def after_loss(loss: Loss, *, cancelled: bool) -> Retry:
    return Retry(exclude=loss is not Loss.ENDED or cancelled, mark_down=loss in (Loss.GONE, Loss.GARBAGE))


def gave_up(last: Loss | None) -> GatewayError:
    """The client's error once a call stops trying, after ``last`` (``None``: never sent)."""
    if last in _ANSWERED:
        return bad_gateway("The rollout servers failed this call (an error or an unreadable reply).")
    return unavailable("Every rollout server tried for this call failed; try again.")


@dataclass
class Attempts:
    """One call's attempts: iterate for each next :class:`Attempt`; the iteration ends after
    ``max_attempts``, or at once when a server answered badly and none is left to try."""
    pool: ServerPool
    execution: str
    max_attempts: int
    excluded: set[str] = field(default_factory=set)
    last: Loss | None = None
    tried: int = 0

    def __aiter__(self) -> Attempts:
        return self

    async def __anext__(self) -> Attempt:
        # After a bad answer, waiting for servers to come back helps nobody: the call fails now.
        if self.tried >= self.max_attempts or (self.last in _ANSWERED and not self.pool.has_active()):
            raise StopAsyncIteration
        self.tried += 1
        return Attempt(self, await self.pool.acquire(self.execution, exclude=self.excluded))

    def gave_up(self) -> GatewayError:
        return gave_up(self.last)

    def lost(self, lease: Lease, lost: UpstreamLost) -> None:
        if not lease.movable:
            raise bad_gateway(f"The rollout server failed mid-stream: {lost}") from lost
        retry = after_loss(lost.loss, cancelled=lease.cancelled)
        if retry.exclude:
            self.excluded.add(lease.server)
        if retry.mark_down:
            self.pool.report_failure(lease)
        self.last = lost.loss


@dataclass
class Attempt:
    """One try on one server: ``async with`` it for the lease, released on the way out; a lost
    server (``UpstreamLost``) is counted and swallowed, so the loop tries the next one."""
    attempts: Attempts
    lease: Lease

    async def __aenter__(self) -> Lease:
        return self.lease

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> bool:
        try:
            if isinstance(error, UpstreamLost):
                self.attempts.lost(self.lease, error)
                return True
            return False
        finally:
            self.attempts.pool.release(self.lease)
