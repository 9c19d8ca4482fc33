"""Where scalars go: TensorBoard event files (always) and Weights & Biases (``tracking.wandb``).
The libraries write their own formats; nothing here knows an event file's layout."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from gyrectl.errors import UserError
from gyrectl.tracking.scalars import Scalar


class ScalarWriter(Protocol):
    def write(self, scalars: Sequence[Scalar]) -> None: ...

    def close(self) -> None: ...


class TensorBoardWriter:
    """``torch.utils.tensorboard``'s ``SummaryWriter`` (the ``tensorboard`` package's format)."""

    def __init__(self, folder: Path):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(folder))

    def write(self, scalars: Sequence[Scalar]) -> None:
        for s in scalars:
            self._writer.add_scalar(s.tag, s.value, global_step=s.step, walltime=s.wall or None)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbWriter:
    """One W&B run per gyrectl run (its id is the run's name, so a resumed head goes on with it);
    ``offline`` writes under ``folder`` and needs no network (``wandb sync`` uploads it later)."""

    def __init__(self, folder: Path, *, mode: str, project: str, name: str):
        try:
            import wandb
        except ImportError:
            raise UserError("tracking.wandb: the wandb package is not installed (pip install wandb, or set "
                            "tracking.wandb=off)") from None
        folder.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("WANDB_SILENT", "true")
        self._wandb = wandb
        self._run = wandb.init(project=project, name=name, id=name, dir=str(folder), mode=mode, resume="allow",
                               settings=wandb.Settings(console="off"))
        for prefix in ("train", "time_s", "memory_gb", "cells"):
            self._run.define_metric(f"{prefix}/*", step_metric="step")  # one x axis: the training step

    def write(self, scalars: Sequence[Scalar]) -> None:
        by_step: dict[tuple[str, int], dict[str, float]] = {}
        for s in scalars:
            axis = "move" if s.tag.startswith("moves/") else "step"
            by_step.setdefault((axis, s.step), {})[s.tag] = s.value
        for (axis, step), values in sorted(by_step.items()):
            self._run.log({axis: step, **values})

    def close(self) -> None:
        self._run.finish()
