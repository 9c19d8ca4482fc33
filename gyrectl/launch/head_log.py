"""``logs/head.log``: what the head reports, in words, whatever ends the run.

The journal is the run's record for machines; this log is for the person who reads "see
logs/head.log" in an error: warnings, faults and recoveries, each step, and how the run ended
(with the traceback of a bug). The local backend already sends the head's stderr there; on Slurm
stderr goes to the job's own log, so the head writes the file itself.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gyrectl.coordinator.events import (
    CellLost,
    CellPlaced,
    EvalEnded,
    Event,
    Finished,
    PhaseChanged,
    Resumed,
    StepFailed,
    TrainEnded,
    TrainerReleased,
    TrainRetried,
    TrainStarted,
    WeightsSynced,
)

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@contextmanager
def head_log(path: Path) -> Iterator[None]:
    """Sends every log record of this process (and Python's warnings) to ``path`` while inside."""
    if _same_file(sys.stderr, path):  # the local backend's head: stderr is this file already
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
    else:
        handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        handler.close()


def event_line(event: Event) -> tuple[int, str] | None:
    """How the head's log tells a coordinator event (level, text); None for the routine ones
    (dispatches, harnesses starting, executions ending with a reward)."""
    match event:
        case Finished(seq=seq, infra_failure=True):
            return logging.WARNING, f"execution #{seq} ended as an infrastructure failure (executions.jsonl says why)"
        case PhaseChanged(cell=cell, phase=phase, weight_version=version, warm=warm):
            return logging.INFO, f"cell {cell}: {phase.value} (weights v{version}{', warm' if warm else ''})"
        case TrainStarted(index=index, cells=cells, take=take, reused=reused, left_out=left_out):
            taken = sum(count for _, _, count in take)
            left = f", {left_out} of them left out as infrastructure failures" if left_out else ""
            return logging.INFO, (f"step {index} started on cell(s) {', '.join(map(str, cells))} with {taken} "
                                  f"executions{left}{' (resident group reused)' if reused else ''}")
        case TrainEnded(index=index):
            return logging.INFO, f"step {index} ended: weights v{index + 1}"
        case StepFailed(cell=cell, step_id=step_id, role=role, exit_code=code):
            return logging.WARNING, f"cell {cell}: its {role} step {step_id} exited on its own (exit code {code})"
        case TrainRetried(index=index):
            return logging.WARNING, f"step {index} starts again from the same weights and batch"
        case TrainerReleased(group=group):
            return logging.INFO, f"resident trainer group {group} released"
        case CellLost(cell=cell, nodes=nodes):
            return logging.WARNING, f"cell {cell} lost its node(s) {', '.join(nodes)}"
        case CellPlaced(cell=cell, nodes=nodes):
            return logging.INFO, f"cell {cell} placed on {', '.join(nodes)}"
        case WeightsSynced(cell=cell, version=version):
            return logging.INFO, f"cell {cell} serves weights v{version}"
        case EvalEnded(version=version):
            return logging.INFO, f"evaluation of weights v{version} ended (evals.jsonl)"
        case Resumed(job_id=job_id):
            return logging.INFO, f"took the run over from its journal{f' (job {job_id})' if job_id else ''}"
    return None


def _same_file(stream: object, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(stream.fileno()), os.stat(path))  # type: ignore[attr-defined]
    except (OSError, AttributeError, ValueError):  # no file behind the stream, or no log yet
        return False
