"""The training step: ``python -m gyrectl.train --run-dir RUN --step N`` under torchrun
(see :mod:`gyrectl.train.__main__`).
May import: errors, config, run, store, capture, dedup."""
