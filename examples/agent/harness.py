"""An example agent harness: a small tool-using agent written against the official ``openai``
client only. It does not know it is being recorded; gyrectl points it at the gateway.

    OPENAI_BASE_URL=http://HOST:PORT/x/e000001/v1 OPENAI_API_KEY=RUN_TOKEN OPENAI_MODEL=tiny \\
    GYRECTL_TASK='{"id": "add-1", "prompt": "What is 12 plus 30?"}' python examples/agent/harness.py

    python examples/agent/harness.py --task-file examples/agent/tasks.jsonl --task-id add-1 --turns 2

Every execution makes the calls a real long-running harness makes, so every branch of a
trajectory tree appears (``gyrectl replay`` shows them):

  turn t of --turns          the main agent's next call: system prompt, the task, the history,
                             two tools (``calculator``, ``notes``)       -> continuation
  a reply failing the        the same messages re-sent, an identical request, while the
  format check               execution's retry budget lasts              -> retry
  --parallel-turn            ``n=2``; the reply with more digits is kept  -> parallel samples
  --subagent-turn            a checker sub-agent in a fresh context (its own system prompt,
                             two turns); its verdict joins the main context -> new context
  history over --context-    the model summarises the conversation (a continuation), which
  chars characters           restarts from [system, summary]: a new context, though the tree
                             labels it a continuation of the shared system + tools prefix

A reply that is not a tool call (the usual case for an untrained model) is taken as plain text:
the harness saves it with the ``notes`` tool itself and feeds an observation back, so the
conversation grows turn by turn. Calls stream or not, decided per call by a generator seeded
from the task: the structure of an execution is a function of its task and the model's replies,
while sampling (temperature 1.0, no seed) differs between executions of the same task.

Tool time (``--tool-wait-median-s``, off by default): long-horizon agents spend most of their
wall time in tools, so the harness can wait before every tool result it feeds back (each native
tool call's result, each ``Observation:``). Each execution draws ONE wait
``w = min(cap, lognormal(ln(median), sigma))`` and waits ``w`` before each of its tool results:
its tool time is ``w`` x (tool results), heavy-tailed across executions, with no GPU involved.
The draw comes from a generator seeded by (``--tool-wait-seed``, the task id, the execution id
of ``$GYRECTL_EXECUTION`` less a ``-hN``/``-rN`` rerun suffix), hashed with SHA-256 (never
Python's salted ``hash()``). gyrectl names a training execution ``e<seq>`` and gives it the task
``tasks[(seq // executions_per_task) % len(tasks)]``, both functions of the sequence number
alone, which every scheduling policy hands out in the same order (0, 1, 2, ...): so the same
execution waits the same under colocate, elastic or async with the same config; a rerun of a
lost execution (``-h1``) or one restarted by a resumed head (``-r1``) is the same sequence
number and keeps its draw. Without ``$GYRECTL_EXECUTION`` (by hand) the draw depends on the seed
and the task id. ``--tool-wait-cap-s`` 0 (the default) means no cap; ``--tool-wait-sigma`` 0
waits exactly the median.

Output: the last stdout line is one JSON object, ``{"answer", "written", "turns", "calls",
"retries", "compressions", ..., "tool_results", "tool_wait_each_s", "tool_wait_s"}``; ``answer``
is the text after ``ANSWER:`` in the final reply, or the whole final reply; ``written`` is every
reply the model sampled, in order; ``tool_results`` counts the tool results fed back,
``tool_wait_each_s`` is the execution's draw ``w`` and ``tool_wait_s`` the seconds actually
waited in all (a wait cut short by SIGTERM included). On SIGTERM (the execution time limit) it
prints the output so far and exits 143. On an error it cannot recover from (the gateway
unreachable after the client's retries, a refused key) it prints nothing on stdout, reports on
stderr and exits 1, so the execution counts as an infrastructure failure
rather than a zero reward.

Settings: built-in defaults < fields of the task object < command-line flags (``--help``).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import operator
import os
import random
import re
import signal
import sys
import time
import zlib
from dataclasses import dataclass, field, fields, replace
from typing import Any

import openai

SYSTEM = "You are a careful agent. Use the tools, then reply ANSWER: <number>."
CHECKER_SYSTEM = "You check another agent's work. Reply with one short line."
FINAL_NUDGE = "Give your final reply now as ANSWER: <number>."
SUMMARY_REQUEST = "Summarise the work so far in one short paragraph. Keep every number."
TOOLS = [
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "notes", "description": "Save a note for later turns.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                       "required": ["text"]}}},
]
ACTION = re.compile(r"ANSWER:|CALC:|NOTE:")


@dataclass(frozen=True)
class Knobs:
    turns: int = 4
    """Main-agent turns (the last one asks for the final answer)."""
    max_tokens: int = 32
    """Completion budget of every call."""
    temperature: float = 1.0
    retries: int = 1
    """Identical re-requests per execution for replies that fail the format check."""
    parallel_turn: int = 2
    """The main turn sampled with ``n=2`` (-1: none)."""
    subagent_turn: int = 1
    """The main turn before which the checker sub-agent runs (-1: none)."""
    subagent_turns: int = 2
    context_chars: int = 700
    """Characters of history above which the conversation is summarised and restarted."""
    stream: str = "mixed"
    """``mixed`` (per call, seeded from the task), ``always`` or ``never``."""
    seed: int | None = None
    """Seeds the harness's own choices; default: a hash of the task's id."""
    max_retries: int = 6
    """Client retries of a failed request (connection errors, 5xx, 429) with backoff."""
    timeout_s: float = 120.0
    """Client timeout per request."""
    tool_wait_median_s: float = field(default=0.0, metadata={"help": (
        "median of the execution's wait before each tool result, in seconds (0: no waits)")})
    tool_wait_sigma: float = field(default=1.0, metadata={"help": (
        "sigma of the wait's lognormal distribution (of its log; 0: always the median)")})
    tool_wait_cap_s: float = field(default=0.0, metadata={"help": "the longest wait, in seconds (0: no cap)"})
    tool_wait_seed: int = field(default=0, metadata={"help": (
        "seeds the waits' draws, with the task id and the execution id")})

    def __post_init__(self) -> None:
        for name in ("tool_wait_median_s", "tool_wait_sigma", "tool_wait_cap_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
        if isinstance(self.tool_wait_seed, bool) or not isinstance(self.tool_wait_seed, int):
            raise ValueError(f"tool_wait_seed must be an integer, not {self.tool_wait_seed!r}")


_RERUN = re.compile(r"(-[hr]\d+)+$")


def tool_wait_draw(knobs: Knobs, task_id: Any, execution: str = "") -> float:
    """The execution's one wait before each tool result, in seconds: ``min(cap, lognormal(ln
    median, sigma))`` from a generator seeded by SHA-256 of (``tool_wait_seed``, the task id, the
    execution id less its rerun suffixes ``-hN``/``-rN``); 0 when ``tool_wait_median_s`` is 0.

    Why these: gyrectl names training executions ``e<seq>`` and picks their tasks from ``seq``
    alone, handing sequence numbers out in the same order under every scheduling policy, so the
    same execution of the same config draws the same wait under colocate, elastic or async; a
    rerun (same sequence number, task and weights) keeps the draw of the run it replaces."""
    if knobs.tool_wait_median_s <= 0:
        return 0.0
    key = f"{knobs.tool_wait_seed}\0{task_id}\0{_RERUN.sub('', execution)}".encode()
    rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
    wait = rng.lognormvariate(math.log(knobs.tool_wait_median_s), knobs.tool_wait_sigma)
    return min(wait, knobs.tool_wait_cap_s) if knobs.tool_wait_cap_s > 0 else wait


class Stopped(BaseException):
    """SIGTERM arrived: the execution time limit."""


class Agent:
    def __init__(self, client: openai.OpenAI, model: str, task: dict[str, Any], knobs: Knobs,
                 execution: str = ""):
        """``execution``: the execution's id (``$GYRECTL_EXECUTION``), which seeds its tool wait."""
        self.client, self.model, self.task, self.knobs = client, model, task, knobs
        seed = knobs.seed if knobs.seed is not None else zlib.crc32(str(task["id"]).encode())
        self.rng = random.Random(seed)
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                               {"role": "user", "content": task["prompt"]}]
        self.notes: list[str] = []
        self.last_reply = ""
        self.written: list[str] = []
        """Every reply the model sampled (retried, parallel, sub-agent and summary ones too)."""
        self.stats = {"turns": 0, "calls": 0, "retries": 0, "compressions": 0, "tool_calls": 0,
                      "streamed": 0, "tool_results": 0}
        self.retries_left = knobs.retries
        self.tool_wait_each_s = tool_wait_draw(knobs, task["id"], execution)
        self.tool_wait_s = 0.0
        """Seconds waited so far before tool results (a wait cut short by SIGTERM included)."""

    # -- the agent loop --------------------------------------------------------------------
    def run(self) -> None:
        k = self.knobs
        for turn in range(k.turns):
            if turn == k.subagent_turn:
                verdict = self.checker()
                self.messages.append({"role": "user", "content": f"A checker says: {verdict}"})
            if turn == k.turns - 1:
                self.messages.append({"role": "user", "content": FINAL_NUDGE})
            reply = self.main_turn(n=2 if turn == k.parallel_turn else 1)
            self.stats["turns"] = turn + 1
            self.last_reply = reply["content"] or ""
            if turn < k.turns - 1:
                self.act(reply)
                if sum(len(m.get("content") or "") for m in self.messages) > k.context_chars:
                    self.compress()

    def main_turn(self, *, n: int) -> dict[str, Any]:
        """One main-agent call; a reply failing the format check is re-requested unchanged."""
        while True:
            choices = self.complete(self.messages, tools=TOOLS, n=n)
            reply = max(choices, key=lambda c: sum(ch.isdigit() for ch in c["content"] or ""))
            if well_formed(reply) or self.retries_left == 0:
                return reply
            self.retries_left -= 1
            self.stats["retries"] += 1

    def act(self, reply: dict[str, Any]) -> None:
        """Runs the reply's tool calls, or treats plain text as a note; appends the observations."""
        if reply["tool_calls"]:
            self.messages.append({"role": "assistant", "content": reply["content"] or "",
                                  "tool_calls": reply["tool_calls"]})
            for call in reply["tool_calls"]:
                self.stats["tool_calls"] += 1
                result = self.run_tool(call["function"]["name"], call["function"]["arguments"])
                self.tool_wait()
                self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            return
        text = reply["content"] or ""
        self.messages.append({"role": "assistant", "content": text})
        if m := re.search(r"CALC:(.*)", text):
            observation = calculate(m.group(1))
        else:
            observation = self.run_tool("notes", json.dumps({"text": text}))
        self.tool_wait()
        self.messages.append({"role": "user", "content": f"Observation: {observation}"})

    def tool_wait(self) -> None:
        """The tool's time before one tool result: the execution's draw. SIGTERM ends the sleep
        (its handler raises ``Stopped`` out of ``time.sleep``); the time waited is counted."""
        self.stats["tool_results"] += 1
        if self.tool_wait_each_s <= 0:
            return
        started = time.monotonic()
        try:
            time.sleep(self.tool_wait_each_s)
        finally:
            self.tool_wait_s += time.monotonic() - started

    def run_tool(self, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments)
        except ValueError:
            return "error: arguments are not JSON"
        if not isinstance(args, dict):
            return "error: arguments must be an object"
        if name == "calculator":
            return calculate(str(args.get("expression", "")))
        if name == "notes":
            self.notes.append(str(args.get("text", ""))[:200])
            numbers = re.findall(r"\d+", " ".join(self.notes))
            return f"{len(self.notes)} notes saved; numbers in them: {' '.join(numbers[-8:]) or 'none'}"
        return f"error: no tool {name!r}"

    def checker(self) -> str:
        """A sub-agent with a fresh context of its own; returns its last reply."""
        messages = [{"role": "system", "content": CHECKER_SYSTEM},
                    {"role": "user", "content": f"Task: {self.task['prompt']}\n"
                                                f"Latest step: {self.last_reply or '(none yet)'}"}]
        reply = ""
        for i in range(self.knobs.subagent_turns):
            if i:
                messages.append({"role": "user", "content": "Now give your verdict in one line."})
            reply = self.complete(messages)[0]["content"] or ""
            messages.append({"role": "assistant", "content": reply})
        return reply

    def compress(self) -> None:
        """Asks for a summary of the conversation, then restarts from [system, summary]."""
        summary = self.complete(self.messages + [{"role": "user", "content": SUMMARY_REQUEST}],
                                tools=TOOLS)[0]["content"] or ""
        self.messages = [self.messages[0],
                         {"role": "user", "content": f"Summary of the work so far: {summary}\n\n"
                                                     f"The task: {self.task['prompt']}"}]
        self.stats["compressions"] += 1

    # -- one model call ----------------------------------------------------------------------
    def complete(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                 n: int = 1) -> list[dict[str, Any]]:
        """Choices as ``{"content", "tool_calls"}``; streams when the task's generator says so."""
        k = self.knobs
        stream = n == 1 and {"always": True, "never": False}.get(k.stream, self.rng.random() < 0.5)
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": k.max_tokens,
                                  "temperature": k.temperature, "n": n}
        if tools:
            kwargs["tools"] = tools
        self.stats["calls"] += 1
        choices = self._request(kwargs, stream=stream)
        self.written += [c["content"] or "" for c in choices]
        return choices

    def _request(self, kwargs: dict[str, Any], *, stream: bool) -> list[dict[str, Any]]:
        if not stream:
            response = self.client.chat.completions.create(**kwargs)
            return [{"content": c.message.content,
                     "tool_calls": [{"id": t.id, "type": "function",
                                     "function": {"name": t.function.name, "arguments": t.function.arguments}}
                                    for t in c.message.tool_calls or []]}
                    for c in response.choices]
        self.stats["streamed"] += 1
        content, calls = [], {}
        for chunk in self.client.chat.completions.create(**kwargs, stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content.append(delta.content or "")
            for t in delta.tool_calls or []:
                call = calls.setdefault(t.index, {"id": "", "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
                call["id"] += t.id or ""
                if t.function:
                    call["function"]["name"] += t.function.name or ""
                    call["function"]["arguments"] += t.function.arguments or ""
        return [{"content": "".join(content), "tool_calls": [calls[i] for i in sorted(calls)]}]

    def output(self, **extra: Any) -> dict[str, Any]:
        m = re.search(r"ANSWER:(.*)", self.last_reply, re.S)
        answer = (m.group(1) if m else self.last_reply).strip()
        return {"answer": answer, "written": self.written, "task": self.task["id"], **self.stats,
                "tool_wait_each_s": round(self.tool_wait_each_s, 6), "tool_wait_s": round(self.tool_wait_s, 6),
                **extra}


def well_formed(reply: dict[str, Any]) -> bool:
    """The format check: a tool call, or text that names an action."""
    return bool(reply["tool_calls"]) or bool(ACTION.search(reply["content"] or ""))


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression: str) -> str:
    """Arithmetic only (numbers, + - * /, parentheses); anything else is an error message."""
    def evaluate(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](evaluate(node.left), evaluate(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](evaluate(node.operand))
        raise ValueError("not arithmetic")
    try:
        if len(expression) > 200:
            raise ValueError("too long")
        return f"{evaluate(ast.parse(expression.strip(), mode='eval').body):g}"
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as exc:
        return f"error: {exc or type(exc).__name__}"


TOOL_WAIT_HELP = """\
tool time: with --tool-wait-median-s above 0 each execution draws one wait
w = min(cap, lognormal(ln(median), sigma)), seeded by (--tool-wait-seed, the task id,
$GYRECTL_EXECUTION less a -hN/-rN rerun suffix), and sleeps w before every tool result it feeds
back; the output's tool_wait_s is the time waited in all. Settings: built-in defaults < fields
of the task object (e.g. "tool_wait_median_s": 2) < these flags."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=TOOL_WAIT_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_argument_group("task (default: $GYRECTL_TASK)")
    source.add_argument("--task", help="the task as one JSON object")
    source.add_argument("--task-file", help="a JSONL file of tasks (with --task-id)")
    source.add_argument("--task-id", help="which task of --task-file (default: the first)")
    for f in fields(Knobs):
        default = f"default {getattr(Knobs(), f.name)!r}"
        parser.add_argument("--" + f.name.replace("_", "-"), type=_type_of(f.name), default=None,
                            help=f"{f.metadata['help']} ({default})" if "help" in f.metadata else default)
    return parser.parse_args(argv)


def _type_of(name: str) -> type:
    value = {"seed": 0}.get(name, getattr(Knobs(), name))
    return type(value)


def load_task(args: argparse.Namespace) -> dict[str, Any]:
    if args.task is not None:
        task = json.loads(args.task)
    elif args.task_file is not None:
        with open(args.task_file) as lines:
            tasks = [json.loads(line) for line in lines if line.strip()]
        task = next((t for t in tasks if args.task_id in (None, str(t["id"]))), None)
        if task is None:
            raise ValueError(f"no task {args.task_id!r} in {args.task_file}")
    elif "GYRECTL_TASK" in os.environ:
        task = json.loads(os.environ["GYRECTL_TASK"])
    else:
        raise ValueError("no task: set GYRECTL_TASK or pass --task / --task-file")
    if not isinstance(task, dict) or "id" not in task or "prompt" not in task:
        raise ValueError("a task is a JSON object with 'id' and 'prompt'")
    return task


def knobs_for(task: dict[str, Any], args: argparse.Namespace) -> Knobs:
    names = {f.name for f in fields(Knobs)}
    from_task = {k: v for k, v in task.items() if k in names}
    from_flags = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return replace(Knobs(), **{**from_task, **from_flags})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        task = load_task(args)
        knobs = knobs_for(task, args)
    except (OSError, ValueError, TypeError) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 2

    stopping = []

    def stop(signum: int, frame: Any) -> None:
        stopping.append(signum)
        raise Stopped
    signal.signal(signal.SIGTERM, stop)
    agent = None
    try:
        # The client reads OPENAI_BASE_URL and OPENAI_API_KEY itself, as in any harness.
        client = openai.OpenAI(max_retries=knobs.max_retries, timeout=knobs.timeout_s)
        agent = Agent(client, os.environ.get("OPENAI_MODEL", "tiny"), task, knobs,
                      os.environ.get("GYRECTL_EXECUTION", ""))
        agent.run()
    except BaseException as exc:
        # Library code the signal lands in may wrap Stopped in its own error (pydantic-core
        # turns it into a SchemaError mid schema build), so the flag decides, not the type.
        if stopping:
            output = (agent.output(stopped=True) if agent
                      else {"answer": "", "task": task["id"], "turns": 0, "stopped": True})
            print(json.dumps(output), flush=True)
            return 143
        if isinstance(exc, openai.OpenAIError):
            print(f"harness: giving up on {task['id']}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        raise
    print(json.dumps(agent.output()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
