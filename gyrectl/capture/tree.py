"""An execution's calls merged into one token tree (a radix tree over token ids).

Every distinct prefix of the calls' prompt + completion sequences is one node (one token); a
*segment* is a run of nodes without a branch point (a radix-tree edge). Tokens are laid out in
depth-first order, so every subtree is a contiguous range ``[i, subtree_end[i])``: the packed
attention mask and the loss weights are computed from those ranges alone.

A token is *trainable* when some call sampled it (it lies in that call's completion). A later
call's prompt repeats earlier completions; those nodes are shared, so they stay trainable with
the behaviour logprob of the call that sampled them first. Tokens the harness or tools injected
are never trainable -- including a re-rendered copy of model output (re-serialised tool-call
JSON): it is a different token sequence, hence a different branch.

Each call gets a *branch kind* relative to the call it shares the longest prefix with (a label
for humans and statistics; it never changes the gradient):

* ``new_context`` -- shares nothing, or a sub-agent / summariser starts its own context (the
  role changes), or the call keeps less than half of its parent's prompt (a handoff swapping the
  system prompt, a restart from a summary);
* ``retry`` -- the same prompt re-sent (after a failure or a rejected reply);
* ``parallel_sample`` -- another choice of the same ``n>1`` request (same call id before ``/``);
* ``continuation`` -- extends the parent's context: the usual next turn, a next prompt that
  dropped the model's reply after a format error (it extends the previous *prompt*), or history
  whose earlier model output the harness re-rendered (``rerendered``: the divergence lies strictly
  inside a run of tokens the policy sampled; ``rerendered_tool_call`` where that call recorded tool calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gyrectl.capture.edit import NO_PARENT
from gyrectl.capture.stored import StoredCall

BranchKind = Literal["continuation", "retry", "parallel_sample", "new_context"]
ROLES = ("main", "subagent", "summary")
KEPT_PROMPT_FOR_CONTINUATION = 0.5


@dataclass(frozen=True)
class CallLabel:
    kind: BranchKind
    parent: int
    """The call this one shares its longest prefix with (``-1``: none)."""
    shared: int
    """Tokens shared with ``parent``."""
    rerendered: bool
    """The divergence from ``parent`` lies inside tokens the policy sampled."""
    rerendered_tool_call: bool
    """...and the call that sampled them recorded tool calls (re-serialised tool-call JSON)."""


@dataclass(frozen=True)
class TokenTree:
    """One execution's token tree. Token arrays have one entry per unique token (DFS order);
    segment arrays one per radix edge (DFS order)."""

    execution: str
    tokens: np.ndarray
    """int32 token ids."""
    parent: np.ndarray
    """int64 index of the token's parent (the position whose logits predict it); -1 at a root."""
    depth: np.ndarray
    """int64 position of the token in its sequence (the position id)."""
    subtree_end: np.ndarray
    """int64: the token's subtree (itself and its descendants) is ``[i, subtree_end[i])``."""
    trainable: np.ndarray
    """bool: some call sampled this token."""
    logprob: np.ndarray
    """float32 behaviour logprob of a trainable token (NaN where unknown or not trainable)."""
    weight_version: np.ndarray
    """int64 weight version that sampled a trainable token (-1 where unknown / not trainable)."""
    segment: np.ndarray
    """int64 segment of each token."""
    seg_start: np.ndarray
    seg_end: np.ndarray
    seg_parent: np.ndarray
    """int64 parent segment (-1 at a root)."""
    seg_call: np.ndarray
    """int64 call that created the segment's tokens (its role and kind label the segment)."""
    seg_num_leaves: np.ndarray
    """int64 root-to-leaf paths through the segment."""
    calls: tuple[StoredCall, ...]
    labels: tuple[CallLabel, ...]

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def num_naive_tokens(self) -> int:
        return sum(call.length for call in self.calls)

    @property
    def leaves(self) -> np.ndarray:
        """Segments without children: one per root-to-leaf path."""
        has_child = np.zeros(len(self.seg_start), dtype=bool)
        has_child[self.seg_parent[self.seg_parent >= 0]] = True
        return np.flatnonzero(~has_child)

    def segment_sums(self, per_token: np.ndarray) -> np.ndarray:
        return np.add.reduceat(per_token, self.seg_start) if len(per_token) else np.zeros(0)

    def path_totals(self, per_segment: np.ndarray) -> np.ndarray:
        """For every segment, the sum of ``per_segment`` over it and its ancestors."""
        return path_totals(self.seg_parent, per_segment)

    def subtree_sums(self, per_segment: np.ndarray) -> np.ndarray:
        """For every segment, the sum of ``per_segment`` over it and its descendants."""
        return subtree_sums(self.seg_parent, per_segment)

    def role_of_segments(self) -> list[str]:
        return [self.calls[c].meta.role for c in self.seg_call]


