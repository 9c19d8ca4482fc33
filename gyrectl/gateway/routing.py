"""Which server gets a call: a pure policy over a snapshot of the server set.

Sticky per execution: an agent's next prompt extends its last one, so the server that served
the execution still holds that prefix in its KV cache and skips recomputing it. Stickiness is
worth some queueing but not unbounded imbalance: once the sticky server has ``sticky_slack``
more calls in flight than the least loaded one, the call moves (and the execution sticks to its
new server from then on).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gyrectl.gateway.lifecycle import ServerState


@dataclass(frozen=True)
class ServerView:
    name: str
    url: str
    state: ServerState
    num_inflight: int
    weight_version: int | None = None
    calls: int = 0
    """Calls it has taken since it joined the pool."""


def choose_server(servers: Sequence[ServerView], *, sticky: str | None, sticky_slack: int = 4,
                  exclude: Collection[str] = (), min_version: int | None = None) -> str | None:
    """Name of the server for the next call, or ``None`` when no active server is left (with
    ``min_version``: none serving that weight version or a newer one)."""
    candidates = [s for s in servers if s.state is ServerState.ACTIVE and s.name not in exclude
                  and (min_version is None or (s.weight_version is not None and s.weight_version >= min_version))]
    if not candidates:
        return None
    least = min(candidates, key=lambda s: (s.num_inflight, s.name))
    for server in candidates:
        if server.name == sticky and server.num_inflight <= least.num_inflight + sticky_slack:
            return server.name
    return least.name
