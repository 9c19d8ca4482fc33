"""Where recorded calls are read from: a run directory, one capture store file or a plain JSONL file.

In a run directory (:class:`gyrectl.run.rundir.RunDir` owns the layout) the calls are in
``trajectories/calls*.seg`` (capture store files) or ``trajectories/calls*.jsonl`` (the gateway's
plain JSONL sink); ``trajectories/executions.jsonl`` holds, per execution, a line with its
``reward`` when it finished and one with its ``step`` when a training step consumed it.
A JSONL file of calls (``replay --export``'s format) may carry ``step`` and ``reward`` on its
lines too. A capture store file on its own (what ``python -m gyrectl.gateway --records calls.seg``
writes) holds calls only: steps and rewards come with a run directory. A file is a store when it
begins with a store record (:func:`gyrectl.capture.store.starts_with_record`) or is named
``*.seg`` (an empty one, or one whose first record is damaged); any other file is read as JSONL.

Nothing that can be read is refused for what cannot: damaged records, a torn tail and lines that
are not calls are skipped and listed in :attr:`Recorded.skipped` for the caller to report.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import StoreContents, read_store, starts_with_record
from gyrectl.capture.stored import StoredCall, full_records, stored_calls
from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir
from gyrectl.store.damage import Skipped
from gyrectl.store.jsonl import scan_jsonl


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
    skipped: list[Skipped] = field(default_factory=list)
    """What could not be read: damaged records, a torn tail, lines that are not calls."""
    unrecoverable: dict[str, int] = field(default_factory=dict)
    """Per execution, intact calls stored as an edit of a call lost to damage."""


def trajectories_dir(run: Path) -> Path:
    return RunDir(Path(run)).trajectories_dir


def load(source: Path) -> Recorded:
    source = Path(source)
    if source.is_dir():
        return _load_run(source)
    if source.is_file():
        store = starts_with_record(source) or source.suffix == ".seg"
        recorded = _load_store(source) if store else _load_jsonl(source)
        if not recorded.calls:
            first = f"; first skipped: {recorded.skipped[0].describe()}" if recorded.skipped else ""
            expected = ("capture store records" if store else
                        "one JSON object per line with 'execution', 'prompt_token_ids', 'completion_token_ids'")
            raise UserError(f"{source}: no recorded calls (expected {expected}){first}")
        return recorded
    raise UserError(f"{source}: no such run directory, capture store or JSONL file")


def load_executions(run: Path, executions: Collection[str]) -> Recorded:
    """The recorded calls of ``executions`` only (a training step's batch): each capture store
    is read through its index, so the cost follows the batch, not the run's age. No ``info``."""
    stores, jsonls = _call_files(run)
    wanted = set(executions)
    files = [read_store(p, executions=wanted) for p in stores]
    for path in jsonls:
        contents = _load_jsonl(path)
        files.append(Recorded(calls={e: c for e, c in contents.calls.items() if e in wanted}, info={},
                              skipped=contents.skipped))
    calls, unrecoverable = _merged(files)
    return Recorded(calls=calls, info={}, skipped=[s for contents in files for s in contents.skipped],
                    unrecoverable=unrecoverable)


def _call_files(run: Path) -> tuple[list[Path], list[Path]]:
    directory = trajectories_dir(run)
    stores, jsonls = sorted(directory.glob("calls*.seg")), sorted(directory.glob("calls*.jsonl"))
    if not stores and not jsonls:
        raise UserError(f"{run}: no recorded calls (expected {directory}/calls*.seg or calls*.jsonl)")
    return stores, jsonls


def _merged(files: Sequence[StoreContents | Recorded]) -> tuple[dict[str, list[StoredCall]], dict[str, int]]:
    """Calls and unrecoverable counts per execution over several files (an execution may span them)."""
    parts: dict[str, list[list[StoredCall]]] = {}
    for contents in files:
        for execution, calls in contents.calls.items():
            parts.setdefault(execution, []).append(calls)
    calls = {e: p[0] if len(p) == 1 else _reindex(p) for e, p in parts.items()}
    unrecoverable: dict[str, int] = {}
    for contents in files:
        for execution, count in contents.unrecoverable.items():
            unrecoverable[execution] = unrecoverable.get(execution, 0) + count
    return calls, unrecoverable


def _load_run(run: Path) -> Recorded:
    stores, jsonls = _call_files(run)
    files = [read_store(p) for p in stores] + [_load_jsonl(p) for p in jsonls]
    calls, unrecoverable = _merged(files)
    executions = scan_jsonl(RunDir(run).executions_file)
    info: dict[str, ExecutionInfo] = {}
    skipped = [s for contents in files for s in contents.skipped] + executions.skipped
    for i, obj in enumerate(executions.records):
        # An execution has a line when it finishes (its reward) and one when a step claims it.
        problem = "missing key 'execution'" if "execution" not in obj else _info_problem(obj)
        if problem:
            skipped.append(executions.refused(i, problem))
            continue
        info[str(obj["execution"])] = _merge_info(info.get(str(obj["execution"])), obj)
    return Recorded(calls=calls, info=info, skipped=skipped, unrecoverable=unrecoverable)


def _load_store(path: Path) -> Recorded:
    """Calls from one capture store file, with what damage cost; no steps or rewards."""
    contents = read_store(path)
    return Recorded(calls=contents.calls, info={}, skipped=contents.skipped, unrecoverable=contents.unrecoverable)


def _reindex(parts: list[list[StoredCall]]) -> list[StoredCall]:
    # Edits point into their own file only; rebuild the execution's edits over all its calls.
    records: list[CallRecord] = []
    for calls in parts:
        records += full_records(calls)
    return next(iter(stored_calls(records).values()))


def _load_jsonl(path: Path) -> Recorded:
    """Calls from a JSONL file; a line that is not a call is skipped and reported, like damage."""
    contents = scan_jsonl(path)
    records: list[CallRecord] = []
    info: dict[str, ExecutionInfo] = {}
    skipped = list(contents.skipped)
    for i, obj in enumerate(contents.records):
        try:
            record = CallRecord.from_json(obj)
        except (ValueError, TypeError) as exc:
            skipped.append(contents.refused(i, str(exc)))
            continue
        problem = _info_problem(obj)
        if problem:
            skipped.append(contents.refused(i, problem))
            continue
        records.append(record)
        info[record.execution] = _merge_info(info.get(record.execution), obj)
    return Recorded(calls=stored_calls(records), info=info, skipped=skipped)


def _info_problem(obj: dict[str, Any]) -> str:
    step, reward = obj.get("step"), obj.get("reward")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2**63):
        return "'step' must be a training step number (an integer from 0)"
    if reward is not None and (not isinstance(reward, (int, float)) or isinstance(reward, bool)):
        return "'reward' must be a number"
    return ""


def _merge_info(known: ExecutionInfo | None, obj: dict[str, Any]) -> ExecutionInfo:
    known = known or ExecutionInfo()
    step, reward = obj.get("step"), obj.get("reward")
    return ExecutionInfo(step=known.step if step is None else step,
                         reward=known.reward if reward is None else float(reward))
