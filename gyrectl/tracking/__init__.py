"""Experiment tracking: the run's scalars into TensorBoard (and Weights & Biases), read from the
run directory's own files, so they can always be written again.
May import: errors, config, run, store, coordinator."""
