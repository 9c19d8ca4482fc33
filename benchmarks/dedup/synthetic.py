"""Synthetic agent-shaped executions at realistic scale, for the data-plane benchmarks.

One execution is a main agent that works in turns: its prompt is the whole history rendered
(system prompt, messages), its completion a reply (a tool call, say), and the next prompt
appends that reply and a tool result, so the context grows by ``growth`` tokens a turn up to
``max_context`` -- then a summariser condenses the history and the main agent restarts from
the summary (context compression). Along the way, with the given probabilities per turn:

* ``p_retry``        the same request is re-sent (a timeout); the retry's reply is kept;
* ``p_parallel``     the request asks for ``n=2``; the second choice is a sibling branch;
* ``p_format_error`` the reply is rejected and dropped from history; a user message follows;
* ``p_rerender``     the harness re-serialises the reply (one token differs) in history;
* ``p_subagent``     a sub-agent with its own system prompt runs a few calls; its answer
                     returns to the main agent as a tool result.

Message framing is 4 tokens (start, role, newline ... end); token ids are uniform in
``[16, vocab)``. Everything is seeded: the same shape and seed give the same calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from gyrectl.capture.record import CallRecord

START, END = 1, 2
GENERATION_PROMPT = np.array([START, 12, 3], dtype=np.int32)


@dataclass(frozen=True)
class AgentShape:
    num_calls: int = 300
    """Main-agent turns (retries, samples, sub-agent and summary calls come on top)."""
    max_context: int = 700_000
    """Context length at which the history is compressed into a summary."""
    growth: int = 3_000
    """Tokens the context grows by per turn (reply + tool result)."""
    system_tokens: int = 2_000
    completion_tokens: tuple[int, int] = (50, 400)
    p_retry: float = 0.04
    p_parallel: float = 0.04
    p_format_error: float = 0.03
    p_rerender: float = 0.03
    p_subagent: float = 0.03
    subagent_calls: tuple[int, int] = (3, 8)
    vocab: int = 150_000


@dataclass(frozen=True)
class SyntheticCall:
    meta: CallRecord
    """Metadata only (token fields empty)."""
    prompt: np.ndarray
    completion: np.ndarray
    logprobs: np.ndarray

    @property
    def tokens(self) -> np.ndarray:
        return np.concatenate([self.prompt, self.completion])


class _Context:
    """A growing conversation kept as one array with amortised appends."""

    def __init__(self, first: np.ndarray):
        self._data = np.empty(max(1024, 2 * len(first)), dtype=np.int32)
        self._len = 0
        self.append(first)

    def append(self, tokens: np.ndarray) -> None:
        if self._len + len(tokens) > len(self._data):
            grown = np.empty(2 * (self._len + len(tokens)), dtype=np.int32)
            grown[:self._len] = self._data[:self._len]
            self._data = grown
        self._data[self._len:self._len + len(tokens)] = tokens
        self._len += len(tokens)

    def __len__(self) -> int:
        return self._len

    def prompt(self) -> np.ndarray:
        return np.concatenate([self._data[:self._len], GENERATION_PROMPT])


def agent_execution(execution: str, shape: AgentShape, seed: int) -> Iterator[SyntheticCall]:
    rng = np.random.default_rng(seed)
    counter = iter(range(10**9))

    def text(n: int) -> np.ndarray:
        return rng.integers(16, shape.vocab, size=n, dtype=np.int32)

    def message(body: np.ndarray, role: int = 11) -> np.ndarray:
        return np.concatenate([[START, role, 3], body, [END]]).astype(np.int32)

    def call(context: _Context, role: str = "main", call_id: str = "", sample_index: int = 0,
             version: int = 0) -> SyntheticCall:
        n = int(rng.integers(*shape.completion_tokens))
        completion = np.append(text(n - 1), END).astype(np.int32)
        meta = CallRecord(execution=execution, prompt_token_ids=(), completion_token_ids=(),
                          call_id=call_id or f"{execution}-{next(counter)}", role=role,  # type: ignore[arg-type]
                          sample_index=sample_index, weight_version=version)
        return SyntheticCall(meta, context.prompt(), completion, -rng.random(n).astype(np.float32))

    def fresh_main() -> _Context:
        return _Context(np.concatenate([message(text(shape.system_tokens), 10), message(text(200))]))

    main = fresh_main()
    for turn in range(shape.num_calls):
        version = turn * 4 // shape.num_calls  # the policy moves on during the session
        reply = call(main, version=version)
        yield reply
        if rng.random() < shape.p_retry:
            reply = call(main, version=version)
            yield reply
        if rng.random() < shape.p_parallel:
            base = reply.meta.call_id
            reply = SyntheticCall(CallRecord(**{**reply.meta.__dict__, "call_id": f"{base}/0"}),
                                  reply.prompt, reply.completion, reply.logprobs)
            yield call(main, call_id=f"{base}/1", sample_index=1, version=version)
        if rng.random() < shape.p_format_error:
            main.append(message(text(30)))  # "your reply was malformed": the reply is dropped
            continue
        body = reply.completion.copy()
        if rng.random() < shape.p_rerender:
            body[len(body) // 2] = (body[len(body) // 2] + 1) % shape.vocab  # re-serialised JSON
        main.append(np.concatenate([[START, 12, 3], body]).astype(np.int32))
        if rng.random() < shape.p_subagent:
            sub = _Context(np.concatenate([message(text(800), 10), message(text(300))]))
            for _ in range(int(rng.integers(*shape.subagent_calls))):
                answer = call(sub, role="subagent", version=version)
                yield answer
                sub.append(np.concatenate([[START, 12, 3], answer.completion, message(text(1500), 13)]))
            main.append(message(answer.completion, 13))
        else:
            main.append(message(text(max(1, shape.growth - len(body) - 8)), 13))
        if len(main) + shape.growth > shape.max_context:
            request = _Context(main.prompt()[:-len(GENERATION_PROMPT)])
            request.append(message(text(60)))  # "summarise the work so far"
            summary = call(request, role="summary", version=version)
            yield summary
            main = fresh_main()
            main.append(message(summary.completion))
