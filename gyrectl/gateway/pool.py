"""The run-time set of rollout servers: who is there, who is busy, which calls run where.

The coordinator changes the set while calls run (``add`` / ``drain`` / ``remove``, also over the
admin route). Decisions are the pure functions of ``routing`` and ``lifecycle``; this object only
holds the state they read and carries out their verdicts (cancel calls, forget servers).

A call holds a :class:`Lease` on its server for as long as it runs there. Cancelling a lease
fires its callbacks (the call closes its upstream connection and aborts the request on the
server); the call then re-sends itself elsewhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from gyrectl.gateway.errors import unavailable
from gyrectl.gateway.lifecycle import ServerEvent, ServerState, transition
from gyrectl.gateway.routing import ServerView, choose_server


class Lease:
    """One call's hold on one server."""

    def __init__(self, server: str, url: str, weight_version: int | None, *, movable: bool = True):
        self.server = server
        self.movable = movable
        """False for a call that cannot continue elsewhere: a drain's grace does not cut it."""
        self.url = url
        self.weight_version = weight_version
        self.cancelled = False
        self._callbacks: list[Callable[[], None]] = []

    def on_cancel(self, callback: Callable[[], None]) -> None:
        if self.cancelled:
            callback()
        else:
            self._callbacks.append(callback)

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            for callback in self._callbacks:
                callback()


@dataclass
class _Server:
    url: str
    state: ServerState
    weight_version: int | None
    leases: set[Lease] = field(default_factory=set)
    grace_timer: asyncio.TimerHandle | None = None
    calls: int = 0


class ServerPool:
    def __init__(self, *, drain_grace_s: float = 30.0, sticky_slack: int = 4,
                 server_wait_s: float = 60.0):
        self.drain_grace_s = drain_grace_s
        self.sticky_slack = sticky_slack
        self.server_wait_s = server_wait_s
        self._servers: dict[str, _Server] = {}
        self._sticky: dict[str, str] = {}
        self._min_version: dict[str, int] = {}
        self._changed = asyncio.Event()

    # -- the coordinator's side ------------------------------------------------------------
    def add(self, name: str, url: str, *, weight_version: int | None = None) -> None:
        """Adds a server (or brings a drained, down or re-started one back) for new calls."""
        server = self._servers.get(name)
        if server is None:
            self._servers[name] = _Server(url.rstrip("/"), ServerState.ACTIVE, weight_version)
        else:
            if server.grace_timer:
                server.grace_timer.cancel()
            server.url, server.state, server.weight_version = url.rstrip("/"), ServerState.ACTIVE, weight_version
        self._changed.set()

    def drain(self, name: str, *, grace_s: float | None = None) -> None:
        """No new calls for ``name``; its calls get ``grace_s`` to finish, then move elsewhere."""
        server = self._require(name)
        self._apply(name, ServerEvent.DRAIN)
        if name in self._servers and server.state is ServerState.DRAINING:
            grace = self.drain_grace_s if grace_s is None else grace_s
            server.grace_timer = asyncio.get_running_loop().call_later(
                grace, self._apply, name, ServerEvent.GRACE_EXPIRED)

    def remove(self, name: str) -> None:
        """Forgets ``name`` now; its running calls move to other servers."""
        self._require(name)
        self._apply(name, ServerEvent.REMOVE)

    def set_weight_version(self, name: str, version: int | None) -> None:
        """Records the policy version ``name`` serves from now on (after a weight reload)."""
        self._require(name).weight_version = version

    def pin_version(self, execution: str, version: int) -> None:
        """Calls of ``execution`` go only to servers serving weights ``version`` or newer (an
        evaluation of that version); they wait while none does."""
        self._min_version[execution] = version

    def has_active(self) -> bool:
        return any(s.state is ServerState.ACTIVE for s in self._servers.values())

    def views(self) -> list[ServerView]:
        return [ServerView(name, s.url, s.state, len(s.leases), s.weight_version, s.calls)
                for name, s in self._servers.items()]

    # -- the calls' side -------------------------------------------------------------------
    async def acquire(self, execution: str, *, exclude: Collection[str] = (),
                      movable: bool = True) -> Lease:
        """A lease on the server for the next call of ``execution``; waits up to
        ``server_wait_s`` while no server is active (nodes are moving between roles)."""
        deadline = asyncio.get_running_loop().time() + self.server_wait_s
        while True:
            pinned = self._min_version.get(execution)
            name = choose_server(self.views(), sticky=self._sticky.get(execution),
                                 sticky_slack=self.sticky_slack, exclude=exclude, min_version=pinned)
            if name is None and exclude:
                # Every other server failed this call once; a retry on them beats an error.
                name = choose_server(self.views(), sticky=None, sticky_slack=self.sticky_slack, min_version=pinned)
            if name is not None:
                server = self._servers[name]
                lease = Lease(name, server.url, server.weight_version, movable=movable)
                server.leases.add(lease)
                server.calls += 1
                self._sticky[execution] = name
                return lease
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise unavailable("No rollout server is available; try again shortly.")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    def release(self, lease: Lease) -> None:
        server = self._servers.get(lease.server)
        if server is not None and lease in server.leases:
            server.leases.discard(lease)
            self._apply(lease.server, ServerEvent.CALL_ENDED)

    def report_failure(self, lease: Lease) -> None:
        """The call on ``lease`` found its server dead (reset, refused, timed out, garbage)."""
        if lease.server in self._servers and not lease.cancelled:
            self._apply(lease.server, ServerEvent.FAILED)

    def forget_execution(self, execution: str) -> None:
        self._sticky.pop(execution, None)
        self._min_version.pop(execution, None)

    # -- carrying out the state machine's verdicts -------------------------------------------
    def _apply(self, name: str, event: ServerEvent) -> None:
        server = self._servers.get(name)
        if server is None:
            return
        # Only a draining server's unmovable calls matter; counting them on every call's end of
        # an active server made each end cost its server's calls in flight.
        pinned = sum(not lease.movable for lease in server.leases) if server.state is ServerState.DRAINING else 0
        verdict = transition(server.state, event, num_inflight=len(server.leases), num_pinned=pinned)
        if verdict.cancel_calls:
            for lease in list(server.leases):
                if lease.movable or verdict.state is None:
                    lease.cancel()
        if verdict.state is None:
            if server.grace_timer:
                server.grace_timer.cancel()
            del self._servers[name]
        else:
            server.state = verdict.state
        self._changed.set()

    def _require(self, name: str) -> _Server:
        if name not in self._servers:
            raise KeyError(f"unknown server {name!r}; known: {', '.join(self._servers) or 'none'}")
        return self._servers[name]
