"""The arithmetic reward: exact match of the reply's answer with the task's ``expected`` number.

``score(task, output)`` is 1.0 when the reply's answer equals ``task["expected"]``, else 0.0. The
reply's answer is the number right after its first ``=`` (the harness's examples reply
``9 - 4 = 5``), or, in a reply with no ``=`` followed by a number, its last number. Only the
first equation counts: SmolLM2 often writes a right equation and then rambles on with other
numbers, and often a wrong one and then more. A decimal is compared whole (``82.5`` is not
``82``). The reply is ``output["answer"]`` (``examples/arith/harness.py`` puts it there).
"""

from __future__ import annotations

import re
from typing import Any

NUMBER = r"(?<![\d.])-?\d+(?:\.\d+)?"
"""An integer or decimal, with a sign only where it does not follow a digit (``9-4``: 9 and 4)."""
AFTER_EQUALS = re.compile(r"=\s*(" + NUMBER + ")")


def answer_of(reply: str) -> str | None:
    """The number the reply answers with, as written; None when it has none."""
    if m := AFTER_EQUALS.search(reply):
        return m.group(1)
    numbers = re.findall(NUMBER, reply)
    return numbers[-1] if numbers else None


def score(task: dict[str, Any], output: dict[str, Any]) -> float:
    return float(answer_of(str(output.get("answer", ""))) == str(task["expected"]))
