"""One GRPO training step: weights vN + batch N -> weights v(N+1), read top to bottom.

    0. v(N+1) exists?  -> done already (a retried step is a no-op; re-append its metrics line
                          if a crash lost it)
    1. join the process group (torchrun's, or a group of one)
    2. prepare the trainer: vN as sharded float32 master weights (FSDP2; each rank reads its
       own slices of the folder), AdamW with the state step N-1 left -- or, in a resident
       trainer that just trained step N-1, take the model and AdamW it holds in memory (see
       :mod:`gyrectl.train.resident`); with ``training.kl_coef > 0`` also the frozen reference
       model, sharded the same way (:mod:`gyrectl.train.reference`)
    3. build the batch: batch file -> calls -> trees -> dedup -> packed micro-batches, advantages
    4. forward/backward over this rank's micro-batches (round-robin), GRPO loss, minus the entropy
       bonus, plus the KL penalty to the reference (:mod:`gyrectl.train.regularizers`)
    5. one AdamW step (gradients summed over ranks by FSDP2's reduce-scatter) at step N's learning
       rate, the gradient clipped to ``training.max_grad_norm`` first (:mod:`gyrectl.train.optim`);
       with ``training.updates_per_batch`` > 1 the batch is that many mini-batches, and 4-5 run once
       for each, after the proximal logprobs of all but the first were taken at vN
       (:mod:`gyrectl.train.proximal`)
    6. save the optimizer state (each rank its shards), then v(N+1) (each rank its files; the
       rename commits the step), then the metrics line

:func:`run_step` is the one-shot step (0-6, then leave the group); :func:`check_step` (0),
:func:`prepare_trainer` (2) and :func:`train_step` (3-6) are its parts, which the resident
trainer calls too: one recipe for both.

Every rank runs the same number of forward/backward passes (FSDP2's collectives must pair up):
a rank with fewer micro-batches repeats one with its loss multiplied by zero.
"""

from __future__ import annotations

import functools
import math
import operator
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from gyrectl.config import load_config
from gyrectl.config.schema import Config, TrainingConfig
from gyrectl.dedup.packing import PackedMicroBatch
from gyrectl.errors import UserError
from gyrectl.run.batch_file import read_batch_file
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender, read_records
from gyrectl.train import checkpoint
from gyrectl.train.batch import StepBatch, build_step_batch
from gyrectl.train.distributed import World, barrier, close_world, init_world, max_over_ranks, sum_over_ranks
from gyrectl.train.forward import logprobs_of, target_logits
from gyrectl.train.grpo import LossStats, token_advantages
from gyrectl.train.loss_shape import micro_batch_policy_loss, scored_targets
from gyrectl.train.memory import GB, MemoryMeter
from gyrectl.train.optim import clip_coefficient, new_optimizer, scale_gradients, set_step_hyperparameters
from gyrectl.train.packed import packed_tensors
from gyrectl.train.policy_export import export_policy
from gyrectl.train.policy_load import empty_policy, load_policy
from gyrectl.train.proximal import Proximal, proximal_logprobs, rank_passes
from gyrectl.train.reference import Reference, load_reference, reference_folder, reference_logprobs
from gyrectl.train.regularizers import RegularizerStats, regularization


@dataclass
class Timer:
    """Wall time per phase (the metrics line's ``time_s``), and the memory each part of the step
    adds (``memory_gb``; spans named apart from the phases: a phase may hold several)."""

    start: float = field(default_factory=time.perf_counter)
    phases: dict[str, float] = field(default_factory=dict)
    memory: MemoryMeter = field(default_factory=MemoryMeter)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        begin = time.perf_counter()
        yield
        # Summed: with several updates per batch, forward_backward and optimizer come round again.
        self.phases[phase] = round(self.phases.get(phase, 0.0) + time.perf_counter() - begin, 4)


@dataclass(frozen=True)
class StepResult:
    loss: float
    stats: LossStats
    grad_norm: float
    """L2 norm of the step's whole gradient, before any clipping (with several updates per batch,
    the mean over them)."""
    regularizers: RegularizerStats = RegularizerStats()
    updates: int = 1

    @classmethod
    def of_updates(cls, results: list[StepResult]) -> StepResult:
        """One batch's updates as one: the mean of their losses (each normalised over its own
        mini-batch) and of their gradient norms, the statistics summed."""
        return cls(loss=sum(r.loss for r in results) / len(results),
                   stats=functools.reduce(operator.add, (r.stats for r in results)),
                   grad_norm=sum(r.grad_norm for r in results) / len(results),
                   regularizers=functools.reduce(operator.add, (r.regularizers for r in results)),
                   updates=len(results))


