"""The arithmetic harness: one chat call per execution, written against the official ``openai``
client only. It does not know it is being recorded; gyrectl points it at the gateway.

    OPENAI_BASE_URL=http://HOST:PORT/x/e000001/v1 OPENAI_API_KEY=RUN_TOKEN OPENAI_MODEL=smollm2 \\
    GYRECTL_TASK='{"id": "sub-1", "prompt": "What is 17 - 9?"}' python examples/arith/harness.py

    python examples/arith/harness.py --task-file examples/arith/eval_tasks.jsonl --task-id eval-sub-1

The question follows three worked examples in the conversation (user question, assistant reply
``a + b = c``). SmolLM2-135M-Instruct asked plainly rambles and rarely ends on the number; after
the examples it writes one equation, usually in about ten tokens, so the reward is about the
arithmetic rather than the format (README.md has the numbers).

Output: the last stdout line is one JSON object, ``{"answer", "written", "task", "calls",
"completion_tokens"}``; ``answer`` is the reply, stripped (``verifier.py`` reads the number in
it); ``written`` is the reply as a list, as in ``examples/agent``. On SIGTERM (the execution time
limit) it prints the output so far and exits 143. On an error it cannot recover from (the gateway
unreachable after the client's retries, a refused key) it prints nothing on stdout, reports on
stderr and exits 1: an infrastructure failure, not a zero reward.

Sampling: ``temperature`` 1.0 is sent on every call, as ``examples/agent`` does (GRPO needs
different replies within a group; the model folder's generation_config sets none, but a folder
that did would otherwise change it). gyrectl's gateway overrides it on eval executions with
``eval.temperature``. ``--temperature`` (or ``GYRECTL_HARNESS_TEMPERATURE``) changes it for hand
checks such as ``benchmarks/learning/baseline.py``'s greedy pass.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any

import openai

EXAMPLES = (
    ("What is 2 + 5?", "2 + 5 = 7"),
    ("What is 9 - 4?", "9 - 4 = 5"),
    ("Ben has 3 cups and buys 4 more. How many cups does Ben have?", "3 + 4 = 7"),
)
"""Worked examples shown before every question; make_tasks.py keeps their facts out of the tasks."""


@dataclass(frozen=True)
class Knobs:
    max_tokens: int = 24
    """Completion budget: an equation takes about 10 tokens; a ramble is cut here."""
    temperature: float = 1.0
    max_retries: int = 6
    """Client retries of a failed request (connection errors, 5xx, 429) with backoff."""
    timeout_s: float = 120.0
    """Client timeout per request."""


class Stopped(BaseException):
    """SIGTERM arrived: the execution time limit."""


def messages_for(prompt: str) -> list[dict[str, str]]:
    """The worked examples as earlier turns, then the question (no system message: the chat
    template's default one stays)."""
    turns = [{"role": role, "content": text}
             for question, reply in EXAMPLES for role, text in (("user", question), ("assistant", reply))]
    return [*turns, {"role": "user", "content": prompt}]


def solve(client: openai.OpenAI, model: str, task: dict[str, Any], knobs: Knobs, output: dict[str, Any]) -> None:
    """One call; fills ``output`` in place so that a SIGTERM mid-call still prints it."""
    response = client.chat.completions.create(model=model, messages=messages_for(task["prompt"]),
                                              max_tokens=knobs.max_tokens, temperature=knobs.temperature)
    reply = response.choices[0].message.content or ""
    output.update(answer=reply.strip(), written=[reply], calls=1,
                  completion_tokens=response.usage.completion_tokens if response.usage else None)


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_argument_group("task (default: $GYRECTL_TASK)")
    source.add_argument("--task", help="the task as one JSON object")
    source.add_argument("--task-file", help="a JSONL file of tasks (with --task-id)")
    source.add_argument("--task-id", help="which task of --task-file (default: the first)")
    parser.add_argument("--max-tokens", type=int, default=Knobs.max_tokens)
    parser.add_argument("--temperature", type=float,
                        default=float(os.environ.get("GYRECTL_HARNESS_TEMPERATURE", Knobs.temperature)),
                        help="default $GYRECTL_HARNESS_TEMPERATURE or 1.0 (the gateway overrides it on evals)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        task = load_task(args)
    except (OSError, ValueError, TypeError) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 2
    knobs = Knobs(max_tokens=args.max_tokens, temperature=args.temperature)
    output: dict[str, Any] = {"answer": "", "written": [], "task": task["id"], "calls": 0}

    stopping = []

    def stop(signum: int, frame: Any) -> None:
        stopping.append(signum)
        raise Stopped
    signal.signal(signal.SIGTERM, stop)
    try:
        # The client reads OPENAI_BASE_URL and OPENAI_API_KEY itself, as in any harness.
        client = openai.OpenAI(max_retries=knobs.max_retries, timeout=knobs.timeout_s)
        solve(client, os.environ.get("OPENAI_MODEL", "smollm2"), task, knobs, output)
    except BaseException as exc:
        # Library code the signal lands in may wrap Stopped in its own error, so the flag decides.
        if stopping:
            print(json.dumps({**output, "stopped": True}), flush=True)
            return 143
        if isinstance(exc, openai.OpenAIError):
            print(f"harness: giving up on {task['id']}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        raise
    print(json.dumps(output), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
