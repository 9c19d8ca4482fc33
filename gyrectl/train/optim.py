"""The optimizer side of a step (``training.lr_schedule``, ``warmup_steps``, ``weight_decay``,
``max_grad_norm``), each a pure function of the config and the step number.

    lr(N)   = lr x warmup(N) x decay(N)      W = warmup_steps, S = run.steps, N = 0 .. S-1
    warmup  = N / W for N < W, else 1        (HF transformers' and verl's ramp: step 0 trains at 0)
    decay   = 1                              constant
              (S - N) / (S - W)              linear, 0 at S
              (1 + cos(pi (N - W) / (S - W))) / 2   cosine, 0 at S
    clip    = min(1, max_grad_norm / (|g| + 1e-6))   torch.nn.utils.clip_grad_norm_'s coefficient

Why no torch LR scheduler: a step may run in a process of its own (weights and AdamW's state
from disk), in a resident trainer that kept them in memory, or again after a crash. A scheduler's
position is a counter inside the process, lost or doubled across those; here step N's learning
rate is computed from (config, N) and written into AdamW's param groups before every step, the
same number whichever process trains it.

Clipping uses the norm the step already computed over every rank (float64, ``grad_norm`` in
``metrics.jsonl``: the norm *before* clipping), so every rank scales its shards by one
coefficient and no collective is added.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from gyrectl.config.training import TrainingConfig

CLIP_EPS = 1e-6
"""What ``torch.nn.utils.clip_grad_norm_`` adds to the norm before dividing (a zero gradient)."""


def step_lr(training: TrainingConfig, *, step: int, steps: int) -> float:
    """The learning rate step ``step`` (0-based) of a ``steps``-step run trains at."""
    return training.lr * schedule_factor(training.lr_schedule, step=step, steps=steps,
                                         warmup_steps=training.warmup_steps)


def schedule_factor(schedule: str, *, step: int, steps: int, warmup_steps: int) -> float:
    """``lr(N) / lr`` of the module docstring, in [0, 1]."""
    if step < warmup_steps:
        return step / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)  # 0 at the peak, 1 at run.steps
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    if schedule == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise ValueError(f"unknown learning-rate schedule {schedule!r}")


def new_optimizer(parameters: Iterable[torch.nn.Parameter], training: TrainingConfig) -> torch.optim.AdamW:
    """AdamW over ``parameters``; :func:`set_step_hyperparameters` sets each step's lr and decay."""
    return torch.optim.AdamW(parameters, lr=training.lr, weight_decay=training.weight_decay)


def set_step_hyperparameters(optimizer: torch.optim.Optimizer, training: TrainingConfig, *, step: int,
                             steps: int) -> float:
    """Writes step ``step``'s learning rate and the config's weight decay into every param group
    (over what a loaded state or a resident trainer's last step left there); returns the lr."""
    lr = step_lr(training, step=step, steps=steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
        group["weight_decay"] = training.weight_decay
    return lr


def clip_coefficient(grad_norm: float, max_grad_norm: float) -> float:
    """What the gradient is multiplied by: 1 (no clipping) when ``max_grad_norm`` is 0 or the
    norm is within it."""
    if max_grad_norm <= 0:
        return 1.0
    return min(1.0, max_grad_norm / (grad_norm + CLIP_EPS))


@torch.no_grad()
def scale_gradients(model: torch.nn.Module, coefficient: float) -> None:
    """Multiplies every gradient (each rank its own shards) by ``coefficient``; 1 leaves them be,
    bit for bit."""
    if coefficient == 1.0:
        return
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(coefficient)
