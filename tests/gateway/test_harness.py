"""A real agent harness from PyPI (OpenAI Agents SDK) in its own process, through the gateway."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
HARNESS = Path(__file__).with_name("harness_agents.py")


def test_openai_agents_sdk_runs_through_the_gateway(gateway, tiny_model_dir):
    pytest.importorskip("agents")
    done = subprocess.run([sys.executable, str(HARNESS), gateway.base_url("agents-1"), gateway.token],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(outputs) == {"chat", "responses"}
    records = gateway.records()
    assert {r["api"] for r in records} == {"chat", "responses"}
    assert all(r["execution"] == "agents-1" and r["completion_token_ids"] for r in records)
    from transformers import AutoTokenizer
    prompt = AutoTokenizer.from_pretrained(tiny_model_dir).decode(records[0]["prompt_token_ids"])
    # The sub-agent tool and the handoff reach the model as tools, rendered by the server.
    assert "translate" in prompt and "transfer_to_billing" in prompt
