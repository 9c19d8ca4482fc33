"""Issue 27's loss shapes: clip-higher and dual clip (``clip_eps_low`` / ``clip_eps_high`` /
``dual_clip``), the loss aggregations (``loss_aggregation``, ``loss_constant``) and GSPO's sequence
ratio (``ratio_level``). Each against the per-sequence references of ``reference_losses`` (plain
torch, no gyrectl code) on random batches, then on deduplicated trees against training on every
root-to-leaf path separately (a logprob table keyed by prefix stands in for the model, so the
whole matrix runs in seconds; ``test_dedup_gradient.py`` repeats the key cases with a real model).
The defaults are shown to be the step as it was, bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gyrectl.capture.stored import stored_calls
from gyrectl.capture.tree import build_tree
from gyrectl.config import parse_config
from gyrectl.config.schema import TrainingConfig
from gyrectl.dedup.exact import LOSS_AGGREGATIONS, exact_dedup, path_token_weights
from gyrectl.dedup.packing import pack
from gyrectl.errors import ConfigError
from gyrectl.train.grpo import ClipRange, clipped_surrogate, policy_loss, token_advantages
from gyrectl.train.loss_shape import micro_batch_policy_loss, scored_targets
from gyrectl.train.packed import packed_tensors
from gyrectl.train.sequence_ratio import path_sums, subtree_sums

from agent_shapes import all_patterns
from naive_paths import root_to_leaf_paths, trainable_positions
from reference_losses import Clip, Sequence, clip_counts, gspo_paper_loss, reference_loss

CONSTANT = 24.0
CAP = 1.5
TOKEN_CLIPS = {"symmetric": Clip(0.2, 0.2), "clip_higher": Clip(0.2, 0.28), "dual": Clip(0.2, 0.28, 1.4)}
SEQUENCE_CLIPS = {"symmetric": Clip(0.06, 0.06), "clip_higher": Clip(0.05, 0.08), "dual": Clip(0.05, 0.08, 1.1)}


def training(mode: str, level: str, clip: Clip) -> TrainingConfig:
    return TrainingConfig(loss_aggregation=mode, loss_constant=CONSTANT, ratio_level=level, clip_eps=0.2,
                          clip_eps_low=clip.low, clip_eps_high=clip.high, dual_clip=clip.dual,
                          max_importance_weight=CAP)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


# ---------------------------------------------------------------------------------------------
# Random batches of independent sequences, packed back to back (each a chain: prompt, then trained
# tokens), against the per-sequence references.


@dataclasses.dataclass
class FlatBatch:
    theta: torch.Tensor
    """Current logprobs of every trained token, packed order (the differentiable leaf)."""
    proximal: torch.Tensor
    seqs: list[Sequence]
    tensors: dict[str, torch.Tensor]
    advantage: torch.Tensor
    """Per packed token."""


def flat_batch(seed: int, mode: str, *, spread: float = 0.3, nan_behaviour: bool = False) -> FlatBatch:
    rng = np.random.default_rng(seed)
    trained = [int(n) for n in rng.integers(1, 13, size=8)] + [0]  # the last sequence has no trained token
    prompts = [int(n) for n in rng.integers(0, 5, size=len(trained))]
    advantages = rng.normal(size=len(trained)).round(3)
    advantages[1] = 0.0
    total = sum(trained)
    proximal = torch.tensor(rng.normal(-1.0, 0.5, size=total), dtype=torch.float32)
    theta = (proximal + torch.tensor(rng.normal(0.0, spread, size=total), dtype=torch.float32)).requires_grad_()
    behaviour = proximal + torch.tensor(rng.normal(0.0, 0.5, size=total), dtype=torch.float32)
    behaviour[rng.random(total) < (1.0 if nan_behaviour else 0.2)] = float("nan")
    c = iter(path_token_weights(np.array([n for n in trained if n], dtype=np.float64), mode, CONSTANT))
    columns: dict[str, list] = {k: [] for k in ("subtree_end", "path_weight", "loss_weight", "trainable",
                                                "behaviour_logprob", "advantage")}
    seqs, start, first = [], 0, 0
    for n, k, a in zip(trained, prompts, advantages, strict=True):
        end = start + k + n
        weight = next(c) if n else 0.0
        columns["subtree_end"] += [end] * (k + n)
        columns["path_weight"] += [0.0] * (k + n - 1) + [weight]
        columns["loss_weight"] += [0.0] * k + [weight] * n
        columns["trainable"] += [False] * k + [True] * n
        columns["behaviour_logprob"] += [float("nan")] * k + behaviour[first:first + n].tolist()
        columns["advantage"] += [float(a)] * (k + n)
        seqs.append(Sequence(logp=theta[first:first + n], proximal=proximal[first:first + n],
                             behaviour=behaviour[first:first + n], advantage=float(a)))
        start, first = end, first + n
    dtypes = {"subtree_end": torch.int64, "trainable": torch.bool}
    tensors = {k: torch.tensor(v, dtype=dtypes.get(k, torch.float32)) for k, v in columns.items()}
    return FlatBatch(theta=theta, proximal=proximal, seqs=seqs, tensors=tensors, advantage=tensors.pop("advantage"))


def packed_flat_loss(batch: FlatBatch, config: TrainingConfig, *, proximal: bool = True):
    targets = scored_targets(batch.tensors, ratio_level=config.ratio_level)
    assert len(targets) == len(batch.theta)
    return micro_batch_policy_loss(logprob=batch.theta, tensors=batch.tensors, targets=targets,
                                   advantage=batch.advantage, training=config,
                                   proximal_logprob=batch.proximal if proximal else None)


def loss_and_grad(theta: torch.Tensor, loss: torch.Tensor) -> tuple[float, torch.Tensor]:
    (grad,) = torch.autograd.grad(loss, theta)
    return float(loss.detach()), grad


@pytest.mark.parametrize("clip_name", list(TOKEN_CLIPS))
@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
@pytest.mark.parametrize("seed", [0, 1])
def test_token_ratio_variants_equal_the_reference(mode, clip_name, seed):
    clip = TOKEN_CLIPS[clip_name]
    batch = flat_batch(seed, mode)
    out = packed_flat_loss(batch, training(mode, "token", clip))
    loss, grad = loss_and_grad(batch.theta, out.loss)
    ref_loss, ref_grad = loss_and_grad(batch.theta, reference_loss(batch.seqs, mode=mode, clip=clip, cap=CAP,
                                                                   constant=CONSTANT))
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert relative(grad, ref_grad) <= 1e-5
    low, high, dual = clip_counts(batch.seqs, level="token", clip=clip)
    assert (out.stats.num_clipped_low, out.stats.num_clipped_high, out.stats.num_dual_clipped) == (low, high, dual)
    assert low and high and (dual or clip.dual is None)  # every branch is exercised
    assert out.stats.num_clipped == low + high and out.stats.num_tokens == len(batch.theta)


@pytest.mark.parametrize("clip_name", list(SEQUENCE_CLIPS))
@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
@pytest.mark.parametrize("seed", [0, 1])
def test_sequence_ratio_equals_the_reference(mode, clip_name, seed):
    clip = SEQUENCE_CLIPS[clip_name]
    batch = flat_batch(seed, mode)
    out = packed_flat_loss(batch, training(mode, "sequence", clip))
    loss, grad = loss_and_grad(batch.theta, out.loss)
    ref_loss, ref_grad = loss_and_grad(batch.theta, reference_loss(batch.seqs, mode=mode, level="sequence",
                                                                   clip=clip, cap=CAP, constant=CONSTANT))
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert relative(grad, ref_grad) <= 1e-5
    low, high, dual = clip_counts([s for s in batch.seqs if len(s.logp)], level="sequence", clip=clip)
    assert (out.stats.num_clipped_low, out.stats.num_clipped_high, out.stats.num_dual_clipped) == (low, high, dual)
    assert out.stats.num_sequences == 8 and low + high + dual < 8  # some paths clip, some do not
    assert out.stats.clip_fraction == (low + high) / 8


def test_sequence_ratio_is_gspo_as_the_paper_writes_it():
    """Without importance weights (no behaviour logprobs) and with ``seq_mean_token_mean``, the
    loss and gradient are GSPO's objective differentiated through ``s`` as a whole."""
    clip = SEQUENCE_CLIPS["clip_higher"]
    batch = flat_batch(3, "seq_mean_token_mean", nan_behaviour=True)
    loss, grad = loss_and_grad(batch.theta, packed_flat_loss(batch, training("seq_mean_token_mean", "sequence",
                                                                             clip)).loss)
    ref_loss, ref_grad = loss_and_grad(batch.theta, gspo_paper_loss([s for s in batch.seqs if len(s.logp)], clip))
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert relative(grad, ref_grad) <= 1e-5


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_with_one_step_per_batch_no_clip_binds_and_the_sequence_ratio_is_the_token_ratio(mode):
    """The proximal policy is the current weights: every ratio is 1, whatever the bounds."""
    batch = flat_batch(4, mode)
    outs = {level: packed_flat_loss(batch, training(mode, level, Clip(0.01, 0.01, 1.01)), proximal=False)
            for level in ("token", "sequence")}
    (token_loss, token_grad), (seq_loss, seq_grad) = (loss_and_grad(batch.theta, o.loss) for o in outs.values())
    assert seq_loss == pytest.approx(token_loss, rel=1e-6)
    assert relative(seq_grad, token_grad) <= 1e-6
    assert all(o.stats.num_clipped == 0 and o.stats.num_dual_clipped == 0 for o in outs.values())


