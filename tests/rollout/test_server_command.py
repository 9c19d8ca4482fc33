"""The rollout server's argv and environment as a pure function of the config (no server), and the
rollout step the coordinator's ``StepFactory`` builds from it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gyrectl.config import parse_config
from gyrectl.config.schema import Config
from gyrectl.errors import RuntimeFailure
from gyrectl.launch.steps import step_factory
from gyrectl.rollout.health import wait_healthy
from gyrectl.rollout.server import engine_flags, rollout_server, served_model_name, server_url
from gyrectl.run.rundir import RunDir

WEIGHTS = Path("/runs/r/checkpoints/v3")


def config(**sections: Any) -> Config:
    return parse_config({"model": {"path": "models/tiny", "dtype": "float32"}, **sections})


def flag_value(command: tuple[str, ...], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_cpu_server_command_and_env() -> None:
    launch = rollout_server(config(rollout={"server_port": 8100}), cell=2, weights_dir=WEIGHTS, python="/venv/python")
    assert launch.command[:3] == ("/venv/python", "-m", "vllm.entrypoints.openai.api_server")
    assert flag_value(launch.command, "--model") == str(WEIGHTS)
    assert flag_value(launch.command, "--served-model-name") == "tiny" == launch.model_name
    assert flag_value(launch.command, "--host") == "127.0.0.1"
    assert flag_value(launch.command, "--port") == "8102" == str(launch.port)  # local: base + cell
    assert flag_value(launch.command, "--dtype") == "float32"
    assert flag_value(launch.command, "--tensor-parallel-size") == "1"
    assert flag_value(launch.command, "--pipeline-parallel-size") == "1"
    assert flag_value(launch.command, "--max-logprobs") == "20"
    assert flag_value(launch.command, "--tool-call-parser") == "hermes"
    assert {"--enable-scale-out", "--enable-auto-tool-choice"} <= set(launch.command)
    assert launch.env == {"VLLM_SERVER_DEV_MODE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                          "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
                          "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}


def test_gpu_server_on_slurm() -> None:
    cfg = config(cluster={"backend": "slurm", "nodes": 4, "gpus_per_node": 8},
                 model={"path": "/shared/models/Qwen3-32B", "dtype": "bfloat16", "tensor_parallel": 4,
                        "pipeline_parallel": 2},
                 rollout={"server_port": 9000})
    launch = rollout_server(cfg, cell=3, weights_dir=WEIGHTS)
    # One command for every node of the cell: each node binds its own address, looked up there
    assert launch.command[:6] == (sys.executable, "-m", "gyrectl.cluster.slurm.bind",
                                  sys.executable, "-m", "vllm.entrypoints.openai.api_server")
    assert "--host" not in launch.command  # never 0.0.0.0: slurm_bind appends the node's address
    assert flag_value(launch.command, "--served-model-name") == "Qwen3-32B"
    assert launch.port == 9000  # every cell has its own nodes: one port for all
    assert flag_value(launch.command, "--dtype") == "bfloat16"
    assert flag_value(launch.command, "--tensor-parallel-size") == "4"
    assert flag_value(launch.command, "--pipeline-parallel-size") == "2"
    assert launch.env == {"VLLM_SERVER_DEV_MODE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    assert server_url(cfg, cell=3, address="node7") == "http://node7:9000"


def test_a_server_key_locks_every_route() -> None:
    launch = rollout_server(config(), cell=0, weights_dir=WEIGHTS, server_key="k" * 43)
    assert launch.env["VLLM_API_KEY"] == "k" * 43  # vLLM's own check on /v1, never on the command line
    assert "k" * 43 not in " ".join(launch.command)
    assert flag_value(launch.command, "--middleware") == "gyrectl.rollout.guard.ServerKeyGuard"  # the rest
    assert "--middleware" not in rollout_server(config(), cell=0, weights_dir=WEIGHTS).command


def test_engine_args_become_flags_after_ours() -> None:
    args = {"max-model-len": 4096, "enforce-eager": True, "enable-prefix-caching": False, "seed": None,
            "--tool-call-parser": "llama3_json", "compilation-config": {"level": 0}, "cuda-graph-sizes": [1, 2]}
    assert engine_flags(args) == ("--max-model-len", "4096", "--enforce-eager", "--tool-call-parser", "llama3_json",
                                  "--compilation-config", '{"level": 0}', "--cuda-graph-sizes", "1", "2")
    command = rollout_server(config(rollout={"engine_args": args}), cell=0, weights_dir=WEIGHTS).command
    assert command[-len(engine_flags(args)):] == engine_flags(args)
    # argparse keeps the last value, so an engine arg overrides our default parser
    last = max(i for i, arg in enumerate(command) if arg == "--tool-call-parser")
    assert command[last + 1] == "llama3_json"


def test_kv_cache_sized_by_engine_args_leaves_the_env_alone() -> None:
    # vLLM lets VLLM_CPU_KVCACHE_SPACE win over --kv-cache-memory-bytes, so setting both would
    # silently ignore the engine arg.
    launch = rollout_server(config(rollout={"engine_args": {"kv-cache-memory-bytes": 2**32}}), cell=0,
                            weights_dir=WEIGHTS)
    assert "VLLM_CPU_KVCACHE_SPACE" not in launch.env
    assert flag_value(launch.command, "--kv-cache-memory-bytes") == str(2**32)


def test_served_name_comes_from_the_model_folder() -> None:
    assert served_model_name(config(model={"path": "/a/b/my-model/"})) == "my-model"
    assert served_model_name(parse_config({})) == "model"  # no model (simulated runs)


def test_step_factory_rollout_step(tmp_path: Path) -> None:
    cfg = config(cluster={"nodes": 2, "cpus_per_node": 1}, rollout={"server_port": 8100})
    run = RunDir.create(tmp_path, "run")
    spec = step_factory(cfg, run).rollout(cell=1, nodes=("local-1",), version=4)
    assert spec.env["VLLM_API_KEY"] == run.server_key()
    assert spec.name == "rollout-cell1" and spec.nodes == ("local-1",)
    assert flag_value(spec.command, "--model") == str(run.weights_dir(4))
    assert flag_value(spec.command, "--port") == "8101"
    assert spec.env["GYRECTL_ROLE"] == "rollout" and spec.env["GYRECTL_CELL"] == "1"
    assert spec.env["GYRECTL_WEIGHTS_VERSION"] == "4" and spec.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert spec.log_path == run.logs_dir / "rollout-cell1.log"
    assert (spec.cpus_per_node, spec.gpus_per_node) == (1, 0)


def test_health_wait_fails_fast_when_the_step_ended() -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeFailure, match="ended before it answered"):
        wait_healthy("http://127.0.0.1:9", alive=lambda: False, timeout_s=60)
    assert time.monotonic() - started < 1


def test_health_wait_has_a_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeFailure, match="did not answer /health within"):
        wait_healthy("http://127.0.0.1:9", alive=lambda: True, timeout_s=1, poll_s=0.2)
    assert time.monotonic() - started < 3
