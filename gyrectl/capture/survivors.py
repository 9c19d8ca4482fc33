"""Which stored calls can still be rebuilt once damage took some records (pure).

A stored call is an edit of an earlier call of its execution (``Edit.parent`` counts calls of
the execution in its file). When a record is lost, every call whose chain of parents runs
through it has lost part of its tokens: it is *unrecoverable*, and the calls after the gap must
not be read against shifted parent numbers. Each record carries its ``call_index`` for this; the
survivors' edits are re-indexed over the survivors alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from gyrectl.capture.edit import NO_PARENT
from gyrectl.capture.stored import StoredCall


@dataclass(frozen=True)
class Survivors:
    calls: list[tuple[int, StoredCall]]
    """``(call_index in the file, call)`` of every rebuildable call, in call order; each call's
    edit points into this list."""
    unrecoverable: int
    """Intact calls that are edits of a lost call."""
    num_indexes: int
    """Call indexes the execution used in the file (lost ones included)."""


def surviving_calls(records: Iterable[tuple[int | None, StoredCall]]) -> dict[str, Survivors]:
    """``records`` in file order as ``(call_index, call)``; a ``None`` index (a file written
    before indexes were recorded) stands for the call's arrival position."""
    by_execution: dict[str, dict[int, StoredCall]] = {}
    for call_index, call in records:
        calls = by_execution.setdefault(call.meta.execution, {})
        index = len(calls) if call_index is None else call_index
        calls.setdefault(index, call)  # a repeated index can only be damage: the first one stands
    return {execution: _rebuildable(calls) for execution, calls in by_execution.items()}


def _rebuildable(calls: dict[int, StoredCall]) -> Survivors:
    position: dict[int, int] = {}  # call index -> place among the survivors
    kept: list[tuple[int, StoredCall]] = []
    for index in sorted(calls):
        call = calls[index]
        parent = call.edit.parent
        if parent != NO_PARENT:
            if parent not in position or call.edit.offset > kept[position[parent]][1].length:
                continue  # its prefix was in a lost call
            if position[parent] != parent:
                call = dataclasses.replace(call, edit=dataclasses.replace(call.edit, parent=position[parent]))
        position[index] = len(kept)
        kept.append((index, call))
    return Survivors(calls=kept, unrecoverable=len(calls) - len(kept), num_indexes=max(calls) + 1)
