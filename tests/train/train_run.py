"""A small real run directory for the training step, and the naive per-path GRPO reference.

Executions come from ``agent_shapes.all_patterns`` (every branch kind); their behaviour logprobs
are the tiny model's own plus noise, so importance weights sit around 1 and some hit the cap;
one call has no logprobs at all (importance weight 1).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import CaptureWriter
from gyrectl.config import dump_config
from gyrectl.config.schema import Config, DedupConfig, ModelConfig, RunConfig, TrainingConfig
from gyrectl.run.rundir import RunDir
from gyrectl.train.grpo import policy_loss

from agent_shapes import all_patterns
from naive_paths import path_nll, root_to_leaf_paths, sequence, trainable_positions
from reference_losses import Sequence

REPO = Path(__file__).resolve().parents[2]
TRAINING = TrainingConfig(lr=1e-3, micro_batch_tokens=256, clip_eps=0.2, max_importance_weight=2.0)


@dataclasses.dataclass(frozen=True)
class Rollout:
    """One execution of a batch: its task, reward and recorded calls."""

    execution: str
    task: str
    reward: float
    records: tuple[CallRecord, ...]


def make_run(root: Path, *, tiny_model_dir: Path, training: TrainingConfig = TRAINING,
             dedup: DedupConfig = DedupConfig()) -> RunDir:
    run = RunDir.create(root, "run")
    config = Config(run=RunConfig(name="run", output_root=str(root)), training=training, dedup=dedup,
                    model=ModelConfig(path=str(tiny_model_dir), dtype="float32"))
    run.config_file.write_text(dump_config(config))
    shutil.copytree(tiny_model_dir, run.weights_dir(0))
    return run


def rollouts(model, *, tasks: dict[str, tuple[str, float]], seed: int, version: int = 0) -> list[Rollout]:
    """``tasks``: execution -> (task, reward). Behaviour logprobs = ``model``'s + U(-1, 1) noise."""
    rng = np.random.default_rng(seed)
    out = []
    for i, (execution, (task, reward)) in enumerate(tasks.items()):
        records = [_with_behaviour(model, r, rng, version) for r in all_patterns(execution, seed=seed + i)]
        if i == 1:  # a call whose logprobs were not recorded
            records[0] = dataclasses.replace(records[0], logprobs=None)
        out.append(Rollout(execution=execution, task=task, reward=reward, records=tuple(records)))
    return out


@torch.no_grad()
def _with_behaviour(model, record: CallRecord, rng: np.random.Generator, version: int) -> CallRecord:
    positions = list(range(len(record.prompt_token_ids), len(sequence(record))))
    own = -path_nll(model, sequence(record), positions)
    noisy = own.numpy() + rng.uniform(-1.0, 1.0, size=len(positions))
    return dataclasses.replace(record, logprobs=tuple(float(x) for x in noisy),
                               weight_version=record.weight_version + version)


def record_calls(run: RunDir, batch: list[Rollout]) -> None:
    with CaptureWriter(run.calls_store, fsync=False) as writer:
        for rollout in batch:
            for record in rollout.records:
                writer.append(record)


def write_batch(run: RunDir, *, step: int, batch: list[Rollout], without_calls: tuple[str, ...] = ()) -> None:
    entries = [{"execution": r.execution, "task": r.task, "reward": r.reward, "weight_version": step}
               for r in batch]
    entries += [{"execution": e, "task": "lonely", "reward": 0.0, "weight_version": step} for e in without_calls]
    run.write_json(run.batch_file(step), {"step": step, "weights_version": step, "executions": entries})


def behaviour_logprob(path: tuple[int, ...], t: int, records: tuple[CallRecord, ...]) -> float:
    """The logprob recorded by the first call (arrival order) that sampled ``path[t]`` after
    ``path[:t]`` -- from the raw records, no tree code."""
    for r in records:
        if len(r.prompt_token_ids) <= t < len(sequence(r)) and sequence(r)[:t + 1] == path[:t + 1]:
            return float("nan") if r.logprobs is None else r.logprobs[t - len(r.prompt_token_ids)]
    raise AssertionError(f"position {t} was sampled by no call")


