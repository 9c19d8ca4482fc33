"""examples/arith: the exact-match verifier, the task files and their generator (pure, fast).
The measured pass@1 of SmolLM2 on these tasks is in examples/arith/README.md."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gyrectl.config import load_config
from gyrectl.rollout.reward import load_verifier
from tests.conftest import REPO

ARITH = REPO / "examples/arith"


def load_script(path: Path) -> ModuleType:
    """A script beside the examples as a module (registered, as dataclasses need)."""
    name = f"arith_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def read_tasks(name: str) -> list[dict]:
    return [json.loads(line) for line in (ARITH / name).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def score():
    # loaded as gyrectl loads rollout.verifier: a standalone module, relative to the launch directory
    return load_verifier("examples/arith/verifier.py:score", REPO)


@pytest.mark.parametrize(("reply", "reward"), [
    ("17 - 9 = 8", 1.0),
    ("17 - 9 = 8 apples, and 8 + 3 = 11", 1.0),       # the first equation counts
    ("17 - 9 = 11, so 17 - 9 = 8", 0.0),              # ... also when it is the wrong one
    ("17 - 9 =8.", 1.0),
    ("The answer is 8.", 1.0),                         # no equation: the last number
    ("8", 1.0),
    ("17 - 9 = 8.5", 0.0),                             # a decimal is compared whole
    ("17 - 9 = 80", 0.0),
    ("17 - 9 = -8", 0.0),
    ("seventeen minus nine is eight", 0.0),
    ("", 0.0),
])
def test_the_reward_is_exact_match_on_the_answered_number(score, reply, reward):
    assert score({"id": "sub-1", "expected": "8"}, {"answer": reply}) == reward


def test_a_negative_answer_and_a_missing_answer_field(score):
    assert score({"id": "t", "expected": "-3"}, {"answer": "2 - 5 = -3"}) == 1.0
    assert score({"id": "t", "expected": "3"}, {"answer": "5-2=3"}) == 1.0
    assert score({"id": "t", "expected": "3"}, {}) == 0.0


def test_the_task_files_are_well_formed_and_held_out_by_content():
    train, held_out = read_tasks("tasks.jsonl"), read_tasks("eval_tasks.jsonl")
    assert len(held_out) >= 50 and len(train) >= 200
    for task in train + held_out:
        assert set(task) == {"id", "prompt", "expected", "family"}
        assert str(int(task["expected"])) == task["expected"]
    ids = [t["id"] for t in train + held_out]
    assert len(set(ids)) == len(ids)
    make = load_script(ARITH / "make_tasks.py")
    numbers = [tuple(int(n) for n in re.findall(r"\d+", t["prompt"])) for t in train + held_out]
    assert all(len(n) == 2 for n in numbers)
    # no held-out fact (operation and operands) is trained on, whatever the wording
    facts = {t["id"]: (("+" if int(t["expected"]) == a + b else "-"), a, b)
             for t, (a, b) in zip(train + held_out, numbers, strict=True)}
    trained = {facts[t["id"]] for t in train}
    assert not trained & {facts[t["id"]] for t in held_out}
    assert not (trained | {facts[t["id"]] for t in held_out}) & make.SHOT_FACTS


def test_make_tasks_is_deterministic_and_wrote_the_shipped_files():
    make = load_script(ARITH / "make_tasks.py")
    assert make.make() == make.make()
    train, held_out = make.make()
    assert make.jsonl(train) == (ARITH / "tasks.jsonl").read_text()
    assert make.jsonl(held_out) == (ARITH / "eval_tasks.jsonl").read_text()


def test_the_harness_examples_are_the_facts_the_generator_keeps_out():
    harness = load_script(ARITH / "harness.py")
    make = load_script(ARITH / "make_tasks.py")
    shown = set()
    for _, reply in harness.EXAMPLES:
        a, op, b, _, _ = reply.split()
        shown.add((op, int(a), int(b)))
    assert shown == make.SHOT_FACTS
    messages = harness.messages_for("What is 17 - 9?")
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3 + ["user"]


def test_the_config_points_at_the_example():
    config = load_config(REPO / "configs/local-smollm2.yaml")
    assert config.rollout.verifier == "examples/arith/verifier.py:score"
    assert (REPO / config.rollout.tasks).parent == ARITH == (REPO / config.eval.tasks).parent
    assert config.training.batch_executions % config.rollout.executions_per_task == 0
