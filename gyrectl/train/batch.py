"""A training step's input, built from the run directory: what ``batches/step-NNNNNN.json`` names,
turned into packed micro-batches with per-execution advantages.

    batch file --> recorded calls of those executions --> token trees --> dedup (exact | paths)
               --> pack to training.micro_batch_tokens;  rewards --> group advantages

Batch file (the coordinator writes it when it claims the step)::

    {"step": N, "weights_version": N,
     "executions": [{"execution": "e000012", "task": "t3", "reward": 0.25, "weight_version": 0}, ...]}

The coordinator lists only executions that ended ``ok`` or ``timed_out``. One that recorded no
call at all (the harness failed before asking the model) has nothing to train: it is skipped,
counted in ``num_skipped``, and left out of its group's advantage statistics.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from gyrectl.capture.source import load_executions
from gyrectl.capture.tree import build_tree
from gyrectl.config.schema import Config
from gyrectl.dedup.exact import exact_dedup
from gyrectl.dedup.packing import PackedMicroBatch, pack
from gyrectl.dedup.paths import paths_dedup
from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir
from gyrectl.store.damage import log_skipped
from gyrectl.train.grpo import group_advantages

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchEntry:
    execution: str
    task: str
    reward: float
    weight_version: int | None


@dataclass(frozen=True)
class BatchFile:
    step: int
    weights_version: int
    entries: tuple[BatchEntry, ...]


@dataclass(frozen=True)
class StepBatch:
    micro_batches: tuple[PackedMicroBatch, ...]
    advantages: dict[str, float]
    """Per trained execution."""
    rewards: dict[str, float]
    """Per execution of the batch file (skipped ones included)."""
    num_executions: int
    """Executions trained (with recorded calls)."""
    num_skipped: int
    """Executions of the batch file without any recorded call."""
    naive_tokens: int
    """Sum over calls of prompt + completion length (what per-call training would process)."""
    unique_tokens: int
    """Tokens after dedup, before packing (exact: every trie node; paths: the sampled union)."""
    trained_tokens: int
    """Unique tokens with a non-zero loss weight."""

    @property
    def dedup_ratio(self) -> float:
        return self.naive_tokens / self.unique_tokens if self.unique_tokens else 0.0


def read_batch_file(*, run: RunDir, step: int) -> BatchFile:
    path = run.batch_file(step)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no batch file for step {step} (the coordinator writes it when it "
                        "claims the step)") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg})") from None
    try:
        entries = tuple(_entry(e) for e in raw["executions"])
        batch = BatchFile(step=int(raw["step"]), weights_version=int(raw["weights_version"]), entries=entries)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: expected {{'step', 'weights_version', 'executions': [{{'execution', "
                        f"'task', 'reward'}}, ...]}} ({type(exc).__name__}: {exc})") from None
    if batch.step != step:
        raise UserError(f"{path}: says step {batch.step}, expected {step}")
    return batch


def _entry(obj: dict[str, Any]) -> BatchEntry:
    version = obj.get("weight_version")
    return BatchEntry(execution=str(obj["execution"]), task=str(obj["task"]), reward=float(obj["reward"]),
                      weight_version=None if version is None else int(version))


def build_step_batch(*, run: RunDir, config: Config, batch: BatchFile) -> StepBatch:
    """Everything the step trains on; identical on every rank (pure given the files)."""
    recorded = _recorded_calls(run, [e.execution for e in batch.entries]) if batch.entries else {}
    present = [e for e in batch.entries if recorded.get(e.execution)]
    trees = [build_tree(e.execution, recorded[e.execution]) for e in present]
    if config.dedup.mode == "exact":  # token mean over (path, sampled token) pairs: DAPO-style token-level GRPO
        weighted = exact_dedup(trees, normalisation="token")
    else:  # a different sample every step, the same on every rank and on a retry
        weighted = paths_dedup(trees, j_max=config.dedup.j_max, seed=config.run.seed + batch.step)
    advantages = group_advantages(rewards={e.execution: e.reward for e in present},
                                  groups={e.execution: e.task for e in present})
    return StepBatch(
        micro_batches=tuple(pack(weighted, budget=config.training.micro_batch_tokens)),
        advantages=advantages, rewards={e.execution: e.reward for e in batch.entries},
        num_executions=len(present), num_skipped=len(batch.entries) - len(present),
        naive_tokens=sum(t.num_naive_tokens for t in trees), unique_tokens=sum(w.num_tokens for w in weighted),
        trained_tokens=sum(w.num_trained for w in weighted))


def _recorded_calls(run: RunDir, executions: list[str]) -> dict:
    """The batch's calls only (the capture store's index): a step's cost does not grow with the run."""
    # No capture file at all (nothing was ever recorded): every execution of the batch is skipped.
    if not any(run.trajectories_dir.glob("calls*")):
        return {}
    recorded = load_executions(run.path, executions)
    log_skipped(recorded.skipped, log)
    for execution, count in recorded.unrecoverable.items():
        log.warning("execution %s: %d call(s) extend a damaged record and are left out of training", execution, count)
    return recorded.calls
