"""One cell's switches between roles, measured inside a real Slurm allocation (run by
``python -m benchmarks.coordination``, which submits it; the allocation's first node is the head,
its second the cell).

train -> rollout:  stop the training step (scancel) | start the vLLM step (srun until Slurm runs
                   it) | the engine's own start (until /health answers) | back in the gateway
rollout -> train:  drain at the gateway (a call mid-stream is cut and parked, grace 0) | stop the
                   vLLM step (scancel, srun gone; no grace, as the actuator does once no call runs) |
                   start the torchrun step (srun until Slurm runs it) | torchrun's worker up and its
                   process group formed (probe.py)

Prints one JSON line per round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from gyrectl.capture.store import CaptureWriter
from gyrectl.cluster.base import StepSpec
from gyrectl.cluster.slurm.hetjob import SlurmCluster
from gyrectl.config import load_config
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.launch.steps import step_factory
from gyrectl.rollout.health import step_alive, wait_healthy
from gyrectl.rollout.server import served_model_name, server_url
from gyrectl.run.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]


def _until(predicate, timeout_s: float = 120.0, poll_s: float = 0.01) -> float:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(poll_s)
    return time.time()


def _stream_call(gateway_url: str, token: str, model: str) -> None:
    """A long streaming call, to be cut mid-stream by the drain (parked until a server serves again)."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "count"}], "stream": True,
                       "max_tokens": 4000, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{gateway_url}/x/bench/v1/chat/completions", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            for _ in response:
                pass
    except urllib.error.HTTPError as exc:
        print(f"the benchmark's call failed: {exc.code} {exc.read()[:500]!r}", file=sys.stderr)
    except OSError:
        pass  # the gateway closes at the end of the benchmark


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = load_config(REPO / "configs/slurm-tiny.yaml", [f"model.path={args.model}", "cluster.backend=slurm"])
    run = RunDir.create(Path(tempfile.mkdtemp(dir=REPO / "runs")), "switch")
    os.symlink(Path(args.model).resolve(), run.weights_dir(0))
    cluster = SlurmCluster()
    node = next(n for n in cluster.discover()[1:])
    steps, token, model = step_factory(config, run), run.token(), served_model_name(config)
    writer = CaptureWriter(run.calls_store)
    gateway = BackgroundGateway(GatewaySettings(token=token, server_key=run.server_key(), models=(model,),
                                                server_wait_s=600), sink=writer)
    pool, url = gateway.gateway.pool, server_url(config, cell=0, address=node.address)
    probe_out = run.path / "probe.jsonl"
    try:
        train_step = ""
        for round_ in range(args.rounds + 1):
            # train -> rollout
            t0 = time.time()
            if train_step:
                cluster.stop_step(train_step, grace_s=0.0)
            t_stopped = time.time()
            server = cluster.start_step(steps.rollout(cell=0, nodes=(node.name,), version=0))
            # B023 below: _until calls its lambda at once, before the loop rebinds the step id it reads
            t_running = _until(lambda: cluster.slurm_step(server) is not None)  # noqa: B023
            wait_healthy(url, alive=step_alive(cluster, server), timeout_s=300, poll_s=0.05)
            t_ready = time.time()
            gateway.call(pool.add, "cell0", url, weight_version=0)
            t_routed = time.time()
            threading.Thread(target=_stream_call, args=(gateway.url, token, model), daemon=True).start()
            _until(lambda: sum(v.num_inflight for v in gateway.servers()) > 0, poll_s=0.05)
            time.sleep(1.0)  # mid-stream
            # rollout -> train
            t1 = time.time()
            gateway.call(pool.drain, "cell0", grace_s=0.0)
            t_drained = _until(lambda: all(v.num_inflight == 0 for v in gateway.servers() if v.name == "cell0"))
            cluster.stop_step(server, grace_s=0.0)  # as the actuator stops a drained server
            t_server_gone = time.time()
            probe = StepSpec(name="probe", nodes=(node.name,), cpus_per_node=config.cluster.cpus_per_node,
                             command=(sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1",
                                      "--rdzv-backend=c10d", f"--rdzv-endpoint={node.name}:{29400 + round_}",
                                      f"--rdzv-id=probe{round_}", str(Path(__file__).with_name("probe.py")),
                                      str(probe_out)),
                             log_path=run.logs_dir / "probe.log")
            train_step = cluster.start_step(probe)
            # B023 below: as above, each lambda runs inside this iteration's _until
            t_train_running = _until(lambda: cluster.slurm_step(train_step) is not None  # noqa: B023
                                     or cluster.step_status(train_step).state.ended)  # noqa: B023
            _until(lambda: cluster.step_status(train_step).state.ended)  # noqa: B023
            worker = [json.loads(line) for line in probe_out.read_text().splitlines()][-1]
            if round_ == 0:
                continue
            print(json.dumps({
                "to_rollout": {"stop_train_step": t_stopped - t0, "start_server_step": t_running - t_stopped,
                               "engine_start": t_ready - t_running, "route": t_routed - t_ready},
                "to_train": {"drain": t_drained - t1, "stop_server_step": t_server_gone - t_drained,
                             "start_train_step": t_train_running - t_server_gone,
                             "worker_process_up": worker["started"] - t_train_running,
                             "torch_import": worker["imported"] - worker["started"],
                             "process_group_up": worker["group_up"] - worker["imported"]}}), flush=True)
    finally:
        # The gateway is not closed: the last round's call is parked with no server left to go to,
        # and a graceful close would wait for it; the process's exit ends it.
        cluster.close()
        writer.close()


if __name__ == "__main__":
    main()
