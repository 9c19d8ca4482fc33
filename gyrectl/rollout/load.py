"""The rollout servers' load, published by the head for ``gyrectl status`` on the login node:
every couple of seconds, each server replica the gateway knows with its cell and node, its
routing state, calls in flight through the gateway and calls it has taken so far, and the
engine's own queue (``vllm:num_requests_running`` / ``_waiting`` from its Prometheus
``/metrics``), written atomically to the run's ``servers.json``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gyrectl.gateway.control import GatewayControl
from gyrectl.rollout.http import ServerCallError, get_text
from gyrectl.rollout.replicas import CellServer
from gyrectl.run.rundir import RunDir

_GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting"}


def engine_load(metrics: str) -> dict[str, int]:
    """``{"running": R, "waiting": W}`` summed over every label set of the two gauges."""
    load = {"running": 0, "waiting": 0}
    for line in metrics.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in _GAUGES:
            load[_GAUGES[name]] += int(float(line.rsplit(" ", 1)[1]))
    return load


class LoadPublisher:
    def __init__(self, run: RunDir, gateway: GatewayControl, *,
                 replica_of: Callable[[str], tuple[int, CellServer] | None] = lambda name: None, every_s: float = 2.0):
        """``replica_of(name)``: the cell and replica a pool name stands for (None: not a cell's)."""
        self._run, self._gateway, self._every_s, self._replica_of = run, gateway, every_s, replica_of
        self._key = run.server_key()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="server-load", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            self._run.write_json(self._run.servers_file, {"at": time.time(), "servers": self.snapshot()})

    def snapshot(self) -> list[dict[str, Any]]:
        rows = []
        for view in self._gateway.servers():
            try:
                page = get_text(view.url + "/metrics", timeout_s=1.0, key=self._key)
                load: dict[str, int | None] = dict(engine_load(page))
            except ServerCallError:  # starting, stopping or gone: the gateway's view still counts
                load = {"running": None, "waiting": None}
            where = self._replica_of(view.name)
            rows.append({"name": view.name, "url": view.url, "state": view.state.value,
                         "gateway_calls": view.num_inflight, "weight_version": view.weight_version, **load,
                         "cell": where[0] if where else None, "node": where[1].node if where else None,
                         "calls": view.calls})
        return rows

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
