"""Policy models: building the tiny local model and loading any HF-format checkpoint."""
