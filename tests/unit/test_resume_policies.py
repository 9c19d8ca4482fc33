"""A head killed in any phase of a run, under every policy, and a new head that resumes the run
(``launch --resume``) to completion, in the simulated world.

The old head's allocation dies with it: the new head runs on a fresh simulated world whose clock
goes on from the old one's (:func:`gyrectl.sim.run.resumed_world`: the executions that were
running run again under their sequence numbers, the finished ones wait for training). It replays
the journal, folds ``Resumed`` into it as ``launch/loop.py`` does, and runs the same policy.

Phases the head is killed in: (a) rollout, no step running (executions in flight, a group half
finished); (b) a cold step (its members started
for it); (c) a step reused by a resident trainer group (``training.resident``); (d) a cell whose
server sleeps (``rollout.sleep_level`` 1) in the training pool, its step not started yet.
``async`` has no (d): its training cells never serve, so none holds a sleeping server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gyrectl.config.schema import Config
from gyrectl.coordinator.actions import Action, MoveCell, StartServer, StartTrain
from gyrectl.coordinator.events import Event, Finished, Resumed, Started, TrainStarted, apply
from gyrectl.coordinator.journal import replay
from gyrectl.coordinator.loop import run_coordinator
from gyrectl.coordinator.state import CellState, CellTable, CoordinatorState, Phase, initial_state
from gyrectl.scheduler import POLICIES
from gyrectl.sim.run import resumed_world, simulated_actuator, simulated_limits, simulated_world
from gyrectl.sim.world import SimulatedWorld

from coordinator_cases import check_invariants, small_config, workload

POLICY_NAMES = ("elastic", "colocate", "async")
JOBS = workload([30.0, 50.0, 80.0, 120.0, 40.0, 60.0, 90.0, 20.0, 150.0, 35.0])
MAX_ROUNDS = 400
"""Rounds a resumed run may take: an uninterrupted one takes under 100 here
(:func:`test_the_bound_on_rounds_leaves_room_for_an_uninterrupted_run`). One that stalls with
work waiting runs out of timers (the simulated clock raises) or out of these rounds."""


def _config(policy: str) -> Config:
    # Groups of two, so groups are open when the head dies; servers sleep and trainer groups stay
    # up between steps by default (rollout.sleep_level 1, training.resident).
    return small_config(policy=policy, cells=3, slots=4, batch=4, steps=5, group=2, staleness=1)


def _last_start(events: list[Event]) -> TrainStarted | None:
    return next((e for e in reversed(events) if isinstance(e, TrainStarted)), None)


def _rolling_out(s: CoordinatorState, events: list[Event]) -> bool:
    return (s.version >= 1 and s.train is None and s.in_flight > 0 and len(s.open_groups) > 0
            and s.phase_count(Phase.ROLLOUT) > 0)


def _cold_step(s: CoordinatorState, events: list[Event]) -> bool:
    return s.train is not None and not _last_start(events).reused


def _reused_step(s: CoordinatorState, events: list[Event]) -> bool:
    return s.train is not None and _last_start(events).reused


def _sleeping_cell(s: CoordinatorState, events: list[Event]) -> bool:
    return s.train is None and any(c.phase is Phase.TRAIN and c.sleeping_server for c in s.cells)


PHASES: dict[str, Callable[[CoordinatorState, list[Event]], bool]] = {
    "rollout": _rolling_out, "cold step": _cold_step, "reused step": _reused_step, "sleeping cell": _sleeping_cell}
CASES = [(policy, phase) for policy in POLICY_NAMES for phase in PHASES
         if (policy, phase) != ("async", "sleeping cell")]


@dataclass
class Head:
    """One head of the run: the world it ran on, and the state it had when it was killed or done."""

    world: SimulatedWorld
    state: CoordinatorState
    journaled: int
    """How many events the journal held when it went."""


@dataclass
class Resumption:
    heads: list[Head]
    """Every head in turn: each one killed but the last, which completed the run."""
    journal: list[Event]
    rounds: int = 0
    """The last head's rounds (policy decisions)."""

    @property
    def final(self) -> CoordinatorState:
        return self.heads[-1].state

    def after(self, head: int) -> list[Event]:
        """What the heads after ``head`` journaled, from the ``Resumed`` of the next one on."""
        return self.journal[self.heads[head].journaled:]


