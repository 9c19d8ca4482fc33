"""The gateway's settings (one frozen dataclass; the run's config fills it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GatewaySettings:
    token: str
    """The run's secret bearer token (the run directory's ``token`` file); every client and
    admin request must carry it."""
    models: tuple[str, ...] = ("tiny",)
    """Model names the rollout servers serve (``--served-model-name``); others get 404."""
    host: str = "127.0.0.1"
    """Address to listen on."""
    port: int = 0
    """Port to listen on (0: any free port; ``Gateway.url`` tells which)."""
    max_body_bytes: int = 64 * 2**20
    """Largest request body accepted (413 above): long agent contexts are a few MB of JSON."""
    drain_grace_s: float = 30.0
    """How long calls on a draining server may run before they are moved elsewhere."""
    server_wait_s: float = 60.0
    """How long a call waits for a server while none is active (nodes moving between roles)
    before it gets 503."""
    sticky_slack: int = 4
    """In-flight calls a sticky server may have beyond the least loaded before an execution
    moves (see ``routing``)."""
    read_timeout_s: float = 120.0
    """Silence from a server, mid-call, after which it counts as dead and the call moves."""
    max_attempts: int = 6
    """Servers one call may try before the client gets 503."""