@dataclass(frozen=True)
class MicroBatchLoss:
    loss: torch.Tensor
    """Scalar, differentiable: this micro-batch's share of the step loss, regularisers included."""
    stats: LossStats
    regularizers: RegularizerStats


@dataclass
class Trainer:
    """What a step trains: the sharded model and its AdamW, holding weights ``version``."""

    world: World
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    version: int
    dtype: torch.dtype
    """The dtype of the weights folders and of forward/backward (``model.dtype``)."""
    loaded: bool = False
    """AdamW goes on from an earlier step's state (read from disk, or kept in memory)."""
    reference: Reference | None = None
    """The KL penalty's frozen model (``training.kl_coef > 0``), kept as long as the trainer."""

    @property
    def keep_master(self) -> bool:
        """The float32 master weights travel with the optimizer state (see gyrectl.train.checkpoint)."""
        return self.dtype != torch.float32


def run_step(*, run: RunDir, step: int) -> dict | None:
    """Trains step ``step``; returns the metrics line (on rank 0; None elsewhere or if done)."""
    timer = Timer()
    config = check_step(run=run, step=step)  # 0.
    if config is None:
        return None
    world = init_world()  # 1.
    try:
        with timer("load"):  # 2.
            trainer = prepare_trainer(run=run, step=step, config=config, world=world, memory=timer.memory)
        return train_step(trainer, run=run, step=step, config=config, timer=timer, origin="started")  # 3.-6.
    finally:
        close_world()


def check_step(*, run: RunDir, step: int) -> Config | None:
    """None if step ``step`` committed already (its metrics line restored if lost), else the
    run's config once the step's inputs are there (user errors before joining the group)."""
    if run.weights_dir(step + 1).exists():
        _ensure_metrics_line(run=run, step=step)
        return None
    config = load_config(run.config_file)
    batch_file = read_batch_file(run=run, step=step)
    if batch_file.weights_version != step:
        raise UserError(f"{run.batch_file(step)}: weights_version {batch_file.weights_version}, but step "
                        f"{step} trains weights v{step} into v{step + 1}")
    checkpoint.require_policy(run=run, version=step)
    return config


def prepare_trainer(*, run: RunDir, step: int, config: Config, world: World, memory: MemoryMeter) -> Trainer:
    """Collective: weights v``step`` from its folder, each rank reading its shards, and AdamW with
    the state the step before left (a fresh one, with a warning, if there is none for v``step``);
    with ``training.kl_coef > 0`` the frozen reference model too (:func:`reference_folder`)."""
    dtype = checkpoint.DTYPES[config.model.dtype]
    model = empty_policy(run=run, version=step, device=world.device)
    with memory("load_weights"):
        model = load_policy(model, run=run, version=step, world=world, compute_dtype=dtype,
                            activation_checkpointing=config.training.activation_checkpointing)
    optimizer = new_optimizer(model.parameters(), config.training)
    with memory("load_state"):
        loaded = checkpoint.restore_trainer_state(run=run, version=step, model=model, optimizer=optimizer,
                                                  master_weights=dtype != torch.float32)
    if not loaded and step > 0 and world.is_main:
        print(f"warning: no optimizer state for v{step} in {run.optimizer_dir}; AdamW starts fresh",
              file=sys.stderr)
    reference = None
    if (folder := reference_folder(run, config.training)) is not None:
        with memory("load_reference"):
            reference = load_reference(folder, world=world, compute_dtype=dtype)
    return Trainer(world=world, model=model, optimizer=optimizer, version=step, dtype=dtype, loaded=loaded,
                   reference=reference)