def build_tree(execution: str, calls: Sequence[StoredCall]) -> TokenTree:
    """Merges one execution's calls (arrival order, edit form) into its token tree."""
    calls = tuple(calls)
    lengths = np.array([len(c.edit.suffix) for c in calls], dtype=np.int64)
    offsets = np.array([c.edit.offset for c in calls], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(calls) else np.zeros(0, np.int64)
    num_tokens = int(lengths.sum())
    # Arrival layout: call c owns ids [starts[c], starts[c] + lengths[c]) = positions offset.. .
    resolve = _Resolver(calls, starts)
    tokens = np.concatenate([c.edit.suffix for c in calls]).astype(np.int32) if num_tokens else np.zeros(0, np.int32)
    owner = np.repeat(np.arange(len(calls)), lengths)
    depth = np.arange(num_tokens, dtype=np.int64) - np.repeat(starts - offsets, lengths)
    parent = np.arange(num_tokens, dtype=np.int64) - 1
    attach = np.array([resolve.node(c, calls[c].edit.offset - 1) if calls[c].edit.offset > 0 else -1
                       for c in range(len(calls))], dtype=np.int64)
    nonempty = lengths > 0
    parent[starts[nonempty]] = attach[nonempty]

    sampled_by, logprob, version = _sampled_tokens(calls, resolve, num_tokens)
    trainable = sampled_by >= 0
    labels = tuple(_label(calls, c, resolve, sampled_by) for c in range(len(calls)))

    # Segments: a new one starts at every call's first token and right after every branch point.
    bounds = np.unique(np.concatenate([starts[nonempty], attach[attach >= 0] + 1]))
    bounds = bounds[bounds < num_tokens]
    seg_len = np.diff(np.append(bounds, num_tokens))
    seg_of = np.repeat(np.arange(len(bounds)), seg_len)
    seg_parent_a = np.where(parent[bounds] >= 0, seg_of[np.maximum(parent[bounds], 0)], -1)
    order = _dfs_order(seg_parent_a)

    # Relayout tokens so every subtree is contiguous.
    new_seg_start = (np.cumsum(seg_len[order]) - seg_len[order]).astype(np.int64)  # empty for a token-less execution
    perm = np.repeat(bounds[order] - new_seg_start, seg_len[order]) + np.arange(num_tokens)
    new_index = np.empty(num_tokens, dtype=np.int64)
    new_index[perm] = np.arange(num_tokens)
    seg_rank = np.empty(len(order), dtype=np.int64)
    seg_rank[order] = np.arange(len(order))
    seg_parent = np.where(seg_parent_a[order] >= 0, seg_rank[np.maximum(seg_parent_a[order], 0)], -1)
    tree_parent = parent[perm]
    tree_parent = np.where(tree_parent >= 0, new_index[np.maximum(tree_parent, 0)], -1)
    seg_end = new_seg_start + seg_len[order]
    sub_end_seg = _subtree_end_segments(seg_parent)
    seg_subtree_end = np.append(new_seg_start, num_tokens)[sub_end_seg]
    segment = np.repeat(np.arange(len(order)), seg_len[order])
    has_child = np.zeros(len(order), dtype=bool)
    has_child[seg_parent[seg_parent >= 0]] = True
    return TokenTree(
        execution=execution, tokens=tokens[perm], parent=tree_parent, depth=depth[perm],
        subtree_end=seg_subtree_end[segment], trainable=trainable[perm], logprob=logprob[perm],
        weight_version=version[perm], segment=segment, seg_start=new_seg_start, seg_end=seg_end,
        seg_parent=seg_parent, seg_call=owner[bounds[order]],
        seg_num_leaves=subtree_sums(seg_parent, ~has_child).astype(np.int64), calls=calls, labels=labels)


def path_totals(seg_parent: np.ndarray, per_segment: np.ndarray) -> np.ndarray:
    out = np.array(per_segment, dtype=np.float64)
    for s in range(len(out)):  # DFS order: a parent's total is final before its children's
        if seg_parent[s] >= 0:
            out[s] += out[seg_parent[s]]
    return out


def subtree_sums(seg_parent: np.ndarray, per_segment: np.ndarray) -> np.ndarray:
    out = np.array(per_segment, dtype=np.float64)
    for s in range(len(out) - 1, -1, -1):  # reverse DFS: children are final before parents
        if seg_parent[s] >= 0:
            out[seg_parent[s]] += out[s]
    return out


class _Resolver:
    """Maps (call, position in its sequence) to the node id in arrival layout."""

    def __init__(self, calls: Sequence[StoredCall], starts: np.ndarray):
        self.calls, self.starts = calls, starts

    def node(self, call: int, position: int) -> int:
        while position < self.calls[call].edit.offset:
            call = self.calls[call].edit.parent
        return int(self.starts[call]) + position - self.calls[call].edit.offset

    def ranges(self, call: int, start: int, end: int) -> list[tuple[int, int, int]]:
        """``(first_position, first_id, count)`` runs covering positions [start, end) of a call."""
        runs = []
        while end > start:
            edit = self.calls[call].edit
            lo = max(start, edit.offset)
            if lo < end:
                runs.append((lo, int(self.starts[call]) + lo - edit.offset, end - lo))
                end = lo
            call = edit.parent
        return runs


def _sampled_tokens(calls: Sequence[StoredCall], resolve: _Resolver,
                    num_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node: the first call that sampled it (-1: none), its logprob and weight version."""
    sampled_by = np.full(num_tokens, -1, dtype=np.int64)
    logprob = np.full(num_tokens, np.nan, dtype=np.float32)
    version = np.full(num_tokens, -1, dtype=np.int64)
    for c, call in enumerate(calls):
        versions = completion_versions(call)
        for position, first, count in resolve.ranges(c, call.prompt_len, call.length):
            ids = slice(first, first + count)
            fresh = sampled_by[ids] < 0  # the first call that sampled a node keeps it
            sampled_by[ids] = np.where(fresh, c, sampled_by[ids])
            in_completion = slice(position - call.prompt_len, position - call.prompt_len + count)
            if call.logprobs is not None:
                logprob[ids] = np.where(fresh, call.logprobs[in_completion], logprob[ids])
            version[ids] = np.where(fresh, versions[in_completion], version[ids])
    return sampled_by, logprob, version


def completion_versions(call: StoredCall) -> np.ndarray:
    """Weight version of each completion token: a call the gateway moved between servers
    mid-generation has one ``segments`` piece per server, each with its own version."""
    num_completion = call.length - call.prompt_len
    versions = np.full(num_completion, -1 if call.meta.weight_version is None else call.meta.weight_version)
    for piece in call.meta.segments:
        if piece.get("weight_version") is not None:
            versions[int(piece.get("start", 0)):] = piece["weight_version"]
    return versions


def _label(calls: Sequence[StoredCall], c: int, resolve: _Resolver, sampled_by: np.ndarray) -> CallLabel:
    call = calls[c]
    p, shared = call.edit.parent, call.edit.offset
    if p == NO_PARENT or shared == 0:
        return CallLabel("new_context", NO_PARENT, 0, False, False)
    parent = calls[p]
    # Re-rendered model output: the divergence lies strictly inside a run the policy sampled
    # (diverging at a reply's first token is a dropped reply, not a re-render).
    sampler = int(sampled_by[resolve.node(p, shared)]) if shared < parent.length else -1
    rerendered = sampler >= 0 and int(sampled_by[resolve.node(p, shared - 1)]) == sampler
    kind: BranchKind
    if call.meta.role != parent.meta.role:
        kind = "new_context"
    elif call.prompt_len == parent.prompt_len and shared >= call.prompt_len:
        kind = "parallel_sample" if _same_request(call, parent) else "retry"
    elif rerendered or shared >= KEPT_PROMPT_FOR_CONTINUATION * parent.prompt_len:
        kind = "continuation"
    else:
        kind = "new_context"
    return CallLabel(kind, p, shared, rerendered, rerendered and bool(calls[sampler].meta.tool_calls))


def _same_request(a: StoredCall, b: StoredCall) -> bool:
    base_a, base_b = a.meta.call_id.split("/")[0], b.meta.call_id.split("/")[0]
    if base_a and base_b:
        return base_a == base_b
    return a.meta.sample_index != b.meta.sample_index


def _dfs_order(seg_parent: np.ndarray) -> np.ndarray:
    children: list[list[int]] = [[] for _ in range(len(seg_parent))]
    roots = []
    for s, p in enumerate(seg_parent.tolist()):
        (children[p] if p >= 0 else roots).append(s)
    order, stack = [], roots[::-1]
    while stack:
        s = stack.pop()
        order.append(s)
        stack.extend(children[s][::-1])
    return np.array(order, dtype=np.int64)


def _subtree_end_segments(seg_parent: np.ndarray) -> np.ndarray:
    """For segments in DFS order: the index one past the last segment of each subtree."""
    end = np.arange(1, len(seg_parent) + 1)
    for s in range(len(seg_parent) - 1, -1, -1):
        p = seg_parent[s]
        if p >= 0:
            end[p] = max(end[p], end[s])
    return end
