"""The calls of one execution in edit form: what the capture store keeps and the tree consumes.

:func:`stored_calls` turns full :class:`~gyrectl.capture.record.CallRecord`\\ s (a JSONL file,
the gateway's output) into this form; the store reads it back directly, so long sessions are
never materialised as one full token list per call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gyrectl.capture.edit import Edit, EditChain
from gyrectl.capture.prefix import PrefixIndex
from gyrectl.capture.record import CallRecord


@dataclass(frozen=True)
class StoredCall:
    edit: Edit
    """The call's prompt + completion tokens as an edit of an earlier call of its execution."""
    prompt_len: int
    """Tokens of the sequence that were the prompt; the rest were sampled by the policy."""
    logprobs: np.ndarray | None
    """float32 behaviour logprobs of the completion tokens, if recorded."""
    meta: CallRecord
    """Everything else about the call; its ``prompt_token_ids``, ``completion_token_ids`` and
    ``logprobs`` are empty (the tokens live in ``edit``)."""

    @property
    def length(self) -> int:
        return self.edit.length


def metadata_only(record: CallRecord) -> CallRecord:
    return dataclasses.replace(record, prompt_token_ids=(), completion_token_ids=(), logprobs=None)


def stored_calls(records: Iterable[CallRecord]) -> dict[str, list[StoredCall]]:
    """Groups records by execution (arrival order kept) and turns each into edit form."""
    indexes: dict[str, PrefixIndex] = {}
    out: dict[str, list[StoredCall]] = {}
    for record in records:
        index = indexes.setdefault(record.execution, PrefixIndex())
        tokens = np.array(record.prompt_token_ids + record.completion_token_ids, dtype=np.int32)
        out.setdefault(record.execution, []).append(StoredCall(
            edit=index.add(tokens), prompt_len=len(record.prompt_token_ids),
            logprobs=None if record.logprobs is None else np.array(record.logprobs, dtype=np.float32),
            meta=metadata_only(record)))
    return out


def full_records(calls: list[StoredCall]) -> list[CallRecord]:
    """The inverse of :func:`stored_calls` for one execution (for ``replay --export``)."""
    chain = EditChain()
    for call in calls:
        chain.append(call.edit)
    records = []
    for i, call in enumerate(calls):
        tokens = chain.tokens(i).tolist()
        records.append(dataclasses.replace(
            call.meta, prompt_token_ids=tuple(tokens[:call.prompt_len]),
            completion_token_ids=tuple(tokens[call.prompt_len:]),
            logprobs=None if call.logprobs is None else tuple(call.logprobs.tolist())))
    return records
