"""Writes the arithmetic task set: ``tasks.jsonl`` (training) and ``eval_tasks.jsonl`` (held out).

    python examples/arith/make_tasks.py            # rewrites both files beside this script
    python examples/arith/make_tasks.py --check    # exit 1 if the files differ from what it writes

Four families, equally many of each, chosen so that SmolLM2-135M-Instruct (behind the few-shot
harness in ``harness.py``) gets some right and some wrong (README.md has the measurements):

  add     10..29 plus a one-digit number          What is 17 + 6?
  add2    two two-digit numbers                   What is 38 + 25?
  sub     from 11..20 take a smaller number       What is 17 - 9?
  word    a one-sentence story: one-digit sums,   Ann has 12 pens and gives away 5. How many pens ...
          or from 3..12 take a smaller number

Deterministic (one seeded generator); the training tasks are shuffled, the held-out ones stay in
family order. Held out by content: no arithmetic fact (operation and
operands) of an eval task appears among the training tasks, nor among the harness's examples.
A task is ``{"id", "prompt", "expected", "family"}``; ``expected`` is the answer as a string.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).parent
SEED = 25
NUM_TRAIN_PER_FAMILY = 80
NUM_EVAL_PER_FAMILY = 16
FAMILIES = ("add", "add2", "sub", "word")
NAMES = ("Ann", "Ben", "Lia", "Sam", "Tom", "Mia", "Raj", "Eva")
ITEMS = ("apples", "cards", "pens", "coins", "books", "stamps", "shells", "marbles")
GAIN = ("{n} has {a} {it} and gets {b} more. How many {it} does {n} have now?",
        "{n} has {a} {it} and buys {b} more. How many {it} does {n} have now?",
        "{n} had {a} {it} and found {b} more. How many {it} does {n} have now?")
LOSS = ("{n} has {a} {it} and gives away {b}. How many {it} does {n} have now?",
        "{n} had {a} {it} and lost {b}. How many {it} does {n} have now?",
        "{n} has {a} {it} and sells {b} of them. How many {it} does {n} have now?")
SHOT_FACTS = {("+", 2, 5), ("-", 9, 4), ("+", 3, 4)}
"""The harness's worked examples: never a task."""

Fact = tuple[str, int, int]


def draw(family: str, rng: random.Random) -> tuple[Fact, str]:
    """One task of ``family``: its fact and its prompt."""
    if family == "add":
        fact = ("+", rng.randint(10, 29), rng.randint(1, 9))
    elif family == "add2":
        fact = ("+", rng.randint(10, 99), rng.randint(10, 99))
    elif family == "sub":
        a = rng.randint(11, 20)
        fact = ("-", a, rng.randint(1, a - 1))
    else:
        # One-digit stories: with numbers up to 20 the model gets about one in twenty right.
        op = rng.choice("+-")
        a = rng.randint(2, 9) if op == "+" else rng.randint(3, 12)
        fact = (op, a, rng.randint(2, 9) if op == "+" else rng.randint(1, a - 1))
        template = rng.choice(GAIN if op == "+" else LOSS)
        return fact, template.format(n=rng.choice(NAMES), it=rng.choice(ITEMS), a=a, b=fact[2])
    op, a, b = fact
    return fact, f"What is {a} {op} {b}?"


def answer(fact: Fact) -> int:
    op, a, b = fact
    return a + b if op == "+" else a - b


def tasks(family: str, rng: random.Random, *, count: int, taken: set[Fact]) -> Iterator[dict]:
    """``count`` tasks of ``family`` with facts not in ``taken`` (which grows with them)."""
    made = 0
    for _ in range(100 * count):
        if made == count:
            return
        fact, prompt = draw(family, rng)
        if fact in taken:
            continue
        taken.add(fact)
        made += 1
        yield {"id": f"{family}-{made}", "prompt": prompt, "expected": str(answer(fact)), "family": family}
    raise ValueError(f"{family}: ran out of unused facts after {made} of {count} tasks")


def make() -> tuple[list[dict], list[dict]]:
    """(training tasks, eval tasks): the eval facts are drawn first, then excluded from training.
    A fact is used once within a split too, so no two tasks are the same sum."""
    rng = random.Random(SEED)
    taken = set(SHOT_FACTS)
    held_out = [dict(t, id="eval-" + t["id"])
                for f in FAMILIES for t in tasks(f, rng, count=NUM_EVAL_PER_FAMILY, taken=taken)]
    train = [t for f in FAMILIES for t in tasks(f, rng, count=NUM_TRAIN_PER_FAMILY, taken=taken)]
    # Training groups take tasks in file order: in family order a run would train on one family
    # at a time, and its reward per step would follow the families' difficulty, not the policy.
    rng.shuffle(train)
    return train, held_out


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = parser.parse_args(argv)
    train, held_out = make()
    files = {HERE / "tasks.jsonl": jsonl(train), HERE / "eval_tasks.jsonl": jsonl(held_out)}
    if args.check:
        stale = [str(path) for path, text in files.items() if not path.exists() or path.read_text() != text]
        if stale:
            print(f"out of date: {', '.join(stale)} (run {sys.argv[0]})", file=sys.stderr)
        return int(bool(stale))
    for path, text in files.items():
        path.write_text(text)
        print(f"{path}: {text.count(chr(10))} tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
