"""A real pretrained model through the whole loop, as CI can afford it: SmolLM2-135M-Instruct (the
folder ``scripts/setup.sh`` builds with ``gyrectl model smollm2``) on ``configs/local-smollm2.yaml``,
one training step of whole GRPO groups on the local backend (groups without a learning signal kept
out: ``training.skip_uniform_groups``), the held-out evaluation of the starting weights and of the
trained ones (served by a live reload of what the step exported), none of it an infrastructure
failure. ~2 min on two cores.

What the tiny random model hides shows here: SmolLM2's own tokenizer and chat template through the
gateway, its 49k vocabulary in the trainer's logits, a 163M-parameter step and reload on CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gyrectl.config import load_config
from gyrectl.model.smollm2 import build_smollm2

from batch_groups import assert_whole_groups

pytestmark = [pytest.mark.loop, pytest.mark.vllm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs/local-smollm2.yaml"
BATCH = 16
EVAL_TASKS = 8


@pytest.fixture(scope="module")
def smollm2_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder setup built, or one built here (the same code) on a machine that has none yet."""
    built = REPO / "models" / "smollm2"
    if (built / "config.json").exists():
        return built
    out = tmp_path_factory.mktemp("models") / "smollm2"
    build_smollm2(out)
    return out


@pytest.fixture(scope="module")
def one_step(cli, smollm2_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    held_out = root / "eval_tasks.jsonl"
    lines = (REPO / "examples/arith/eval_tasks.jsonl").read_text().splitlines()
    held_out.write_text("\n".join(lines[::len(lines) // EVAL_TASKS][:EVAL_TASKS]) + "\n")  # all families
    result = cli("launch", str(CONFIG), "--wait", "--json", "--set", f"run.output_root={root}",
                 "--set", f"model.path={smollm2_model}", "--set", "run.steps=1",
                 "--set", f"training.batch_executions={BATCH}", "--set", f"eval.tasks={held_out}",
                 "--set", "training.skip_uniform_groups=true", timeout=1800)
    run_dir = root / load_config(CONFIG).run.name
    head_log = run_dir / "logs" / "head.log"
    assert result.returncode == 0, f"{result.stderr}\n--- head.log ---\n" + (
        head_log.read_text()[-5000:] if head_log.exists() else "")
    return run_dir


def _status(cli, run_dir: Path) -> dict:
    result = cli("status", str(run_dir), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_one_step_of_whole_groups_trains_the_real_model(cli, one_step: Path) -> None:
    view = _status(cli, one_step)
    assert view["job"]["reason"] == "completed"
    group_size = load_config(CONFIG).rollout.executions_per_task
    assert assert_whole_groups(one_step, group_size=group_size) == BATCH // group_size
    [step] = view["steps"]
    assert step["groups"] == BATCH // group_size and step["trained_tokens"] > 0
    executions = view["executions"]
    assert executions["infra_failures"] == 0
    # training.skip_uniform_groups: groups that all got one reward were kept out and made up for,
    # unless the draws ran out (max_batch_draws 4: three batches' worth), and are never trained
    allowance = BATCH * (load_config(CONFIG).training.max_batch_draws - 1)
    assert step["groups_without_signal"] == 0 or executions["uniform_skipped"] + group_size > allowance
    assert executions["finished"] >= BATCH + executions["uniform_skipped"]
    assert step["signal_token_share"] == 1.0 or step["groups_without_signal"] == step["groups"]  # none trained


def test_the_start_and_the_trained_weights_are_evaluated_without_an_infrastructure_failure(cli, one_step) -> None:
    evals = _status(cli, one_step)["evals"]
    assert [e["weight_version"] for e in evals] == [0, 1]
    assert all(e["executions"] == EVAL_TASKS and e["infra_failures"] == 0 for e in evals), evals
    assert all(e["pass_at_1"] is not None for e in evals)
