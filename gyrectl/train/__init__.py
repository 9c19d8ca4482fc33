"""The training step: ``python -m gyrectl.train --run-dir RUN --step N`` under torchrun
(see :mod:`gyrectl.train.__main__`). The torch side of a packed micro-batch lives here too: its
tensors (``packed.py``), the tree attention mask (``mask.py``) and the forward pass that scores
its tokens (``forward.py``); ``dedup`` only decides, in numpy.
May import: errors, config, run, store, capture, dedup."""
