"""The run's faults and what the head did about each, as a pure function of the coordinator's
events (the journal, oldest first): the ``faults`` of ``status --json`` and the text view's
"faults" lines.

| kind | what happened | recovery | done when |
| --- | --- | --- | --- |
| ``server_died`` | a serving cell's rollout server step exited on its own | ``restarted`` | the cell serves again |
| ``sleeping_server_died`` | the server asleep on a training cell exited | ``cold start on return`` | it serves again |
| ``wake_timed_out`` | a sleeping server did not wake in time; stopped | ``replaced`` | the cell serves again |
| ``sleep_timed_out`` | a drained server did not go to sleep in time; stopped | ``stopped`` | the cell's next phase |
| ``trainer_died`` | a member of the running training step exited | ``step retried`` | the step ends |
| ``idle_trainer_died`` | a member of a waiting resident group exited | ``trainer re-formed`` | a new group starts |
| ``cell_lost`` | the cluster lost the cell's nodes | ``placed`` | it serves or trains again |
| ``head_restarted`` | a new head took the run over (``cell`` null) | ``resumed`` | a cell serves again |

``seconds`` runs from the fault until its recovery was done. A fault whose recovery was not seen
(yet) has recovery ``pending`` and ``seconds`` null, or ``gave up`` once the run ended failed.
A resident trainer group released because the next step trains on other cells is routine, not a
fault: only a member that exited on its own (``StepFailed``) makes one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gyrectl.coordinator.events import (
    CellLost,
    Dispatched,
    Event,
    Finished,
    PhaseChanged,
    Resumed,
    Started,
    StepFailed,
    TrainEnded,
    TrainExtended,
    TrainStarted,
)
from gyrectl.coordinator.state import Phase


@dataclass(frozen=True)
class Kind:
    words: str
    """How the text view says it happened."""
    recovery: str
    """What the head does about it, once done."""


KINDS: dict[str, Kind] = {
    "server_died": Kind("server died", "restarted"),
    "sleeping_server_died": Kind("sleeping server died", "cold start on return"),
    "wake_timed_out": Kind("sleeping server did not wake in time", "replaced"),
    "sleep_timed_out": Kind("drained server did not go to sleep in time", "stopped"),
    "trainer_died": Kind("training member died mid-step", "step retried"),
    "idle_trainer_died": Kind("waiting resident trainer member died", "trainer re-formed"),
    "cell_lost": Kind("lost its nodes", "placed"),
    "head_restarted": Kind("a new head took over", "resumed"),
}
"""Every kind of fault (the table above), with its words and its recovery."""
PENDING = "pending"
GAVE_UP = "gave up"


@dataclass(frozen=True)
class Fault:
    at: float
    """When it happened (unix time)."""
    cell: int | None
    """The cell it hit; None for the head's."""
    kind: str
    """A key of :data:`KINDS`."""
    recovery: str
    """The kind's recovery once done, else :data:`PENDING` or :data:`GAVE_UP`."""
    seconds: float | None
    """From the fault until its recovery was done; None while none was."""
    exit_code: int | None = None
    """The failed step's exit code, when it had one: shown in the text view, not in ``--json``."""

    @property
    def words(self) -> str:
        return KINDS[self.kind].words

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "cell": self.cell, "kind": self.kind, "recovery": self.recovery,
                "seconds": self.seconds}


Done = Callable[[Event], bool]
"""Whether an event completes a fault's recovery."""
_ROUTINE = (Dispatched, Started, Finished)
"""The events (most of a journal) that neither make a fault nor complete a recovery."""


def run_faults(events: Iterable[Event], *, gave_up: bool = False) -> tuple[Fault, ...]:
    """Every fault in ``events`` (a run's journal, oldest first), in time order, each with its
    recovery; ``gave_up``: the run ended failed, so what is still pending never recovers."""
    found: list[Fault] = []
    waiting: list[tuple[int, Done]] = []  # faults whose recovery is not done: index in found, when it is
    asleep: dict[int, str] = {}  # cell -> its sleeping server step
    step: tuple[int, frozenset[int]] | None = None  # the running training step: its index and cells
    for event in events:
        if isinstance(event, _ROUTINE):
            continue
        still: list[tuple[int, Done]] = []
        for i, done in waiting:
            if done(event):
                found[i] = _recovered(found[i], event.at)
            else:
                still.append((i, done))
        waiting = still
        if made := _fault(event, asleep, step):
            waiting.append((len(found), made[1]))
            found.append(made[0])
        match event:  # what classifying the next faults needs to know
            case PhaseChanged(cell=cell, sleeping_server=server):
                asleep[cell] = server
            case StepFailed(cell=cell, step_id=step_id) if asleep.get(cell) == step_id:
                asleep[cell] = ""
            case TrainStarted(index=index, cells=cells):
                step = (index, frozenset(cells))
            case TrainExtended(cell=cell) if step is not None:
                step = (step[0], step[1] | {cell})
            case TrainEnded():
                step = None
            case CellLost(cell=cell):
                asleep[cell] = ""
                step = None if step is not None and cell in step[1] else step
            case Resumed():
                asleep.clear()
                step = None
    left = GAVE_UP if gave_up else PENDING
    for i, _ in waiting:
        found[i] = dataclasses.replace(found[i], recovery=left)
    return tuple(found)


def _fault(event: Event, asleep: dict[int, str], step: tuple[int, frozenset[int]] | None) -> tuple[Fault, Done] | None:
    """The fault ``event`` says happened, still pending, with what completes its recovery."""
    match event:
        case StepFailed(cell=cell, role="train", exit_code=code, at=at):
            if step is not None and cell in step[1]:
                index = step[0]
                return _pending("trainer_died", at, cell, code), lambda e: type(e) is TrainEnded and e.index == index
            return _pending("idle_trainer_died", at, cell, code), lambda e: type(e) is TrainStarted and not e.reused
        case StepFailed(cell=cell, reason="sleep_timeout", exit_code=code, at=at):
            return _pending("sleep_timed_out", at, cell, code), lambda e: type(e) is PhaseChanged and e.cell == cell
        case StepFailed(cell=cell, step_id=step_id, reason=reason, exit_code=code, at=at):
            kind = ("wake_timed_out" if reason == "wake_timeout"
                    else "sleeping_server_died" if step_id and asleep.get(cell) == step_id else "server_died")
            return _pending(kind, at, cell, code), _enters(Phase.ROLLOUT, cell)
        case CellLost(cell=cell, at=at):
            return _pending("cell_lost", at, cell, None), _enters(Phase.ROLLOUT, cell, also=Phase.TRAIN)
        case Resumed(at=at):
            return _pending("head_restarted", at, None, None), _enters(Phase.ROLLOUT)
    return None


def _enters(phase: Phase, cell: int | None = None, *, also: Phase | None = None) -> Done:
    """Done once ``cell`` (any cell: None) enters ``phase`` (or ``also``)."""
    return lambda e: (isinstance(e, PhaseChanged) and e.phase in (phase, also)
                      and (cell is None or e.cell == cell))


def _pending(kind: str, at: float, cell: int | None, exit_code: int | None) -> Fault:
    return Fault(at=at, cell=cell, kind=kind, recovery=PENDING, seconds=None, exit_code=exit_code)


def _recovered(fault: Fault, at: float) -> Fault:
    return dataclasses.replace(fault, recovery=KINDS[fault.kind].recovery, seconds=round(at - fault.at, 3))
