"""Hand-built executions with the call patterns real harnesses produce, in a ChatML-like token
rendering: a message is ``<start> role <nl> content <end> <nl>``; a completion is the assistant
content plus the sampled ``<end>``; the next prompt renders it back as a message."""

from __future__ import annotations

import numpy as np

from gyrectl.capture.record import CallRecord

START, END, NL = 1, 2, 3
ROLE_TOKEN = {"system": 10, "user": 11, "assistant": 12, "tool": 13}
GENERATION_PROMPT = [START, ROLE_TOKEN["assistant"], NL]


def render(messages: list[tuple[str, list[int]]]) -> list[int]:
    out: list[int] = []
    for role, content in messages:
        out += [START, ROLE_TOKEN[role], NL, *content, END, NL]
    return out


class Harness:
    """Records calls of one execution the way the gateway would."""

    def __init__(self, execution: str, seed: int, *, content_len: tuple[int, int] = (3, 7)):
        self.execution = execution
        self.rng = np.random.default_rng(seed)
        self.content_len = content_len
        self.records: list[CallRecord] = []

    def text(self) -> list[int]:
        return self.rng.integers(20, 4000, size=int(self.rng.integers(*self.content_len))).tolist()

    def call(self, messages, *, role="main", reply=None, call_id="", sample_index=0, tool_calls=(),
             version=0) -> list[int]:
        """Sends ``messages``; returns the reply content (completion minus the sampled end)."""
        content = self.text() if reply is None else reply
        completion = [*content, END]
        self.records.append(CallRecord(
            execution=self.execution, prompt_token_ids=tuple(render(messages) + GENERATION_PROMPT),
            completion_token_ids=tuple(completion),
            logprobs=tuple(float(x) for x in -self.rng.random(len(completion))),
            weight_version=version, call_id=call_id or f"c{len(self.records)}", role=role,
            sample_index=sample_index, tool_calls=tuple(tool_calls)))
        return content


def all_patterns(execution: str = "e0", seed: int = 0) -> list[CallRecord]:
    """Every pattern of issue 3 in one execution; the comment on each call is its branch kind."""
    h = Harness(execution, seed)
    main = [("system", h.text()), ("user", h.text())]
    a0 = h.call(main, tool_calls=[{"name": "ls", "arguments": "{}"}])           # new_context (root)
    main += [("assistant", a0), ("tool", h.text())]
    h.call(main)                                                                 # continuation
    a1 = h.call(main, version=1)                                                 # retry (same prompt)
    main += [("assistant", a1), ("tool", h.text())]
    bad = h.call(main, call_id="n2/0", sample_index=0)                           # continuation
    h.call(main, call_id="n2/1", sample_index=1)                                 # parallel_sample
    del bad  # the harness rejects the reply: it is dropped from history (format error)
    main += [("user", h.text())]
    a3 = h.call(main, tool_calls=[{"name": "cat", "arguments": "{\"a\": 1}"}])   # continuation (reply dropped)
    rerendered = list(a3)
    rerendered[len(a3) // 2] += 1  # the harness re-serialises the tool-call JSON in history
    main += [("assistant", rerendered), ("tool", h.text())]
    a4 = h.call(main)                                                            # continuation (rerendered)
    sub = [("system", h.text()), ("user", h.text())]
    b0 = h.call(sub, role="subagent")                                            # new_context (sub-agent)
    sub += [("assistant", b0), ("tool", h.text())]
    h.call(sub, role="subagent")                                                 # continuation
    summary = h.call(main + [("user", h.text())], role="summary")                # new_context (summariser)
    h.call([("system", h.text()), ("user", summary)])                            # new_context (handoff / restart)
    h.call(main, reply=a4)                                                       # retry: identical request and reply
    return h.records
