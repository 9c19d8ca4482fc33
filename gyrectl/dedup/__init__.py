"""Deduplication of trajectory trees before a training step, and tree-packed batches: pure numpy
decisions (which tokens, their loss weights, the packing plan as plain arrays). The trainer turns
them into tensors, masks and a forward pass (``train/packed.py``, ``train/mask.py``,
``train/forward.py``). No torch here (``tests/unit/test_layering.py``).
May import: errors, store, capture."""
