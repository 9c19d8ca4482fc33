"""Continuing a half-generated choice on another server, token-in/token-out (pure).

The new server gets ``/v1/completions`` with the prompt token ids plus the completion tokens
already delivered as its prompt, so it picks up exactly where the lost server stopped (vLLM
reproduces a greedy continuation bit-for-bit; see ``shared/vllm/NOTES.md``). Sampling settings
carry over; the token budget shrinks by what was already generated.
"""

from __future__ import annotations

from typing import Any

# Settings that shape sampling and stopping, shared by chat and completions requests.
CARRIED_OVER = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids",
                "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos",
                "logit_bias", "skip_special_tokens", "spaces_between_special_tokens",
                "include_stop_str_in_output", "bad_words", "allowed_token_ids")


def remaining_tokens(request: dict[str, Any], num_delivered: int) -> int | None:
    """Completion tokens the choice may still generate (``None``: up to the context length)."""
    budget = request.get("max_completion_tokens") or request.get("max_tokens")
    return None if budget is None else budget - num_delivered


def continuation_body(request: dict[str, Any], *, prompt_ids: list[int], delivered: list[int],
                      top_logprobs: int) -> dict[str, Any]:
    body = {key: request[key] for key in CARRIED_OVER if key in request}
    left = remaining_tokens(request, len(delivered))
    if left is not None:
        body["max_tokens"] = left
    if request.get("min_tokens"):
        body["min_tokens"] = max(0, request["min_tokens"] - len(delivered))
    body.update(model=request["model"], prompt=list(prompt_ids) + list(delivered), n=1, stream=True,
                return_token_ids=True, logprobs=top_logprobs)
    return body


def completion_logprobs(choice: dict[str, Any]) -> list[float]:
    """The sampled tokens' logprobs from a ``/v1/completions`` choice."""
    return list((choice.get("logprobs") or {}).get("token_logprobs") or ())
