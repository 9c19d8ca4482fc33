"""The training step's knobs (``training.*``): what a batch is, the policy-gradient algorithm and
the optimizer. A module of its own beside :mod:`gyrectl.config.schema` (which re-exports
:class:`TrainingConfig`): issue 27's variants each add a field or two here.

Every default reproduces the step as it was before the knob existed: GRPO's advantages, no
gradient clipping, no weight decay, a constant learning rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class TrainingConfig:
    algorithm: Literal["grpo"] = "grpo"
    """Policy-gradient algorithm."""
    advantage: Literal["grpo", "dr_grpo", "rloo"] = "grpo"
    """How an execution's reward becomes its advantage, against the other members of its group as
    present in the batch (docs/algorithms.md). ``grpo``: ``(r - mean) / (std + 1e-4)``, the group's
    population std (DeepSeekMath, Shao et al. 2024). ``dr_grpo``: ``r - mean``, no division, so a
    group whose rewards barely differ is not blown up to unit scale (Dr. GRPO, Liu et al. 2025).
    ``rloo``: ``r`` minus the mean of the *other* members, an unbiased baseline (REINFORCE
    leave-one-out, Ahmadian et al. 2024). In each a group of one, or one whose rewards are all
    equal, gets 0; each is one value per execution, so exact dedup stays exact."""
    batch_executions: int = 64
    """Finished executions one training step consumes: whole GRPO groups, so a multiple of
    ``rollout.executions_per_task``."""
    skip_uniform_groups: bool = False
    """Keep groups without a learning signal (every member got the same reward, so every advantage
    is 0) out of the batches, and dispatch more executions to fill them (DAPO's dynamic sampling);
    such groups are never trained. Needs ``scheduler.batch_order: completion``."""
    max_batch_draws: int = 4
    """With ``skip_uniform_groups``: the executions drawn per step, counted in batches, over the run
    so far (DAPO's max_num_gen_batches). Past it, groups without a signal fill batches again (their
    tokens are still left out of the loss), so a task the policy cannot tell apart cannot stall the run."""
    lr: float = 1e-6
    """AdamW learning rate: the peak of ``lr_schedule``."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """How step N's learning rate follows from ``lr`` once ``warmup_steps`` are over (W of them, S =
    ``run.steps``): ``constant``: lr; ``linear``: lr x (S - N) / (S - W), down to 0 at S; ``cosine``:
    lr x (1 + cos(pi x (N - W) / (S - W))) / 2, down to 0 at S. A function of the config and N
    alone, so a step in a process of its own, a retried step and a resident trainer agree (each
    step's ``lr`` is in ``metrics.jsonl``); changing ``run.steps`` on a resume reshapes it."""
    warmup_steps: int = 0
    """Steps whose learning rate rises linearly from 0: step N < warmup_steps trains at lr x N /
    warmup_steps, so step 0's is 0 (AdamW's moments still take its gradient), as HF transformers'
    and verl's schedules do. At most ``run.steps``; 0: no warmup."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay: each step multiplies every weight by 1 - (its learning rate)
    x weight_decay before the update. 0 (not torch's 0.01) by default: a policy-gradient step should move
    weights only where the advantages say."""
    max_grad_norm: float = 0.0
    """Scale the step's gradient down to this L2 norm (over every parameter and rank) when it is
    larger, before AdamW's step: ``torch.nn.utils.clip_grad_norm_``'s rule. 0: no clipping.
    ``grad_norm`` in ``metrics.jsonl`` is the norm before clipping."""
    micro_batch_tokens: int = 16384
    """Token budget of one packed micro-batch (each rank runs whole micro-batches: its activations,
    logits and attention mask grow with it; ``gyrectl plan`` shows by how much)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them:
    about a third more compute, activations of one layer plus each layer's input instead of every
    layer's (``gyrectl plan`` shows both)."""
    clip_eps: float = 0.2
    """PPO-style clipping range of the importance ratio."""
    max_importance_weight: float = 2.0
    """Cap of the truncated importance weight that corrects tokens sampled by older weights."""
    resident: bool = True
    """Keep the training group up between steps: while the next step trains on the same cells, its
    members keep their processes, model and optimizer state (no torchrun start, no load; on GPU
    offloaded to host memory while the cells serve). Other cells, a failed step or a lost cell start
    a new group from the last checkpoint. false: every step starts its members afresh. A step that
    grows (``scheduler.grow_running_step``, simulated only) always starts afresh."""
    keep_checkpoints: int = 3
    """Weight versions (``checkpoints/vN``) kept on disk: the newest N; the head removes an older
    one once no server serves or loads it and no evaluation waits on it (0: keep every version).
    v0, the link to ``model.path``, is never removed. 3 by default: the newest is all that the next
    step, the servers and a resume read, and two more let you go back a couple of steps if
    training diverged, while a 32B model's run holds ~3 x 64 GB of bf16 weights instead of 64 GB
    per step it trained. Only the newest version's optimizer state is kept, whatever this says."""
