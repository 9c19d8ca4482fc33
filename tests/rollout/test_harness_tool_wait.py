"""Tool time in the example agent harness (examples/agent/harness.py, ``--tool-wait-*``): one wait
per execution drawn from a seeded, capped lognormal, slept before every tool result. No model
server: the draw is unit-tested, and whole runs talk to a stub OpenAI server in this file.

    .venv/bin/python -m pytest tests/rollout/test_harness_tool_wait.py -q
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "examples" / "agent" / "harness.py"
TASK = {"id": "add-1", "prompt": "What is 12 plus 30?"}
QUICK = ["--turns", "3", "--subagent-turn", "-1", "--parallel-turn", "-1", "--stream", "never",
         "--max-retries", "0", "--timeout-s", "10"]
"""Three main turns, nothing else: two plain-text replies answered with an observation each."""


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("example_harness_tool_wait", HARNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look the module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


class StubOpenAI:
    """An OpenAI-compatible chat server whose every reply is the same plain text (no tool call)."""

    def __init__(self) -> None:
        self.requests = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                stub.requests += 1
                choices = [{"index": i, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "NOTE: 12 + 30 = 42. ANSWER: 42"}}
                           for i in range(body.get("n", 1))]
                data = json.dumps({"id": "stub", "object": "chat.completion", "created": 0,
                                   "model": body.get("model", "tiny"), "choices": choices}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    server = StubOpenAI()
    yield server
    server.close()


def harness_env(stub: StubOpenAI, execution: str, task: dict[str, Any] = TASK) -> dict[str, str]:
    return {**os.environ, "OPENAI_BASE_URL": stub.base_url, "OPENAI_API_KEY": "x", "OPENAI_MODEL": "tiny",
            "GYRECTL_TASK": json.dumps(task), "GYRECTL_EXECUTION": execution}


# -- the draw --------------------------------------------------------------------------------------

def test_the_draw_is_fixed_per_execution_and_differs_across_executions(harness):
    knobs = harness.Knobs(tool_wait_median_s=2.0, tool_wait_sigma=1.0, tool_wait_seed=7)
    draws = [harness.tool_wait_draw(knobs, "add-1", f"e{seq:06d}") for seq in range(50)]
    assert draws == [harness.tool_wait_draw(knobs, "add-1", f"e{seq:06d}") for seq in range(50)]
    assert len(set(draws)) == 50 and all(w > 0 for w in draws)
    # the same execution run again (a lost node's rerun, a resumed head's restart) keeps its draw
    assert harness.tool_wait_draw(knobs, "add-1", "e000003-h1") == draws[3]
    assert harness.tool_wait_draw(knobs, "add-1", "e000003-r1-h2") == draws[3]
    # the seed and the task change it
    assert harness.tool_wait_draw(harness.replace(knobs, tool_wait_seed=8), "add-1", "e000003") != draws[3]
    assert harness.tool_wait_draw(knobs, "mul-1", "e000003") != draws[3]
    # not Python's salted hash(): the same value in a fresh interpreter with another hash seed
    code = (f"import importlib.util, sys; spec = importlib.util.spec_from_file_location('h', {str(HARNESS)!r}); "
            "m = importlib.util.module_from_spec(spec); sys.modules['h'] = m; spec.loader.exec_module(m); "
            "print(repr(m.tool_wait_draw(m.Knobs(tool_wait_median_s=2.0, tool_wait_seed=7), 'add-1', 'e000003')))")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert float(fresh.stdout) == draws[3]


def test_the_median_and_the_cap_hold_over_2000_executions(harness):
    knobs = harness.Knobs(tool_wait_median_s=2.0, tool_wait_sigma=1.0, tool_wait_cap_s=30.0)
    draws = [harness.tool_wait_draw(knobs, "add-1", f"e{seq:06d}") for seq in range(2000)]
    assert abs(statistics.median(draws) - 2.0) < 0.2
    assert max(draws) == 30.0 and all(w <= 30.0 for w in draws)  # e^(ln 2 + 2.7 sigma) > 30: the cap bites
    uncapped = [harness.tool_wait_draw(harness.replace(knobs, tool_wait_cap_s=0.0), "add-1", f"e{seq:06d}")
                for seq in range(2000)]
    assert max(uncapped) > 30.0  # 0: no cap
    assert [min(w, 30.0) for w in uncapped] == draws
    # heavy-tailed: the mean well above the median (lognormal: median * e^(sigma^2 / 2))
    assert statistics.mean(uncapped) > 1.4 * statistics.median(uncapped)
    assert harness.tool_wait_draw(harness.replace(knobs, tool_wait_sigma=0.0), "add-1", "e000001") == \
        pytest.approx(2.0)
    assert harness.tool_wait_draw(harness.Knobs(), "add-1", "e000001") == 0.0  # off by default


def test_settings_come_from_defaults_then_the_task_then_flags(harness):
    defaults = harness.knobs_for(dict(TASK), harness.parse_args([]))
    assert (defaults.tool_wait_median_s, defaults.tool_wait_sigma, defaults.tool_wait_cap_s,
            defaults.tool_wait_seed) == (0.0, 1.0, 0.0, 0)
    task = {**TASK, "tool_wait_median_s": 2, "tool_wait_sigma": 0.5, "tool_wait_cap_s": 30, "tool_wait_seed": 3}
    from_task = harness.knobs_for(task, harness.parse_args([]))
    assert (from_task.tool_wait_median_s, from_task.tool_wait_sigma, from_task.tool_wait_cap_s,
            from_task.tool_wait_seed) == (2, 0.5, 30, 3)
    flags = harness.parse_args(["--tool-wait-median-s", "0.25", "--tool-wait-sigma", "1.5",
                                "--tool-wait-cap-s", "4", "--tool-wait-seed", "9"])
    knobs = harness.knobs_for(task, flags)
    assert (knobs.tool_wait_median_s, knobs.tool_wait_sigma, knobs.tool_wait_cap_s, knobs.tool_wait_seed) == \
        (0.25, 1.5, 4.0, 9)
    assert harness.knobs_for(task, harness.parse_args(["--tool-wait-seed", "9"])).tool_wait_median_s == 2
    for bad in ({"tool_wait_median_s": -1}, {"tool_wait_sigma": "wide"}, {"tool_wait_cap_s": float("inf")},
                {"tool_wait_seed": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            harness.knobs_for({**TASK, **bad}, harness.parse_args([]))


def test_help_names_the_flags():
    out = subprocess.run([sys.executable, str(HARNESS), "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--tool-wait-median-s", "--tool-wait-sigma", "--tool-wait-cap-s", "--tool-wait-seed"):
        assert flag in out
    bad = subprocess.run([sys.executable, str(HARNESS), "--tool-wait-median-s", "-2", "--task", json.dumps(TASK)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "tool_wait_median_s" in bad.stderr


# -- whole runs against the stub server ------------------------------------------------------------

def test_an_execution_waits_its_draw_before_every_tool_result(harness, stub):
    flags = ["--tool-wait-median-s", "0.4", "--tool-wait-sigma", "1.0", "--tool-wait-cap-s", "1.5",
             "--tool-wait-seed", "5"]
    knobs = harness.knobs_for(TASK, harness.parse_args(flags))
    want = harness.tool_wait_draw(knobs, TASK["id"], "e000004")
    assert 0 < want <= 1.5
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(HARNESS), *QUICK, *flags], env=harness_env(stub, "e000004"),
                          capture_output=True, text=True, timeout=60)
    wall_s = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    output = json.loads(done.stdout.strip().splitlines()[-1])
    assert output["turns"] == 3 and output["tool_results"] == 2 and stub.requests == 3
    assert output["tool_wait_each_s"] == pytest.approx(want, abs=1e-6)
    assert output["tool_wait_s"] >= 2 * want - 0.01 and output["tool_wait_s"] == pytest.approx(2 * want, abs=0.2)
    assert wall_s >= output["tool_wait_s"]
    # off: no wait, the keys still there
    stub.requests = 0
    off = subprocess.run([sys.executable, str(HARNESS), *QUICK], env=harness_env(stub, "e000004"),
                         capture_output=True, text=True, timeout=60)
    output = json.loads(off.stdout.strip().splitlines()[-1])
    assert (output["tool_results"], output["tool_wait_each_s"], output["tool_wait_s"]) == (2, 0.0, 0.0)


def test_a_task_field_turns_the_wait_on(harness, stub):
    task = {**TASK, "tool_wait_median_s": 0.2, "tool_wait_sigma": 0}
    done = subprocess.run([sys.executable, str(HARNESS), *QUICK], env=harness_env(stub, "e000001", task),
                          capture_output=True, text=True, timeout=60)
    output = json.loads(done.stdout.strip().splitlines()[-1])
    assert output["tool_wait_each_s"] == pytest.approx(0.2) and output["tool_wait_s"] >= 0.39


def test_sigterm_during_a_wait_ends_the_execution_promptly(stub):
    flags = ["--tool-wait-median-s", "60", "--tool-wait-sigma", "0"]
    process = subprocess.Popen([sys.executable, str(HARNESS), *QUICK, *flags], env=harness_env(stub, "e000002"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while stub.requests < 1 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert stub.requests == 1
        time.sleep(1.0)  # the first reply is in: the harness is in its 60 s wait
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=10)
        took_s = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, stderr[-3000:]
    assert took_s < 5
    output = json.loads(stdout.strip().splitlines()[-1])
    assert output["stopped"] is True and output["turns"] == 1 and stub.requests == 1
    assert output["tool_wait_each_s"] == pytest.approx(60.0) and 0.3 < output["tool_wait_s"] < 10
