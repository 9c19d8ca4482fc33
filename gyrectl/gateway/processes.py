"""Several gateway processes behind one port, for when one event loop is not enough
(``cluster.head.gateway_processes``; one process carries about 2,400 calls/s, see
docs/performance.md).

    harnesses --one port (SO_REUSEPORT: the kernel spreads connections)--> process 0 .. N-1
    head --admin token, 127.0.0.1, each process's own admin port--> every process
    process i --records--> trajectories/calls-g{i}.seg (readers merge every calls*.seg)

The head sends each change of the pool (add, drain, weight version) and of an execution (version
pin, sampling fields, forget) to every process, and sums what they report (calls in flight per
server). Each process routes its own calls: least loaded and sticky by what it sees itself, which
with connections spread evenly is the same choice in proportion. A harness's client keeps its
connection, so an execution's calls mostly stay with one process and its stickiness.

A process that dies takes its connections' calls with it (their harnesses see an error, as from
any lost connection, and reconnect to the others); the head logs it and carries on with the rest.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from gyrectl.gateway.app import base_url
from gyrectl.gateway.lifecycle import ServerState
from gyrectl.gateway.routing import ServerView
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.run.children import DIE_WITH_PARENT
from gyrectl.run.rundir import RunDir

log = logging.getLogger(__name__)
_ADMIN_TIMEOUT_S = 10.0
_START_TIMEOUT_S = 60.0


class GatewayProcessError(RuntimeError):
    """A gateway process did not start, or refused what the head asked."""


class _Process:
    def __init__(self, argv: list[str]):
        self.popen = subprocess.Popen([*DIE_WITH_PARENT, *argv], stdout=subprocess.PIPE)
        self.url = self.admin_url = ""

    def read_addresses(self) -> None:
        """Its public and admin addresses: the two lines it prints once it listens (nothing after)."""
        deadline, out = time.monotonic() + _START_TIMEOUT_S, b""
        while out.count(b"\n") < 2:
            ready, _, _ = select.select([self.popen.stdout], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self.popen.stdout.fileno(), 4096) if ready else b""
            if not chunk:
                self.popen.kill()
                raise GatewayProcessError(f"a gateway process did not listen within {_START_TIMEOUT_S:.0f} s "
                                          f"(exit {self.popen.wait()})")
            out += chunk
        self.url, self.admin_url = out.decode().split("\n")[:2]

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


class GatewayProcesses:
    """Started from the head's main thread (the processes die with it); ``close()`` stops them."""

    def __init__(self, *, run: RunDir, settings: GatewaySettings, processes: int):
        self._admin_token = settings.admin_token
        if not self._admin_token:
            raise ValueError("gateway processes need the admin token: it is how the head reaches them")

        def argv(index: int, port: int) -> list[str]:
            return [sys.executable, "-m", "gyrectl.gateway", "--token-file", str(run.token_file),
                    "--admin-token-file", str(run.admin_token_file), "--server-key-file", str(run.server_key_file),
                    "--records", str(run.gateway_calls_store(index)), "--models", *settings.models,
                    "--host", settings.host, "--port", str(port), "--reuse-port", "--admin-port", "0",
                    "--server-wait-s", str(settings.server_wait_s)]
        first = _Process(argv(0, settings.port))  # it picks the port when asked for any
        self._processes = [first]
        try:
            first.read_addresses()
            port = int(first.url.rsplit(":", 1)[1])
            self._processes += [_Process(argv(i, port)) for i in range(1, processes)]
            for process in self._processes[1:]:
                process.read_addresses()
        except BaseException:
            self.close()
            raise
        self.url = first.url

    def base_url(self, execution: str) -> str:
        return base_url(self.url, execution)

    def servers(self) -> list[ServerView]:
        merged: dict[str, list[dict[str, Any]]] = {}
        for reply in self._each("GET", "/admin/servers"):
            for entry in reply["servers"]:
                merged.setdefault(entry["name"], []).append(entry)
        return [_merged_view(entries) for entries in merged.values()]

    def add_server(self, name: str, url: str, *, weight_version: int | None) -> None:
        self._each("POST", "/admin/servers", {"name": name, "url": url, "weight_version": weight_version})

    def drain_server(self, name: str) -> None:
        # A process with no call left on it has forgotten the server already (404 there).
        self._each("POST", f"/admin/servers/{quote(name, safe='')}/drain", {}, missing_ok=True)

    def set_weight_version(self, name: str, version: int) -> None:
        self._each("POST", f"/admin/servers/{quote(name, safe='')}/weight_version", {"version": version},
                   missing_ok=True)

    def pin_version(self, execution: str, version: int) -> None:
        self._each("POST", _execution_path(execution), {"min_version": version})

    def set_sampling(self, execution: str, fields: dict[str, Any]) -> None:
        self._each("POST", _execution_path(execution), {"sampling": dict(fields)})

    def forget_execution(self, execution: str) -> None:
        self._each("DELETE", _execution_path(execution))

    def process_ids(self) -> list[int]:
        return [process.popen.pid for process in self._processes]

    def alive(self) -> list[bool]:
        return [process.alive for process in self._processes]

    def close(self) -> None:
        for process in self._processes:
            if process.alive:
                process.popen.send_signal(signal.SIGTERM)  # it finishes its calls and writes its records
        for process in self._processes:
            try:
                process.popen.wait(60)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()

    def _each(self, method: str, path: str, body: dict[str, Any] | None = None, *,
              missing_ok: bool = False) -> list[dict[str, Any]]:
        replies = []
        for index, process in enumerate(self._processes):
            if not process.alive:
                continue
            try:
                replies.append(self._admin(process, method, path, body))
            except urllib.error.HTTPError as exc:
                if not (missing_ok and exc.code == 404):
                    raise GatewayProcessError(f"gateway process {index}: {method} {path}: HTTP {exc.code}: "
                                              f"{exc.read()[:300]!r}") from exc
            except OSError as exc:
                if process.alive:
                    raise GatewayProcessError(f"gateway process {index} does not answer: {exc}") from exc
                log.error("gateway process %d (pid %d) died (exit %s); the others carry its share",
                          index, process.popen.pid, process.popen.returncode)
        return replies

    def _admin(self, process: _Process, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        request = urllib.request.Request(
            process.admin_url + path, method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._admin_token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=_ADMIN_TIMEOUT_S) as response:
            return json.loads(response.read())


def _execution_path(execution: str) -> str:
    return f"/admin/executions/{quote(execution, safe='')}"


def _merged_view(entries: list[dict[str, Any]]) -> ServerView:
    """One server as all processes see it: calls summed; draining if the head drained it, down if
    any process found it dead, else active."""
    states = {ServerState(entry["state"]) for entry in entries}
    state = next(s for s in (ServerState.DRAINING, ServerState.DOWN, ServerState.ACTIVE) if s in states)
    first = entries[0]
    return ServerView(first["name"], first["url"], state, sum(e["num_inflight"] for e in entries),
                      first["weight_version"], sum(e["calls"] for e in entries))
