"""Issue 27's first slice: the advantage estimators (``training.advantage``) and the optimizer's
knobs (``lr_schedule``, ``warmup_steps``, ``weight_decay``, ``max_grad_norm``), each against a
reference written here from its definition (plain Python, not the code under test), and the
defaults shown to reproduce the step as it was before the knobs existed."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
import yaml

from gyrectl.config import parse_config
from gyrectl.config.schema import TrainingConfig
from gyrectl.errors import ConfigError
from gyrectl.train.grpo import ADVANTAGE_ESTIMATORS, group_advantages
from gyrectl.train.optim import (
    clip_coefficient,
    new_optimizer,
    scale_gradients,
    schedule_factor,
    set_step_hyperparameters,
    step_lr,
)
from gyrectl.train.signal import groups_with_signal

# ---------------------------------------------------------------------------------------------
# Advantages: references from the papers' definitions, one group at a time, in plain Python.


def _all_equal(rs: list[float]) -> bool:
    return all(r == rs[0] for r in rs)


def reference_grpo(rs: list[float]) -> list[float]:
    """DeepSeekMath's (r - mean) / std, population std, + 1e-4 against a zero std."""
    n = len(rs)
    if n == 1 or _all_equal(rs):
        return [0.0] * n
    mean = sum(rs) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rs) / n)
    return [(r - mean) / (std + 1e-4) for r in rs]


def reference_dr_grpo(rs: list[float]) -> list[float]:
    """Dr. GRPO (Liu et al. 2025): the group mean subtracted, no std division."""
    n = len(rs)
    if n == 1 or _all_equal(rs):
        return [0.0] * n
    mean = sum(rs) / n
    return [r - mean for r in rs]


def reference_rloo(rs: list[float]) -> list[float]:
    """RLOO (Ahmadian et al. 2024): each reward minus the mean of the others' rewards."""
    n = len(rs)
    if n == 1 or _all_equal(rs):
        return [0.0] * n
    out = []
    for i, r in enumerate(rs):
        others = [rs[j] for j in range(n) if j != i]
        out.append(r - sum(others) / len(others))
    return out


REFERENCES = {"grpo": reference_grpo, "dr_grpo": reference_dr_grpo, "rloo": reference_rloo}


def random_batch(seed: int) -> tuple[dict[str, float], dict[str, str]]:
    """Groups of 1, 2, 3, 5 and 8 members, in interleaved order: continuous rewards, binary ones
    (ties), all-equal groups (0/1 and one whose float mean is not exact), and a group of one."""
    rng = random.Random(seed)
    groups: list[list[float]] = [
        [rng.random()],
        [rng.random(), rng.random()],
        [float(rng.random() < 0.5) for _ in range(5)] + [1.0, 0.0][: 0 if seed % 2 else 2],
        [rng.choice([0.0, 0.5, 1.0]) for _ in range(8)],
        [0.1, 0.1, 0.1],  # sum 0.30000000000000004: the mean is not exactly 0.1
        [1.0] * 5,
        [rng.uniform(-3, 3) for _ in range(3)],
    ]
    rewards, membership = {}, {}
    members = [(g, i, r) for g, rs in enumerate(groups) for i, r in enumerate(rs)]
    rng.shuffle(members)  # a batch's executions arrive in any order
    for g, i, r in members:
        rewards[f"g{g}-e{i}"] = r
        membership[f"g{g}-e{i}"] = f"task{g}"
    return rewards, membership


@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS)
@pytest.mark.parametrize("seed", range(6))
def test_each_estimator_equals_its_reference_on_random_groups(estimator: str, seed: int) -> None:
    rewards, groups = random_batch(seed)
    got = group_advantages(rewards=rewards, groups=groups, estimator=estimator)
    assert set(got) == set(rewards)
    for task in set(groups.values()):
        names = [e for e in rewards if groups[e] == task]
        expected = REFERENCES[estimator]([rewards[e] for e in names])
        assert [got[e] for e in names] == pytest.approx(expected, rel=1e-12, abs=1e-12), task


