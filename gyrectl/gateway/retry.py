"""What a call does after losing its server: the one retry rule of every API (pure decisions,
plus the little state one call keeps between its attempts).

* A server that is gone (refused, reset, silent) or answers garbage is marked down for every
  call: it is broken, and the coordinator re-routes its cell.
* A 5xx answer says little about the server (one request tripped it): only this call avoids
  that server; the others keep using it.
* A call ended on purpose (drain, removal, a coordinator's abort) may go back to the same
  server unless its own lease was cancelled (the server is leaving).

When no attempt is left, or no server is left after a server answered badly, the client gets
502 (the servers failed the call); when servers went away or are moving, 503 (try again).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """One call's servers tried so far; ``acquire`` the next lease, ``lost`` after a failure."""
    pool: ServerPool
    execution: str
    excluded: set[str] = field(default_factory=set)
    last: Loss | None = None

    async def acquire(self) -> Lease:
        # After a bad answer, waiting for servers to come back helps nobody: the call fails now.
        if self.last in _ANSWERED and not self.pool.has_active():
            raise gave_up(self.last)
        return await self.pool.acquire(self.execution, exclude=self.excluded)

    def lost(self, lease: Lease, lost: UpstreamLost) -> None:
        retry = after_loss(lost.loss, cancelled=lease.cancelled)
        if retry.exclude:
            self.excluded.add(lease.server)
        if retry.mark_down:
            self.pool.report_failure(lease)
        self.last = lost.loss
