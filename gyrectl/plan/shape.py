"""A decoder-only model's shape: what the memory plan multiplies.

Read from the model folder's ``config.json`` when the login node can see it, else looked up by
the folder's name among published shapes (the model cards' ``config.json``), so a plan can be
made before the weights are on the cluster. Only dense Qwen2/Qwen3/Llama-style decoders: an
embedding, ``layers`` x (attention with grouped KV heads + gated MLP + two RMSNorms), a final
norm and an LM head (tied or not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gyrectl.errors import ConfigError


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    max_positions: int
    qkv_bias: bool = False
    """Qwen2 has biases on q, k and v."""
    qk_norm: bool = False
    """Qwen3 normalises q and k per head (two ``head_dim`` vectors per layer)."""

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        q, kv = self.heads * self.head_dim, self.kv_dim
        attention = self.hidden * (q + 2 * kv) + q * self.hidden
        attention += (q + 2 * kv) if self.qkv_bias else 0
        attention += 2 * self.head_dim if self.qk_norm else 0
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        head = 0 if self.tied else self.embedding_params
        return self.embedding_params + self.layers * self.layer_params + self.hidden + head

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of every layer for one token (the whole model, before tensor parallelism)."""
        return 2 * self.layers * self.kv_dim * dtype_bytes


def _qwen2(name: str, hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int, tied: bool) -> ModelShape:
    return ModelShape(name=name, hidden=hidden, layers=layers, heads=heads, kv_heads=kv, head_dim=hidden // heads,
                      intermediate=inter, vocab=vocab, tied=tied, max_positions=32768, qkv_bias=True)


def _qwen3(name: str, hidden: int, layers: int, heads: int, kv: int, inter: int, tied: bool) -> ModelShape:
    return ModelShape(name=name, hidden=hidden, layers=layers, heads=heads, kv_heads=kv, head_dim=128,
                      intermediate=inter, vocab=151936, tied=tied, max_positions=40960, qk_norm=True)


PUBLISHED = {shape.name.lower(): shape for shape in (
    # From each model's config.json on its model card (Qwen/<name> on Hugging Face).
    _qwen2("Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, True),
    _qwen2("Qwen2.5-1.5B", 1536, 28, 12, 2, 8960, 151936, True),
    _qwen2("Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064, False),
    _qwen3("Qwen3-8B", 4096, 36, 32, 8, 12288, False),
    _qwen3("Qwen3-32B", 5120, 64, 64, 8, 25600, False),
)}
"""Shapes known by name (``-Instruct`` variants share them)."""


def model_shape(path: str) -> ModelShape | None:
    """The shape of the model at ``path``: its ``config.json`` if readable, else the published
    shape its folder name names; None if neither."""
    config_file = Path(path).expanduser() / "config.json"
    if config_file.is_file():
        try:
            return shape_of_config(json.loads(config_file.read_text()), name=Path(path).name)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError("model.path", f"{config_file} is not a decoder config.json the plan can read "
                                            f"({type(exc).__name__}: {exc})") from None
    name = Path(path).name.lower().removesuffix("-instruct")
    return PUBLISHED.get(name)


def shape_of_config(config: dict, *, name: str) -> ModelShape:
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    model_type = str(config.get("model_type", ""))
    return ModelShape(
        name=name, hidden=hidden, layers=int(config["num_hidden_layers"]), heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads), intermediate=int(config["intermediate_size"]),
        vocab=int(config["vocab_size"]), tied=bool(config.get("tie_word_embeddings", False)),
        max_positions=int(config.get("max_position_embeddings", 0)),
        qkv_bias=bool(config.get("attention_bias", model_type == "qwen2")), qk_norm=model_type == "qwen3")
