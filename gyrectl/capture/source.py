"""Where recorded calls are read from: a run directory's capture store or a plain JSONL file.

In a run directory (:class:`gyrectl.launch.rundir.RunDir` owns the layout) the calls are in
``trajectories/calls*.seg`` (capture store files) or ``trajectories/calls*.jsonl`` (the gateway's
plain JSONL sink); ``trajectories/executions.jsonl`` holds, per execution, a line with its
``reward`` when it finished and one with its ``step`` when a training step consumed it.
A JSONL file of calls (``replay --export``'s format) may carry ``step`` and ``reward`` on its
lines too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import read_store
from gyrectl.capture.stored import StoredCall, full_records, stored_calls
from gyrectl.errors import UserError
from gyrectl.launch.rundir import RunDir
from gyrectl.store.jsonl import read_records


@dataclass(frozen=True)
class ExecutionInfo:
    step: int | None = None
    """Training step that consumed the execution, if known."""
    reward: float | None = None
    """The execution's reward, if known."""


@dataclass(frozen=True)
class Recorded:
    calls: dict[str, list[StoredCall]]
    """Calls per execution, arrival order, in edit form."""
    info: dict[str, ExecutionInfo]


def trajectories_dir(run: Path) -> Path:
    return RunDir(Path(run)).trajectories_dir


def load(source: Path) -> Recorded:
    source = Path(source)
    if source.is_dir():
        return _load_run(source)
    if source.is_file():
        return _load_jsonl(source)
    raise UserError(f"{source}: no such run directory or JSONL file")


def _load_run(run: Path) -> Recorded:
    directory = trajectories_dir(run)
    stores, jsonls = sorted(directory.glob("calls*.seg")), sorted(directory.glob("calls*.jsonl"))
    if not stores and not jsonls:
        raise UserError(f"{run}: no recorded calls (expected {directory}/calls*.seg or calls*.jsonl)")
    parts: dict[str, list[list[StoredCall]]] = {}
    for per_file in [read_store(p) for p in stores] + [_load_jsonl(p).calls for p in jsonls]:
        for execution, calls in per_file.items():
            parts.setdefault(execution, []).append(calls)
    calls = {e: p[0] if len(p) == 1 else _reindex(p) for e, p in parts.items()}
    info: dict[str, ExecutionInfo] = {}
    for obj in read_records(RunDir(run).executions_file):
        # An execution has a line when it finishes (its reward) and one when a step claims it.
        known = info.get(str(obj["execution"]), ExecutionInfo())
        info[str(obj["execution"])] = ExecutionInfo(step=obj.get("step", known.step), reward=obj.get("reward", known.reward))
    return Recorded(calls=calls, info=info)


def _reindex(parts: list[list[StoredCall]]) -> list[StoredCall]:
    # Edits point into their own file only; rebuild the execution's edits over all its calls.
    records: list[CallRecord] = []
    for calls in parts:
        records += full_records(calls)
    return next(iter(stored_calls(records).values()))


def _load_jsonl(path: Path) -> Recorded:
    records, info = [], {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise UserError(f"{where}: expected a JSON object with 'execution', 'prompt_token_ids', "
                                "'completion_token_ids'")
            try:
                record = CallRecord.from_json(obj)
            except (ValueError, TypeError) as exc:
                raise UserError(f"{where}: {exc}") from None
            records.append(record)
            info[record.execution] = _line_info(obj, info.get(record.execution), where)
    if not records:
        raise UserError(f"{path}: no recorded calls (expected one JSON object per line)")
    return Recorded(calls=stored_calls(records), info=info)


def _line_info(obj: dict, known: ExecutionInfo | None, where: str) -> ExecutionInfo:
    step, reward = obj.get("step"), obj.get("reward")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise UserError(f"{where}: 'step' must be an integer")
    if reward is not None and (not isinstance(reward, (int, float)) or isinstance(reward, bool)):
        raise UserError(f"{where}: 'reward' must be a number")
    known = known or ExecutionInfo()
    return ExecutionInfo(step=known.step if step is None else step,
                         reward=known.reward if reward is None else float(reward))


