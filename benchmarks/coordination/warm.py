"""Warm vs cold role switches of one cell, side by side in one run, engine included (printed as
Markdown; the figures in docs/performance.md):

    PYTHONPATH=. .venv/bin/python -m benchmarks.coordination.warm --rounds 3        # local backend
    PYTHONPATH=. .venv/bin/python -m benchmarks.coordination --warm-only          # the Slurm cluster

On Slurm it runs inside a two-node allocation (``python -m benchmarks.coordination`` submits it
with ``--backend slurm``): the first node is the head, the cell's server is an srun step on the
second, started with ``--overlap`` as a run's server is when it may sleep beside a trainer.

Each round moves the cell both ways twice, with the calls the actuator makes:

    cold (rollout.sleep_level 0)  to train:   drain at the gateway, stop the server step (until it ended)
                                  to rollout: start a server step, until /health answers, route
    warm (rollout.sleep_level 1)  to train:   drain at the gateway, POST /sleep?level=1
                                  to rollout: POST /wake_up, reload the newest weights (the live
                                              sync: pause, reload, reset the prefix cache, resume), route

and, while the cell would train, what its server costs: CPU seconds of the server's process tree
over a window, sleeping (warm) vs not there at all (cold) and awake but idle (for reference). The
first cold start (the cell's first) is not counted: every cell pays it once either way.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from gyrectl.capture.store import CaptureWriter
from gyrectl.cluster.base import Node
from gyrectl.cluster.local.cluster import LocalCluster
from gyrectl.cluster.slurm.hetjob import SlurmCluster
from gyrectl.config import load_config
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.launch.steps import step_factory
from gyrectl.rollout.health import step_alive, wait_healthy
from gyrectl.rollout.server import served_model_name, server_url
from gyrectl.rollout.sleep import sleep_server, wake_server
from gyrectl.rollout.weights import HttpWeightSync
from gyrectl.run.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
CONFIGS = {"local": "configs/local-tiny.yaml", "slurm": "configs/slurm-tiny.yaml"}


def _cell_node(nodes: Sequence[Node]) -> Node:
    """The node the moving cell is on: the local backend's second virtual node, or the
    allocation's second node (its first is the head)."""
    return next((n for n in nodes if n.het_group == 1), None) or nodes[1]


def _server_tree(weights: Path) -> list[psutil.Process]:
    """The vLLM server of ``weights`` and every process under it (engine core, workers)."""
    roots = [p for p in psutil.process_iter(["cmdline"])
             if "vllm.entrypoints.openai.api_server" in " ".join(p.info["cmdline"] or ()) and
             str(weights) in " ".join(p.info["cmdline"] or ())]
    return [tree for root in roots for tree in [root, *root.children(recursive=True)]]


def _cpu_s(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def cpu_over(weights: Path, window_s: float) -> float:
    """CPU seconds the server's processes used over ``window_s`` (0 when there is no server)."""
    processes = _server_tree(weights)
    before = _cpu_s(processes)
    time.sleep(window_s)
    return _cpu_s(processes) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "models/tiny")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu-window-s", type=float, default=10.0)
    parser.add_argument("--backend", choices=("local", "slurm"), default="local",
                        help="slurm: inside an allocation of two nodes (see the module's docstring)")
    args = parser.parse_args()
    config = load_config(REPO / CONFIGS[args.backend], [f"model.path={args.model.resolve()}",
                                                         f"cluster.backend={args.backend}"])
    (REPO / "runs").mkdir(exist_ok=True)
    run = RunDir.create(Path(tempfile.mkdtemp(dir=REPO / "runs")), "warm")
    weights = run.weights_dir(0)
    weights.symlink_to(args.model.resolve())
    cluster = LocalCluster(config) if args.backend == "local" else SlurmCluster()
    node = _cell_node(cluster.discover())
    steps, key, model = step_factory(config, run), run.server_key(), served_model_name(config)
    writer = CaptureWriter(run.calls_store)
    gateway = BackgroundGateway(GatewaySettings(token=run.token(), admin_token=run.admin_token(), server_key=key,
                                                models=(model,)), sink=writer)
    pool, url = gateway.gateway.pool, server_url(config, cell=0, address=node.address)
    sync = HttpWeightSync(server_key=key)

    def cold_start() -> str:
        step = cluster.start_step(steps.rollout(cell=0, nodes=(node.name,), version=0))
        wait_healthy(url, alive=step_alive(cluster, step), timeout_s=600, poll_s=0.05)
        gateway.call(pool.add, "cell0", url, weight_version=0)
        return step

    def drain() -> None:
        gateway.call(pool.drain, "cell0", grace_s=0.0)
        while any(v.num_inflight for v in gateway.servers() if v.name == "cell0"):
            time.sleep(0.01)

    rows: dict[str, list[float]] = {name: [] for name in (
        "cold to_train", "cold to_rollout", "warm to_train", "warm to_rollout",
        "cpu asleep", "cpu gone", "cpu awake idle")}
    try:
        step = cold_start()  # the cell's first start: paid once either way
        version = 0
        for _ in range(args.rounds):
            rows["cpu awake idle"].append(cpu_over(weights, args.cpu_window_s))
            # warm: sleep, (train), wake + newest weights + route
            t0 = time.perf_counter()
            drain()
            sleep_server(url, level=1, key=key)
            rows["warm to_train"].append(time.perf_counter() - t0)
            rows["cpu asleep"].append(cpu_over(weights, args.cpu_window_s))
            t0 = time.perf_counter()
            wake_server(url, key=key)
            version += 1
            sync.sync(url, weights, version)
            gateway.call(pool.add, "cell0", url, weight_version=version)
            rows["warm to_rollout"].append(time.perf_counter() - t0)
            # cold: stop, (train), start + route
            t0 = time.perf_counter()
            drain()
            cluster.stop_step(step, grace_s=0.0)
            while not cluster.step_status(step).state.ended:
                time.sleep(0.01)
            rows["cold to_train"].append(time.perf_counter() - t0)
            rows["cpu gone"].append(cpu_over(weights, args.cpu_window_s))
            t0 = time.perf_counter()
            step = cold_start()
            rows["cold to_rollout"].append(time.perf_counter() - t0)
    finally:
        cluster.close()
        gateway.close()
        writer.close()
    _print(rows, args)


def _print(rows: dict[str, list[float]], args: argparse.Namespace) -> None:
    def cell(name: str) -> str:
        values = rows[name]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    print(f"### Warm vs cold switch, {args.backend} backend, tiny model on CPU, {args.rounds} rounds "
          f"(median (min-max), s)\n")
    print("| direction | cold (sleep_level 0) | warm (sleep_level 1) | cold / warm |")
    print("|---|---|---|---|")
    for direction in ("to_rollout", "to_train"):
        cold, warm = (statistics.median(rows[f"{kind} {direction}"]) for kind in ("cold", "warm"))
        label = "train -> rollout (ready_s)" if direction == "to_rollout" else "rollout -> train"
        print(f"| {label} | {cell(f'cold {direction}')} | {cell(f'warm {direction}')} | {cold / warm:.1f}x |")
    print(f"\nCPU seconds of the cell's server over {args.cpu_window_s:.0f} s while the cell would train: "
          f"asleep {cell('cpu asleep')}, stopped {cell('cpu gone')}, awake and idle {cell('cpu awake idle')}.")


if __name__ == "__main__":
    main()
