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
        case StepFailed():
            return logging.WARNING, _step_failed(event)
        case TrainRetried(index=index):
            return logging.WARNING, f"step {index} starts again on the same cells from the same weights and batch"
        case TrainerReleased(group=group):
            return logging.INFO, f"resident trainer group {group} released: the next step starts a new group"
        case CellLost(cell=cell, nodes=nodes):
            return logging.WARNING, (f"cell {cell} lost its node(s) {', '.join(nodes)}: its calls go to other servers "
                                     "and a training step it was in gives its batch back; the cell holds no work "
                                     "until it is placed on new nodes")
        case CellPlaced(cell=cell, nodes=nodes):
            return logging.INFO, f"cell {cell} placed on {', '.join(nodes)}"
        case WeightsSynced(cell=cell, version=version):
            return logging.INFO, f"cell {cell} serves weights v{version}"
        case EvalEnded(version=version):
            return logging.INFO, f"evaluation of weights v{version} ended (evals.jsonl)"
        case Resumed(job_id=job_id):
            return logging.INFO, (f"took the run over from its journal{f' (job {job_id})' if job_id else ''}: "
                                  "the previous head's steps are gone, every cell starts idle, and a training "
                                  "step that was running is trained again from the same weights")
    return None


def _step_failed(event: StepFailed) -> str:
    """What failed and what the head does about it (the events after it say which way it went)."""
    cell, step, code = event.cell, event.step_id, f"exit code {event.exit_code}"
    if event.reason == "wake_timeout":
        return (f"cell {cell}: its sleeping rollout server (step {step}) did not wake within "
                "rollout.wake_timeout_s; stopped, a new one cold-starts")
    if event.reason == "sleep_timeout":
        return (f"cell {cell}: its drained rollout server (step {step}) did not go to sleep within "
                "rollout.wake_timeout_s; stopped, the cell trains and cold-starts a new server when it returns")
    if event.role == "train":
        return (f"cell {cell}: its training member (step {step}) exited on its own ({code}); the step starts "
                "again on the same cells, or, if its resident group was waiting, the next step starts a new group")
    return (f"cell {cell}: its rollout server (step {step}) exited on its own ({code}); its calls go to other "
            "servers and a new server starts (if it was asleep: when the cell returns to rollout)")


def _same_file(stream: object, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(stream.fileno()), os.stat(path))  # type: ignore[attr-defined]
    except (OSError, AttributeError, ValueError):  # no file behind the stream, or no log yet
        return False
