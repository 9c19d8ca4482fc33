"""A gateway on its own event loop in a background thread of the head, driven from synchronous
code (one of the two kinds of :class:`~gyrectl.gateway.control.GatewayControl`).

The coordinator's loop is synchronous (it blocks on the cluster and the clock), while the gateway
is an asyncio server; the pool's methods must run on the gateway's loop (they arm timers on it),
so every call from the coordinator's thread is handed to that loop and waited for.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import uvloop

from gyrectl.gateway.app import Gateway
from gyrectl.gateway.routing import ServerView
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.gateway.sink import CallSink

T = TypeVar("T")


class BackgroundGateway:
    def __init__(self, settings: GatewaySettings, *, sink: CallSink):
        self.gateway = Gateway(settings, sink=sink)
        self._loop = uvloop.new_event_loop()  # measured: benchmarks/gateway/gateway_only.py
        self._thread = threading.Thread(target=self._loop.run_forever, name="gateway", daemon=True)
        self._thread.start()
        self.run(self.gateway.start())

    @property
    def url(self) -> str:
        return self.gateway.url

    def base_url(self, execution: str) -> str:
        return self.gateway.base_url(execution)

    def run(self, coroutine: Any, timeout: float = 60) -> Any:
        """Runs a coroutine on the gateway's loop and returns its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Runs a plain function (a pool method) on the gateway's loop."""
        async def invoke() -> T:
            return function(*args, **kwargs)
        return self.run(invoke())

    def servers(self) -> list[ServerView]:
        return self.call(self.gateway.pool.views)

    def add_server(self, name: str, url: str, *, weight_version: int | None) -> None:
        self.call(self.gateway.pool.add, name, url, weight_version=weight_version)

    def drain_server(self, name: str) -> None:
        self.call(self.gateway.pool.drain, name)

    def set_weight_version(self, name: str, version: int) -> None:
        self.call(self.gateway.pool.set_weight_version, name, version)

    def pin_version(self, execution: str, version: int) -> None:
        self.call(self.gateway.pool.pin_version, execution, version)

    def set_sampling(self, execution: str, fields: dict[str, Any]) -> None:
        self.call(self.gateway.sampling.__setitem__, execution, dict(fields))

    def forget_execution(self, execution: str) -> None:
        self.call(self.gateway.forget_execution, execution)

    def close(self) -> None:
        self.run(self.gateway.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