def train_step(trainer: Trainer, *, run: RunDir, step: int, config: Config, timer: Timer,
               origin: str) -> dict | None:
    """Steps 3-6 on a prepared trainer holding weights v``step``; ``origin`` (``started`` or
    ``reused``) goes into the metrics line. Leaves ``trainer`` holding v``step + 1``."""
    assert trainer.version == step, f"the trainer holds v{trainer.version}, not v{step}"
    world, model, optimizer = trainer.world, trainer.model, trainer.optimizer
    # Step N's learning rate, from the config alone: it wins over a loaded state's and a resident's.
    lr = set_step_hyperparameters(optimizer, config.training, step=step, steps=config.run.steps)
    memory = timer.memory
    with timer("batch"), memory("batch"):  # 3.
        batch = build_step_batch(run=run, config=config, batch=read_batch_file(run=run, step=step))
    with timer("forward_backward"), memory("forward_backward"):
        proximal = proximal_logprobs(model=model, mini_batches=batch.mini_batches, world=world,
                                     ratio_level=config.training.ratio_level)
    updates = []
    for micro_batches, mini_proximal in zip(batch.mini_batches, proximal, strict=True):
        with timer("forward_backward"), memory("forward_backward"):  # 4.
            updates.append(forward_backward(model=model, micro_batches=micro_batches, advantages=batch.advantages,
                                            world=world, training=config.training, reference=trainer.reference,
                                            proximal=mini_proximal))
        with timer("optimizer"), memory("optimizer"):  # 5.
            scale_gradients(model, clip_coefficient(updates[-1].grad_norm, config.training.max_grad_norm))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    result = StepResult.of_updates(updates)
    trainer.version = step + 1
    with timer("save"):  # 6.
        # The copy inside v(N+1) is written before the save ends: its save time and duration are 0.
        metrics = _metrics(step=step, batch=batch, result=result, lr=lr, world=world, loaded=trainer.loaded,
                           timer=timer, origin=origin)
        with memory("save_state"):
            checkpoint.save_trainer_state(run=run, version=step + 1, model=model, optimizer=optimizer,
                                          master_weights=trainer.keep_master, is_main=world.is_main)
        with memory("save_weights"):
            export_policy(run=run, version=step + 1, model=model, dtype=trainer.dtype, step_record=metrics,
                          world=world)
        if world.is_main:
            checkpoint.prune_trainer_state(run=run, keep=step + 1)
    trainer.loaded = True  # the next step (in this process) goes on from this state
    memory_gb = _memory_gb(memory, world=world)  # collective: every rank's spans
    if world.is_main:
        metrics.update(memory_gb)
        metrics["time_s"]["save"] = timer.phases["save"]
        metrics["duration_s"] = round(time.perf_counter() - timer.start, 4)
        _append_metrics(run=run, metrics=metrics)
        print(step_line(metrics), flush=True)  # the member's log: one line per step
    barrier()  # no rank reports success before rank 0 committed
    return metrics if world.is_main else None


def forward_backward(*, model: torch.nn.Module, micro_batches: tuple[PackedMicroBatch, ...],
                     advantages: dict[str, float], world: World, training: TrainingConfig,
                     reference: Reference | None = None, proximal: Proximal = None) -> StepResult:
    """Accumulates this rank's gradients over its share of ``micro_batches`` (one update's);
    returns their loss and statistics over all ranks."""
    loss_sum, stats, regularizers = 0.0, LossStats(), RegularizerStats()
    for k, (micro, real) in enumerate(rank_passes(micro_batches, world)):  # a spare pass gets weight zero
        out = micro_batch_loss(model=model, micro=micro, advantages=advantages, training=training,
                               device=world.device, reference=reference,
                               proximal_logprob=proximal[k] if real and proximal is not None else None)
        (out.loss if real else out.loss * 0.0).backward()
        if real:
            loss_sum += float(out.loss.detach())
            stats, regularizers = stats + out.stats, regularizers + out.regularizers
    n = len(stats.as_tuple())
    totals = sum_over_ranks([loss_sum, *stats.as_tuple(), *regularizers.as_tuple()], world=world)
    return StepResult(loss=totals[0], stats=LossStats(*totals[1:1 + n]), grad_norm=_grad_norm(model, world=world),
                      regularizers=RegularizerStats(*totals[1 + n:]))


