"""Finds, for a new token sequence, the earlier sequence of the same execution that shares its
longest prefix -- in time linear in the new sequence, independent of the number of earlier calls.

Sequences are cut into blocks of ``block`` tokens; the key of "the first k blocks" is a chained
BLAKE2b digest (as vLLM's prefix cache does), so equal keys mean equal prefixes. The longest
matching k is found by binary search (a k-block prefix match implies every shorter one); the
exact divergence inside block k+1 is then found by comparing tokens with the few earlier calls
that continue that k-block prefix differently.
"""

from __future__ import annotations

import hashlib

import numpy as np

from gyrectl.capture.edit import NO_PARENT, Edit, EditChain

DEFAULT_BLOCK = 512


def block_keys(tokens: np.ndarray, block: int) -> list[bytes]:
    """``keys[k]`` identifies ``tokens[:k*block]`` for every full block count k (keys[0] = b"")."""
    data = np.ascontiguousarray(tokens, dtype="<i4").tobytes()
    step = 4 * block
    keys = [b""]
    for start in range(0, len(data) - step + 1, step):
        keys.append(hashlib.blake2b(keys[-1] + data[start:start + step], digest_size=16).digest())
    return keys


def common_prefix_length(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differs = np.flatnonzero(a[:n] != b[:n])
    return int(differs[0]) if len(differs) else n


class PrefixIndex:
    """Turns the token sequences of one execution, in arrival order, into :class:`Edit`\\ s."""

    def __init__(self, *, block: int = DEFAULT_BLOCK):
        self.block = block
        self.chain = EditChain()
        # key of a k-block prefix -> calls that continue it in a way no earlier call did (a new
        # block k+1, or a partial last block): one representative per distinct continuation.
        self._continuations: dict[bytes, list[int]] = {b"": []}

    def add(self, tokens: np.ndarray) -> Edit:
        tokens = np.asarray(tokens, dtype=np.int32)
        keys = block_keys(tokens, self.block)
        matched = self._longest_known(keys)
        parent, shared = self._best_continuation(tokens, keys[matched], matched)
        edit = Edit(parent=parent, offset=shared, suffix=tokens[shared:].copy())
        call = self.chain.append(edit)
        if shared == len(tokens):
            return edit  # wholly inside an earlier call (a retry), which stands for it as a parent
        for level in range(matched, len(keys)):
            is_last = level == len(keys) - 1
            if is_last or keys[level + 1] not in self._continuations:
                self._continuations.setdefault(keys[level], []).append(call)
        return edit

    def hold_place(self) -> None:
        """Takes the next call number for a call whose tokens are lost (a damaged record), so
        later calls keep their numbers; it is never offered as a parent."""
        self.chain.append(Edit(parent=NO_PARENT, offset=0, suffix=np.zeros(0, dtype=np.int32)))

    def _longest_known(self, keys: list[bytes]) -> int:
        lo, hi = 0, len(keys) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if keys[mid] in self._continuations:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _best_continuation(self, tokens: np.ndarray, key: bytes, matched: int) -> tuple[int, int]:
        start, end = matched * self.block, (matched + 1) * self.block
        best, best_shared = NO_PARENT, 0
        for call in self._continuations[key]:
            shared = start + common_prefix_length(tokens[start:end], self.chain.tokens(call, start, end))
            if shared > best_shared:
                best, best_shared = call, shared
                if shared == min(end, len(tokens)):
                    break  # no continuation can share more: the first to share it all is kept
        return best, best_shared
