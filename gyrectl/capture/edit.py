"""A call's tokens as an edit of an earlier call: the form that grows with *unique* tokens.

An agent session's prompts mostly extend earlier prompts. Storing every call as ``(parent,
offset, suffix)`` -- "the first ``offset`` tokens are those of call ``parent``, then come
``suffix``" -- keeps each token once. When ``offset`` is the longest prefix the call shares with
*any* earlier call of its execution (what :class:`~gyrectl.capture.prefix.PrefixIndex` finds),
the suffix tokens are exactly the new nodes the call adds to the execution's token trie; the
capture store and the trajectory tree both rely on that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NO_PARENT = -1


@dataclass(frozen=True)
class Edit:
    parent: int
    """Index (arrival order, within the execution) of the call whose prefix this one shares, or
    ``NO_PARENT``."""
    offset: int
    """Number of leading tokens shared with ``parent`` (0 without a parent)."""
    suffix: np.ndarray
    """int32 tokens after the shared prefix."""

    @property
    def length(self) -> int:
        return self.offset + len(self.suffix)


class EditChain:
    """The edits of one execution, in arrival order, with random access to any call's tokens."""

    def __init__(self) -> None:
        self.edits: list[Edit] = []

    def append(self, edit: Edit) -> int:
        assert edit.parent < len(self.edits), "an edit may only refer to an earlier call"
        self.edits.append(edit)
        return len(self.edits) - 1

    def tokens(self, call: int, start: int = 0, end: int | None = None) -> np.ndarray:
        """Tokens ``[start, end)`` of call ``call``'s full sequence (prompt + completion)."""
        edit = self.edits[call]
        end = edit.length if end is None else min(end, edit.length)
        pieces: list[np.ndarray] = []
        # Walk towards the root: each edit supplies the part of [start, end) at or after its offset.
        while end > start:
            edit = self.edits[call]
            lo = max(start, edit.offset)
            if lo < end:
                pieces.append(edit.suffix[lo - edit.offset:end - edit.offset])
                end = lo
            call = edit.parent
        if not pieces:
            return np.zeros(0, dtype=np.int32)
        return np.concatenate(pieces[::-1])
