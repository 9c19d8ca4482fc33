"""The reference the dedup proofs compare against, computed from the raw call records only (no
tree code): root-to-leaf paths are the distinct call sequences that are no strict prefix of
another; a path position is trainable when some call with that same prefix sampled it."""

from __future__ import annotations

from gyrectl.capture.record import CallRecord


def sequence(record: CallRecord) -> tuple[int, ...]:
    return record.prompt_token_ids + record.completion_token_ids


def root_to_leaf_paths(records: list[CallRecord]) -> list[tuple[int, ...]]:
    sequences = sorted({sequence(r) for r in records})
    return [s for s in sequences if not any(o != s and o[:len(s)] == s for o in sequences)]


def trainable_positions(path: tuple[int, ...], records: list[CallRecord]) -> list[int]:
    return [t for t in range(1, len(path))
            if any(len(r.prompt_token_ids) <= t < len(sequence(r)) and sequence(r)[:t + 1] == path[:t + 1]
                   for r in records)]


def path_nll(model, path: tuple[int, ...], positions: list[int]):
    """Per-position NLL of ``path[t]`` for t in ``positions``, one ordinary causal forward."""
    import torch

    ids = torch.tensor(path)[None]
    logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    targets = torch.tensor(positions)
    return -logprobs[targets - 1, ids[0, targets]]


def unique_trie_positions(records: list[CallRecord]) -> int:
    return len({sequence(r)[:t + 1] for r in records for t in range(len(sequence(r)))})
