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

Output: the last stdout line is one JSON object, ``{"answer", "written", "turns", "calls",
"retries", "compressions", ...}``; ``answer`` is the text after ``ANSWER:`` in the final reply,
or the whole final reply; ``written`` is every reply the model sampled, in order. On SIGTERM (the
execution time limit) it prints the output so far and exits 143. On an error it cannot recover
from (the gateway unreachable after the client's retries, a refused key) it prints nothing on
stdout, reports on stderr and exits 1, so the execution counts as an infrastructure failure
rather than a zero reward.

Settings: built-in defaults < fields of the task object < command-line flags (``--help``).
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import os
import random
import re
import signal
import sys
import zlib
from dataclasses import dataclass, fields, replace
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


class Stopped(BaseException):
    """SIGTERM arrived: the execution time limit."""


class Agent:
    def __init__(self, client: openai.OpenAI, model: str, task: dict[str, Any], knobs: Knobs):
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
                      "streamed": 0}
        self.retries_left = knobs.retries

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
                self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            return
        text = reply["content"] or ""
        self.messages.append({"role": "assistant", "content": text})
        if m := re.search(r"CALC:(.*)", text):
            observation = calculate(m.group(1))
        else:
            observation = self.run_tool("notes", json.dumps({"text": text}))
        self.messages.append({"role": "user", "content": f"Observation: {observation}"})

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
        return {"answer": answer, "written": self.written, "task": self.task["id"], **self.stats, **extra}


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_argument_group("task (default: $GYRECTL_TASK)")
    source.add_argument("--task", help="the task as one JSON object")
    source.add_argument("--task-file", help="a JSONL file of tasks (with --task-id)")
    source.add_argument("--task-id", help="which task of --task-file (default: the first)")
    for f in fields(Knobs):
        parser.add_argument("--" + f.name.replace("_", "-"), type=_type_of(f.name), default=None,
                            help=f"default {getattr(Knobs(), f.name)!r}")
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
        agent = Agent(client, os.environ.get("OPENAI_MODEL", "tiny"), task, knobs)
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