def micro_batch_loss(*, model: torch.nn.Module, micro: PackedMicroBatch, advantages: dict[str, float],
                     training: TrainingConfig, device: torch.device, reference: Reference | None = None,
                     proximal_logprob: torch.Tensor | None = None) -> MicroBatchLoss:
    """The GRPO loss of one packed micro-batch (its share of the update's loss), with the
    regularisers' terms (the entropy is measured whatever ``training.entropy_coef`` says);
    ``proximal_logprob`` per scored target, default the current weights'."""
    tensors = packed_tensors(micro, device)
    targets = scored_targets(tensors, ratio_level=training.ratio_level)
    # The reference first: its gathered weights and logits are freed before the policy's are made.
    ref_logprob = None if reference is None else reference_logprobs(reference, tensors, targets)
    advantage = token_advantages(execution_index=tensors["execution_index"], executions=micro.executions,
                                 advantages=advantages)
    logits = target_logits(model, tensors, targets)
    logprob = logprobs_of(logits, tensors["input_ids"][targets])
    loss_weight = tensors["loss_weight"][targets]
    policy = micro_batch_policy_loss(logprob=logprob, tensors=tensors, targets=targets, advantage=advantage,
                                     training=training, proximal_logprob=proximal_logprob)
    extra = regularization(logits=logits, logprob=logprob, ref_logprob=ref_logprob, loss_weight=loss_weight,
                           entropy_coef=training.entropy_coef, kl_coef=training.kl_coef,
                           kl_estimator=training.kl_estimator)
    loss = policy.loss if extra.loss is None else policy.loss + extra.loss
    return MicroBatchLoss(loss=loss, stats=policy.stats, regularizers=extra.stats)


def _grad_norm(model: torch.nn.Module, *, world: World) -> float:
    """L2 norm of the full gradient: squares of each rank's shards, summed over ranks, in float64
    (a float32 norm over a million entries drifts by ~1e-5 relative: too coarse to compare with
    a reference gradient)."""
    local = sum(float(_local(p.grad).double().square().sum()) for p in model.parameters() if p.grad is not None)
    return math.sqrt(sum_over_ranks([local], world=world)[0])


def _memory_gb(memory: MemoryMeter, *, world: World) -> dict:
    """``memory_gb`` (span -> the most any rank's memory rose during it) and ``peak_memory_gb``
    (the highest any rank's memory was), in GB; both empty where memory cannot be read."""
    spans = sorted(memory.added)
    tops = max_over_ranks([memory.peak, *(memory.added[s] for s in spans)], world=world)
    return {"memory_gb": {s: round(v / GB, 4) for s, v in zip(spans, tops[1:], strict=True)},
            "peak_memory_gb": round(tops[0] / GB, 4) if spans else None}


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _metrics(*, step: int, batch: StepBatch, result: StepResult, lr: float, world: World, loaded: bool,
             timer: Timer, origin: str) -> dict:
    # grad_norm is the norm before clipping (training.max_grad_norm): the one to tune it against.
    rewards = np.array(list(batch.rewards.values()), dtype=np.float64)
    return {
        "step": step, "weight_version": step + 1, "loss": result.loss,
        "reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
        "reward_std": float(rewards.std()) if len(rewards) else 0.0,
        **result.stats.metrics(), "grad_norm": result.grad_norm, "lr": lr,
        "entropy": result.regularizers.entropy, "kl_ref": result.regularizers.kl_ref,
        "executions": batch.num_executions, "executions_skipped": batch.num_skipped,
        "groups": batch.signal.groups, "groups_without_signal": batch.signal.groups_without_signal,
        "signal_token_share": round(batch.signal.token_share, 4),
        "micro_batches": len(batch.micro_batches), "updates": result.updates, "naive_tokens": batch.naive_tokens,
        "unique_tokens": batch.unique_tokens, "trained_tokens": batch.trained_tokens,
        "dedup_ratio": round(batch.dedup_ratio, 4), "duration_s": 0.0, "time_s": {**timer.phases, "save": 0.0},
        "world_size": world.world_size, "optimizer_state": "loaded" if loaded else "fresh",
        "trainer": origin}


def step_line(metrics: dict) -> str:
    """The line a step leaves in its member's log, e.g. ``step 3 -> v4: 1,234 tokens trained, loss
    -0.01234, 5.2 s (started)``; the full record is the step's line in ``metrics.jsonl``."""
    return (f"step {metrics['step']} -> v{metrics['weight_version']}: {metrics['trained_tokens']:,} tokens trained, "
            f"loss {metrics['loss']:.4g}, {metrics['duration_s']:.1f} s ({metrics['trainer']})")


def _append_metrics(*, run: RunDir, metrics: dict) -> None:
    with JsonlAppender(run.metrics_file) as out:
        out.append(metrics)


def _ensure_metrics_line(*, run: RunDir, step: int) -> None:
    """A crash between the commit (rename) and the metrics line would lose the line: put it back
    from the record inside v(N+1). Only one process (rank 0, or a plain run) writes."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    if any(r.get("step") == step for r in read_records(run.metrics_file)):
        return
    record = checkpoint.read_step_record(run=run, version=step + 1)
    if record is not None:
        _append_metrics(run=run, metrics=record)
