import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from gyrectl.model.tiny import build_tiny_model

    out = tmp_path_factory.mktemp("tiny")
    build_tiny_model(out)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """The tiny model in float32 with sdpa attention (the CPU training path), eval mode: no
    dropout, so packed and per-path forwards are comparable."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    return model.eval()
