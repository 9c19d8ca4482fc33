"""Trajectory trees for the call patterns real harnesses produce."""

from __future__ import annotations

import numpy as np

from gyrectl.capture.prefix import PrefixIndex, common_prefix_length
from gyrectl.capture.record import CallRecord
from gyrectl.capture.stored import full_records, stored_calls
from gyrectl.capture.tree import build_tree

from agent_shapes import END, all_patterns
from naive_paths import root_to_leaf_paths, sequence, trainable_positions, unique_trie_positions


def tree_of(records):
    [(execution, calls)] = stored_calls(records).items()
    return build_tree(execution, calls)


def test_branch_kind_of_every_pattern():
    records = all_patterns()
    labels = tree_of(records).labels
    assert [label.kind for label in labels] == [
        "new_context", "continuation", "retry", "continuation", "parallel_sample", "continuation",
        "continuation", "new_context", "continuation", "new_context", "new_context", "retry"]
    dropped, rerendered = labels[5], labels[6]
    assert dropped.parent == 3 and not dropped.rerendered  # extends the rejected call's prompt
    assert rerendered.rerendered and rerendered.rerendered_tool_call


def test_tree_has_one_node_per_trie_position_and_one_leaf_per_path():
    records = all_patterns(seed=5)
    tree = tree_of(records)
    assert tree.num_tokens == unique_trie_positions(records)
    assert len(tree.leaves) == len(root_to_leaf_paths(records))
    assert tree.num_naive_tokens == sum(len(sequence(r)) for r in records)


def test_each_path_reads_back_with_its_trainable_tokens():
    records = all_patterns(seed=6)
    tree = tree_of(records)
    paths = {}
    for leaf in tree.leaves:
        last = tree.seg_end[leaf] - 1
        ids = []
        while last >= 0:
            ids.append(last)
            last = tree.parent[last]
        ids = ids[::-1]
        assert tree.depth[ids].tolist() == list(range(len(ids)))
        paths[tuple(tree.tokens[ids].tolist())] = np.flatnonzero(tree.trainable[ids]).tolist()
    assert sorted(paths) == root_to_leaf_paths(records)
    for path, trainable in paths.items():
        assert trainable == trainable_positions(path, records)


def test_subtrees_are_contiguous_ranges():
    tree = tree_of(all_patterns(seed=7))
    for i in range(tree.num_tokens):
        descendants = [j for j in range(tree.num_tokens) if _is_ancestor(tree, i, j)]
        assert descendants == list(range(i, tree.subtree_end[i]))


def _is_ancestor(tree, i, j):
    while j >= 0:
        if j == i:
            return True
        j = tree.parent[j]
    return False


def test_earlier_completions_in_a_later_prompt_keep_their_logprobs():
    records = all_patterns(seed=8)
    tree = tree_of(records)
    first = records[0]
    node = tree.depth == len(sequence(first)) - 1
    node &= tree.tokens == END
    # the first call's sampled end token is on the main chain and keeps call 0's logprob
    assert np.isclose(tree.logprob[node], first.logprobs[-1]).any()
    assert not tree.trainable[tree.depth == 0].any()


def test_identical_retry_adds_no_tokens_and_no_path():
    records = all_patterns(seed=9)
    without = tree_of(records[:-1])
    with_retry = tree_of(records)
    assert with_retry.num_tokens == without.num_tokens
    assert len(with_retry.leaves) == len(without.leaves)


def test_prefix_index_finds_longest_prefix_across_block_boundaries():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 100, 1000)
    index = PrefixIndex(block=16)
    index.add(base[:300])
    index.add(np.concatenate([base[:517], [7, 7]]))
    edit = index.add(np.concatenate([base[:600], [9]]))
    assert (edit.parent, edit.offset) == (1, 517)
    assert index.chain.tokens(2).tolist() == np.concatenate([base[:600], [9]]).tolist()


def test_full_records_round_trip():
    records = all_patterns(seed=10)
    [calls] = stored_calls(records).values()
    back = full_records(calls)
    assert [(r.prompt_token_ids, r.completion_token_ids, r.role) for r in back] == \
           [(r.prompt_token_ids, r.completion_token_ids, r.role) for r in records]


def test_sub_agent_tokens_carry_their_role():
    records = all_patterns(seed=11)
    tree = tree_of(records)
    roles = tree.role_of_segments()
    assert {"main", "subagent", "summary"} <= set(roles)
    sub = [s for s, r in enumerate(roles) if r == "subagent"]
    assert all(tree.trainable[tree.seg_start[s]:tree.seg_end[s]].any() for s in sub if s in set(tree.leaves))


def test_a_call_moved_between_servers_carries_per_piece_weight_versions():
    record = CallRecord(execution="m", prompt_token_ids=(1, 2), completion_token_ids=(3, 4, 5, 6), weight_version=7,
                        segments=({"server": "a", "weight_version": 7, "start": 0},
                                  {"server": "b", "weight_version": 8, "start": 3}))
    tree = tree_of([record])
    assert tree.weight_version.tolist() == [-1, -1, 7, 7, 7, 8]


def test_prefix_index_shares_the_longest_prefix_of_any_earlier_call_and_retries_cost_no_scan():
    rng = np.random.default_rng(3)
    index, seen = PrefixIndex(block=4), []
    for _ in range(400):  # calls that retry, extend or fork earlier ones, some several times over
        if seen and rng.random() < 0.8:
            earlier = seen[rng.integers(len(seen))]
            cut = int(rng.integers(0, len(earlier) + 1))
            tokens = np.concatenate([earlier[:cut], rng.integers(0, 3, int(rng.integers(0, 6)))]).astype(np.int32)
        else:
            tokens = rng.integers(0, 3, int(rng.integers(0, 12))).astype(np.int32)
        longest = max((common_prefix_length(tokens, s) for s in seen), default=0)
        edit = index.add(tokens)
        assert edit.offset == longest
        assert index.chain.tokens(len(seen)).tolist() == tokens.tolist()
        seen.append(tokens)
    retries = PrefixIndex()
    for _ in range(1000):
        retries.add(np.arange(80, dtype=np.int32))
    assert sum(len(calls) for calls in retries._continuations.values()) == 1