@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS)
def test_a_group_of_one_and_an_all_equal_group_get_exactly_zero(estimator: str) -> None:
    rewards = {"alone": 0.7, "a": 0.1, "b": 0.1, "c": 0.1, "x": 1.0, "y": 0.0}
    groups = {"alone": "t0", "a": "t1", "b": "t1", "c": "t1", "x": "t2", "y": "t2"}
    got = group_advantages(rewards=rewards, groups=groups, estimator=estimator)
    assert [got[e] for e in ("alone", "a", "b", "c")] == [0.0] * 4  # exactly, not 1e-13
    assert groups_with_signal(got, groups) == {"t2"}  # what skip_uniform_groups and `status` count


def test_the_estimators_relate_as_their_formulas_say() -> None:
    """Within a group of n: rloo = n/(n-1) x dr_grpo, grpo = dr_grpo / (std + 1e-4); rloo and
    dr_grpo sum to 0 (a baseline, not a reweighting)."""
    rewards, groups = random_batch(11)
    by = {name: group_advantages(rewards=rewards, groups=groups, estimator=name) for name in ADVANTAGE_ESTIMATORS}
    for task in set(groups.values()):
        names = [e for e in rewards if groups[e] == task]
        n, r = len(names), np.array([rewards[e] for e in names])
        for e in names:
            if n > 1:
                assert by["rloo"][e] == pytest.approx(n / (n - 1) * by["dr_grpo"][e], abs=1e-12)
            assert by["grpo"][e] == pytest.approx(by["dr_grpo"][e] / (r.std() + 1e-4), abs=1e-9)
        assert sum(by["rloo"][e] for e in names) == pytest.approx(0.0, abs=1e-12)


def test_grpo_is_bit_for_bit_todays_formula_on_groups_with_a_signal() -> None:
    """The default estimator's arithmetic, unchanged: ``(r - r.mean()) / (r.std() + 1e-4)``."""
    rewards, groups = random_batch(3)
    got = group_advantages(rewards=rewards, groups=groups)
    for task in set(groups.values()):
        names = [e for e in rewards if groups[e] == task]
        r = np.array([rewards[e] for e in names], dtype=np.float64)
        if len(r) > 1 and not (r == r[0]).all():
            assert [got[e] for e in names] == ((r - r.mean()) / (r.std() + 1e-4)).tolist()


def test_an_unknown_estimator_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        group_advantages(rewards={"a": 1.0}, groups={"a": "t"}, estimator="ppo")


# ---------------------------------------------------------------------------------------------
# The learning rate of step N: closed forms.

LR, STEPS = 3e-6, 20


def lr_of(step: int, *, schedule: str, warmup: int = 0, steps: int = STEPS) -> float:
    return step_lr(TrainingConfig(lr=LR, lr_schedule=schedule, warmup_steps=warmup), step=step, steps=steps)


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_warmup_rises_linearly_from_zero(schedule: str) -> None:
    assert [lr_of(n, schedule=schedule, warmup=4) for n in range(4)] == pytest.approx(
        [0.0, LR / 4, LR / 2, 3 * LR / 4], rel=1e-12)
    assert lr_of(4, schedule=schedule, warmup=4) == pytest.approx(LR, rel=1e-12)  # the peak, after W steps


@pytest.mark.parametrize("step", [0, 1, 7, 19])
def test_constant_is_lr_at_every_step(step: int) -> None:
    assert lr_of(step, schedule="constant") == LR  # exactly: what every step trained at before


@pytest.mark.parametrize("warmup", [0, 5])
@pytest.mark.parametrize("step", [5, 6, 12, 19])
def test_linear_decays_to_zero_at_run_steps(warmup: int, step: int) -> None:
    assert lr_of(step, schedule="linear", warmup=warmup) == pytest.approx(
        LR * (STEPS - step) / (STEPS - warmup), rel=1e-12)


@pytest.mark.parametrize("warmup", [0, 5])
@pytest.mark.parametrize("step", [5, 6, 12, 19])
def test_cosine_decays_to_zero_at_run_steps(warmup: int, step: int) -> None:
    expected = LR * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (STEPS - warmup)))
    assert lr_of(step, schedule="cosine", warmup=warmup) == pytest.approx(expected, rel=1e-12)