def _kill_and_resume(config: Config, *phases: str) -> Resumption:
    """Runs heads one after the other, killing each in its phase of ``phases``; the last one runs
    the run to completion."""
    limits, decide = simulated_limits(config), POLICIES[config.scheduler.policy]
    run = Resumption(heads=[], journal=[])
    world, state = simulated_world(config, JOBS), initial_state(limits)
    for phase in phases:
        reached = PHASES[phase]
        state = run_coordinator(state=state, decide=decide, actuator=simulated_actuator(config, world),
                                journal=run.journal, now=world.clock.now,
                                stop=lambda s, reached=reached: s.done or reached(s, run.journal))
        assert reached(state, run.journal), f"the {config.scheduler.policy} run never reached the phase ({phase})"
        run.heads.append(Head(world=world, state=state, journaled=len(run.journal)))
        # The head dies with its allocation; a new head on a new allocation takes the journal over.
        world = resumed_world(config, JOBS, journal=run.journal, previous=world)
        resumed = Resumed(at=world.clock.now(), job_id=str(len(run.heads) + 1))
        state = apply(replay(run.journal, limits), resumed)
        run.journal.append(resumed)

    def counted(state: CoordinatorState, now: float) -> list[Action]:
        run.rounds += 1
        assert run.rounds <= MAX_ROUNDS, f"the resumed run stalled: {state}"
        return decide(state, now)
    state = run_coordinator(state=state, decide=counted, actuator=simulated_actuator(config, world),
                            journal=run.journal, now=world.clock.now)
    run.heads.append(Head(world=world, state=state, journaled=len(run.journal)))
    return run


def _check_completed(config: Config, run: Resumption) -> None:
    limits, final = run.final.limits, run.final
    assert final.done and final.version == config.run.steps and run.rounds <= MAX_ROUNDS
    # Every execution finished once and was trained, whole groups only, nothing left over.
    state = check_invariants(config, run.journal)
    assert state == final and final.trained == config.run.steps * limits.batch_executions
    starts = [e for e in run.journal if isinstance(e, TrainStarted)]
    assert all(sum(n for _, _, n in e.take) == limits.batch_executions for e in starts), "a step took part of a batch"
    # The worlds agree: each execution was trained by exactly one completed step, across the heads.
    trained = [seq for head in run.heads for seq in head.world.batches.taken(before=head.state.version)]
    assert sorted(trained) == list(range(limits.total_executions))
    for i, killed in enumerate(run.heads[:-1]):
        if killed.state.train is not None:  # the step the head died in is trained again, from the same weights
            assert _first_start(run.after(i)).index == killed.state.train.index


def _first_start(events: list[Event]) -> TrainStarted:
    return next(e for e in events if isinstance(e, TrainStarted))


