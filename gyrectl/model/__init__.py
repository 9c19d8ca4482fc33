"""Policy models: building the tiny local model and loading any HF-format checkpoint.
May import: nothing of gyrectl."""
