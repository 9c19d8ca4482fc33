"""Exact dedup proof: the gradient of the tree-packed loss equals that of naive per-path training
(fp32, tiny model), for trees with every branch kind, also when trees are split across
micro-batches with prefix recomputation; also with each advantage estimator's per-execution
advantages weighting the tokens, with each loss aggregation, and with GSPO's sequence ratio. Paths
mode against its own naive definition."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from gyrectl.capture.stored import stored_calls
from gyrectl.capture.tree import build_tree
from gyrectl.config.schema import TrainingConfig
from gyrectl.dedup.exact import exact_dedup
from gyrectl.dedup.packing import pack
from gyrectl.dedup.paths import paths_dedup, sample_paths, union_of_paths
from gyrectl.train.forward import packed_loss, target_logprobs
from gyrectl.train.grpo import ADVANTAGE_ESTIMATORS, group_advantages, token_advantages
from gyrectl.train.loss_shape import micro_batch_policy_loss, scored_targets
from gyrectl.train.packed import packed_tensors

from agent_shapes import all_patterns
from naive_paths import path_nll, root_to_leaf_paths, trainable_positions
from reference_losses import Clip, Sequence, aggregate, clip_counts, reference_loss

EXECUTIONS = {f"e{i}": all_patterns(f"e{i}", seed=i) for i in range(2)}


def trees():
    calls = stored_calls(r for records in EXECUTIONS.values() for r in records)
    return [build_tree(e, c) for e, c in calls.items()]


def gradient(model, loss_fn) -> torch.Tensor:
    model.zero_grad()
    loss = loss_fn()
    loss.backward()
    return loss.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])


def packed(model, weighted, budget):
    batches = pack(weighted, budget=budget)
    return sum(packed_loss(model, packed_tensors(b)) for b in batches), batches


def naive_loss(model, normalisation):
    per_execution = []
    for records in EXECUTIONS.values():
        per_execution.append([path_nll(model, p, trainable_positions(p, records))
                              for p in root_to_leaf_paths(records)])
    if normalisation == "token":
        nll = torch.cat([n for paths in per_execution for n in paths])
        return nll.sum() / len(nll)
    means = [torch.stack([n.mean() for n in paths if len(n)]).mean() for paths in per_execution]
    return torch.stack(means).mean()


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("normalisation", ["token", "path"])
@pytest.mark.parametrize("split", [False, True])
def test_exact_packed_gradient_equals_per_path_gradient(tiny_model, normalisation, split):
    weighted = exact_dedup(trees(), normalisation=normalisation)
    longest_path = max(int(w.depth.max()) + 1 for w in weighted)
    budget = longest_path + 8 if split else 100_000
    (loss_p, grad_p), (loss_n, grad_n) = (
        gradient(tiny_model, lambda: packed(tiny_model, weighted, budget)[0]),
        gradient(tiny_model, lambda: naive_loss(tiny_model, normalisation)))
    assert abs(float(loss_p - loss_n)) <= 1e-5 * abs(float(loss_n))
    assert relative(grad_p, grad_n) <= 1e-5
    batches = packed(tiny_model, weighted, budget)[1]
    if split:  # the small budget must really split trees and recompute prefixes
        assert len(batches) > len(EXECUTIONS) and not any(b.over_budget for b in batches)


# Two groups of different sizes (3 and 2), so the estimators are not multiples of one another.
GROUPED = {f"g{i}": all_patterns(f"g{i}", seed=10 + i) for i in range(5)}
REWARDS = {"g0": 1.0, "g1": 0.25, "g2": 0.0, "g3": 0.5, "g4": 1.0}
GROUP = {"g0": "t", "g1": "t", "g2": "t", "g3": "u", "g4": "u"}


@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS)
def test_each_advantage_keeps_the_packed_gradient_equal_to_per_path(tiny_model, estimator):
    """An advantage is one value per execution: it multiplies every token weight of that execution's
    tree, shared prefix tokens included (all their paths belong to the same execution), so
    ``-sum_i w_i A_e(i) log p_i`` over the tree equals the mean over (path, token) pairs of
    ``-A_e log p`` -- for grpo, dr_grpo and rloo alike."""
    advantages = group_advantages(rewards=REWARDS, groups=GROUP, estimator=estimator)
    assert len({round(abs(a), 9) for a in advantages.values()}) >= 3  # different per group and member
    calls = stored_calls(r for records in GROUPED.values() for r in records)
    weighted = exact_dedup([build_tree(e, c) for e, c in calls.items()], normalisation="token")
    budget = max(int(w.depth.max()) + 1 for w in weighted) + 8  # trees split across micro-batches

    def packed_advantage_loss():
        total = 0.0
        for micro in pack(weighted, budget=budget):
            tensors = packed_tensors(micro)
            targets = torch.nonzero(tensors["loss_weight"] != 0).flatten()
            advantage = token_advantages(execution_index=tensors["execution_index"], executions=micro.executions,
                                         advantages=advantages)[targets]
            total = total - (tensors["loss_weight"][targets] * advantage
                             * target_logprobs(tiny_model, tensors, targets)).sum()
        return total

    def naive_advantage_loss():
        terms = [advantages[e] * path_nll(tiny_model, p, trainable_positions(p, records))
                 for e, records in GROUPED.items() for p in root_to_leaf_paths(records)]
        return torch.cat(terms).sum() / sum(len(t) for t in terms)

    (loss_p, grad_p), (loss_n, grad_n) = (gradient(tiny_model, packed_advantage_loss),
                                          gradient(tiny_model, naive_advantage_loss))
    assert abs(float(loss_p - loss_n)) <= 1e-5 * abs(float(loss_n))
    assert relative(grad_p, grad_n) <= 1e-5


def test_every_branch_kind_is_in_the_proof_trees():
    kinds = {label.kind for tree in trees() for label in tree.labels}
    assert kinds == {"new_context", "continuation", "retry", "parallel_sample"}
    assert any(label.rerendered for tree in trees() for label in tree.labels)


def test_unit_weights_are_wrong(tiny_model):
    """The proof can fail: uniform weights over unique tokens (no path counts) differ."""
    weighted = exact_dedup(trees(), normalisation="token")
    uniform = [w.__class__(**{**w.__dict__, "loss_weight": (w.loss_weight > 0) / 100.0}) for w in weighted]
    _, grad_u = gradient(tiny_model, lambda: packed(tiny_model, uniform, 100_000)[0])
    _, grad_n = gradient(tiny_model, lambda: naive_loss(tiny_model, "token"))
    assert relative(grad_u / grad_u.norm(), grad_n / grad_n.norm()) > 1e-2


def test_paths_mode_gradient_equals_its_naive_definition(tiny_model):
    j_max, seed = 3, 7
    built = trees()
    weighted = paths_dedup(built, j_max=j_max, seed=seed)
    rng = np.random.default_rng(seed)
    chosen = [sample_paths(t, j_max=j_max, rng=rng) for t in built]

    def naive():
        # Each chosen path forwarded on its own; a token shared by several chosen paths counted
        # once (keyed by its prefix); mean within the execution, then over executions.
        means = []
        for tree, leaves in zip(built, chosen, strict=True):
            records = EXECUTIONS[tree.execution]
            by_prefix = {}
            for leaf in leaves:
                path = tuple(tree.tokens[union_of_paths(tree, np.array([leaf]))].tolist())
                positions = trainable_positions(path, records)
                for t, nll in zip(positions, path_nll(tiny_model, path, positions), strict=True):
                    by_prefix.setdefault(path[:t + 1], nll)
            means.append(torch.stack(list(by_prefix.values())).mean())
        return torch.stack(means).mean()

    assert all(1 <= len(c) <= j_max for c in chosen)
    (loss_p, grad_p), (loss_n, grad_n) = (gradient(tiny_model, lambda: packed(tiny_model, weighted, 120)[0]),
                                          gradient(tiny_model, naive))
    assert abs(float(loss_p - loss_n)) <= 1e-5 * abs(float(loss_n))
    assert relative(grad_p, grad_n) <= 1e-5


# Issue 27's loss shapes with the real model: each loss aggregation, and GSPO's sequence ratio
# against a proximal policy that differs from the current one (a perturbed copy of the model).
SIGNED = {"e0": 1.0, "e1": -0.5}


def split_budget(weighted) -> int:
    return max(int(w.depth.max()) + 1 for w in weighted) + 8


@pytest.mark.parametrize("mode", ["seq_mean_token_mean", "seq_mean_token_sum", "constant"])
def test_each_loss_aggregation_keeps_the_packed_gradient_equal_to_per_path(tiny_model, mode):
    """A shared prefix token lies on paths of different lengths: its weight is the sum over them of
    each path's per-token weight (``1 / (|T_p| P)``, ``1 / P``, ``1 / (C P)``)."""
    weighted = exact_dedup(trees(), normalisation=mode, loss_constant=24.0)

    def packed_aggregated_loss():
        total = 0.0
        for micro in pack(weighted, budget=split_budget(weighted)):
            tensors = packed_tensors(micro)
            targets = torch.nonzero(tensors["loss_weight"] != 0).flatten()
            advantage = token_advantages(execution_index=tensors["execution_index"], executions=micro.executions,
                                         advantages=SIGNED)[targets]
            total = total - (tensors["loss_weight"][targets] * advantage
                             * target_logprobs(tiny_model, tensors, targets)).sum()
        return total

    def naive_aggregated_loss():
        terms = [-SIGNED[e] * path_nll(tiny_model, p, trainable_positions(p, records))
                 for e, records in EXECUTIONS.items() for p in root_to_leaf_paths(records)]
        return -aggregate(terms, mode, 24.0)

    (loss_p, grad_p), (loss_n, grad_n) = (gradient(tiny_model, packed_aggregated_loss),
                                          gradient(tiny_model, naive_aggregated_loss))
    assert abs(float(loss_p - loss_n)) <= 1e-5 * abs(float(loss_n))
    assert relative(grad_p, grad_n) <= 1e-5


