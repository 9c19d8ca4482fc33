"""Paths mode: role-priority sampling and union weights."""

from __future__ import annotations

import numpy as np

from gyrectl.capture.stored import stored_calls
from gyrectl.capture.tree import build_tree
from gyrectl.dedup.exact import path_trainable_counts
from gyrectl.dedup.paths import paths_dedup, sample_paths

from agent_shapes import all_patterns


def tree(seed=0):
    [(e, calls)] = stored_calls(all_patterns(seed=seed)).items()
    return build_tree(e, calls)


def leaf_roles(t, leaves):
    return [t.calls[c].meta.role for c in t.seg_call[leaves]]


def test_main_paths_come_first_then_lower_priority_roles():
    t = tree()
    num_main = leaf_roles(t, t.leaves).count("main")
    for seed in range(5):
        few = sample_paths(t, j_max=2, rng=np.random.default_rng(seed))
        assert leaf_roles(t, few) == ["main", "main"]
    everything = sample_paths(t, j_max=100, rng=np.random.default_rng(0))
    assert len(everything) == len(t.leaves)
    assert leaf_roles(t, everything).count("main") == num_main
    reversed_priority = sample_paths(t, j_max=1, rng=np.random.default_rng(0), role_priority=("summary", "main"))
    assert leaf_roles(t, reversed_priority) == ["summary"]


def test_sampling_favours_paths_with_more_trainable_tokens():
    t = tree(seed=2)
    counts = path_trainable_counts(t)
    main_leaves = [leaf for leaf in t.leaves if t.calls[t.seg_call[leaf]].meta.role == "main"]
    rng = np.random.default_rng(0)
    draws = np.concatenate([sample_paths(t, j_max=1, rng=rng) for _ in range(3000)])
    frequency = np.array([np.mean(draws == leaf) for leaf in main_leaves])
    expected = counts[main_leaves] / counts[main_leaves].sum()
    np.testing.assert_allclose(frequency, expected, atol=0.03)


def test_union_weights_average_within_then_across_executions():
    trees = [tree(seed=3), tree(seed=4)]
    weighted = paths_dedup(trees, j_max=2, seed=1)
    for w in weighted:
        assert np.isclose(w.loss_weight.sum(), 0.5)  # each execution is half of the batch mean
        trained = w.loss_weight[w.loss_weight > 0]
        assert np.allclose(trained, trained[0])  # shared prefix tokens are not counted per path
        assert w.num_tokens < trees[0].num_tokens + trees[1].num_tokens
