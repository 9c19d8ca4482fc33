"""The gateway's settings (one frozen dataclass; the run's config fills it)."""

from __future__ import annotations

from dataclasses import dataclass

MIN_TOKEN_CHARS = 24
"""Shortest token a gateway accepts: a run's tokens are 43 random URL-safe characters; anything
as short as a word or a typo'd empty file must stop the gateway, not open it."""


class WeakToken(ValueError):
    """A token the gateway will not start with (empty, short, or the client and admin tokens equal)."""


@dataclass(frozen=True)
class GatewaySettings:
    token: str
    """The client token (the run directory's ``token`` file): what harnesses present, good for the
    client routes (``/v1/...``) only."""
    admin_token: str = ""
    """The admin token (``admin_token``): the only key the admin routes take. Empty: the admin
    routes are off (403), as in a run, where the coordinator drives the pool in-process."""
    server_key: str = ""
    """The rollout servers' API key (``server_key``), sent as ``Authorization: Bearer`` on every
    call to a server; empty for servers started without one."""
    models: tuple[str, ...] = ("tiny",)
    """Model names the rollout servers serve (``--served-model-name``); others get 404."""
    host: str = "127.0.0.1"
    """Address to listen on, and the one harnesses are given (the head's cluster address when
    harnesses run on other nodes)."""
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
    """Attempts one call may make (on any servers) before the client gets 502 or 503 (see ``retry``)."""

    def __post_init__(self) -> None:
        if len(self.token) < MIN_TOKEN_CHARS:
            raise WeakToken(f"the gateway's client token is {len(self.token)} characters long; it needs at "
                            f"least {MIN_TOKEN_CHARS} (an empty token file would let anyone in)")
        if self.admin_token and len(self.admin_token) < MIN_TOKEN_CHARS:
            raise WeakToken(f"the gateway's admin token is {len(self.admin_token)} characters long; it needs "
                            f"at least {MIN_TOKEN_CHARS}")
        if self.admin_token == self.token:
            raise WeakToken("the admin token equals the client token: harnesses would reach the admin routes")