def test_the_schedules_at_their_landmarks() -> None:
    assert lr_of(10, schedule="cosine") == pytest.approx(LR / 2, rel=1e-12)  # halfway: half
    assert lr_of(10, schedule="linear") == pytest.approx(LR / 2, rel=1e-12)
    assert lr_of(19, schedule="linear") == pytest.approx(LR / 20, rel=1e-12)  # the last step still trains
    assert lr_of(20, schedule="linear") == 0.0 and lr_of(20, schedule="cosine") == pytest.approx(0.0, abs=1e-20)
    assert lr_of(3, schedule="linear", warmup=4, steps=4) == pytest.approx(3 * LR / 4)  # all warmup
    assert schedule_factor("cosine", step=0, steps=1, warmup_steps=0) == 1.0  # a one-step run trains


def test_the_lr_is_written_into_the_optimizer_whatever_it_held() -> None:
    """A loaded state or a resident's last step left other values: step N's win, every step."""
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.5, weight_decay=0.3)
    training = TrainingConfig(lr=LR, lr_schedule="linear", weight_decay=0.01)
    lr = set_step_hyperparameters(optimizer, training, step=10, steps=STEPS)
    assert lr == pytest.approx(LR / 2)
    assert [(g["lr"], g["weight_decay"]) for g in optimizer.param_groups] == [(lr, 0.01)]


# ---------------------------------------------------------------------------------------------
# Gradient clipping against torch.nn.utils.clip_grad_norm_ on an independent copy.


