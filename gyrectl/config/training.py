"""The training step's knobs (``training.*``): what a batch is, the policy-gradient algorithm and
the optimizer. A module of its own beside :mod:`gyrectl.config.schema` (which re-exports
:class:`TrainingConfig`): issue 27's variants each add a field or two here.

Every default reproduces the step as it was before the knob existed: GRPO's advantages, no
gradient clipping, no weight decay, a constant learning rate, no entropy bonus, no KL penalty
(and so no reference model loaded), the token mean over (path, token) pairs, one symmetric clip
range, the token-level ratio.
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
    updates_per_batch: int = 1
    """Optimizer steps per batch (PPO's epochs over mini-batches; verl's ``ppo_mini_batch_size``,
    AReaL's ``ppo_n_minibatches``): the batch's GRPO groups, whole and in batch order, are split
    into this many mini-batches, each trained by one AdamW step at step N's learning rate, its
    ``loss_aggregation`` taken over the mini-batch's own paths (advantages stay the whole batch's).
    Every token's proximal logprob is computed with weights vN before the first update, so from
    the second update on the ratio to the proximal policy moves and the clips (``clip_eps*``,
    ``dual_clip``) and GSPO's sequence ratio bind. Costs one extra forward pass, without gradient,
    over all but the first mini-batch. At most the batch's groups; 1: one step, the ratio is 1."""
    micro_batch_tokens: int = 16384
    """Token budget of one packed micro-batch (each rank runs whole micro-batches: its activations,
    logits and attention mask grow with it; ``gyrectl plan`` shows by how much)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them:
    about a third more compute, activations of one layer plus each layer's input instead of every
    layer's (``gyrectl plan`` shows both)."""
    clip_eps: float = 0.2
    """PPO-style clipping range of the importance ratio ``r`` to the proximal policy: the surrogate
    is ``min(r A, clip(r, 1 - eps, 1 + eps) A)``. With one optimizer step per batch the proximal
    policy is the current weights, ``r`` is 1 and no clip ever binds; with ``updates_per_batch`` > 1
    they bind from the second update on (docs/algorithms.md)."""
    clip_eps_low: float | None = None
    """The lower clip bound alone: ``r`` is clipped at ``1 - clip_eps_low``, in (0, 1). Unset: ``clip_eps``."""
    clip_eps_high: float | None = None
    """The upper clip bound alone: ``r`` is clipped at ``1 + clip_eps_high``. DAPO's clip-higher (Yu et al.
    2025) sets 0.28 with ``clip_eps_low`` 0.2: a token the policy found unlikely can gain more
    probability in one step, which keeps exploration (entropy) from collapsing. Unset: ``clip_eps``."""
    dual_clip: float | None = None
    """Dual-clip PPO's lower bound ``c`` > 1 for negative advantages (Ye et al. 2020): where ``A < 0``
    the surrogate is ``max(min(r A, clip(r) A), c A)``, so a token whose ratio grew far (``r > c``)
    under a negative advantage cannot push the loss without bound. verl's ``vanilla`` policy loss
    always applies it (``clip_ratio_c``, 3 by default). Unset: off."""
    loss_aggregation: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant"] = "token_mean"
    """How token terms become the step's loss, a *sequence* being one root-to-leaf path of a trajectory
    tree (what training without dedup sees as one sample), P the batch's paths with a trained token
    and ``|T_p|`` path p's trained tokens. ``token_mean``: the mean over every (path, token) pair,
    ``sum / sum_p |T_p|`` (DAPO's token-level loss; verl's default). ``seq_mean_token_mean``: each
    path's token mean, then the mean over paths (DeepSeekMath's GRPO; short paths weigh more per
    token). ``seq_mean_token_sum``: each path's token sum, then the mean over paths (long paths weigh
    more). ``constant``: each path's token sum divided by ``loss_constant``, then the mean over
    paths (Dr. GRPO). Each is exact under tree dedup: a shared token's weight is the sum over the
    paths through it of each path's per-token weight. Needs ``dedup.mode: exact`` unless
    ``token_mean`` (paths mode has its own per-execution mean)."""
    loss_constant: float | None = None
    """``constant`` aggregation's fixed divisor: Dr. GRPO uses the generation budget (the most
    tokens a sample may have), so the gradient scale depends neither on lengths nor on how many
    tokens a batch happens to hold. For agent trees, the most trained tokens a path may hold.
    Required with ``loss_aggregation: constant``, read by no other; positive when set."""
    ratio_level: Literal["token", "sequence"] = "token"
    """Which importance ratio is clipped. ``token``: each token's ``r_t``. ``sequence``: GSPO's
    (Zheng et al. 2025) ``s_p = exp(mean over path p's trained tokens of log r_t)``, one ratio per
    root-to-leaf path, clipped per path, whose gradient reaches each token as ``s_p grad log p_t``;
    GSPO clips it at ~3e-4 / 4e-4 (``clip_eps_low`` / ``clip_eps_high``), far tighter than a token
    ratio, and pairs it with ``seq_mean_token_mean``. Exact under tree dedup: a token shared by paths
    whose ratios differ gets the sum of their terms (each piece of a tree split across micro-batches
    holds the whole of its paths). Needs ``dedup.mode: exact``. With one optimizer step per batch
    ``s_p`` is 1 and the step equals the token level's."""
    max_importance_weight: float = 2.0
    """Cap of the truncated importance weight that corrects tokens sampled by older weights."""
    entropy_coef: float = 0.0
    """Entropy bonus: the loss subtracts entropy_coef x the policy's mean token entropy over trained
    tokens (the entropy, in nats, of the distribution each token was sampled from; weighted like
    the policy term, so exact under tree dedup). A positive value slows the policy's collapse onto
    few continuations; 0 (as verl's ``entropy_coeff``) leaves the loss as it was. The entropy is
    logged every step either way (``entropy`` in ``metrics.jsonl``): a steady fall is the usual
    sign of a policy that stopped exploring."""
    kl_coef: float = 0.0
    """KL penalty towards a frozen reference model (``kl_reference``): the loss adds kl_coef x the
    mean of ``kl_estimator`` over trained tokens (``kl_ref`` in ``metrics.jsonl``). Keeps the policy
    near the reference (GRPO's beta: DeepSeekMath used 0.04, verl's GRPO examples 0.001). 0: no
    reference model is loaded and the step is as without it; above 0 every training rank also
    holds the reference's weights, sharded, in ``model.dtype`` (``gyrectl plan`` counts them)."""
    kl_estimator: Literal["k1", "k3", "low_var_kl"] = "low_var_kl"
    """How a token's KL to the reference is estimated from ``log r = ref - logp`` (Schulman 2020):
    ``k1``: ``-log r``, unbiased but noisy, and as a loss its expected gradient on the policy's own
    samples is 0; ``k3``: ``r - 1 - log r``, never negative (GRPO's, DeepSeekMath); ``low_var_kl``:
    verl's k3, with log r clamped to [-20, 20] and the result to [-10, 10]: k3 grows like r = pi_ref
    / pi, so without the clamp one token the reference finds far likelier could dominate the step
    (verl's default; a clamped token gets no gradient). Ignored while ``kl_coef`` is 0
    (docs/algorithms.md)."""
    kl_reference: str = ""
    """The reference model's HF folder (relative to the launch directory, as ``model.path``).
    Empty: the run's starting weights v0, i.e. ``model.path``, so the penalty keeps the policy near
    where it began. Another folder must share the policy's tokenizer. Ignored while ``kl_coef`` is 0."""
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
