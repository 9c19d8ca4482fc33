"""Several gateway processes behind one port (``cluster.head.gateway_processes``): the kernel
spreads connections over them, each gets every change the head makes (servers, drains, an
execution's version pin and sampling fields), every call is recorded in some process's store,
and the head sees their calls summed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from gyrectl.capture.source import load_executions
from gyrectl.capture.store import scan
from gyrectl.gateway.processes import GatewayProcessError, GatewayProcesses
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.run.rundir import RunDir

from fake_vllm import CHAT, FakeVllm, serve

PROCESSES = 3


@pytest.fixture
def fake() -> Iterator[FakeVllm]:
    """A fake vLLM on its own loop in a thread (the gateway processes call it from outside)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = FakeVllm()
    runner = asyncio.run_coroutine_threadsafe(serve(server), loop).result(10)
    yield server
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@pytest.fixture
def gateway(tmp_path) -> Iterator[tuple[RunDir, GatewayProcesses]]:
    run = RunDir.create(tmp_path / "runs", "r")
    settings = GatewaySettings(token=run.token(), admin_token=run.admin_token(), server_key=run.server_key(),
                               models=("tiny",), server_wait_s=0.5)
    processes = GatewayProcesses(run=run, settings=settings, processes=PROCESSES)
    yield run, processes
    processes.close()


def call(gateway: GatewayProcesses, token: str, execution: str) -> int:
    """One call on a connection of its own (urllib does not keep them), so the kernel picks a process."""
    request = urllib.request.Request(gateway.base_url(execution) + "/chat/completions", data=json.dumps(CHAT).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_calls_spread_over_the_processes_all_recorded_and_summed(fake, gateway):
    run, processes = gateway
    processes.add_server("s0", fake.url, weight_version=1)
    assert [call(processes, run.token(), f"e{i}") for i in range(60)] == [200] * 60
    [view] = processes.servers()
    assert (view.name, view.state.value, view.weight_version, view.calls) == ("s0", "active", 1, 60)
    stores = sorted(run.trajectories_dir.glob("calls-g*.seg"))
    per_process = [len(scan(store).records) for store in stores]
    assert len(stores) == PROCESSES and sum(per_process) == 60
    assert sum(1 for n in per_process if n) >= 2, f"the kernel sent every connection to one process: {per_process}"
    assert set(load_executions(run.path, [f"e{i}" for i in range(60)]).calls) == {f"e{i}" for i in range(60)}


def test_every_process_gets_the_heads_changes(fake, gateway):
    run, processes = gateway
    processes.add_server("s0", fake.url, weight_version=1)
    processes.set_sampling("eval-1", {"temperature": 0.25})
    processes.pin_version("eval-1", 2)  # no server serves 2 yet: its calls wait, then 503
    assert set(call(processes, run.token(), "eval-1") for _ in range(12)) == {503}
    processes.set_weight_version("s0", 2)
    assert [call(processes, run.token(), "eval-1") for _ in range(12)] == [200] * 12
    assert all(body["temperature"] == 0.25 for body in fake.bodies[-12:])
    processes.forget_execution("eval-1")
    call(processes, run.token(), "eval-1")
    assert "temperature" not in fake.bodies[-1]
    processes.drain_server("s0")  # no server left anywhere: every process answers 503
    assert set(call(processes, run.token(), f"late{i}") for i in range(12)) == {503}
    assert processes.servers() == []


def test_a_dead_process_leaves_the_others_serving(fake, gateway):
    run, processes = gateway
    processes.add_server("s0", fake.url, weight_version=1)
    os.kill(processes.process_ids()[1], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while processes.alive()[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes.alive() == [True, False, True]
    processes.drain_server("s0")  # the dead one is logged and skipped, the others changed
    assert processes.servers() == []
    processes.add_server("s0", fake.url, weight_version=1)
    assert [call(processes, run.token(), f"e{i}") for i in range(20)] == [200] * 20


def test_a_process_that_cannot_listen_is_an_error_that_says_so(tmp_path):
    run = RunDir.create(tmp_path / "runs", "r")
    with socket.socket() as taken:  # a port held without SO_REUSEPORT: the first process cannot bind it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = GatewaySettings(token=run.token(), admin_token=run.admin_token(), models=("tiny",),
                                   port=taken.getsockname()[1])
        with pytest.raises(GatewayProcessError, match="did not listen"):
            GatewayProcesses(run=run, settings=settings, processes=2)
