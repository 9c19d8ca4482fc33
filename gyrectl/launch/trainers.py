"""Resident trainer groups asked through the run directory: the coordinator's
``ResidentTrainers`` port on a real cluster. A request is a file every member polls for
(:func:`gyrectl.run.files.write_train_request`); a step is done once its weights folder is in
place (the trainer renames it there after the optimizer state) and its metrics line follows it,
so a run that ends right after its last step keeps that step's line."""

from __future__ import annotations

from dataclasses import dataclass

from gyrectl.run.files import write_train_request
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records


@dataclass(frozen=True)
class RunDirTrainers:
    run: RunDir

    def request(self, *, index: int, group: str) -> None:
        write_train_request(self.run, index, group)

    def committed(self, index: int) -> bool:
        return self.run.weights_dir(index + 1).exists() and any(
            record.get("step") == index for record in read_records(self.run.metrics_file))
