"""The coordinator's ``CellServers`` on a real run: each cell's vLLM server replicas (local
processes or Slurm steps), as the head's gateway routes to them.

::

    route(cell)     ──> gateway pool: add / drain each of the cell's server replicas
    sleep / wake    ──> the cell's drained replicas sleep while the cell trains, wake to return
                        (background threads: the cell trains once every replica sleeps, and is
                        not ready until every replica woke)
    sync_weights    ──> background thread: live reload of checkpoints/vN into each replica (after
                        the cell's wake, if one is under way), reported as WeightsSynced through
                        the outbox
    place(cell)     ──> the cell's replicas on its new nodes (a lost cell placed again)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from gyrectl.cluster.base import Node
from gyrectl.coordinator.events import WeightsSynced
from gyrectl.gateway.control import GatewayControl
from gyrectl.rollout.http import ServerCallError, get
from gyrectl.rollout.outbox import Outbox
from gyrectl.rollout.replicas import CellServer
from gyrectl.rollout.sleep import SLEEP_TIMEOUT_S, EngineSwitches
from gyrectl.rollout.sync import WeightSync
from gyrectl.run.rundir import RunDir


class LiveCellServers:
    def __init__(self, *, run: RunDir, gateway: GatewayControl, servers: Sequence[Sequence[CellServer]],
                 replicas_of: Callable[[int, Sequence[Node]], Sequence[CellServer]], weight_sync: WeightSync,
                 outbox: Outbox, server_key: str = "", serving: Callable[[int], None] = lambda version: None,
                 wake_timeout_s: float = SLEEP_TIMEOUT_S):
        """``servers``: each cell's replicas; ``replicas_of(cell, nodes)``: a cell's replicas on
        other nodes (after ``place``); ``serving(version)``: told whenever a server starts serving
        a version (an evaluation may be due); ``wake_timeout_s``: how long a sleep or wake call
        may take (``rollout.wake_timeout_s``)."""
        self._run, self._gateway, self._outbox, self._serving = run, gateway, outbox, serving
        self._servers, self._replicas_of = [tuple(cell) for cell in servers], replicas_of
        self._weight_sync, self._server_key = weight_sync, server_key
        self._lock = threading.Lock()
        self._reloads: list[tuple[int, int]] = []
        """``(cell, version)`` of each live reload under way."""
        self._switches = EngineSwitches(key=server_key, timeout_s=wake_timeout_s)

    def ready(self, cell: int) -> bool:
        """Every replica of the cell answers (a multi-node engine answers once all its ranks
        joined), and none is still waking."""
        if self._switches.waking(cell):
            return False
        return all(self._healthy(server) for server in self._servers[cell])

    def route(self, cell: int, *, routed: bool, weight_version: int = 0) -> None:
        if routed:
            for server in self._servers[cell]:
                self._gateway.add_server(server.name, server.url, weight_version=weight_version)
            self._serving(weight_version)
            return
        self._switches.forget_sleep(cell)  # a drain begins
        known = {view.name for view in self._gateway.servers()}
        for server in self._servers[cell]:
            if server.name in known:
                self._gateway.drain_server(server.name)

    def sleep(self, cell: int, *, level: int) -> None:
        self._switches.sleep(cell, [server.url for server in self._servers[cell]], level=level)

    def asleep(self, cell: int) -> bool | None:
        return self._switches.asleep(cell)

    def wake(self, cell: int) -> None:
        self._switches.wake(cell, [server.url for server in self._servers[cell]])

    def sessions(self, cell: int) -> int:
        names = {server.name for server in self._servers[cell]}
        return sum(view.num_inflight for view in self._gateway.servers() if view.name in names)

    def sync_weights(self, cell: int, version: int) -> None:
        with self._lock:
            self._reloads.append((cell, version))
        threading.Thread(target=self._sync, args=(cell, version), name=f"sync-cell{cell}", daemon=True).start()

    def place(self, cell: int, nodes: Sequence[Node]) -> None:
        self._servers[cell] = tuple(self._replicas_of(cell, nodes))

    def replica_of(self, name: str) -> tuple[int, CellServer] | None:
        """The cell and replica the gateway knows as ``name`` (for ``servers.json``)."""
        for cell, servers in enumerate(self._servers):
            for server in servers:
                if server.name == name:
                    return cell, server
        return None

    def reloading(self) -> set[int]:
        """Weights versions a live reload is loading, or loaded without the coordinator having
        heard yet (its ``WeightsSynced`` waits in the outbox): checkpoint retention keeps them."""
        with self._lock:  # read before the outbox: a reload leaves this list after its event is in there
            versions = {version for _, version in self._reloads}
        return versions | {e.version for e in self._outbox.pending() if isinstance(e, WeightsSynced)}

    def _sync(self, cell: int, version: int) -> None:
        """Every replica of the cell reloads ``version`` (at once: each is its own engine), once
        the cell's wake (if one is under way) is over; the cell has synced when all have."""
        if not self._switches.woke(cell):  # its server is replaced by a cold start, which loads the newest weights
            with self._lock:
                self._reloads.remove((cell, version))
            return
        servers = self._servers[cell]
        with ThreadPoolExecutor(max_workers=len(servers), thread_name_prefix=f"sync-cell{cell}") as pool:
            failures = [f for f in pool.map(lambda server: self._sync_replica(server, version), servers) if f]
        if failures:  # reported on the coordinator's thread by the next poll
            if self.ready(cell):
                self._outbox.fail(f"weight sync of cell {cell} to v{version} failed: {'; '.join(failures)}")
            # else a server died under the reload: the coordinator sees its step exit and starts
            # new servers with the latest weights, which makes this reload moot
        else:
            self._outbox.emit(WeightsSynced(cell=cell, version=version, at=time.time()))
            self._serving(version)
        with self._lock:
            self._reloads.remove((cell, version))

    def _sync_replica(self, server: CellServer, version: int) -> str:
        """What went wrong reloading ``version`` into one replica (empty: nothing)."""
        try:
            self._weight_sync.sync(server.url, self._run.weights_dir(version), version)
        except Exception as exc:
            return f"{server.name}: {exc}"
        if any(view.name == server.name for view in self._gateway.servers()):
            self._gateway.set_weight_version(server.name, version)
        return ""

    @staticmethod
    def _healthy(server: CellServer) -> bool:
        try:
            get(server.url + "/health", timeout_s=1.0)
        except ServerCallError:  # not listening yet, or still loading the weights
            return False
        return True