@pytest.fixture(scope="module")
def proximal_model(tiny_model):
    """The tiny model with every weight nudged: the policy before a few optimizer steps."""
    old = copy.deepcopy(tiny_model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in old.parameters():
            p.add_(0.05 * p.std().nan_to_num(0.0) * torch.randn(p.shape, generator=generator))
    return old


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean"])
def test_sequence_ratio_keeps_the_packed_gradient_equal_to_per_path(tiny_model, proximal_model, mode):
    """GSPO with ratios that really differ from 1 and clip for some paths: each piece of a split
    tree scores its context, so every path's ratio is whole; behaviour logprobs unknown (the
    importance weights are proven with shared tokens in ``test_loss_shapes.py``)."""
    clip = Clip(low=0.004, high=0.006, dual=1.008)
    config = TrainingConfig(loss_aggregation=mode, ratio_level="sequence", clip_eps_low=clip.low,
                            clip_eps_high=clip.high, dual_clip=clip.dual)
    weighted = exact_dedup(trees(), normalisation=mode)

    def packed_sequence_loss():
        total = 0.0
        for micro in pack(weighted, budget=split_budget(weighted)):
            tensors = packed_tensors(micro)
            tensors["behaviour_logprob"] = torch.full_like(tensors["behaviour_logprob"], float("nan"))
            targets = scored_targets(tensors, ratio_level="sequence")
            with torch.no_grad():
                proximal = target_logprobs(proximal_model, tensors, targets)
            advantage = token_advantages(execution_index=tensors["execution_index"], executions=micro.executions,
                                         advantages=SIGNED)
            total = total + micro_batch_policy_loss(
                logprob=target_logprobs(tiny_model, tensors, targets), tensors=tensors, targets=targets,
                advantage=advantage, training=config, proximal_logprob=proximal).loss
        return total

    def per_path_sequences():
        seqs = []
        for e, records in EXECUTIONS.items():
            for p in root_to_leaf_paths(records):
                positions = trainable_positions(p, records)
                with torch.no_grad():
                    proximal = -path_nll(proximal_model, p, positions)
                seqs.append(Sequence(logp=-path_nll(tiny_model, p, positions), proximal=proximal,
                                     behaviour=torch.full_like(proximal, float("nan")), advantage=SIGNED[e]))
        return seqs

    (loss_p, grad_p), (loss_n, grad_n) = (
        gradient(tiny_model, packed_sequence_loss),
        gradient(tiny_model, lambda: reference_loss(per_path_sequences(), mode=mode, level="sequence", clip=clip)))
    assert abs(float(loss_p - loss_n)) <= 1e-5 * abs(float(loss_n))
    assert relative(grad_p, grad_n) <= 1e-5
    seqs = per_path_sequences()
    low, high, dual = clip_counts(seqs, level="sequence", clip=clip)
    assert 0 < low + high + dual < len(seqs)  # some paths clip, some do not
