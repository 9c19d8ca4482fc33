"""The sampling fields the head imposes on an execution's calls (an evaluation's temperature),
set over what its harness sent (pure).

An imposed temperature must never turn a request vLLM accepts into one it refuses: at a
temperature under vLLM's greedy threshold it samples greedily and answers 400 "n must be 1 when
using greedy sampling" to any ``n`` > 1, which the harness, having asked for no greedy sampling,
cannot expect. Such a call goes up as temperature 1 with ``top_k`` 1 instead: every other token is
masked before sampling, so each of the n choices is the argmax token at every position, the
tokens greedy decoding gives (penalties, logit bias and the like apply before the mask, as before
an argmax). The recorded logprobs do not change either: vLLM returns the raw model's, taken
before temperature and top-k. Only two tokens with exactly equal top logits could differ (greedy
takes the first, top-k keeps both).
"""

from __future__ import annotations

from typing import Any

GREEDY_BELOW = 1e-5
"""vLLM samples greedily under this temperature (``vllm.sampling_params._SAMPLING_EPS``)."""
ARGMAX = {"temperature": 1.0, "top_k": 1}
"""Greedy decoding as vLLM's random sampler does it, which takes any ``n``."""


def impose(body: dict[str, Any], imposed: dict[str, Any]) -> dict[str, Any]:
    """The request as sent upstream: ``imposed`` over ``body``, greedy ``n`` > 1 as ``ARGMAX``."""
    sent = {**body, **imposed}
    temperature = imposed.get("temperature")
    if isinstance(temperature, int | float) and temperature < GREEDY_BELOW and sent.get("n", 1) > 1:
        sent.update(ARGMAX)
    return sent
