"""A packed micro-batch (:class:`gyrectl.dedup.packing.PackedMicroBatch`, plain numpy arrays) as
the tensors the forward pass reads (:mod:`gyrectl.train.forward`); the arrays are shared with
the tensors on CPU, not copied.
"""

from __future__ import annotations

from typing import Any

import torch

from gyrectl.dedup.packing import PackedMicroBatch

TENSOR_FIELDS = ("input_ids", "position_ids", "parent_index", "subtree_end", "loss_weight",
                 "behaviour_logprob", "weight_version", "execution_index", "trainable", "path_weight")
"""The per-token arrays of a micro-batch, each one tensor of the same name."""


def packed_tensors(batch: PackedMicroBatch, device: Any = "cpu") -> dict[str, torch.Tensor]:
    """``{field: tensor}`` for every per-token array of ``batch``, on ``device``."""
    return {name: torch.from_numpy(getattr(batch, name)).to(device) for name in TENSOR_FIELDS}