def test_the_defaults_are_the_step_before_bit_for_bit():
    batch = flat_batch(5, "token_mean", spread=0.0)
    targets = scored_targets(batch.tensors, ratio_level="token")
    shaped = micro_batch_policy_loss(logprob=batch.theta, tensors=batch.tensors, targets=targets,
                                     advantage=batch.advantage, training=TrainingConfig())
    before = policy_loss(logprob=batch.theta, behaviour_logprob=batch.tensors["behaviour_logprob"][targets],
                         advantage=batch.advantage[targets], loss_weight=batch.tensors["loss_weight"][targets],
                         clip_eps=0.2, max_importance_weight=2.0)
    assert torch.equal(shaped.loss, before.loss) and shaped.stats == before.stats
    assert torch.equal(*(torch.autograd.grad(out.loss, batch.theta)[0] for out in (shaped, before)))
    assert ClipRange.of(TrainingConfig()) == ClipRange(low=0.2, high=0.2, dual=None)


def test_each_clip_binds_on_its_own_side():
    """clip-higher lets a good token's ratio reach 1.28 (symmetric 0.2 stops it at 1.2); the low
    bound stays at 0.8; the dual floor holds a bad token whose ratio grew past c at c x A."""
    ratio = torch.tensor([1.25, 1.25, 1.3, 0.75, 0.75, 4.0, 2.0]).requires_grad_()
    advantage = torch.tensor([1.0, 1.0, 1.0, -1.0, 1.0, -1.0, -1.0])
    s = clipped_surrogate(ratio, advantage, ClipRange(low=0.2, high=0.28, dual=3.0))
    s.value.sum().backward()
    assert s.value.tolist() == pytest.approx([1.25, 1.25, 1.28, -0.8, 0.75, -3.0, -2.0])
    assert ratio.grad.tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, -1.0]
    assert s.clipped_high.tolist() == [False, False, True, False, False, False, False]
    assert s.clipped_low.tolist() == [False, False, False, True, False, False, False]
    assert s.dual_clipped.tolist() == [False, False, False, False, False, True, False]
    symmetric = clipped_surrogate(ratio.detach(), advantage, ClipRange(low=0.2, high=0.2))
    assert symmetric.clipped_high.tolist()[:3] == [True, True, True]


