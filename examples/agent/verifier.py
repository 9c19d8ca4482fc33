"""The example reward: how much of what the agent wrote is digits.

``score(task, output)`` is the fraction of the non-whitespace characters the model wrote in the
execution (every sampled reply in ``output["written"]``; the final ``answer`` for a harness that
reports only that) that are digits, in [0, 1] (0 when it wrote nothing). See README.md for why a
tiny random model can learn this and how to replace it with your own verifier.
"""

from __future__ import annotations

from typing import Any


def score(task: dict[str, Any], output: dict[str, Any]) -> float:
    written = output.get("written")
    if not isinstance(written, list):
        written = [output.get("answer")]
    characters = [c for text in written if isinstance(text, str) for c in text if not c.isspace()]
    if not characters:
        return 0.0
    return sum(c in "0123456789" for c in characters) / len(characters)
