"""The life of one rollout server in the gateway's set: a pure state machine.

    add --> ACTIVE --drain--> DRAINING --last call ends--> (forgotten)
              |                   |
              |                   +--grace expires / remove--> cancel its calls --> (forgotten)
              |                   |    (a call that cannot move -- a Responses stream already
              |                   |     under way -- keeps the server until it ends or removal)
              +--remove--> cancel its calls --> (forgotten)
              +--a call finds it dead--> DOWN (no new calls; ``add`` brings it back)

Only ACTIVE servers get new calls. A cancelled call is not an error: the gateway re-sends it to
another server, continuing a half-sent stream from the tokens already delivered.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ServerState(enum.Enum):
    ACTIVE = "active"
    DRAINING = "draining"
    DOWN = "down"


class ServerEvent(enum.Enum):
    DRAIN = "drain"
    REMOVE = "remove"
    GRACE_EXPIRED = "grace_expired"
    CALL_ENDED = "call_ended"
    FAILED = "failed"


@dataclass(frozen=True)
class Transition:
    state: ServerState | None
    """The new state; ``None``: forget the server."""
    cancel_calls: bool = False
    """Cancel the calls still running on it (they are re-sent elsewhere)."""


def transition(state: ServerState, event: ServerEvent, *, num_inflight: int,
               num_pinned: int = 0) -> Transition:
    """Next state of a server after ``event``; ``num_inflight`` counts its calls still running
    (after the one that ended, for ``CALL_ENDED``), ``num_pinned`` those of them that cannot
    move to another server."""
    if event is ServerEvent.REMOVE:
        return Transition(None, cancel_calls=num_inflight > 0)
    if event is ServerEvent.FAILED:
        # Its other calls find out on their own (reset or timeout) and fail over then.
        return Transition(ServerState.DOWN if state is not ServerState.DRAINING else state)
    if state is ServerState.DRAINING:
        if event is ServerEvent.GRACE_EXPIRED:
            movable = num_inflight - num_pinned
            return Transition(ServerState.DRAINING if num_pinned else None, cancel_calls=movable > 0)
        if num_inflight == 0:
            return Transition(None)
        return Transition(state)
    if event is ServerEvent.DRAIN:
        return Transition(None) if num_inflight == 0 else Transition(ServerState.DRAINING)
    return Transition(state)