def test_constant_needs_a_positive_constant():
    with pytest.raises(ValueError, match="loss_constant"):
        path_token_weights(np.array([3.0, 4.0]), "constant", None)
    assert path_token_weights(np.array([3.0, 5.0]), "constant", 10.0).tolist() == [0.05, 0.05]


def test_path_and_subtree_sums_follow_the_dfs_ranges():
    # 0 -> 1 -> {2 -> 3, 4}; 5 -> 6 (a second tree): subtree ends as packing stores them.
    subtree_end = torch.tensor([5, 5, 4, 4, 5, 7, 7])
    values = torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
    assert path_sums(values, subtree_end).tolist() == [1, 3, 7, 15, 19, 32, 96]
    assert subtree_sums(values, subtree_end).tolist() == [31, 30, 12, 8, 16, 96, 64]


# ---------------------------------------------------------------------------------------------
# Deduplicated trees against every root-to-leaf path trained on its own. The "model" is a table:
# a token's current, proximal and behaviour logprobs are functions of its prefix (as a model's
# are), so a shared token has one value whichever path it is on.

EXECUTIONS = {f"t{i}": all_patterns(f"t{i}", seed=20 + i) for i in range(3)}
ADVANTAGES = {"t0": 0.7, "t1": -1.3, "t2": 0.4}


