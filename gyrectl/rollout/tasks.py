"""Which task an execution runs: dispatch order decides, so a restarted coordinator (which
replays the dispatch count from its journal) hands the same task to the same sequence number.

Execution ``seq`` belongs to group ``seq // executions_per_task``
(:func:`gyrectl.coordinator.groups.group_of`): consecutive executions run the same task, and a
batch takes them a whole group at a time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gyrectl.coordinator.groups import group_of
from gyrectl.errors import UserError


@dataclass(frozen=True)
class Assignment:
    execution: str
    """Execution id: also its gateway path (``/x/<execution>/v1``) and its capture key."""
    seq: int
    task: dict[str, Any]


def execution_id(seq: int) -> str:
    return f"e{seq:06d}"


def rerun_id(execution: str) -> str:
    """The id of a lost execution's next run (``e000012`` -> ``e000012-h1`` -> ``e000012-h2``):
    an id of its own, so its calls never mix with the lost run's."""
    base, _, count = execution.rpartition("-h")
    return f"{base}-h{int(count) + 1}" if base and count.isdigit() else f"{execution}-h1"


def load_tasks(path: Path, *, field: str = "rollout.tasks") -> list[dict[str, Any]]:
    """Tasks of a JSONL file (one object with at least ``id`` per line); errors name ``field``, the
    config field that named the file, and the line (``field: FILE:LINE: ...``). The head and the
    pre-flight (:mod:`gyrectl.launch.preflight`) both read the file with it."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise UserError(f"{field}: cannot read {path}: {exc.strerror}") from None
    tasks = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            task = json.loads(line.decode())
        except UnicodeDecodeError:
            raise UserError(f"{field}: {path}:{number}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise UserError(f"{field}: {path}:{number}: not JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(task, dict) or "id" not in task:
            raise UserError(f"{field}: {path}:{number}: a task is a JSON object with an 'id'")
        tasks.append(task)
    if not tasks:
        raise UserError(f"{field}: {path} holds no task")
    return tasks


def assign(seq: int, tasks: list[dict[str, Any]], *, executions_per_task: int) -> Assignment:
    group = group_of(seq, group_size=executions_per_task)
    return Assignment(execution=execution_id(seq), seq=seq, task=tasks[group % len(tasks)])
