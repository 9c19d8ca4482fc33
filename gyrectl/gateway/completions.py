"""``/v1/completions``: capture fields added upstream and hidden again, as for chat.

vLLM reports ``prompt_token_ids`` per choice here (a request may hold several prompts), and
``logprobs`` is an integer (top-k) rather than a flag; ``0`` still returns the sampled tokens'
logprobs, which is all capture needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gyrectl.gateway.capture import ABORTED, ChoiceCapture, capture_for, usage_block
from gyrectl.gateway.continuation import completion_logprobs
from gyrectl.gateway.pool import Lease

PATH = "/v1/completions"
ABORT_PREFIX = "cmpl-"


@dataclass(frozen=True)
class Asked:
    token_ids: bool
    logprobs: int | None
    include_usage: bool

    @property
    def top_logprobs(self) -> int:
        return self.logprobs or 0


def upstream_request(body: dict[str, Any]) -> tuple[dict[str, Any], Asked]:
    asked = Asked(token_ids=bool(body.get("return_token_ids")), logprobs=body.get("logprobs"),
                  include_usage=bool((body.get("stream_options") or {}).get("include_usage")))
    return {**body, "return_token_ids": True, "logprobs": asked.top_logprobs}, asked


def absorb_choice(choice: dict[str, Any], captures: dict[int, ChoiceCapture], lease: Lease) -> None:
    cap = capture_for(captures, choice["index"], lease)
    if choice.get("prompt_token_ids") is not None:
        cap.prompt_ids = choice["prompt_token_ids"]
    cap.add_tokens(choice.get("token_ids"), completion_logprobs(choice))
    cap.finish(choice.get("finish_reason"))


def absorb_response(response: dict[str, Any], captures: dict[int, ChoiceCapture], lease: Lease) -> None:
    for choice in response.get("choices", ()):
        absorb_choice(choice, captures, lease)


absorb_chunk = absorb_response  # a chunk has the same shape, one piece of each choice


def strip_response(response: dict[str, Any], asked: Asked) -> dict[str, Any]:
    return {**response, "choices": [_strip_choice(c, asked) for c in response.get("choices", ())]}


def strip_chunk(chunk: dict[str, Any], asked: Asked) -> dict[str, Any] | None:
    choices = []
    for choice in chunk.get("choices", ()):
        if choice.get("finish_reason") == ABORTED:
            choice = {**choice, "finish_reason": None, "stop_reason": None}
        if choice.get("text") or choice.get("finish_reason"):
            choices.append(_strip_choice(choice, asked))
    if not choices and chunk.get("choices"):
        return None
    return {**chunk, "choices": choices}


def continuation_chunk(header: dict[str, Any], index: int, choice: dict[str, Any],
                       asked: Asked) -> dict[str, Any]:
    piece = _strip_choice({**choice, "index": index, "prompt_token_ids": None}, asked)
    return {**header, "object": "text_completion", "choices": [piece]}


def usage_chunk(header: dict[str, Any], captures: dict[int, ChoiceCapture]) -> dict[str, Any]:
    prompt = sum(len(c.prompt_ids or ()) for c in captures.values())
    return {**header, "object": "text_completion", "choices": [], "usage": usage_block(prompt, captures)}


def _strip_choice(choice: dict[str, Any], asked: Asked) -> dict[str, Any]:
    out = dict(choice)
    if not asked.token_ids:
        out.pop("token_ids", None)
        out.pop("prompt_token_ids", None)
    if asked.logprobs is None:
        out["logprobs"] = None
    return out
