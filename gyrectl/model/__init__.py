"""Policy models: building the tiny local model, importing SmolLM2-135M-Instruct (any GGUF
model) as an HF folder, and loading any HF-format checkpoint.
May import: nothing of gyrectl."""
