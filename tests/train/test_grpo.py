"""GRPO's pure pieces: group advantages and the decoupled-PPO token loss."""

from __future__ import annotations

import math

import pytest
import torch

from gyrectl.train.grpo import ADVANTAGE_EPS, group_advantages, policy_loss, token_advantages


def test_advantages_are_standardised_within_each_group():
    rewards = {"a": 1.0, "b": 0.0, "c": 0.5, "d": 0.9, "e": 0.1}
    groups = {"a": "t0", "b": "t0", "c": "t0", "d": "t1", "e": "t1"}
    adv = group_advantages(rewards=rewards, groups=groups)
    std0 = math.sqrt(((1 - 0.5) ** 2 + 0.5 ** 2 + 0) / 3)  # population std of {1, 0, 0.5}
    assert adv["a"] == pytest.approx(0.5 / (std0 + ADVANTAGE_EPS))
    assert adv["c"] == pytest.approx(0.0)
    assert adv["b"] == pytest.approx(-adv["a"])
    assert adv["d"] == pytest.approx(0.4 / (0.4 + ADVANTAGE_EPS)) and adv["e"] == pytest.approx(-adv["d"])


def test_a_group_of_one_and_a_group_of_equal_rewards_get_zero():
    adv = group_advantages(rewards={"alone": 1.0, "x": 0.3, "y": 0.3},
                           groups={"alone": "t9", "x": "t1", "y": "t1"})
    assert adv == {"alone": 0.0, "x": 0.0, "y": 0.0}


def test_token_advantages_follow_the_execution_index():
    adv = token_advantages(execution_index=torch.tensor([0, 0, 1, 1, 0]), executions=("e1", "e0"),
                           advantages={"e0": -1.0, "e1": 2.0})
    assert adv.tolist() == [2.0, 2.0, -1.0, -1.0, 2.0]


def _loss(logprob, *, proximal, advantage, behaviour=None, weight=None, eps=0.2, cap=2.0):
    n = len(logprob)
    return policy_loss(logprob=logprob, proximal_logprob=proximal, advantage=advantage,
                       behaviour_logprob=proximal.clone() if behaviour is None else behaviour,
                       loss_weight=torch.ones(n) if weight is None else weight, clip_eps=eps,
                       max_importance_weight=cap)


def test_clipping_behaves_as_ppo():
    # ratio = exp(logp - prox): 1.5 (above 1 + eps), 0.5 (below 1 - eps), 1.1 (inside).
    proximal = torch.zeros(6)
    ratios = torch.tensor([1.5, 1.5, 0.5, 0.5, 1.1, 1.1])
    advantage = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    logprob = ratios.log().requires_grad_()
    out = _loss(logprob, proximal=proximal, advantage=advantage)
    out.loss.backward()
    # PPO's pessimistic bound: a good token cannot be pushed past 1 + eps, a bad one not below
    # 1 - eps; the other two cases stay unclipped (their gradient survives).
    expected = -torch.tensor([1.2 * 1, 1.5 * -1, 0.5 * 1, 0.8 * -1, 1.1 * 1, 1.1 * -1]).sum()
    assert float(out.loss.detach()) == pytest.approx(float(expected))
    no_gradient = logprob.grad == 0
    assert no_gradient.tolist() == [True, False, False, True, False, False]
    assert out.stats.num_clipped == 2 and out.stats.clip_fraction == pytest.approx(2 / 6)
    # d/dlogp of -ratio * A = -ratio * A
    assert logprob.grad[[1, 2, 4, 5]].tolist() == pytest.approx((-ratios * advantage)[[1, 2, 4, 5]].tolist())


def test_truncated_importance_weight_caps_and_ignores_unknown_behaviour():
    current = torch.tensor([-1.0, -1.0, -1.0, -1.0])
    behaviour = torch.tensor([-1.0, -1.5, -9.0, float("nan")])  # w = 1, e^0.5, capped, unknown -> 1
    logprob = current.clone().requires_grad_()
    out = policy_loss(logprob=logprob, behaviour_logprob=behaviour,
                      advantage=torch.ones(4), loss_weight=torch.ones(4), clip_eps=0.2, max_importance_weight=1.5)
    weights = [1.0, 1.5, 1.5, 1.0]  # e^0.5 = 1.65 is capped too
    assert float(out.loss.detach()) == pytest.approx(-sum(weights))
    assert out.stats.mean_importance_weight == pytest.approx(sum(weights) / 4)
    out.loss.backward()
    assert logprob.grad.tolist() == pytest.approx([-w for w in weights])  # no NaN leaks into the gradient


def test_k3_kl_is_zero_on_policy_and_skips_unknown_behaviour():
    current = torch.tensor([-0.5, -2.0, -1.0])
    on_policy = policy_loss(logprob=current, behaviour_logprob=current.clone(), advantage=torch.ones(3),
                            loss_weight=torch.ones(3), clip_eps=0.2, max_importance_weight=2.0)
    assert on_policy.stats.kl == 0.0
    behaviour = torch.tensor([-1.0, float("nan"), -0.5])
    off = policy_loss(logprob=current, behaviour_logprob=behaviour, advantage=torch.ones(3),
                      loss_weight=torch.ones(3), clip_eps=0.2, max_importance_weight=2.0)
    r = torch.tensor([0.5, -0.5])  # log(current / behaviour) on the two known tokens
    assert off.stats.num_kl_tokens == 2
    assert off.stats.kl == pytest.approx(float((r.exp() - 1 - r).mean()))


def test_on_policy_unclipped_gradient_is_plain_reinforce():
    """behaviour == current and one step per batch: the gradient is that of -sum A w log p."""
    torch.manual_seed(0)
    logits = torch.randn(7, 11, requires_grad=True)
    tokens = torch.randint(0, 11, (7,))
    advantage, weight = torch.randn(7), torch.rand(7)

    def logprob():
        return torch.log_softmax(logits, dim=-1)[torch.arange(7), tokens]

    out = policy_loss(logprob=logprob(), behaviour_logprob=logprob().detach(), advantage=advantage,
                      loss_weight=weight, clip_eps=0.2, max_importance_weight=2.0)
    (grad_grpo,) = torch.autograd.grad(out.loss, logits)
    (grad_plain,) = torch.autograd.grad(-(advantage * weight * logprob()).sum(), logits)
    assert torch.allclose(grad_grpo, grad_plain, atol=1e-7, rtol=1e-6)
    assert out.stats.clip_fraction == 0.0 and out.stats.mean_importance_weight == pytest.approx(1.0)