def tiny_net_with_gradient(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    x, y = torch.randn(32, 6), torch.randn(32, 4)
    (100.0 * (net(x) - y).square().mean()).backward()  # a norm well above 1
    return net


def step_grad_norm(model: torch.nn.Module) -> float:
    """The trainer's own norm (``gyrectl.train.step._grad_norm``) in a process group of one."""
    from gyrectl.train.distributed import close_world, init_world
    from gyrectl.train.step import _grad_norm

    world = init_world()
    try:
        return _grad_norm(model, world=world)
    finally:
        close_world()


def gradients(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("max_norm", [0.5, 2.0])
def test_clipping_matches_torch_and_the_logged_norm_is_the_one_before(max_norm: float) -> None:
    ours, theirs = tiny_net_with_gradient(), tiny_net_with_gradient()  # deepcopy would drop .grad
    assert torch.equal(gradients(ours), gradients(theirs))
    norm = step_grad_norm(ours)  # what metrics.jsonl's grad_norm holds
    torch_norm = float(torch.nn.utils.clip_grad_norm_(theirs.parameters(), max_norm))
    assert norm > max_norm and norm == pytest.approx(torch_norm, rel=1e-6)
    scale_gradients(ours, clip_coefficient(norm, max_norm))
    assert torch.allclose(gradients(ours), gradients(theirs), rtol=1e-6, atol=0)
    assert float(gradients(ours).double().norm()) == pytest.approx(max_norm, rel=1e-5)  # clipped to it
    training = TrainingConfig(lr=1e-2, max_grad_norm=max_norm, weight_decay=0.1)
    for net in (ours, theirs):  # and the AdamW step after it agrees
        new_optimizer(net.parameters(), training).step()
    pairs = zip(ours.parameters(), theirs.parameters(), strict=True)
    assert all(torch.allclose(a, b, rtol=1e-6, atol=1e-9) for a, b in pairs)


@pytest.mark.parametrize("max_norm", [0.0, 1e6])
def test_no_clipping_leaves_the_gradient_bit_for_bit(max_norm: float) -> None:
    """0 turns clipping off; a bound above the norm never touches the gradient (torch's rule
    would still multiply by max/(norm + 1e-6) clamped to 1: a multiply by exactly 1.0)."""
    net = tiny_net_with_gradient()
    before = gradients(net).clone()
    assert clip_coefficient(step_grad_norm(net), max_norm) == 1.0
    scale_gradients(net, clip_coefficient(step_grad_norm(net), max_norm))
    assert torch.equal(gradients(net), before)


# ---------------------------------------------------------------------------------------------
# The defaults are the step as it was.


def test_the_defaults_are_todays_step() -> None:
    training = TrainingConfig()
    assert (training.advantage, training.lr_schedule, training.warmup_steps) == ("grpo", "constant", 0)
    assert (training.weight_decay, training.max_grad_norm) == (0.0, 0.0)


def test_three_default_steps_equal_todays_adamw_bit_for_bit() -> None:
    """Today's step 5: ``AdamW(lr=training.lr, weight_decay=0.0)``, lr rewritten each step, no
    clipping. The new step 5 with the default config: the same weights, bit for bit."""
    training = TrainingConfig(lr=1e-2)
    today, new = tiny_net_with_gradient(), tiny_net_with_gradient()
    old_optimizer = torch.optim.AdamW(today.parameters(), lr=training.lr, weight_decay=0.0)
    new_opt = new_optimizer(new.parameters(), training)
    hyper = [{k: v for k, v in o.param_groups[0].items() if k != "params"} for o in (old_optimizer, new_opt)]
    assert hyper[0] == hyper[1]  # betas, eps, amsgrad, foreach...: every hyperparameter as before
    for step in range(3):
        if step:  # a fresh gradient each step, the same for both
            for net in (today, new):
                net.zero_grad()
                torch.manual_seed(step)
                x, y = torch.randn(32, 6), torch.randn(32, 4)
                (100.0 * (net(x) - y).square().mean()).backward()
        for group in old_optimizer.param_groups:
            group["lr"] = training.lr
        old_optimizer.step()
        set_step_hyperparameters(new_opt, training, step=step, steps=10)
        scale_gradients(new, clip_coefficient(step_grad_norm(new), training.max_grad_norm))
        new_opt.step()
        assert all(torch.equal(a, b) for a, b in zip(today.parameters(), new.parameters(), strict=True))


# ---------------------------------------------------------------------------------------------
# `gyrectl config check` refuses what cannot work, naming the field.

BAD_TRAINING = [
    ({"run": {"steps": 10}, "training": {"warmup_steps": 11}}, "training.warmup_steps", "more than run.steps=10"),
    ({"training": {"warmup_steps": -1}}, "training.warmup_steps", "at least 0"),
    ({"training": {"weight_decay": -0.01}}, "training.weight_decay", "at least 0"),
    ({"training": {"lr": 0.1, "weight_decay": 10}}, "training.weight_decay", "0.1 x 10 = 1"),
    ({"training": {"max_grad_norm": -1}}, "training.max_grad_norm", "at least 0 (0: no clipping)"),
    ({"training": {"advantage": "gae"}}, "training.advantage", "'grpo', 'dr_grpo', 'rloo'"),
    ({"training": {"lr_schedule": "step"}}, "training.lr_schedule", "'constant', 'linear', 'cosine'"),
    ({"training": {"updates_per_batch": 0}}, "training.updates_per_batch", "at least 1"),
    ({"rollout": {"executions_per_task": 8}, "training": {"batch_executions": 16, "updates_per_batch": 3}},
     "training.updates_per_batch", "more than the 2 GRPO group(s) of a batch"),
]


@pytest.mark.parametrize("raw,field,text", BAD_TRAINING, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD_TRAINING)])
def test_a_bad_training_knob_names_its_field(raw: dict, field: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.path == field and text in str(info.value)


def test_the_edges_are_accepted() -> None:
    config = parse_config({"run": {"steps": 4}, "rollout": {"executions_per_task": 8}, "training": {
        "warmup_steps": 4, "lr_schedule": "cosine", "advantage": "rloo", "max_grad_norm": 1.0,
        "weight_decay": 0.01, "batch_executions": 16, "updates_per_batch": 2}})
    assert (config.training.warmup_steps, config.training.advantage) == (4, "rloo")
    assert config.training.updates_per_batch == 2  # one update per group


def test_config_check_refuses_with_the_field_named(tmp_path, cli) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"run": {"steps": 3}, "training": {"warmup_steps": 8}}))
    result = cli("config", "check", str(path))
    assert result.returncode == 2, result.stderr
    assert "training.warmup_steps" in result.stderr and "run.steps=3" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
