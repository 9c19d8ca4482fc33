"""Deduplication of trajectory trees before a training step, and tree-packed batches (pure).
May import: errors, store, capture."""
