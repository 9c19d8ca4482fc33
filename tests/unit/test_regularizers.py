"""The entropy bonus and the KL penalty (``gyrectl.train.regularizers``): each equals an
independent reference written here (numpy for the values, analytic derivatives or plain torch
autograd for the gradients) on random logits and logprobs, and on deduplicated trees their
gradient equals per-path training's (1e-5, as ``test_dedup_gradient``)."""

from __future__ import annotations

import copy
import typing
from pathlib import Path

import numpy as np
import pytest
import torch

from gyrectl.capture.stored import stored_calls
from gyrectl.capture.tree import build_tree
from gyrectl.config.schema import TrainingConfig
from gyrectl.dedup.exact import exact_dedup
from gyrectl.dedup.packing import pack
from gyrectl.train.forward import logprobs_of, target_logits
from gyrectl.train.packed import packed_tensors
from gyrectl.train.reference import Reference, reference_logprobs
from gyrectl.train.regularizers import (
    KL_ESTIMATORS,
    RegularizerStats,
    kl_estimate,
    regularization,
    token_entropy,
)

from agent_shapes import all_patterns
from naive_paths import root_to_leaf_paths, trainable_positions

RNG = np.random.default_rng(0)


def numpy_entropy(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    return -(p * np.log(p)).sum(axis=-1)


def numpy_kl(logp: np.ndarray, ref: np.ndarray, estimator: str) -> tuple[np.ndarray, np.ndarray]:
    """The estimator's value and its derivative in ``logp``, from the formulas (verl's clamps for
    low_var_kl: log r to [-20, 20], then the value to [-10, 10]; a clamped side has derivative 0)."""
    if estimator == "k1":
        return logp - ref, np.ones_like(logp)
    log_r = ref - logp
    if estimator == "k3":
        return np.exp(log_r) - log_r - 1, 1 - np.exp(log_r)
    inside = np.abs(log_r) <= 20
    clamped = np.clip(log_r, -20, 20)
    value = np.exp(clamped) - clamped - 1
    slope = np.where(inside, 1 - np.exp(clamped), 0.0)
    return np.clip(value, -10, 10), np.where(np.abs(value) <= 10, slope, 0.0)


def random_logits(rows: int = 23, vocab: int = 57, scale: float = 3.0) -> np.ndarray:
    return RNG.normal(scale=scale, size=(rows, vocab))


@pytest.mark.parametrize("chunk_rows", [None, 1, 4, 23, 100])
def test_entropy_and_its_gradient_equal_a_plain_reference(chunk_rows):
    logits = random_logits()
    upstream = RNG.normal(size=logits.shape[0])
    x = torch.tensor(logits, requires_grad=True)
    entropy = token_entropy(x, chunk_rows=chunk_rows)
    (entropy * torch.tensor(upstream)).sum().backward()
    # Plain autograd through softmax, independent of the chunked backward.
    y = torch.tensor(logits, requires_grad=True)
    plain = -(torch.softmax(y, -1) * torch.log_softmax(y, -1)).sum(-1)
    (plain * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(entropy.detach().numpy(), numpy_entropy(logits), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_entropy_gradcheck_and_float32():
    x = torch.tensor(random_logits(7, 11), requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: token_entropy(t, chunk_rows=3), (x,))
    logits32 = torch.tensor(random_logits(), dtype=torch.float32)
    np.testing.assert_allclose(token_entropy(logits32).numpy(), numpy_entropy(logits32.double().numpy()),
                               rtol=1e-5)


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_each_kl_estimator_and_its_gradient_equal_the_formula(estimator):
    logp = np.log(RNG.uniform(0.01, 1.0, size=200))
    ref = logp + RNG.normal(scale=1.5, size=200)
    ref[:3] = logp[:3] + np.array([30.0, -30.0, 2.9])  # past each of low_var_kl's clamps
    x = torch.tensor(logp, requires_grad=True)
    value = kl_estimate(x, torch.tensor(ref), estimator)
    value.sum().backward()
    expected, slope = numpy_kl(logp, ref, estimator)
    np.testing.assert_allclose(value.detach().numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), slope, rtol=1e-12, atol=1e-12)


def test_kl_estimators_are_the_config_choices_and_estimate_kl():
    choices = typing.get_args(typing.get_type_hints(TrainingConfig)["kl_estimator"])
    assert choices == KL_ESTIMATORS
    # Sampled from the policy, each estimator's mean is KL(policy || reference) (k1 and k3 unbiased).
    policy = torch.softmax(torch.tensor(random_logits(1, 6, scale=1.0))[0], -1)
    reference = torch.softmax(torch.tensor(random_logits(1, 6, scale=1.0))[0], -1)
    exact = float((policy * (policy.log() - reference.log())).sum())
    tokens = torch.multinomial(policy, 400_000, replacement=True, generator=torch.Generator().manual_seed(0))
    for estimator in KL_ESTIMATORS:
        mean = float(kl_estimate(policy.log()[tokens], reference.log()[tokens], estimator).mean())
        assert mean == pytest.approx(exact, rel=0.03), estimator


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_the_combined_term_loss_gradient_and_stats_equal_a_reference(estimator):
    logits, tokens = random_logits(), RNG.integers(0, 57, size=23)
    ref = RNG.normal(scale=0.5, size=23) + np.log(RNG.uniform(0.01, 0.2, size=23))
    weight = RNG.uniform(0.0, 0.1, size=23)
    entropy_coef, kl_coef = 0.03, 0.2
    x = torch.tensor(logits, requires_grad=True)
    logprob = logprobs_of(x, torch.tensor(tokens))
    out = regularization(logits=x, logprob=logprob, ref_logprob=torch.tensor(ref), loss_weight=torch.tensor(weight),
                         entropy_coef=entropy_coef, kl_coef=kl_coef, kl_estimator=estimator)
    out.loss.backward()
    # Reference: the loss in numpy; its gradient in plain autograd (softmax, gather, the formula).
    log_p = logits - logits.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    kl, _ = numpy_kl(log_p[np.arange(23), tokens], ref, estimator)
    entropy = numpy_entropy(logits)
    expected = -entropy_coef * (weight * entropy).sum() + kl_coef * (weight * kl).sum()
    assert float(out.loss.detach()) == pytest.approx(expected, rel=1e-12)
    y = torch.tensor(logits, requires_grad=True)
    lp = torch.log_softmax(y, -1)
    chosen = lp[torch.arange(23), torch.tensor(tokens)]
    w = torch.tensor(weight)
    log_r = torch.tensor(ref) - chosen
    bounded = log_r.clamp(-20, 20)
    plain_kl = {"k1": -log_r, "k3": log_r.exp() - log_r - 1,
                "low_var_kl": (bounded.exp() - bounded - 1).clamp(-10, 10)}[estimator]
    (-entropy_coef * (w * -(lp.exp() * lp).sum(-1)).sum() + kl_coef * (w * plain_kl).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-10, atol=1e-14)
    assert out.stats.entropy == pytest.approx((weight * entropy).sum() / weight.sum(), rel=1e-12)
    assert out.stats.kl_ref == pytest.approx((weight * kl).sum() / weight.sum(), rel=1e-12)


def test_off_by_default_no_loss_and_the_entropy_still_measured():
    x = torch.tensor(random_logits(), requires_grad=True)
    weight = torch.full((23,), 0.5)
    out = regularization(logits=x, logprob=logprobs_of(x, torch.zeros(23, dtype=torch.long)), ref_logprob=None,
                         loss_weight=weight, entropy_coef=0.0, kl_coef=0.0, kl_estimator="low_var_kl")
    assert out.loss is None and out.stats.kl_ref is None
    assert out.stats.entropy == pytest.approx(float(numpy_entropy(x.detach().numpy()).mean()), rel=1e-12)
    # Measured with the KL coefficient 0 too: kl_ref is logged, nothing added to the loss.
    ref = torch.zeros(23, dtype=torch.float64)
    logged = regularization(logits=x, logprob=logprobs_of(x, torch.zeros(23, dtype=torch.long)), ref_logprob=ref,
                            loss_weight=weight, entropy_coef=0.0, kl_coef=0.0, kl_estimator="k3")
    assert logged.loss is None and logged.stats.kl_ref is not None and logged.stats.kl_ref > 0


def test_stats_add_up_to_the_means_of_the_whole():
    a = RegularizerStats(weight_sum=0.25, entropy_sum=0.5, kl_sum=0.1, kl_weight_sum=0.25)
    b = RegularizerStats(weight_sum=0.75, entropy_sum=3.0, kl_sum=0.2, kl_weight_sum=0.75)
    assert (a + b).entropy == pytest.approx(3.5) and (a + b).kl_ref == pytest.approx(0.3)
    assert RegularizerStats().entropy == 0.0 and RegularizerStats().kl_ref is None


# ---- exact under tree dedup ------------------------------------------------------------------

EXECUTIONS = {f"r{i}": all_patterns(f"r{i}", seed=20 + i) for i in range(2)}
CASES = [(0.05, 0.0, "k3"), (0.0, 0.3, "k1"), (0.0, 0.3, "k3"), (0.0, 0.3, "low_var_kl"), (0.02, 0.3, "low_var_kl")]
"""(entropy_coef, kl_coef, kl_estimator): the entropy alone, each estimator alone, both."""


@pytest.fixture(scope="module")
def reference_model(tiny_model):
    """The tiny model with every weight moved by half its spread: a reference the policy differs
    from by log-ratios of order 1 (near 0, k3's gradient ``(1 - r) grad logp`` would be float32's
    rounding of a tiny ``1 - r``, not a test of the weights)."""
    model = copy.deepcopy(tiny_model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.5 * (p.std() if p.numel() > 1 else 1.0))
    return model.requires_grad_(False)


def packed_scores(policy, reference):
    """Per micro-batch of deduplicated trees split across micro-batches, what the trainer's
    functions give the regularisers: the policy's parent-row logits and logprobs (with their
    graph), the reference's logprobs at the same rows, the dedup weights."""
    calls = stored_calls(r for records in EXECUTIONS.values() for r in records)
    weighted = exact_dedup([build_tree(e, c) for e, c in calls.items()], normalisation="token")
    budget = max(int(w.depth.max()) + 1 for w in weighted) + 8
    scores = []
    for micro in pack(weighted, budget=budget):
        tensors = packed_tensors(micro)
        targets = torch.nonzero(tensors["loss_weight"] != 0).flatten()
        ref = reference_logprobs(Reference(model=reference, folder=Path(".")), tensors, targets)
        logits = target_logits(policy, tensors, targets)
        scores.append((logits, logprobs_of(logits, tensors["input_ids"][targets]), ref,
                       tensors["loss_weight"][targets]))
    assert len(scores) > len(EXECUTIONS)  # trees really split, prefixes recomputed
    return scores


def naive_scores(policy, reference):
    """Every root-to-leaf path its own causal forward through both models, plain torch at each
    trainable position: the policy's log-softmax rows, the tokens' logprobs under both models."""
    rows, logp, ref = [], [], []
    for records in EXECUTIONS.values():
        for path in root_to_leaf_paths(records):
            positions = torch.tensor(trainable_positions(path, records))
            ids = torch.tensor(path)[None]
            tokens = ids[0, positions]
            log_p = torch.log_softmax(policy(input_ids=ids).logits[0].float(), -1)[positions - 1]
            with torch.no_grad():
                ref_log_p = torch.log_softmax(reference(input_ids=ids).logits[0].float(), -1)[positions - 1]
            rows.append(log_p)
            logp.append(log_p[torch.arange(len(tokens)), tokens])
            ref.append(ref_log_p[torch.arange(len(tokens)), tokens])
    return torch.cat(rows), torch.cat(logp), torch.cat(ref)


def naive_terms(scores, entropy_coef: float, kl_coef: float, estimator: str):
    """The loss as a mean over every (path, token) pair; also the means logged and the size of
    the terms summed (k1 is signed: its mean can be far smaller than they are)."""
    rows, logp, ref = scores
    entropy = -(rows.exp() * rows).sum(-1)
    log_r = ref - logp
    bounded = log_r.clamp(-20, 20)
    kl = {"k1": -log_r, "k3": log_r.exp() - log_r - 1,
          "low_var_kl": (bounded.exp() - bounded - 1).clamp(-10, 10)}[estimator]
    loss = -entropy_coef * entropy.mean() + kl_coef * kl.mean()
    scale = entropy_coef * float(entropy.detach().mean()) + kl_coef * float(kl.detach().abs().mean())
    return loss, float(entropy.detach().mean()), float(kl.detach().mean()), scale


@pytest.fixture(scope="module")
def scores(tiny_model, reference_model):
    """Both sides' forwards, once: every loss below is differentiated on these graphs."""
    return packed_scores(tiny_model, reference_model), naive_scores(tiny_model, reference_model)


def flat_gradient(loss, model) -> torch.Tensor:
    grads = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten().double()
                      for g, p in zip(grads, model.parameters(), strict=True)])