@pytest.mark.parametrize(("policy", "phase"), CASES)
def test_a_run_resumed_after_its_head_was_killed_completes(policy: str, phase: str) -> None:
    config = _config(policy)
    run = _kill_and_resume(config, phase)
    _check_completed(config, run)
    if (policy, phase) == ("colocate", "reused step"):  # issue 26's case: every cell asleep
        assert all(c.sleeping_server for c in run.heads[0].state.cells)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_a_run_whose_heads_are_killed_again_and_again_completes(policy: str) -> None:
    phases = [phase for phase in PHASES if (policy, phase) in CASES]
    config = _config(policy)
    _check_completed(config, _kill_and_resume(config, phases[2], phases[0], phases[1]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(POLICY_NAMES), cells=st.integers(2, 5), slots=st.integers(1, 6), group=st.integers(1, 3),
       groups_per_batch=st.integers(1, 4), steps=st.integers(1, 4), staleness=st.integers(0, 2),
       movable=st.booleans(), order=st.sampled_from(["completion", "dispatch"]), pool=st.integers(0, 4),
       sleep_level=st.integers(0, 2), resident=st.booleans(), grow=st.booleans(),
       time_limit_s=st.sampled_from([100.0, 600.0]),
       durations=st.lists(st.floats(1.0, 400.0), min_size=1, max_size=20),
       kills=st.lists(st.integers(1, 150), min_size=1, max_size=3))
def test_a_run_killed_after_any_round_resumes_to_completion(policy, cells, slots, group, groups_per_batch, steps,
                                                            staleness, movable, order, pool, sleep_level, resident,
                                                            grow, time_limit_s, durations, kills):
    """Heads killed after any number of rounds, in whatever state that is, of any configuration."""
    config = small_config(policy=policy, cells=cells, slots=slots, batch=group * groups_per_batch, steps=steps,
                          staleness=staleness, movable=movable, order=order, min_rollout=min(pool, cells - 1),
                          group=group, time_limit_s=time_limit_s)
    config = dataclasses.replace(config, rollout=dataclasses.replace(config.rollout, sleep_level=sleep_level),
                                 training=dataclasses.replace(config.training, resident=resident),
                                 scheduler=dataclasses.replace(config.scheduler, grow_running_step=grow))
    limits, decide, jobs = simulated_limits(config), POLICIES[policy], workload(durations)
    world, state, journal = simulated_world(config, jobs), initial_state(limits), []
    for kill in kills:
        rounds = iter(range(kill))
        state = run_coordinator(state=state, decide=decide, actuator=simulated_actuator(config, world),
                                journal=journal, now=world.clock.now,
                                stop=lambda s, rounds=rounds: s.done or next(rounds, None) is None)
        if state.done:
            break
        world = resumed_world(config, jobs, journal=journal, previous=world)
        journal.append(Resumed(at=world.clock.now()))
        state = apply(replay(journal[:-1], limits), journal[-1])
    rounds = iter(range(MAX_ROUNDS * 5))
    state = run_coordinator(state=state, decide=decide, actuator=simulated_actuator(config, world), journal=journal,
                            now=world.clock.now, stop=lambda s: s.done or next(rounds, None) is None)
    assert state.done, "the resumed run stalled"
    check_invariants(config, journal)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_executions_running_when_the_head_died_run_again_under_their_sequence_numbers(policy: str) -> None:
    run = _kill_and_resume(_config(policy), "rollout")
    killed, before, after = run.heads[0].state, run.journal[:run.heads[0].journaled], run.after(0)
    finished_before = {e.seq for e in before if isinstance(e, Finished)}
    running = set(range(killed.dispatched)) - finished_before
    finished_after = {e.seq for e in after if isinstance(e, Finished)}
    assert running and running <= finished_after and not finished_before & finished_after
    # their harnesses started long ago: the new head reports only the ones it dispatches
    assert sum(e.count for e in after if isinstance(e, Started)) == run.final.dispatched - killed.dispatched


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_the_bound_on_rounds_leaves_room_for_an_uninterrupted_run(policy: str) -> None:
    config, rounds = _config(policy), []

    def counted(state: CoordinatorState, now: float) -> list[Action]:
        rounds.append(now)
        return POLICIES[policy](state, now)
    world = simulated_world(config, JOBS)
    state = run_coordinator(state=initial_state(simulated_limits(config)), decide=counted,
                            actuator=simulated_actuator(config, world), journal=[], now=world.clock.now)
    assert state.done and 3 * len(rounds) <= MAX_ROUNDS


def _resumed_state(*, buffered: int, in_flight: int) -> CoordinatorState:
    """Version 1 of a run on 3 cells, every one idle, as a resumed head replays it (``_config``)."""
    cells = CellTable(CellState(id=i) for i in range(3))
    return dataclasses.replace(initial_state(simulated_limits(_config("elastic"))), cells=cells, version=1,
                               trained=4, dispatched=4 + buffered + in_flight, finished=4 + buffered,
                               buffer=((1, 1, buffered),) if buffered else ())


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_policy_trains_a_ready_batch_on_idle_cells_in_the_first_round(policy: str) -> None:
    actions = POLICIES[policy](_resumed_state(buffered=4, in_flight=0), 5.0)
    [start] = [a for a in actions if isinstance(a, StartTrain)]
    moved = [a.cell for a in actions if isinstance(a, MoveCell)]
    assert start.take == ((1, 1, 4),) and start.index == 1 and set(start.cells) == set(moved)
    started = {a.cell for a in actions if isinstance(a, StartServer)}
    if policy == "colocate":  # everyone trains
        assert start.cells == (0, 1, 2) and not started
    else:  # rollout goes on on the other cells, within the staleness budget (block 2 of 4 executions)
        assert started == {0, 1, 2} - set(start.cells) and started


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_policy_starts_idle_cells_for_executions_in_flight(policy: str) -> None:
    actions = POLICIES[policy](_resumed_state(buffered=0, in_flight=4), 5.0)
    assert StartServer(cell=0) in actions and not [a for a in actions if isinstance(a, StartTrain)]


def test_a_taken_over_execution_waits_for_a_server_and_one_that_never_comes_times_it_out() -> None:
    config = small_config(cells=2, slots=4, batch=2, steps=1, time_limit_s=100.0)
    for routed_at, ended in ((40.0, {0: False, 1: True}), (None, {0: True, 1: True})):
        world = simulated_world(config, workload([30.0, 500.0]), start_s=1000.0)
        world.executions.take_over([(0, 3), (1, 3)], next_seq=2)
        if routed_at is not None:
            world.clock.at(routed_at, lambda world=world: world.servers.route(0, routed=True) or True)
        finished: list[Finished] = []
        while len(finished) < 2:
            world.clock.advance()
            finished += [e for e in world.executions.poll() if isinstance(e, Finished)]
        assert {e.seq: e.timed_out for e in finished} == ended and {e.version for e in finished} == {3}
        assert all(e.at <= 1100.0 for e in finished) and (routed_at is None or finished[0].at > 1070.0)
