"""The coordinator's narrow views of the world besides the ``Cluster``: the executions it
dispatches and hears end, the cell servers it routes, sleeps, wakes and syncs, the batches
training steps claim, the clock it waits on, and the builder of the steps it starts. Real ones
(:mod:`gyrectl.rollout`) run processes, talk HTTP and sleep; the simulated ones (:mod:`gyrectl.sim`)
share a virtual clock with the simulated cluster. The step builder (:mod:`gyrectl.launch.steps`)
knows the engines' command lines; the coordinator only asks it for ``StepSpec``s. Resident trainer
groups are asked for steps through the run directory (:mod:`gyrectl.launch.trainers`) or the
simulated world. Old weights versions are removed by the head's checkpoint retention
(:mod:`gyrectl.launch.retention`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gyrectl.cluster.base import Node, StepSpec
from gyrectl.coordinator.events import Event
from gyrectl.coordinator.state import CoordinatorState


def batch_name(index: int) -> str:
    """The name of training step ``index``'s batch (what ``Batches.claim`` reserves)."""
    return f"batch-{index}"


class Executions(Protocol):
    """The agent executions: started on the routed servers, reported as they end."""

    def dispatch(self, *, count: int, version: int) -> None:
        """Starts ``count`` new executions (the next sequence numbers) on routed servers."""

    def poll(self) -> list[Event]:
        """What happened since the last poll, in the order it happened: ``Started``, ``Finished``,
        ``EvalEnded``, and the cell servers' ``WeightsSynced`` (their reloads end off the
        coordinator's thread and report through the same feed). Raises ``RuntimeFailure`` once the
        run must stop (a reload failed, too many infrastructure failures)."""


class CellServers(Protocol):
    """Each cell's rollout server replicas, as the gateway routes to them."""

    def ready(self, cell: int) -> bool:
        """Whether the cell's started server answers (its engine has loaded the weights)."""

    def route(self, cell: int, *, routed: bool, weight_version: int = 0) -> None:
        """Adds a cell's server (serving ``weight_version``) to the routing, or drains it (its
        executions move on between calls)."""

    def sleep(self, cell: int, *, level: int) -> None:
        """Starts putting the cell's drained server to sleep (``rollout.sleep_level``) and returns
        at once; asked again while that sleep is under way, does nothing. ``asleep`` says how it
        went."""

    def asleep(self, cell: int) -> bool | None:
        """How the sleep of the cell's drained server went: None while under way (or not asked
        since the cell began draining), True once it sleeps, False if it did not answer within
        ``rollout.wake_timeout_s``."""

    def wake(self, cell: int) -> None:
        """Starts waking the cell's sleeping server and returns at once; the cell is ``ready``
        once it answers (it serves the weights it had, or none at level 2, until
        ``sync_weights``, which waits for the wake). Never raises: a server that does not wake
        is never ready, and the coordinator replaces it after ``rollout.wake_timeout_s``."""

    def sessions(self, cell: int) -> int:
        """Executions the cell's server still holds (0 once a drained cell may stop)."""

    def sync_weights(self, cell: int, version: int) -> None:
        """Makes the cell's server load weights ``version``; reported by ``WeightsSynced``."""

    def place(self, cell: int, nodes: Sequence[Node]) -> None:
        """The cell's servers now run on ``nodes`` (a lost cell placed on new nodes)."""


class Batches(Protocol):
    """The finished executions waiting to be trained, as training steps take them."""

    def claim(self, *, index: int, take: tuple[tuple[int, int, int], ...]) -> int:
        """Reserves the finished executions ``take`` for training step ``index``; returns how many
        of them the batch leaves out (infrastructure failures: never trained)."""

    def release(self, *, index: int) -> None:
        """Gives back what ``claim`` reserved for step ``index`` (the step was abandoned when a
        cell in it was lost); the step's next claim may take the same executions again."""


class StepBuilder(Protocol):
    def rollout(self, *, cell: int, nodes: tuple[str, ...], version: int) -> StepSpec:
        """Cell ``cell``'s rollout server on ``nodes``, serving weights ``version``."""

    def train_member(self, *, cell: int, nodes: tuple[str, ...], index: int, members: int, rendezvous_host: str,
                     attempt: int = 0, group: str = "") -> StepSpec:
        """Cell ``cell``'s part of training step ``index`` (one of ``members`` member cells); with a
        ``group`` id, a resident member that stays up for the steps requested of that group."""


class ResidentTrainers(Protocol):
    """The resident trainer groups' side of the run: asked for a step, they say when it is committed."""

    def request(self, *, index: int, group: str) -> None:
        """Asks the resident group ``group`` (up, waiting) to train step ``index``; a group other
        than ``group`` that is still up exits on seeing it."""

    def committed(self, index: int) -> bool:
        """Whether step ``index``'s weights (version ``index + 1``) are committed: a resident
        group's step is done (its members stay up, so their exit cannot say it)."""


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on the coordinator's clock."""

    def wait(self) -> None:
        """Blocks until something may have changed (real: a poll interval; simulated: next event)."""


class Checkpoints(Protocol):
    """The weights versions on the shared filesystem (``checkpoints/vN``)."""

    def retain(self, state: CoordinatorState) -> None:
        """Removes the versions no one reads any more in ``state`` (``training.keep_checkpoints``)."""
