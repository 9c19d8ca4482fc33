"""Training members of one step meet at one rendezvous; a retried step gets a fresh one."""

from __future__ import annotations

from pathlib import Path

from gyrectl.cluster.base import Cluster, Node, StepSpec, StepState, StepStatus
from gyrectl.config.loader import parse_config
from gyrectl.coordinator.actions import StartTrain
from gyrectl.coordinator.actuator import Actuator
from gyrectl.coordinator.events import PhaseChanged, apply
from gyrectl.coordinator.state import Phase, initial_state, limits_from_config
from gyrectl.launch.steps import step_factory
from gyrectl.run.rundir import RunDir

from coordinator_cases import RecordingTrainers, Unused

CONFIG = parse_config({"cluster": {"backend": "slurm", "nodes": 4, "gpus_per_node": 0}, "cells": {"nodes_per_cell": 2}})


class RecordingCluster(Cluster):
    """Remembers what it was asked to start; every step runs until stopped."""

    backend = "recording"

    def __init__(self) -> None:
        self.started: list[StepSpec] = []

    def discover(self):
        return [Node("head", 0, 0, 1)] + [Node(f"n{i}", 1, 0, 1) for i in range(4)]

    def start_step(self, spec: StepSpec) -> str:
        self.started.append(spec)
        return str(len(self.started))

    def stop_step(self, step_id: str, *, grace_s: float = 5.0) -> None:
        pass

    def step_status(self, step_id: str) -> StepStatus:
        return StepStatus(step_id, StepState.RUNNING)


class Batches:
    def claim(self, *, index, take):
        return 0  # none of the batch left out


def _flag(spec: StepSpec, name: str) -> str:
    return next(arg.split("=", 1)[1] for arg in spec.command if arg.startswith(f"--{name}="))


def test_members_of_a_step_share_its_first_cells_rendezvous(tmp_path: Path) -> None:
    cluster = RecordingCluster()
    actuator = Actuator(cluster=cluster, executions=Unused(), servers=Unused(), batches=Batches(),
                        clock=type("C", (), {"now": lambda self: 0.0})(),
                        steps=step_factory(CONFIG, RunDir(tmp_path)), trainers=RecordingTrainers(),
                        cell_nodes=[("n0", "n1"), ("n2", "n3")])
    state = initial_state(limits_from_config(CONFIG))
    for cell in (0, 1):
        state = apply(state, PhaseChanged(cell=cell, phase=Phase.TRAIN, at=0.0))
    actuator.act(StartTrain(index=3, cells=(1, 0), take=()), state)
    first, second = cluster.started
    assert first.nodes == ("n2", "n3") and second.nodes == ("n0", "n1")
    assert (_flag(first, "rdzv-endpoint") == _flag(second, "rdzv-endpoint")
            == f"n2:{_flag(first, 'rdzv-endpoint').split(':')[1]}")
    assert _flag(first, "rdzv-id") == _flag(second, "rdzv-id") and _flag(first, "nnodes") == "4"


def test_each_attempt_of_a_step_has_its_own_rendezvous(tmp_path: Path) -> None:
    factory = step_factory(CONFIG, RunDir(tmp_path))
    tries = [factory.train_member(cell=0, nodes=("n0", "n1"), index=5, members=1, rendezvous_host="n0", attempt=a)
             for a in range(3)]
    assert len({_flag(t, "rdzv-endpoint") for t in tries}) == len({_flag(t, "rdzv-id") for t in tries}) == 3
    next_step = factory.train_member(cell=0, nodes=("n0", "n1"), index=6, members=1, rendezvous_host="n0")
    assert _flag(next_step, "rdzv-endpoint") not in {_flag(t, "rdzv-endpoint") for t in tries}
