"""The rollout servers' load, published by the head for ``gyrectl status`` on the login node:
every couple of seconds, each server the gateway knows with its routing state and calls in flight
through the gateway, and the engine's own queue (``vllm:num_requests_running`` / ``_waiting``
from its Prometheus ``/metrics``), written atomically to the run's ``servers.json``."""

from __future__ import annotations

import threading
import time
from typing import Any

from gyrectl.gateway.background import BackgroundGateway
from gyrectl.rollout.http import ServerCallError, get_text
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
    def __init__(self, run: RunDir, gateway: BackgroundGateway, *, every_s: float = 2.0):
        self._run, self._gateway, self._every_s = run, gateway, every_s
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
            rows.append({"name": view.name, "url": view.url, "state": view.state.value,
                         "gateway_calls": view.num_inflight, "weight_version": view.weight_version, **load})
        return rows

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
