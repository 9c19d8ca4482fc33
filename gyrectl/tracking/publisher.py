"""The head's tracking thread: every ``every_s`` (and once more when the run ends) it reads the
run's metrics and journal, and hands the writers the scalars they have not had yet.

What was written is kept in ``tracking/written.json`` (tag and step of each scalar), so a head
that resumes a run writes only what is new; a crash between a write and that file costs at most
the scalars of one round written twice (TensorBoard shows both points). The files stay the truth:
deleting ``tracking/`` and resuming writes everything again.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gyrectl.config.schema import Config
from gyrectl.coordinator.journal import read_events
from gyrectl.coordinator.state import initial_state, limits_from_config
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records
from gyrectl.tracking.scalars import Scalar, run_scalars
from gyrectl.tracking.writers import ScalarWriter, TensorBoardWriter, WandbWriter


def writers_for(config: Config, run: RunDir) -> list[ScalarWriter]:
    tracking, found = config.tracking, []
    if tracking.tensorboard:
        found.append(TensorBoardWriter(run.tracking_dir / "tensorboard"))
    if tracking.wandb != "off":
        found.append(WandbWriter(run.tracking_dir, mode=tracking.wandb, project=tracking.wandb_project,
                                 name=run.name))
    return found


class TrackingPublisher:
    def __init__(self, run: RunDir, config: Config, *, writers: Sequence[ScalarWriter] | None = None,
                 every_s: float = 30.0):
        self._run, self._every_s = run, every_s
        self._initial = initial_state(limits_from_config(config))
        self._writers = list(writers_for(config, run) if writers is None else writers)
        self._written_file = run.tracking_dir / "written.json"
        self._written = {(tag, step) for tag, step in (run.read_json(self._written_file) or [])}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="tracking", daemon=True)
        if self._writers:
            self._thread.start()

    def publish(self) -> list[Scalar]:
        """Writes the scalars not written yet; returns them."""
        with self._lock:
            scalars = run_scalars(list(read_records(self._run.metrics_file)), read_events(self._run.journal_file),
                                  self._initial, list(read_records(self._run.evals_file)))
            new = sorted(s for s in scalars if (s.tag, s.step) not in self._written)
            if new:
                for writer in self._writers:
                    writer.write(new)
                self._written |= {(s.tag, s.step) for s in new}
                self._run.tracking_dir.mkdir(exist_ok=True)
                self._run.write_json(self._written_file, sorted(self._written))
            return new

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self.publish()
            except Exception as exc:  # tracking never stops a run; the files keep everything
                print(f"tracking: {type(exc).__name__}: {exc} (retried in {self._every_s:g} s)", flush=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._writers:
            try:
                self.publish()
            finally:
                for writer in self._writers:
                    writer.close()
