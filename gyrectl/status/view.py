"""What a login node can see of a run: the job's state from its backend, and the node table.

Job states are folded into four words scripts can rely on — ``pending``, ``running``, ``ended``,
``unknown`` — by the run's backend (:meth:`gyrectl.cluster.backend.Backend.job_view`), with
Slurm's own word kept beside them (``slurm_state``) and, for an ended run, how it ended
(``reason``: the head's own record when it had the chance to write one).

The view is typed records (:mod:`gyrectl.status.rows`, :mod:`gyrectl.coordinator.views`);
their ``to_json`` is the ``status --json`` contract.

A damaged file of the run directory (:mod:`gyrectl.run.files`) does not hide the others:
the view leaves out what it holds and names it under ``damaged``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gyrectl.cluster.backend import JobView, backend_named, read_job_record
from gyrectl.config.schema import Config
from gyrectl.coordinator.actuator import group_cells
from gyrectl.coordinator.events import Event
from gyrectl.coordinator.journal import read_journal, replay
from gyrectl.coordinator.state import limits_from_config
from gyrectl.coordinator.views import (
    CellRow,
    ExecutionCounts,
    Move,
    TrainingRow,
    cell_rows,
    execution_counts,
    moves,
    placed_cells,
    training_row,
)
from gyrectl.run.files import EVAL_SUMMARY, STEP_METRICS, check_fields, read_nodes, read_servers, run_config
from gyrectl.run.rundir import DamagedRunFile, RunDir
from gyrectl.status.faults import Fault, run_faults
from gyrectl.status.rows import EvalRow, NodeRow, ServerRow, StepRow
from gyrectl.store.damage import Skipped
from gyrectl.store.jsonl import JsonlContents, scan_jsonl


@dataclass(frozen=True)
class RunView:
    run_dir: str
    name: str
    job: JobView
    nodes: list[NodeRow]
    note: str = ""
    steps: list[StepRow] = field(default_factory=list)
    """One object per finished training step (the trainer's ``metrics.jsonl`` lines)."""
    total_steps: int = 0
    """Training steps the run is configured for."""
    cells: list[CellRow] = field(default_factory=list)
    """One row per cell (:func:`gyrectl.coordinator.views.cell_rows`), from the journal."""
    moves: list[Move] = field(default_factory=list)
    """Every move of a cell between roles (:func:`gyrectl.coordinator.views.moves`)."""
    executions: ExecutionCounts | None = None
    """Executions so far; None (``{}`` in JSON) until a coordinator journaled an event."""
    training: TrainingRow | None = None
    """The training step under way."""
    servers: list[ServerRow] = field(default_factory=list)
    """The rollout servers' load as the head last published it (``gyrectl.rollout.load``)."""
    servers_at: float | None = None
    """When the head published ``servers``."""
    damaged: dict[str, str] = field(default_factory=dict)
    """Files of the run directory that could not be read back, by name: what is wrong with each.
    The view leaves out what they hold."""
    skipped: list[Skipped] = field(default_factory=list)
    """Spans of the journal and the metrics that could not be read, and lines that do not hold
    what they should: the rest of those files is shown."""
    records_read: dict[str, int] = field(default_factory=dict)
    """Records read and used, per file (``journal.jsonl``, ``metrics.jsonl``)."""
    evals: list[EvalRow] = field(default_factory=list)
    """One row per finished evaluation (``evals.jsonl``: :mod:`gyrectl.rollout.evals`)."""
    disk_bytes: int = 0
    """What the run directory's files hold, in bytes (:func:`disk_bytes`)."""
    faults: list[Fault] = field(default_factory=list)
    """Every fault the journal shows, oldest first, with what the head did about it
    (:mod:`gyrectl.status.faults`)."""

    def to_json(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "name": self.name, "job": self.job.to_json(),
                "nodes": [n.to_json() for n in self.nodes], "note": self.note,
                "steps": [s.to_json() for s in self.steps], "total_steps": self.total_steps,
                "cells": [c.to_json() for c in self.cells], "moves": [m.to_json() for m in self.moves],
                "executions": {} if self.executions is None else self.executions.to_json(),
                "training": None if self.training is None else self.training.to_json(),
                "servers": [s.to_json() for s in self.servers], "servers_at": self.servers_at, "damaged": self.damaged,
                "skipped": [s.to_json() for s in self.skipped], "records_read": self.records_read,
                "evals": [e.to_json() for e in self.evals], "disk_bytes": self.disk_bytes,
                "faults": [f.to_json() for f in self.faults]}


T = TypeVar("T")


def _read(reader: Callable[[RunDir], T], run: RunDir, damaged: dict[str, str] | None, default: T) -> T:
    """``reader(run)``; when ``damaged`` collects them, a damaged file is noted there and
    ``default`` stands in for it, else ``DamagedRunFile`` goes up."""
    try:
        return reader(run)
    except DamagedRunFile as exc:
        if damaged is None:
            raise
        damaged[exc.path.name] = exc.problem
        return default


def job_view(run: RunDir, *, damaged: dict[str, str] | None = None) -> JobView:
    """The run's job as its backend sees it; ``damaged`` as in :func:`_read`."""
    job = _read(read_job_record, run, damaged, None)
    if damaged and run.job_file.name in damaged:
        return JobView(id="", backend="unknown", state="unknown",
                       reason="job.json is damaged: the run's job is unknown")
    job = job or {}
    job_id, name = str(job.get("job_id", "")), str(job.get("backend", ""))
    if backend := backend_named(name, layout=job.get("layout")):
        return backend.job_view(run, job_id, damaged=damaged)
    return JobView(id=job_id, backend=name or "unknown", state="unknown", reason="no job.json in the run directory")


def run_view(run: RunDir) -> RunView:
    damaged: dict[str, str] = {}
    nodes = [NodeRow.of(n) for n in _read(read_nodes, run, damaged, None) or []]
    written = bool(nodes) or run.nodes_file.name in damaged
    load = _read(read_servers, run, damaged, {"at": None, "servers": []})
    config = _read(run_config, run, damaged, None)
    journal, metrics = read_journal(run.journal_file), scan_jsonl(run.metrics_file)
    steps, refused = finished_steps(metrics)
    evals, refused_evals = finished_evals(scan_jsonl(run.evals_file))
    job = job_view(run, damaged=damaged)
    note = _note(run, job=job, nodes=nodes, table_written=written, coordinator_ran=bool(journal.events))
    view = RunView(run_dir=str(run.path), name=run.name, job=job, nodes=nodes,
                   note=note, steps=steps, total_steps=config.run.steps if config else 0,
                   servers=[ServerRow.of(s) for s in load["servers"]], servers_at=load["at"], damaged=damaged,
                   skipped=sorted(journal.skipped + metrics.skipped + refused + refused_evals,
                                  key=lambda s: (s.path, s.offset)),
                   records_read={run.journal_file.name: len(journal.records),
                                 run.metrics_file.name: len(metrics.records) - len(refused)}, evals=evals,
                   disk_bytes=disk_bytes(run.path),
                   faults=list(run_faults(journal.events, gave_up=job.state == "ended" and job.reason == "failed")))
    return view if config is None else _with_coordinator(view, nodes, config, journal.events)


def _note(run: RunDir, *, job: JobView, nodes: list[NodeRow], table_written: bool, coordinator_ran: bool) -> str:
    """Why the node table shows no roles, if it shows none: the job is starting, no coordinator
    runs (an allocation held without a loop), or the run ended before one ran (a run that failed
    at start: its error is ``job.error``, which ``status`` shows above the tables)."""
    if job.state == "ended" and not coordinator_ran:
        how = "failed" if job.reason == "failed" else f"ended ({job.reason})"
        return f"the run {how} before any coordinator ran; the head's log: {run.logs_dir / 'head.log'}"
    if not table_written:
        return "the head has not written the node table yet (job pending or starting)"
    if nodes and all(n.role == "idle" for n in nodes):
        return "all nodes idle: no coordinator assigns roles yet"
    return ""


def disk_bytes(folder: Path) -> int:
    """The sizes of the files under ``folder`` summed, links not followed (``checkpoints/v0`` is
    the user's model, not the run's): one ``scandir`` per folder, one ``lstat`` per file. A file
    or folder that goes while it is read (a step's temporary folder, a version retention removed)
    counts for nothing."""
    total, folders = 0, [folder]
    while folders:
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:  # gone, or not ours to read (a sandboxed harness's workdir)
            continue
    return total


def _with_coordinator(view: RunView, nodes: list[NodeRow], config: Config, events: list[Event]) -> RunView:
    """The coordinator's view, rebuilt from the journal the same way a restarted coordinator
    rebuilds its state (nothing when no coordinator has written one)."""
    if not events:
        return view
    state = replay(events, limits_from_config(config))
    # Rows of replacement nodes are appended after the discovered ones; the journal says where they went.
    discovered = [n.name for n in nodes if n.het_group == 1][:config.num_cells * config.cells.nodes_per_cell]
    cell_nodes = placed_cells(events, group_cells(discovered, config.cells.nodes_per_cell))
    return dataclasses.replace(view, cells=cell_rows(state, cell_nodes), moves=moves(events),
                               training=training_row(state), executions=execution_counts(state))


def finished_evals(contents: JsonlContents) -> tuple[list[EvalRow], list[Skipped]]:
    """The evaluations' lines in file order, and the lines without an evaluation's fields (with
    the file's own damage)."""
    records, refused = _with_fields(contents, EVAL_SUMMARY, "an evaluation's summary")
    return [EvalRow.of(record) for record in records], list(contents.skipped) + refused


def finished_steps(metrics: JsonlContents) -> tuple[list[StepRow], list[Skipped]]:
    """The trainer's metrics lines, one per finished step, in step order (a retried step once),
    and the lines without a finished step's fields (damage that still parsed)."""
    records, refused = _with_fields(metrics, STEP_METRICS, "a finished step's metrics")
    by_step = {record["step"]: record for record in records}
    return [StepRow.of(by_step[step]) for step in sorted(by_step)], refused


def _with_fields(contents: JsonlContents, fields: dict[str, tuple[type, ...]],
                 what: str) -> tuple[list[dict[str, Any]], list[Skipped]]:
    """The records of ``contents`` that hold ``fields``, and one ``Skipped`` for each that does not."""
    kept, refused = [], []
    for i, record in enumerate(contents.records):
        try:
            check_fields(Path(contents.path), record, fields)
        except DamagedRunFile as exc:
            refused.append(contents.refused(i, f"not {what}: {exc.problem}"))
            continue
        kept.append(record)
    return kept, refused