def test_regularizers_on_deduplicated_trees_give_the_per_path_gradient(tiny_model, scores):
    """Entropy, each KL estimator, and both: loss, gradient and the logged means of the packed
    trees equal per-path training's."""
    packed, naive = scores
    for entropy_coef, kl_coef, estimator in CASES:
        case = f"entropy_coef={entropy_coef} kl_coef={kl_coef} {estimator}"
        outs = [regularization(logits=logits, logprob=logprob, ref_logprob=ref, loss_weight=weight,
                               entropy_coef=entropy_coef, kl_coef=kl_coef, kl_estimator=estimator)
                for logits, logprob, ref, weight in packed]
        loss_p = sum(out.loss for out in outs[1:]) + outs[0].loss
        stats = sum((out.stats for out in outs[1:]), outs[0].stats)
        loss_n, entropy, kl, scale = naive_terms(naive, entropy_coef, kl_coef, estimator)
        grad_p, grad_n = flat_gradient(loss_p, tiny_model), flat_gradient(loss_n, tiny_model)
        assert abs(float(loss_p.detach() - loss_n.detach())) <= 1e-5 * scale, case
        assert float((grad_p - grad_n).norm() / grad_n.norm()) <= 1e-5, case
        assert stats.entropy == pytest.approx(entropy, rel=1e-5), case
        assert stats.kl_ref == pytest.approx(kl, abs=1e-5 * max(abs(kl), scale / max(kl_coef, 1e-9))), case


def test_the_dedup_proof_can_fail(tiny_model, scores):
    """Unique tokens weighted alike (no path counts) give another entropy gradient."""
    packed, naive = scores
    uniform = sum(-token_entropy(logits).sum() / 1000 for logits, *_ in packed)
    grad_u = flat_gradient(uniform, tiny_model)
    grad_n = flat_gradient(naive_terms(naive, 0.05, 0.0, "k3")[0], tiny_model)
    assert float((grad_u / grad_u.norm() - grad_n / grad_n.norm()).norm()) > 1e-2