def naive_grpo_loss(model, batch: list[Rollout], advantages: dict[str, float],
                    training: TrainingConfig = TRAINING) -> torch.Tensor:
    """Every root-to-leaf path its own causal forward; the GRPO loss as a mean over every
    (path, sampled token) pair of the batch -- what exact dedup's token normalisation promises."""
    logprob, behaviour, advantage = [], [], []
    for rollout in batch:
        for path in root_to_leaf_paths(list(rollout.records)):
            positions = trainable_positions(path, list(rollout.records))
            logprob.append(-path_nll(model, path, positions))
            behaviour += [behaviour_logprob(path, t, rollout.records) for t in positions]
            advantage += [advantages[rollout.execution]] * len(positions)
    logprob = torch.cat(logprob)
    weight = torch.full_like(logprob, 1.0 / len(logprob))
    return policy_loss(logprob=logprob, behaviour_logprob=torch.tensor(behaviour), advantage=torch.tensor(advantage),
                       loss_weight=weight, clip_eps=training.clip_eps,
                       max_importance_weight=training.max_importance_weight).loss


def path_sequences(model, batch: list[Rollout], advantages: dict[str, float],
                   proximal: dict | None = None) -> list[Sequence]:
    """Every root-to-leaf path of ``batch`` as ``reference_losses.Sequence``: its sampled tokens'
    logprobs under ``model`` (its own causal forward), proximal logprobs from ``proximal``
    ((execution, path) -> tensor; default these logprobs, detached), behaviour logprobs as recorded."""
    out = []
    for rollout in batch:
        records = list(rollout.records)
        for path in root_to_leaf_paths(records):
            positions = trainable_positions(path, records)
            logp = -path_nll(model, path, positions)
            prox = logp.detach() if proximal is None else proximal[rollout.execution, path]
            out.append(Sequence(logp=logp, proximal=prox, advantage=advantages[rollout.execution],
                                behaviour=torch.tensor([behaviour_logprob(path, t, rollout.records)
                                                        for t in positions])))
    return out


def torchrun_step(run: RunDir, *, step: int, nproc: int = 2, timeout: float = 300,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node=NPROC -m gyrectl.train --run-dir RUN --step N``."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "gyrectl.train", "--run-dir", str(run.path), "--step", str(step)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def train_step(run: RunDir, *, step: int, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m gyrectl.train --run-dir RUN --step N``: one process, no torchrun."""
    command = [sys.executable, "-m", "gyrectl.train", "--run-dir", str(run.path), "--step", str(step)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def resident_step(run: RunDir, *, step: int, group: str, nproc: int = 0) -> subprocess.Popen:
    """``python -m gyrectl.train ... --resident --group GROUP`` (with ``nproc`` > 0 under torchrun as
    the coordinator starts it, ``gyrectl.train.torchrun``: the returned process is the agent),
    started and left running: the caller writes requests, the stop file, and waits for it. Its
    output goes to ``logs/resident-GROUP.log`` (a pipe nobody reads while it runs could fill up)."""
    command = ["-m", "gyrectl.train", "--run-dir", str(run.path), "--step", str(step), "--resident", "--group", group]
    if nproc:
        command = ["-m", "gyrectl.train.torchrun", "--standalone", f"--nproc_per_node={nproc}", *command]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(resident_log(run, group=group), "w") as log:
        return subprocess.Popen([sys.executable, *command], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def resident_log(run: RunDir, *, group: str) -> Path:
    return run.logs_dir / f"resident-{group}.log"


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of an HF folder, whichever way it is split into ``*.safetensors`` files."""
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(path)))
    return out


def read_trainer_state(run: RunDir, *, version: int, scratch: Path) -> dict:
    """The DCP folder ``checkpoints/optimizer/vN`` as one full state dict (``optimizer``, and
    ``model`` with master weights): a test may gather what no rank ever does."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from gyrectl.train.checkpoint import trainer_state_dir

    out = scratch / f"trainer-state-v{version}.pt"
    dcp_to_torch_save(trainer_state_dir(run=run, version=version), out)
    return torch.load(out, weights_only=False)
