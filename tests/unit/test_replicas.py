"""Where a cell's engines run and answer (:mod:`gyrectl.rollout.replicas`), and the launch lines
that put them there: the srun line of the cell's server step and the command each of its tasks
runs (``gyrectl.cluster.slurm.bind``), pinned by golden files.

Regenerate the golden files after an intended change with:
    GYRECTL_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_replicas.py
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from gyrectl.cluster.base import Node
from gyrectl.cluster.slurm.bind import split_options, task_command
from gyrectl.cluster.slurm.hetjob import srun_argv
from gyrectl.config import parse_config
from gyrectl.config.placement import nodes_per_engine, replicas_per_cell, replicas_per_node
from gyrectl.config.schema import Config
from gyrectl.errors import ConfigError
from gyrectl.launch.steps import step_factory
from gyrectl.rollout.replicas import cell_replicas
from gyrectl.run.rundir import RunDir

GOLDEN = Path(__file__).parent / "golden"
NODES = ("gpu-a", "gpu-b", "gpu-c", "gpu-d")
ADDRESS = {name: f"10.0.0.{i + 1}" for i, name in enumerate(NODES)}


def gpu_config(*, tp: int, pp: int = 1, gpus: int = 8, nodes_per_cell: int = 2, nodes: int = 4) -> Config:
    return parse_config({
        "cluster": {"backend": "slurm", "nodes": nodes, "gpus_per_node": gpus, "cpus_per_node": 64},
        "cells": {"nodes_per_cell": nodes_per_cell},
        "model": {"path": "/shared/models/Qwen3-32B", "dtype": "bfloat16", "tensor_parallel": tp,
                  "pipeline_parallel": pp},
        "rollout": {"server_port": 9000}, "run": {"name": "r", "output_root": "/shared/runs"}})


def test_cpu_nodes_serve_one_replica_each():
    config = parse_config({"cluster": {"backend": "slurm", "nodes": 4}, "cells": {"nodes_per_cell": 2}})
    replicas = cell_replicas(config, cell=1, nodes=NODES[2:])
    assert [(r.name, r.node, r.slot) for r in replicas] == [("cell1.0", "gpu-c", 0), ("cell1.1", "gpu-d", 0)]


def test_a_one_replica_cell_keeps_the_name_cells_always_had():
    config = parse_config({"cluster": {"backend": "slurm", "nodes": 2}})
    assert [r.name for r in cell_replicas(config, cell=3, nodes=("n7",))] == ["cell3"]


def test_gpu_groups_of_a_node_are_replicas_of_their_own():
    config = gpu_config(tp=2)
    assert (replicas_per_node(config), nodes_per_engine(config), replicas_per_cell(config)) == (4, 1, 8)
    replicas = cell_replicas(config, cell=0, nodes=NODES[:2])
    assert len(replicas) == replicas_per_cell(config)
    assert [(r.name, r.node, r.slot) for r in replicas[3:5]] == [("cell0.3", "gpu-a", 3), ("cell0.4", "gpu-b", 0)]


def test_an_engine_bigger_than_a_node_spans_nodes_and_answers_on_the_first():
    config = gpu_config(tp=8, pp=2, nodes_per_cell=4)
    assert (replicas_per_node(config), nodes_per_engine(config), replicas_per_cell(config)) == (0, 2, 2)
    assert len(cell_replicas(config, cell=0, nodes=NODES)) == replicas_per_cell(config)
    assert [(r.name, r.node) for r in cell_replicas(config, cell=0, nodes=NODES)] == [("cell0.0", "gpu-a"),
                                                                                     ("cell0.1", "gpu-c")]


def test_an_engine_of_a_node_and_a_half_is_refused():
    with pytest.raises(ConfigError, match="tensor_parallel x pipeline_parallel = 12 GPUs is more than a node's 8"):
        gpu_config(tp=4, pp=3, nodes_per_cell=3, nodes=6)


def test_each_replica_is_reached_on_its_node_and_its_slots_port(tmp_path):
    steps = step_factory(gpu_config(tp=4), RunDir(tmp_path))
    nodes = [Node(name=n, het_group=1, gpus=8, cpus=64, address=ADDRESS[n]) for n in NODES[:2]]
    assert [(s.name, s.url, s.node) for s in steps.replicas(cell=0, nodes=nodes)] == [
        ("cell0.0", "http://10.0.0.1:9000", "gpu-a"), ("cell0.1", "http://10.0.0.1:9001", "gpu-a"),
        ("cell0.2", "http://10.0.0.2:9000", "gpu-b"), ("cell0.3", "http://10.0.0.2:9001", "gpu-b")]


def launch_lines(config: Config, *, tasks: list[tuple[str, int]], visible: list[str]) -> str:
    """The srun line of cell 0's server step on the first nodes, then each task's command and
    environment as bind makes them, one per line: what a golden file pins."""
    steps = step_factory(config)  # the run directory the config names, no server key
    spec = steps.rollout(cell=0, nodes=NODES[:config.cells.nodes_per_cell], version=3)
    argv = srun_argv(spec, target="--jobid=41", step_name="5-rollout-cell0")
    lines = ["srun: " + shlex.join(argv)]
    options, command = split_options(argv[argv.index("gyrectl.cluster.slurm.bind") + 1:])
    for node, local_id in tasks:
        task, env = task_command(command, options, node=node, address_of=ADDRESS.__getitem__, local_id=local_id,
                                 visible_gpus=visible)
        lines.append(f"task {node}/{local_id}: " + " ".join(f"{k}={v}" for k, v in env.items()) + " "
                     + shlex.join(task))
    return "\n".join(lines).replace(sys.executable, "PYTHON") + "\n"  # the interpreter differs between machines


@pytest.mark.parametrize("golden, config, tasks", [
    ("engine-across-nodes.txt", gpu_config(tp=8, pp=2, nodes_per_cell=2), [("gpu-a", 0), ("gpu-b", 0)]),
    ("engine-per-gpu-group.txt", gpu_config(tp=4, nodes_per_cell=1), [("gpu-a", 0), ("gpu-a", 1)]),
])
def test_golden_launch_lines(golden, config, tasks):
    text = launch_lines(config, tasks=tasks, visible=[str(i) for i in range(8)])
    if os.environ.get("GYRECTL_UPDATE_GOLDEN"):
        (GOLDEN / golden).write_text(text)
    assert text == (GOLDEN / golden).read_text(), golden


def test_an_engine_across_nodes_is_one_engine_not_n_servers():
    text = launch_lines(gpu_config(tp=8, pp=2, nodes_per_cell=2), tasks=[("gpu-a", 0), ("gpu-b", 0)],
                        visible=[str(i) for i in range(8)])
    srun, head, worker = text.splitlines()
    assert "--ntasks=2 --ntasks-per-node=1" in srun and "--gres=gpu:8" in srun
    # the first node runs the API server, rank 0; the second a headless rank 1 of the same engine
    assert "vllm.entrypoints.openai.api_server" in head and "--headless" not in head
    assert "--nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 9900" in head
    assert "vllm.entrypoints.cli.main serve --headless" in worker
    assert "--nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 9900" in worker
    assert "--tensor-parallel-size 8" in worker and "--pipeline-parallel-size 2" in worker


def test_replicas_on_one_node_take_their_own_gpus_and_ports():
    text = launch_lines(gpu_config(tp=4, nodes_per_cell=1), tasks=[("gpu-a", 0), ("gpu-a", 1)],
                        visible=["0", "1", "2", "3", "4", "5", "6", "7"])
    srun, first, second = text.splitlines()
    assert "--ntasks=2 --ntasks-per-node=2 --cpus-per-task=32" in srun
    assert first.startswith("task gpu-a/0: CUDA_VISIBLE_DEVICES=0,1,2,3 ") and first.endswith(
        "--port 9000 --host 10.0.0.1")
    assert second.startswith("task gpu-a/1: CUDA_VISIBLE_DEVICES=4,5,6,7 ") and second.endswith(
        "--port 9001 --host 10.0.0.1")


def test_a_plain_server_is_bound_to_its_node_and_nothing_else():
    options, command = split_options(["python", "-m", "vllm", "--host", "0.0.0.0"])
    assert options == {}
    argv, env = task_command(command, options, node="node3", address_of={"node3": "10.0.0.13"}.__getitem__,
                             local_id=0, visible_gpus=[])
    assert argv[-2:] == ["--host", "10.0.0.13"] and env == {}
