"""A cell whose nodes the cluster lost (cells layout: a crashed node): the fold, the actuator's
answer, the elastic policy with fewer cells, and what ``status`` makes of it."""

from __future__ import annotations

from pathlib import Path

from gyrectl.cluster.base import Cluster, Node, StepSpec, StepState, StepStatus
from gyrectl.config.loader import parse_config
from gyrectl.coordinator.actions import MoveCell, StartServer, StartTrain
from gyrectl.coordinator.actuator import Actuator
from gyrectl.coordinator.events import (
    CellLost,
    CellPlaced,
    Dispatched,
    Finished,
    PhaseChanged,
    TrainStarted,
    apply,
    from_record,
    to_record,
)
from gyrectl.coordinator.journal import replay
from gyrectl.coordinator.state import Limits, Phase
from gyrectl.coordinator.views import moves, placed_cells
from gyrectl.launch.steps import step_factory
from gyrectl.run.rundir import RunDir
from gyrectl.scheduler import elastic

from coordinator_cases import RecordingTrainers, Unused

LIMITS = Limits(num_cells=2, slots_per_cell=4, batch_executions=2, max_staleness=0, min_rollout_cells=1,
                total_executions=4)
CONFIG = parse_config({"cluster": {"backend": "slurm", "nodes": 2, "gpus_per_node": 0},
                       "rollout": {"server_port": 18300}})


def _training_state():
    """Cell 0 serves; cell 1 trains step 0 on the two finished executions."""
    events = [PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=1.0, step_id="srv0"), Dispatched(count=2, version=0, at=1.5),
              PhaseChanged(cell=1, phase=Phase.TRAIN, at=2.0),
              Finished(seq=0, version=0, timed_out=False, at=3.0), Finished(seq=1, version=0, timed_out=False, at=3.0),
              TrainStarted(index=0, cells=(1,), take=((0, 0, 2),), at=4.0, step_ids=("train1",))]
    return replay(events, LIMITS)


def test_a_cell_lost_in_training_gives_the_batch_back_and_comes_back_idle() -> None:
    state = _training_state()
    assert state.trained == 2 and state.buffered == 0 and state.train is not None
    lost = apply(state, CellLost(cell=1, at=5.0, nodes=("node3",)))
    assert lost.cells[1].phase is Phase.LOST and lost.train is None
    assert lost.trained == 0 and lost.buffer == ((0, 0, 2),) and lost.staleness == () and lost.version == 0
    placed = apply(lost, CellPlaced(cell=1, nodes=("node4",), at=9.0))
    assert placed.cells[1].phase is Phase.IDLE and placed.cells[1].since == 9.0
    for event in (CellLost(cell=1, at=5.0, nodes=("node3",)), CellPlaced(cell=1, nodes=("node4",), at=9.0)):
        assert from_record(to_record(event)) == event  # journal round trip


class LosingCluster(Cluster):
    """Steps run until stopped; cell 1's nodes are lost, and a replacement is granted on the second ask."""

    backend = "losing"

    def __init__(self) -> None:
        self.stopped: list[str] = []
        self.asks = 0

    def discover(self):
        return []

    def start_step(self, spec: StepSpec) -> str:
        return spec.name

    def stop_step(self, step_id: str, *, grace_s: float = 5.0) -> None:
        self.stopped.append(step_id)

    def step_status(self, step_id: str) -> StepStatus:
        return StepStatus(step_id, StepState.CANCELLED if step_id in self.stopped else StepState.RUNNING)

    def lost_cells(self) -> set[int]:
        return {1}

    def replacement(self, cell: int):
        self.asks += 1
        return [Node("node4", 1, 0, 4, address="10.0.0.14")] if self.asks > 1 else None


class RolloutSide:
    """The cell servers and the batches: records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs))

    def sessions(self, cell: int) -> int:
        return 0


def test_the_actuator_stops_a_lost_cells_training_step_and_places_it_on_granted_nodes(tmp_path: Path) -> None:
    cluster, rollout = LosingCluster(), RolloutSide()
    actuator = Actuator(cluster=cluster, executions=Unused(), servers=rollout, batches=rollout,
                        clock=type("C", (), {"now": lambda self: 5.0})(),
                        steps=step_factory(CONFIG, RunDir(tmp_path)), trainers=RecordingTrainers(),
                        cell_nodes=[("node2",), ("node3",)])
    state = _training_state()
    events = actuator.observe(state)
    assert events == [CellLost(cell=1, at=5.0, nodes=("node3",))]
    assert cluster.stopped == ["train1"]
    assert ("route", (1,), {"routed": False}) in rollout.calls and ("release", (), {"index": 0}) in rollout.calls
    state = apply(state, events[0])
    assert actuator.observe(state) == []  # the replacement is asked for, not granted yet
    assert actuator.observe(state) == [CellPlaced(cell=1, nodes=("node4",), at=5.0)]
    (placed,) = [args[1] for name, args, _ in rollout.calls if name == "place" and args[0] == 1]
    assert [node.name for node in placed] == ["node4"]
    (replica,) = step_factory(CONFIG, RunDir(tmp_path)).replicas(cell=1, nodes=placed)
    assert (replica.name, replica.url, replica.node) == ("cell1", "http://10.0.0.14:18300", "node4")
    assert actuator.cell_nodes[1] == ("node4",)


def test_with_one_cell_left_elastic_trains_on_it_once_its_work_is_done() -> None:
    state = apply(_training_state(), CellLost(cell=1, at=5.0, nodes=("node3",)))
    # A batch is ready and nothing is in flight: the lone serving cell goes to train it.
    assert MoveCell(cell=0, to=Phase.TRAIN) in elastic.decide(state, 6.0)
    state = apply(state, PhaseChanged(cell=0, phase=Phase.TRAIN, at=7.0))
    assert StartTrain(index=0, cells=(0,), take=((0, 0, 2),)) in elastic.decide(state, 8.0)
    placed = apply(state, CellPlaced(cell=1, nodes=("node4",), at=9.0))
    assert StartServer(cell=1) in elastic.decide(placed, 9.0)


def test_status_follows_a_lost_cell_to_its_new_nodes_and_ends_its_move_as_lost() -> None:
    events = [PhaseChanged(cell=1, phase=Phase.DRAINING, at=10.0, step_id="s1"),
              CellLost(cell=1, at=12.0, nodes=("node3",)), CellPlaced(cell=1, nodes=("node5",), at=40.0)]
    assert placed_cells(events, [("node2",), ("node3",)]) == [("node2",), ("node5",)]
    assert [m.to_json() for m in moves(events)] == [{"cell": 1, "from": "rollout", "to": "lost", "at": 10.0,
                                                     "duration_s": 2.0, "warm": False, "ready_s": 2.0}]
