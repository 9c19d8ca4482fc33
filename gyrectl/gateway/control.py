"""What the head tells the gateway and asks of it, whether the gateway is one event loop in the
head's process (:class:`~gyrectl.gateway.background.BackgroundGateway`) or several processes
sharing one port (:class:`~gyrectl.gateway.processes.GatewayProcesses`). The rollout side
(``gyrectl.rollout``) sees only this."""

from __future__ import annotations

from typing import Any, Protocol

from gyrectl.gateway.routing import ServerView


class GatewayControl(Protocol):
    url: str
    """Where harnesses reach the gateway."""

    def base_url(self, execution: str) -> str:
        """The OpenAI base URL to give the harness of ``execution``."""

    def servers(self) -> list[ServerView]:
        """The pool as the gateway sees it (calls in flight summed over its processes)."""

    def add_server(self, name: str, url: str, *, weight_version: int | None) -> None:
        """Routes new calls to ``name`` too (or again, after a drain)."""

    def drain_server(self, name: str) -> None:
        """No new calls for ``name``; its calls finish or move after the drain grace."""

    def set_weight_version(self, name: str, version: int) -> None:
        """``name`` serves weights ``version`` from now on."""

    def pin_version(self, execution: str, version: int) -> None:
        """Calls of ``execution`` go only to servers serving ``version`` or newer."""

    def set_sampling(self, execution: str, fields: dict[str, Any]) -> None:
        """Request fields set on every call of ``execution``, whatever its harness sends."""

    def forget_execution(self, execution: str) -> None:
        """``execution`` ended: its stickiness, version pin and sampling fields go."""

    def close(self) -> None:
        """Stops the gateway (its records are written first)."""
