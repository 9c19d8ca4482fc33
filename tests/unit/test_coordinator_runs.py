"""Whole simulated runs through the real coordinator loop: invariants of every policy (property-
based), and resuming from the journal."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gyrectl.coordinator.events import Dispatched, PhaseChanged, TrainStarted
from gyrectl.coordinator.journal import Journal, read_events, replay
from gyrectl.coordinator.loop import run_coordinator
from gyrectl.coordinator.state import Phase, initial_state
from gyrectl.scheduler import elastic
from gyrectl.sim.run import simulate, simulated_actuator, simulated_limits, simulated_world

from coordinator_cases import check_invariants, small_config, workload


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(["elastic", "colocate", "async"]), cells=st.integers(2, 5), slots=st.integers(1, 6),
       group=st.integers(1, 4), groups_per_batch=st.integers(1, 6), steps=st.integers(1, 4),
       staleness=st.integers(0, 2), movable=st.booleans(), order=st.sampled_from(["completion", "dispatch"]),
       pool=st.integers(0, 4), durations=st.lists(st.floats(1.0, 2000.0), min_size=1, max_size=30))
def test_every_policy_keeps_its_invariants(policy, cells, slots, group, groups_per_batch, steps, staleness, movable,
                                           order, pool, durations):
    batch = group * groups_per_batch
    config = small_config(policy=policy, cells=cells, slots=slots, batch=batch, steps=steps, staleness=staleness,
                          movable=movable, order=order, train_cells=1, min_rollout=min(pool, cells - 1), group=group)
    sim = simulate(config, workload_spec=workload(durations))
    state = check_invariants(config, sim.events)
    assert state.version == -(-steps * batch // batch)
    if order == "dispatch" or policy == "colocate":
        assert max(state.staleness)[0] <= (0 if policy == "colocate" else staleness)


def test_elastic_actually_moves_cells_both_ways():
    config = small_config(cells=4, slots=4, batch=8, steps=6)
    sim = simulate(config, workload_spec=workload([10, 20, 400, 15, 30, 25, 900, 12]))
    phases = [e.phase for e in sim.events if isinstance(e, PhaseChanged)]
    assert Phase.DRAINING in phases and Phase.RETURNING in phases
    assert any(len(e.cells) < 4 for e in sim.events if isinstance(e, TrainStarted))  # rollout went on meanwhile
    check_invariants(config, sim.events)


def test_time_limited_executions_are_trained_not_lost():
    config = small_config(cells=2, slots=4, batch=4, steps=2, time_limit_s=50.0)
    sim = simulate(config, workload_spec=workload([10, 500, 20, 900]))
    state = check_invariants(config, sim.events)
    assert state.timed_out == 4 and sim.result.makespan_s < 500  # two per batch hit the 50 s cap


def test_invariant_checker_catches_a_cell_leaving_over_capacity():
    config = small_config(cells=2, slots=4, batch=4, steps=2)
    events = [PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=0.0), PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=0.0),
              Dispatched(count=8, version=0, at=0.0),
              PhaseChanged(cell=1, phase=Phase.DRAINING, at=1.0)]  # w = 8 > C_R - C_cell = 8 - 4
    with pytest.raises(AssertionError, match="capacity rule"):
        check_invariants(config, events)


def test_restarted_coordinator_continues_with_the_same_decisions(tmp_path):
    config = small_config(cells=3, slots=3, batch=6, steps=4)
    jobs = workload([5, 50, 8, 300, 20, 7, 90, 3])
    whole = simulate(config, workload_spec=jobs).events

    path = tmp_path / "journal.jsonl"
    world = simulated_world(config, jobs)  # the cluster outlives the coordinator
    initial = initial_state(simulated_limits(config))
    journal = Journal(path, fsync=False)
    crashed = run_coordinator(state=initial, decide=elastic.decide, actuator=simulated_actuator(config, world),
                              journal=journal, now=world.clock.now, stop=lambda s: s.version >= 2)
    journal.close()  # the coordinator dies here
    resumed = replay(read_events(path), initial.limits)
    assert resumed == crashed
    with Journal(path, fsync=False) as journal:
        run_coordinator(state=resumed, decide=elastic.decide, actuator=simulated_actuator(config, world),
                        journal=journal, now=world.clock.now)
    assert read_events(path) == whole


def test_journal_replays_to_the_same_state(tmp_path):
    config = small_config(cells=3, slots=3, batch=6, steps=3)
    journal = tmp_path / "journal.jsonl"
    sim = simulate(config, workload_spec=workload([5, 50, 8, 300, 20, 7]), journal_path=journal)
    assert read_events(journal) == sim.events
    assert replay(read_events(journal), simulated_limits(config)) == check_invariants(config, sim.events)


def test_the_coordinator_gets_a_round_per_live_world_event_never_for_a_superseded_timer():
    config = small_config(cells=4, slots=4, batch=8, steps=4)
    world = simulated_world(config, workload([10, 20, 400, 15, 30, 25, 900, 12]))
    clock = world.clock
    advances, live_per_wait = [], []
    advance, wait = clock.advance, clock.wait

    def counted_advance() -> bool:
        advances.append(advance())
        return advances[-1]

    def counted_wait() -> None:
        before = clock.events_processed
        wait()
        live_per_wait.append(clock.events_processed - before)
    clock.advance, clock.wait = counted_advance, counted_wait
    state = run_coordinator(state=initial_state(simulated_limits(config)), decide=elastic.decide,
                            actuator=simulated_actuator(config, world), journal=[], now=clock.now)
    assert state.done
    assert not all(advances), "the run must have had superseded timers for this to show anything"
    assert set(live_per_wait) == {1}, "each wait runs exactly one live event, past any superseded ones"
