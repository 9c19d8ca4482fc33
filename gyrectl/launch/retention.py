"""Checkpoint retention (``training.keep_checkpoints``): which weights versions the run no longer
needs, decided purely, and the head's side that removes them.

Who reads ``checkpoints/vN``, and so what keeps it::

    the next training step, a retried one, a resumed head   vN is the newest (the newest N stay)
    a server starting, or returning cold, with vN            the cell is starting or returning
    a live reload of vN (gyrectl.rollout.live)               the reload is under way
    a server that serves vN                                  a cell serves it (rollout, draining)
    an evaluation of vN                                      it is due or running

Nothing else reads an older version: the behaviour logprobs of stale tokens are vLLM's records,
the proximal policy is the trainer's own weights at the step's start (:mod:`gyrectl.train.proximal`), and the trainer
keeps the newest version's optimizer state only. A sleeping server does not serve: it wakes to
the newest weights. v0 links to the user's model and is never removed; a version above the newest
is a step's commit the coordinator has not heard of yet, left alone.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterable

from gyrectl.coordinator.state import CoordinatorState, Phase
from gyrectl.run.rundir import RunDir

log = logging.getLogger(__name__)


def versions_to_remove(*, on_disk: Iterable[int], newest: int, keep: int, in_use: Iterable[int]) -> list[int]:
    """The versions of ``on_disk`` to remove, oldest first: those older than the ``keep`` newest
    (``newest`` and the ``keep - 1`` before it) that are not ``in_use``, never v0. None when
    ``keep`` is 0 (keep every version)."""
    if keep == 0:
        return []
    needed = set(in_use)
    return sorted(v for v in set(on_disk) if 0 < v <= newest - keep and v not in needed)


def versions_in_use(state: CoordinatorState, *, serving: bool = True) -> set[int]:
    """The versions the coordinator's state says are read: what its cells' servers load (starting,
    returning) and, with ``serving``, serve (rollout, draining), and the training step's."""
    phases = (Phase.STARTING, Phase.RETURNING) + ((Phase.ROLLOUT, Phase.DRAINING) if serving else ())
    used = {cell.weight_version for cell in state.cells_in(*phases)}
    return used | ({state.train.index} if state.train is not None else set())


class CheckpointRetention:
    """The head's side, on the coordinator's thread: :meth:`retain` each round before the
    coordinator waits (``Actuator``'s ``Checkpoints`` port), :meth:`finish` once the loop ended.
    Every load begins on that thread too, always of the newest version, so none can begin between
    a decision and its removal. Each removal is a line in the head's log."""

    def __init__(self, run: RunDir, *, keep: int, reloading: Callable[[], set[int]],
                 evaluating: Callable[[], set[int]]):
        """``reloading()``: versions the cells' live reloads load; ``evaluating()``: versions whose
        evaluation is due or running."""
        self._run, self._keep = run, keep
        self._reloading, self._evaluating = reloading, evaluating
        self._decided: tuple[int, frozenset[int]] | None = None

    def retain(self, state: CoordinatorState) -> None:
        self._remove(newest=state.version, in_use=versions_in_use(state) | self._reloading() | self._evaluating())

    def finish(self, state: CoordinatorState) -> None:
        """The loop ended and its servers stop with the head: only a load under way still keeps an
        old version (a resumed head starts its servers with the newest)."""
        self._remove(newest=state.version, in_use=versions_in_use(state, serving=False) | self._reloading())

    def _remove(self, *, newest: int, in_use: set[int]) -> None:
        decided = (newest, frozenset(in_use))
        if self._keep == 0 or decided == self._decided:  # nothing changed: no listing of a shared filesystem
            return
        self._decided = decided
        on_disk = self._run.weight_versions()
        for version in versions_to_remove(on_disk=on_disk, newest=newest, keep=self._keep, in_use=in_use):
            folder = self._run.weights_dir(version)
            try:
                shutil.rmtree(folder)
            except OSError as exc:  # housekeeping: the run goes on, the next change tries again
                log.warning("could not remove weights v%d (%s): %s", version, folder, exc)
                continue
            log.info("removed weights v%d (training.keep_checkpoints=%d, newest v%d; in use: %s)", version,
                     self._keep, newest, ", ".join(f"v{v}" for v in sorted(in_use)) or "none")
