"""A run's scalars, as a pure function of what its files hold: the trainer's metrics lines and
the coordinator's journal.

    train/<key>          per step: reward, loss, KL, clip fraction (and by side: low, high,
                         dual), dedup ratio, tokens, grad
                         norm (before clipping), learning rate, step duration, the policy's
                         entropy, the KL to the reference model (``kl_ref``, with
                         ``training.kl_coef > 0``) (``metrics.jsonl``)
    time_s/<part>        per step: load, batch, forward_backward, optimizer, save
    memory_gb/<part>     per step: what each part of the step added to a rank's memory
    cells/idle_fraction  per step: the share of cell time between the step before's end and this
                         step's end that neither served nor trained (starting, switching,
                         waiting, idle, lost: GPUs doing nothing useful)
    moves/<from>_to_<to>_s  per move (numbered in order): how long the move took
    eval/<key>           per evaluation, at its weights version (v0: the starting weights):
                         reward_mean, pass_at_1, pass_at_k, infra_failures

Every scalar has a step (x axis) and a wall-clock time; the same files always give the same
scalars, so a writer only has to remember which (tag, step) it wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gyrectl.coordinator.events import Event, TrainEnded
from gyrectl.coordinator.state import CoordinatorState
from gyrectl.coordinator.timeline import role_segments
from gyrectl.coordinator.views import moves

STEP_KEYS = ("reward_mean", "reward_std", "loss", "kl", "clip_fraction", "importance_weight_mean", "grad_norm",
             "dedup_ratio", "executions", "executions_skipped", "naive_tokens", "unique_tokens", "trained_tokens",
             "micro_batches", "duration_s", "peak_memory_gb", "world_size", "groups", "groups_without_signal",
             "signal_token_share", "lr", "entropy", "kl_ref", "clip_fraction_low", "clip_fraction_high",
             "dual_clip_fraction", "updates")
BUSY = ("rollout", "training")
"""Timeline labels of a cell doing useful work (:func:`gyrectl.coordinator.timeline.role_segments`)."""


@dataclass(frozen=True, order=True)
class Scalar:
    tag: str
    step: int
    value: float
    wall: float
    """Seconds since the epoch (when the step or move ended; 0 if no journal says)."""


def run_scalars(metrics: Sequence[dict[str, Any]], events: Sequence[Event], initial: CoordinatorState,
                evals: Sequence[dict[str, Any]] = ()) -> list[Scalar]:
    ends = {e.index: e.at for e in events if isinstance(e, TrainEnded)}
    return [*step_scalars(metrics, ends), *idle_scalars(events, initial, ends), *move_scalars(events),
            *eval_scalars(evals)]


def eval_scalars(evals: Sequence[dict[str, Any]]) -> list[Scalar]:
    return [Scalar(f"eval/{key}", int(line["weight_version"]), float(line[key]), float(line.get("at", 0.0)))
            for line in evals for key in ("reward_mean", "pass_at_1", "pass_at_k", "infra_failures")
            if isinstance(line.get(key), int | float)]


def step_scalars(metrics: Sequence[dict[str, Any]], ends: dict[int, float]) -> list[Scalar]:
    found = []
    for line in metrics:
        step, wall = int(line["step"]), ends.get(int(line["step"]), 0.0)
        found += [Scalar(f"train/{key}", step, float(line[key]), wall) for key in STEP_KEYS
                  if isinstance(line.get(key), int | float) and not isinstance(line.get(key), bool)]
        for group in ("time_s", "memory_gb"):
            parts = line.get(group) or {}
            found += [Scalar(f"{group}/{part}", step, float(value), wall) for part, value in sorted(parts.items())
                      if isinstance(value, int | float)]
    return found


def idle_scalars(events: Sequence[Event], initial: CoordinatorState, ends: dict[int, float]) -> list[Scalar]:
    """Per finished step, the idle share of all cells' time since the step before ended (the
    first step: since the run's first event)."""
    if not ends or not events:
        return []
    segments = role_segments(initial, list(events), origin=0.0)
    start, found = events[0].at, []
    for step in sorted(ends):
        end = ends[step]
        total = idle = 0.0
        for _, label, a, b in segments:
            overlap = min(b, end) - max(a, start)
            if overlap > 0:
                total += overlap
                idle += overlap if label not in BUSY else 0.0
        if total > 0:
            found.append(Scalar("cells/idle_fraction", step, round(idle / total, 6), end))
        start = end
    return found


def move_scalars(events: Sequence[Event]) -> list[Scalar]:
    """Each finished move at its place among all moves (those under way included, so a move's
    number never changes as the journal grows)."""
    return [Scalar(f"moves/{m.from_role}_to_{m.to}_s", i, m.duration_s, m.at + m.duration_s)
            for i, m in enumerate(moves(events)) if m.duration_s is not None]
