"""20,000 agent sessions open at once through the head's gateway, loopback only, bounded in time.

Each session is one long streaming call of an execution of its own (16 chunks, 4 s apart: about
a minute), started evenly over 40 s by four load processes, so at the end of the ramp all 20,000
are open together. Upstream: four stub servers (vLLM's reply shape, no model) as four routed
servers. The gateway is ``GatewayProcesses``, what the head starts for
``cluster.head.gateway_processes``: one process holds two sockets per session (client and
upstream), so on a box whose hard open-files limit is 20,000 (this one) a single process tops out
near 10,000 sessions and the soak takes four.

Checked: no session saw an error, every one of them was open at one instant, every call was
recorded (one record per execution across the processes' capture stores); the gateway's memory
per session is printed (docs/performance.md keeps the figure).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gyrectl.capture.store import scan
from gyrectl.gateway.processes import GatewayProcesses
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.run.rundir import RunDir

pytestmark = pytest.mark.slow
SESSIONS = 20_000
LOAD_PROCESSES = 4
STUBS = 4
GATEWAY_PROCESSES = 4
RAMP_S, PAUSE_MS = 40.0, 4000.0  # 15 pauses of 4 s: every call outlasts the ramp
STUB = Path(__file__).parents[2] / "benchmarks" / "gateway" / "stub_upstream.py"
CLIENT = Path(__file__).with_name("soak_client.py")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def most_open_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


def test_twenty_thousand_open_sessions(tmp_path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * SESSIONS // GATEWAY_PROCESSES + 1024
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.fail(f"the hard open-files limit {hard} is below the {needed} each gateway process needs here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the children inherit it
    stubs = [subprocess.Popen([sys.executable, str(STUB), "--tokens", "16"], stdout=subprocess.PIPE, text=True)
             for _ in range(STUBS)]
    run = RunDir.create(tmp_path / "runs", "soak")
    gateway = None
    try:
        urls = [stub.stdout.readline().strip() for stub in stubs]
        gateway = GatewayProcesses(run=run, settings=GatewaySettings(
            token=run.token(), admin_token=run.admin_token(), models=("tiny",)),
            processes=GATEWAY_PROCESSES)
        for i, url in enumerate(urls):
            gateway.add_server(f"stub{i}", url, weight_version=0)
        idle = sum(rss_kib(pid) for pid in gateway.process_ids())
        peak, sampling = [idle], threading.Event()

        def sample() -> None:
            while not sampling.wait(1.0):
                peak.append(sum(rss_kib(pid) for pid in gateway.process_ids()))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        share = SESSIONS // LOAD_PROCESSES
        clients = [subprocess.Popen([sys.executable, str(CLIENT), gateway.url, run.token(), str(i * share),
                                     str((i + 1) * share), str(RAMP_S), str(PAUSE_MS), f"127.0.0.{i + 2}"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for i in range(LOAD_PROCESSES)]
        results = []
        for client in clients:
            out, err = client.communicate(timeout=600)
            assert client.returncode == 0, err[-3000:]
            results.append(json.loads(out))
        sampling.set()
        sampler.join()
        errors = [e for r in results for e in r["errors"]]
        assert not errors, f"{len(errors)} sessions failed, e.g. {errors[:5]}"
        intervals = [tuple(pair) for r in results for pair in r["intervals"]]
        assert len(intervals) == SESSIONS
        assert most_open_at_once(intervals) == SESSIONS
        assert gateway.alive() == [True] * GATEWAY_PROCESSES
        gateway.close()  # each process writes what it holds before it exits
        stores = sorted(run.trajectories_dir.glob("calls-g*.seg"))
        records = [r for store in stores for r in scan(store).records]
        assert len(records) == SESSIONS
        assert {r.call.meta.execution for r in records} == {f"soak-{i}" for i in range(SESSIONS)}
        per_session = (max(peak) - idle) / SESSIONS
        print(f"\nsoak: {SESSIONS} sessions open at once through {GATEWAY_PROCESSES} gateway processes, 0 errors, "
              f"{len(records)} records; gateway memory {idle / 1024:.0f} MiB idle, {max(peak) / 1024:.0f} MiB at "
              f"the peak: {per_session:.1f} KiB per open session")
    finally:
        if gateway is not None:
            gateway.close()
        for stub in stubs:
            stub.terminate()
            stub.wait(30)
