"""benchmarks/e2e's figures, measured the same way on a simulation's events as on a real journal:
the simulator's own makespan and count of trained executions come out again."""

from __future__ import annotations

from pathlib import Path

from benchmarks.e2e.figures import run_figures
from gyrectl.config import load_config
from gyrectl.coordinator.events import Dispatched
from gyrectl.coordinator.state import initial_state
from gyrectl.sim.run import simulate, simulated_limits

REPO = Path(__file__).resolve().parents[2]


def test_a_simulations_figures_are_its_own() -> None:
    config = load_config(REPO / "configs/local-tiny.yaml", ["run.steps=3"])
    sim = simulate(config, workload_spec="heavy-tail")
    figures = run_figures(sim.events, initial_state(simulated_limits(config)))
    assert figures.from_start_s == round(sim.result.makespan_s, 2)  # its clock starts with the cells' start
    assert figures.trained == sim.result.executions_trained and figures.steps == sim.result.steps == 3
    first_dispatch = next(e.at for e in sim.events if isinstance(e, Dispatched))
    assert figures.makespan_s == round(sim.result.makespan_s - first_dispatch, 2)
    assert 0.0 < figures.idle_share < 1.0