def prefix_tables(seed: int) -> tuple[dict[tuple[int, ...], int], torch.Tensor, torch.Tensor, torch.Tensor]:
    keys = sorted({path[:t + 1] for records in EXECUTIONS.values() for path in root_to_leaf_paths(records)
                   for t in trainable_positions(path, records)})
    rng = np.random.default_rng(seed)
    proximal = torch.tensor(rng.normal(-1.0, 0.5, size=len(keys)), dtype=torch.float32)
    theta = (proximal + torch.tensor(rng.normal(0.0, 0.3, size=len(keys)), dtype=torch.float32)).requires_grad_()
    behaviour = proximal + torch.tensor(rng.normal(0.0, 0.5, size=len(keys)), dtype=torch.float32)
    behaviour[rng.random(len(keys)) < 0.2] = float("nan")
    return {k: i for i, k in enumerate(keys)}, theta, proximal, behaviour


def per_path_sequences(index, theta, proximal, behaviour) -> list[Sequence]:
    seqs = []
    for execution, records in EXECUTIONS.items():
        for path in root_to_leaf_paths(records):
            rows = torch.tensor([index[path[:t + 1]] for t in trainable_positions(path, records)], dtype=torch.int64)
            seqs.append(Sequence(logp=theta[rows], proximal=proximal[rows], behaviour=behaviour[rows],
                                 advantage=ADVANTAGES[execution]))
    return seqs


def packed_prefixes(tensors: dict[str, torch.Tensor]) -> list[tuple[int, ...]]:
    prefixes: list[tuple[int, ...]] = []
    for token, parent in zip(tensors["input_ids"].tolist(), tensors["parent_index"].tolist(), strict=True):
        prefixes.append((prefixes[parent] if parent >= 0 else ()) + (token,))
    return prefixes


def packed_tree_loss(config: TrainingConfig, *, split: bool, index, theta, proximal, behaviour,
                     targets_of=scored_targets) -> torch.Tensor:
    calls = stored_calls(r for records in EXECUTIONS.values() for r in records)
    weighted = exact_dedup([build_tree(e, c) for e, c in calls.items()], normalisation=config.loss_aggregation,
                           loss_constant=config.loss_constant)
    budget = max(int(w.depth.max()) + 1 for w in weighted) + 8 if split else 100_000
    micro_batches = pack(weighted, budget=budget)
    if split:  # pieces whose recomputed context holds trainable tokens: the cross-piece case
        assert any(bool((m.trainable & (m.loss_weight == 0)).any()) for m in micro_batches)
    total = torch.zeros(())
    for micro in micro_batches:
        tensors = packed_tensors(micro)
        targets = targets_of(tensors, ratio_level=config.ratio_level)
        rows = torch.tensor([index[p] for p in np.array(packed_prefixes(tensors), dtype=object)[targets.numpy()]],
                            dtype=torch.int64)
        tensors["behaviour_logprob"] = torch.full_like(tensors["behaviour_logprob"], float("nan"))
        tensors["behaviour_logprob"][targets] = behaviour[rows]
        advantage = token_advantages(execution_index=tensors["execution_index"], executions=micro.executions,
                                     advantages=ADVANTAGES)
        total = total + micro_batch_policy_loss(logprob=theta[rows], tensors=tensors, targets=targets,
                                                advantage=advantage, training=config,
                                                proximal_logprob=proximal[rows]).loss
    return total


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_tree_dedup_equals_training_every_path(mode, level, split):
    clip = (TOKEN_CLIPS if level == "token" else SEQUENCE_CLIPS)["dual"]
    index, theta, proximal, behaviour = prefix_tables(seed=7)
    config = training(mode, level, clip)
    loss, grad = loss_and_grad(theta, packed_tree_loss(config, split=split, index=index, theta=theta,
                                                       proximal=proximal, behaviour=behaviour))
    seqs = per_path_sequences(index, theta, proximal, behaviour)
    ref_loss, ref_grad = loss_and_grad(theta, reference_loss(seqs, mode=mode, level=level, clip=clip, cap=CAP,
                                                             constant=CONSTANT))
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert relative(grad, ref_grad) <= 1e-5
    if level == "sequence":  # paths through shared tokens clip differently: the sums are really tested
        low, high, dual = clip_counts([s for s in seqs if len(s.logp)], level="sequence", clip=clip)
        assert 0 < low + high + dual < len(seqs)


