"""Packed micro-batches: mask, positions and parent indices give every token the same logprob as
running its root-to-leaf path alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gyrectl.capture.stored import stored_calls
from gyrectl.capture.tree import build_tree
from gyrectl.dedup.exact import exact_dedup
from gyrectl.dedup.packing import pack, split_to_budget
from gyrectl.train.forward import target_logprobs
from gyrectl.train.mask import dense_tree_mask
from gyrectl.train.packed import packed_tensors

from agent_shapes import all_patterns


def weighted_trees():
    calls = stored_calls([*all_patterns("a", seed=3), *all_patterns("b", seed=4)])
    return exact_dedup([build_tree(e, c) for e, c in calls.items()])


def ancestors(batch, i):
    out = []
    while i >= 0:
        out.append(i)
        i = int(batch.parent_index[i])
    return out[::-1]


def path_logprob(model, batch, i) -> float:
    """logprob of packed token i from an ordinary causal forward over its own path."""
    path = ancestors(batch, i)
    ids = torch.tensor(batch.input_ids[path])[None]
    logits = model(input_ids=ids).logits[0, -2].float()
    return float(torch.log_softmax(logits, -1)[ids[0, -1]])


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_packed_logprobs_equal_per_path_logprobs(tiny_model, implementation):
    tiny_model.config._attn_implementation = implementation
    try:
        batch = pack(weighted_trees(), budget=120)[2]
        targets = torch.nonzero(torch.from_numpy(batch.parent_index) >= 0).flatten()
        with torch.no_grad():
            packed = target_logprobs(tiny_model, packed_tensors(batch), targets)
            # Includes the first token of every branch (its parent is not at i-1).
            branch_firsts = [int(i) for i in targets if batch.parent_index[i] != i - 1]
            assert branch_firsts
            sample = sorted(set(branch_firsts[:6] + targets[::15].tolist()))
            expected = [path_logprob(tiny_model, batch, i) for i in sample]
        np.testing.assert_allclose(packed[[targets.tolist().index(i) for i in sample]].numpy(), expected, atol=2e-5)
    finally:
        tiny_model.config._attn_implementation = "sdpa"


def test_positions_are_depths_and_mask_is_ancestry():
    batch = pack(weighted_trees(), budget=10_000)[0]
    for i in range(0, batch.num_tokens, 7):
        path = ancestors(batch, i)
        assert batch.position_ids[i] == len(path) - 1
        seen = np.flatnonzero(dense_tree_mask(torch.from_numpy(batch.subtree_end))[0, 0, i].numpy())
        assert seen.tolist() == path


def test_pieces_respect_budget_and_train_each_token_once():
    tree = weighted_trees()[0]
    budget = int(tree.depth.max()) + 10
    pieces = split_to_budget(tree, budget)
    assert len(pieces) > 1 and all(p.num_tokens <= budget for p in pieces)
    assert sum(p.loss_weight.sum() for p in pieces) == pytest.approx(tree.loss_weight.sum())
    assert sum(p.num_trained for p in pieces) == tree.num_trained
    for piece in pieces:  # every piece is ancestor-closed: parents precede children
        assert np.all(piece.parent < np.arange(piece.num_tokens))


def test_a_path_longer_than_the_budget_gets_its_own_flagged_micro_batch():
    tree = weighted_trees()[0]
    batches = pack([tree], budget=int(tree.depth.max()) // 2)
    assert any(b.over_budget for b in batches)
    assert sum(b.loss_weight.sum() for b in batches) == pytest.approx(tree.loss_weight.sum())


@pytest.mark.slow
def test_flex_block_mask_forward_matches_sdpa(tiny_model):
    batch = packed_tensors(pack(weighted_trees(), budget=200)[0])
    with torch.no_grad():
        reference = target_logprobs(tiny_model, batch)
        tiny_model.config._attn_implementation = "flex_attention"
        try:
            flex = target_logprobs(tiny_model, batch)
        finally:
            tiny_model.config._attn_implementation = "sdpa"
    torch.testing.assert_close(flex, reference, atol=2e-5, rtol=0)


def test_block_mask_from_ranges_equals_the_token_mask():
    from torch.nn.attention.flex_attention import create_block_mask

    from gyrectl.train.mask import flex_tree_mask

    batch = pack(weighted_trees(), budget=10_000)[0]
    subtree_end = torch.from_numpy(batch.subtree_end)
    ours = flex_tree_mask(subtree_end, block=16)
    reference = create_block_mask(lambda b, h, q, kv: (kv <= q) & (q < subtree_end[kv]), B=None, H=None,
                                  Q_LEN=len(subtree_end), KV_LEN=len(subtree_end), device="cpu", BLOCK_SIZE=16)
    assert torch.equal(ours.to_dense(), reference.to_dense())
    # and the blocks it skips are really empty while it keeps fewer than all of them
    assert int(ours.kv_num_blocks.sum() + ours.full_kv_num_blocks.sum()) < ours.kv_indices.shape[-1] ** 2
