import sys
from pathlib import Path

import pytest

# The call generators (agent_shapes) and the naive per-path reference (naive_paths) the dedup
# proof uses live beside the unit tests; the training proofs reuse them rather than copy them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from gyrectl.model.tiny import build_tiny_model

    out = tmp_path_factory.mktemp("tiny")
    build_tiny_model(out)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """float32, sdpa (the CPU training path); Qwen2 has no dropout, so train/eval agree."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