def test_uniform_path_weights_would_be_wrong_for_a_per_sequence_mean():
    """The proof can fail: ``token_mean``'s weights under the ``seq_mean_token_mean`` reference."""
    index, theta, proximal, behaviour = prefix_tables(seed=7)
    clip = TOKEN_CLIPS["symmetric"]
    _, grad = loss_and_grad(theta, packed_tree_loss(training("token_mean", "token", clip), split=False,
                                                    index=index, theta=theta, proximal=proximal,
                                                    behaviour=behaviour))
    seqs = per_path_sequences(index, theta, proximal, behaviour)
    _, ref_grad = loss_and_grad(theta, reference_loss(seqs, mode="seq_mean_token_mean", clip=clip, cap=CAP))
    assert relative(grad / grad.norm(), ref_grad / ref_grad.norm()) > 1e-2


# ---------------------------------------------------------------------------------------------
# gyrectl config check: impossible combinations, each error naming its field.


def config_of(training: dict, dedup: dict | None = None):
    return parse_config({"training": training, **({"dedup": dedup} if dedup else {})})


@pytest.mark.parametrize(("training", "dedup", "field", "says"), [
    ({"clip_eps_low": 1.0}, None, "training.clip_eps_low", "(0, 1)"),
    ({"clip_eps_low": 0.0}, None, "training.clip_eps_low", "(0, 1)"),
    ({"clip_eps_high": 0.0}, None, "training.clip_eps_high", "positive"),
    ({"clip_eps_high": -0.1}, None, "training.clip_eps_high", "positive"),
    ({"dual_clip": 1.0}, None, "training.dual_clip", "above 1"),
    ({"dual_clip": 0.5}, None, "training.dual_clip", "above 1"),
    ({"loss_aggregation": "constant"}, None, "training.loss_constant", "must be set"),
    ({"loss_aggregation": "constant", "loss_constant": 0}, None, "training.loss_constant", "positive"),
    ({"loss_constant": -4}, None, "training.loss_constant", "positive"),
    ({"loss_aggregation": "seq_mean_token_mean"}, {"mode": "paths"}, "training.loss_aggregation", "exact"),
    ({"ratio_level": "sequence"}, {"mode": "paths"}, "training.ratio_level", "exact"),
])
def test_config_check_refuses_impossible_loss_shapes(training, dedup, field, says):
    with pytest.raises(ConfigError) as caught:
        config_of(training, dedup)
    assert caught.value.path == field and says in str(caught.value)


def test_config_check_takes_every_published_shape():
    dapo = config_of({"clip_eps_low": 0.2, "clip_eps_high": 0.28, "loss_aggregation": "token_mean"})
    assert ClipRange.of(dapo.training) == ClipRange(low=0.2, high=0.28)
    dr_grpo = config_of({"advantage": "dr_grpo", "loss_aggregation": "constant", "loss_constant": 4096})
    assert dr_grpo.training.loss_constant == 4096
    gspo = config_of({"ratio_level": "sequence", "clip_eps_low": 3e-4, "clip_eps_high": 4e-4,
                      "loss_aggregation": "seq_mean_token_mean"})
    assert gspo.training.ratio_level == "sequence"
    assert config_of({"dual_clip": 3.0}).training.dual_clip == 3.0
    assert config_of({}, {"mode": "paths"}).training.loss_aggregation == "token_mean"


def test_scoring_only_the_loss_weighted_tokens_would_be_wrong_for_split_trees():
    """The proof can fail: without the recomputed context's trainable tokens, a piece sees only part
    of the paths ending in it, and their sequence ratios are wrong."""
    index, theta, proximal, behaviour = prefix_tables(seed=7)
    clip = SEQUENCE_CLIPS["symmetric"]
    config = training("seq_mean_token_mean", "sequence", clip)

    def weighted_only(tensors, ratio_level):
        return torch.nonzero(tensors["loss_weight"] != 0).flatten()

    _, grad = loss_and_grad(theta, packed_tree_loss(config, split=True, index=index, theta=theta, proximal=proximal,
                                                    behaviour=behaviour, targets_of=weighted_only))
    seqs = per_path_sequences(index, theta, proximal, behaviour)
    _, ref_grad = loss_and_grad(theta, reference_loss(seqs, mode="seq_mean_token_mean", level="sequence", clip=clip,
                                                      cap=CAP))
    assert relative(grad, ref_grad) > 1e-3
