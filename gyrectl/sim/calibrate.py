"""The ``simulator:`` section measured on a finished run (``gyrectl simulate --calibrate RUN_DIR``):
the inverse of the simulator's cost models (:mod:`gyrectl.sim.models`, ``steps``, ``rollout``),
read off the run's journal events and its ``metrics.jsonl`` lines.

    calibration = calibrate(events=read_journal(run.journal_file).events,
                            metrics=scan_jsonl(run.metrics_file).records, config=run_config(run))
    print(simulator_yaml(calibration))      # paste into a config's ``simulator:``

What each value is measured from (medians, so one slow first start does not set the figure):

* ``engine_start_s``: a cell's first server start, ``starting`` until it serves (``rollout``).
* ``train_to_rollout_s``: a return from training (``returning``) until it serves; warm returns
  (wakes) when there are any, and among them those a weight reload did not hold up (the simulator
  routes a woken server once both its wake and its reload are over).
* ``weight_sync_s``: ``SyncStarted`` -> ``WeightsSynced``, of serving cells when there are any
  (a woken server's reload may include its wake).
* ``train_tokens_per_s_per_gpu``: the slope of a least-squares fit of each training step's wall
  time (``TrainStarted`` -> ``TrainEnded``) against its unique tokens (``metrics.jsonl``: what a
  simulated step trains, its executions' token tries) per GPU of its cells, with one intercept per
  kind of start (below); where the fit explains the wall times poorly (steps of nearly one size:
  their noise would set the slope), the median of tokens per second of the trainer's own time. The
  simulator shares a step's work among its cells, and counts a cell without GPUs (a local CPU
  run) as one GPU: so does this.
* ``train_step_overhead_s``: the trainer's own time (``duration_s`` less ``time_s.load``) less the
  fitted token time. The journal alone cannot tell it from a step's start cost (both are in the
  wall time, one before the work, one after): without those metrics it keeps the config's value.
* ``rollout_to_train_s``: the wall-time intercept of steps whose cells came from rollout, less the
  overhead, plus the drain (``draining`` -> ``train``: calls finishing, the server going to sleep),
  which a real run spends before the step and the simulator inside it.
* ``step_restart_s``: the same intercept for steps whose cells all trained last (a warm trainer).

Not measured (the config's value, flagged): ``server_slowdown_at_full`` and ``move_cost_s`` (they
need the calls' timings per server, not the journal), ``executions_movable`` and ``workload_size``
(choices, not timings). Steps that grew (``TrainExtended``), were retried, or mixed cells of both
kinds are left out of the fit: their wall time is not one start cost plus shared work.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gyrectl.config.schema import Config, SimulatorConfig
from gyrectl.coordinator.events import (
    CellLost,
    CellPlaced,
    Event,
    PhaseChanged,
    Resumed,
    SyncStarted,
    TrainEnded,
    TrainExtended,
    TrainRetried,
    TrainStarted,
    WeightsSynced,
)
from gyrectl.coordinator.state import Phase
from gyrectl.sim.models import costs_from_config

SAME_TIME_S = 1e-3
"""Two events this close are one moment (a reload that ended as its server was routed held it up)."""
NOT_A_TIMING = "not measured (a choice, not a timing): the config's value"


@dataclass(frozen=True)
class Measured:
    name: str
    """The ``simulator.*`` field."""
    value: float | int | bool
    samples: int
    """Observations it comes from; 0: not measured, the config's value."""
    note: str = ""
    """How it was measured, or why it was not."""


@dataclass(frozen=True)
class Calibration:
    values: tuple[Measured, ...]
    """One per ``SimulatorConfig`` field, in its order."""
    unused_metrics: int = 0
    """``metrics.jsonl`` lines without an integer ``step`` and ``unique_tokens``."""

    @property
    def simulator(self) -> SimulatorConfig:
        return SimulatorConfig(**{m.name: m.value for m in self.values})  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, float | int | bool]:
        """The ``--json`` contract: exactly the ``simulator.*`` field names."""
        return {m.name: m.value for m in self.values}

    @property
    def not_measured(self) -> list[str]:
        return [m.name for m in self.values if m.samples == 0]


@dataclass
class _Samples:
    """Durations seen in the journal, by what they time."""

    engine: list[float] = field(default_factory=list)
    returns: list[tuple[float, bool, bool]] = field(default_factory=list)
    """(duration, warm, held up by a weight reload)."""
    drains: list[float] = field(default_factory=list)
    syncs: list[tuple[float, bool]] = field(default_factory=list)
    """(duration, its cell was serving)."""
    steps: dict[int, _Step] = field(default_factory=dict)


@dataclass
class _Step:
    members: list[tuple[float, bool]]
    """When each cell joined the step (its start, or a ``TrainExtended``), and whether its last step
    was training (the simulator then times its start as a restart)."""
    ended_at: float | None = None
    retried: bool = False

    @property
    def wall_s(self) -> float:
        """From its cells' mean join time to its end: with a start cost c_i per cell, shared work W
        and overhead o, the simulator ends a step when sum_i (end - o - join_i - c_i) = W, so
        end - mean(join) = mean(c) + o + W / cells, whether or not it grew."""
        assert self.ended_at is not None
        return self.ended_at - statistics.fmean(t for t, _ in self.members)

    @property
    def restart_share(self) -> float:
        return statistics.fmean(float(warm) for _, warm in self.members)


def calibrate(*, events: Sequence[Event], metrics: Sequence[Mapping[str, Any]], config: Config) -> Calibration:
    """The ``simulator:`` section ``events`` (a run's journal) and ``metrics`` (its ``metrics.jsonl``
    records) measure; what they cannot measure keeps ``config.simulator``'s value, with 0 samples."""
    base = config.simulator
    seen = _walk(events)
    # The tokens a simulated step trains are its executions' token tries (``sim.recorded``): the
    # trainer's unique tokens, not only the sampled ones (``trained_tokens``).
    tokens, unused = _step_metrics(metrics, "unique_tokens")
    compute = _compute_times(metrics)
    gpus = costs_from_config(config).gpus_per_cell
    steps = [(s, tokens[i]) for i, s in sorted(seen.steps.items())
             if not s.retried and s.ended_at is not None and i in tokens]
    rates = [tokens[i] / (gpus * len(s.members)) / compute[i] for s, i in
             ((s, i) for i, s in sorted(seen.steps.items()) if not s.retried and i in tokens)
             if compute.get(i, 0.0) > 0]
    fit = _fit_steps(steps, gpus=gpus, base=base, rate=statistics.median(rates) if rates else None)
    per_token = 1.0 / fit.tokens_per_s.value
    overheads = [compute[i] - per_token * tokens[i] / (gpus * len(s.members))
                 for i, s in sorted(seen.steps.items()) if i in compute and i in tokens and not s.retried]
    overhead = _median("train_step_overhead_s", overheads, base, "the trainer's time per step (metrics.jsonl)")
    if not overheads and fit.intercepts:
        # The journal holds start cost + overhead: the config's overhead, if it is no more than that.
        least = min(value for value, _ in fit.intercepts.values())
        overhead = _kept("train_step_overhead_s", base, "not measured (metrics.jsonl has no duration_s and "
                         "time_s.load): the config's value, capped at the shortest step start; the start costs "
                         "absorb the rest")
        overhead = dataclasses.replace(overhead, value=_round(max(0.0, min(base.train_step_overhead_s, least))))
    drain = statistics.median(seen.drains) if seen.drains and base.executions_movable else 0.0
    values = {
        "server_slowdown_at_full": _kept("server_slowdown_at_full", base,
                                         "not measured (needs the calls' timings per server): the config's value"),
        "train_tokens_per_s_per_gpu": fit.tokens_per_s,
        "train_step_overhead_s": overhead,
        "rollout_to_train_s": _start_cost("rollout_to_train_s", fit.intercepts.get("switch"), overhead, base,
                                          drain=drain, what="steps on cells from rollout"),
        "train_to_rollout_s": _returns(seen.returns, base),
        "engine_start_s": _median("engine_start_s", seen.engine, base, "first server starts"),
        "weight_sync_s": _syncs(seen.syncs, base),
        "step_restart_s": _start_cost("step_restart_s", fit.intercepts.get("restart"), overhead, base,
                                      drain=0.0, what="steps on cells that trained last"),
        "move_cost_s": _kept("move_cost_s", base, "not measured (needs the calls' timings per server): "
                                                  "the config's value"),
        "executions_movable": _kept("executions_movable", base, NOT_A_TIMING),
        "workload_size": _kept("workload_size", base, NOT_A_TIMING),
    }
    assert list(values) == [f.name for f in dataclasses.fields(SimulatorConfig)], "one value per simulator field"
    return Calibration(values=tuple(values.values()), unused_metrics=unused)


# -- reading the journal ------------------------------------------------------------------------
def _walk(events: Sequence[Event]) -> _Samples:
    """One pass over the journal: each cell's last phase change and the role of its last step
    (what the simulator's switch-cost model keys on: ``CellRoles``)."""
    found = _Samples()
    last_role: dict[int, str] = {}
    entered: dict[int, tuple[PhaseChanged, str]] = {}
    """Each cell's last phase change, and what the simulator would time a server start there by."""
    syncs: dict[int, tuple[float, bool]] = {}
    synced_at: dict[int, float] = {}
    for event in events:
        if isinstance(event, PhaseChanged):
            entered[event.cell] = _phase_changed(event, found, last_role=last_role, before=entered.get(event.cell),
                                                 synced_at=synced_at)
        elif isinstance(event, SyncStarted):
            serving = event.cell in entered and entered[event.cell][0].phase is Phase.ROLLOUT
            syncs[event.cell] = (event.at, serving)
        elif isinstance(event, WeightsSynced) and event.cell in syncs:
            started, serving = syncs.pop(event.cell)
            found.syncs.append((event.at - started, serving))
            synced_at[event.cell] = event.at
        elif isinstance(event, TrainStarted):
            found.steps[event.index] = _Step([(event.at, last_role.get(c, "") == "train") for c in event.cells])
            last_role.update(dict.fromkeys(event.cells, "train"))
        elif isinstance(event, TrainExtended) and found.steps:  # the running step grew
            found.steps[max(found.steps)].members.append((event.at, last_role.get(event.cell, "") == "train"))
            last_role[event.cell] = "train"
        elif isinstance(event, TrainRetried) and event.index in found.steps:
            found.steps[event.index].retried = True
        elif isinstance(event, TrainEnded) and event.index in found.steps:
            found.steps[event.index].ended_at = event.at
        elif isinstance(event, Resumed | CellLost | CellPlaced):
            # A new allocation (or node): its cells start from nothing, as a resumed simulated world's do.
            for cell in [event.cell] if isinstance(event, CellLost | CellPlaced) else list(last_role):
                last_role.pop(cell, None)
                entered.pop(cell, None)
                syncs.pop(cell, None)
    return found


def _phase_changed(event: PhaseChanged, found: _Samples, *, last_role: dict[int, str],
                   before: tuple[PhaseChanged, str] | None, synced_at: dict[int, float]) -> tuple[PhaseChanged, str]:
    """Samples the phase the cell leaves; returns what to remember of the one it enters."""
    if event.phase in (Phase.STARTING, Phase.RETURNING):
        # The simulator times a server start by the cell's last step: none (an engine start),
        # training (a return), or a server (a restart after a crash: step_restart_s, not sampled).
        role = last_role.get(event.cell, "")
        last_role[event.cell] = "rollout"
        return event, "engine" if role == "" else "return" if role == "train" else "restart"
    if before is None:
        return event, ""
    (left, timed_as), took = before, event.at - before[0].at
    if event.phase is Phase.ROLLOUT and left.phase in (Phase.STARTING, Phase.RETURNING):
        if timed_as == "engine":
            found.engine.append(took)
        elif timed_as == "return":
            synced = synced_at.get(event.cell, -1.0)
            held = synced >= left.at and event.at - synced < SAME_TIME_S
            found.returns.append((took, left.warm, held))
    elif event.phase is Phase.TRAIN and left.phase is Phase.DRAINING:
        found.drains.append(took)
    return event, ""


def _step_metrics(metrics: Sequence[Mapping[str, Any]], name: str) -> tuple[dict[int, int], int]:
    """``name`` of each step's metrics line (a retried step's last), and the lines without it."""
    found, unused = {}, 0
    for record in metrics:
        step, value = record.get("step"), record.get(name)
        if isinstance(step, int) and isinstance(value, int) and not isinstance(value, bool):
            found[step] = value
        else:
            unused += 1
    return found, unused


def _compute_times(metrics: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """The trainer's time of each step after it loaded its state (``duration_s - time_s.load``)."""
    found = {}
    for record in metrics:
        step, duration, phases = record.get("step"), record.get("duration_s"), record.get("time_s")
        load = phases.get("load") if isinstance(phases, Mapping) else None
        if isinstance(step, int) and _number(duration) and _number(load):
            found[step] = float(duration) - float(load)
    return found


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- the fits -----------------------------------------------------------------------------------
MIN_FIT_R2 = 0.9
"""The share of the steps' wall-time variance a fitted slope must explain to be used."""


@dataclass(frozen=True)
class _StepFit:
    tokens_per_s: Measured
    intercepts: dict[str, tuple[float, int]]
    """Wall time of a step with no tokens, by kind of start, and the steps of that kind."""


def _fit_steps(steps: list[tuple[_Step, int]], *, gpus: int, base: SimulatorConfig,
               rate: float | None = None) -> _StepFit:
    """wall = x / tokens_per_s + intercept[switch] (1 - r) + intercept[restart] r, with x = tokens / (GPUs
    per cell x cells) and r the share of cells that trained last: the simulator's step (start cost,
    work shared among its cells, fixed overhead; :attr:`_Step.wall_s`). Where the fit does not
    explain the wall times (:func:`_slope`), ``rate`` (tokens per second of the trainer's own time,
    when metrics.jsonl has it) stands in for it: all of the trainer's time then counts as token time."""
    name = "train_tokens_per_s_per_gpu"
    if not steps:
        return _StepFit(_kept(name, base, "not measured (no finished step with unique_tokens in metrics.jsonl): "
                                          "the config's value"), {})
    x = np.array([tokens / (gpus * len(s.members)) for s, tokens in steps])
    wall = np.array([s.wall_s for s, _ in steps])
    share = np.array([s.restart_share for s, _ in steps])
    kinds = {k: col for k, col in (("switch", 1.0 - share), ("restart", share)) if col.any()}
    starts = np.stack(list(kinds.values()), axis=1)
    if np.linalg.matrix_rank(starts) < len(kinds):  # every step mixed the kinds alike: one start cost
        kinds = {"switch": np.ones(len(steps)), "restart": np.ones(len(steps))} if "switch" in kinds else kinds
        starts = np.ones((len(steps), 1))
    slope = _slope(x, starts, wall) if len(np.unique(np.round(x, 6))) >= 2 and len(steps) > starts.shape[1] else 0.0
    if slope > 0:
        measured = Measured(name, _round(1.0 / slope), len(steps), f"fit over {len(steps)} training steps")
    elif rate:
        measured = Measured(name, _round(rate), len(steps), "median of unique tokens per second of the trainer's "
                            "time (duration_s less time_s.load): step sizes too alike for a fit")
        slope = 1.0 / rate
    else:
        why = "one step size only" if slope == 0 else "step time not explained by tokens"
        measured = _kept(name, base, f"not measured ({why}): the config's value")
        slope = 1.0 / base.train_tokens_per_s_per_gpu
    solved = np.linalg.lstsq(starts, wall - slope * x, rcond=None)[0]
    values = list(solved) * len(kinds) if len(solved) == 1 else list(solved)
    intercepts = {k: (float(v), int(np.count_nonzero(kinds[k]))) for k, v in zip(kinds, values, strict=False)}
    return _StepFit(measured, intercepts)


def _slope(x: np.ndarray, starts: np.ndarray, wall: np.ndarray) -> float:
    """The fitted seconds per token, or -1 where the fit is not to be trusted: a slope or a start
    cost below 0, or wall times it explains less than :data:`MIN_FIT_R2` of (a real run's steps
    are of nearly one size, so their wall times' noise would set the slope)."""
    coefficients, *_ = np.linalg.lstsq(np.column_stack([x, starts]), wall, rcond=None)
    residual = wall - np.column_stack([x, starts]) @ coefficients
    spread = float(np.square(wall - wall.mean()).sum())
    explained = 1.0 - float(np.square(residual).sum()) / spread if spread > 0 else 1.0
    if coefficients[0] <= 0 or (coefficients[1:] < 0).any() or explained < MIN_FIT_R2:
        return -1.0
    return float(coefficients[0])


def _start_cost(name: str, intercept: tuple[float, int] | None, overhead: Measured, base: SimulatorConfig,
                *, drain: float, what: str) -> Measured:
    if intercept is None:
        return _kept(name, base, f"not measured (no clean {what}): the config's value")
    value, samples = intercept
    note = f"{what}, less train_step_overhead_s" + (" (not measured)" if overhead.samples == 0 else "")
    return Measured(name, _round(max(0.0, value - float(overhead.value) + drain)), samples, note)


def _returns(returns: list[tuple[float, bool, bool]], base: SimulatorConfig) -> Measured:
    warm = [r for r in returns if r[1]] or returns
    free = [r for r in warm if not r[2]]
    what = ("wakes" if warm and warm[0][1] else "cold returns" if warm else "returns from training") + (
        "" if free or not warm else ", each held up by its weight reload")
    return _median("train_to_rollout_s", [r[0] for r in free or warm], base, what)


def _syncs(syncs: list[tuple[float, bool]], base: SimulatorConfig) -> Measured:
    serving = [d for d, on in syncs if on]
    return _median("weight_sync_s", serving or [d for d, _ in syncs], base,
                   "reloads on serving cells" if serving else "reloads (of waking servers)")


def _median(name: str, durations: list[float], base: SimulatorConfig, what: str, *, missing: str = "") -> Measured:
    if not durations:
        return _kept(name, base, missing or f"not measured (no {what} in the journal): the config's value")
    return Measured(name, _round(max(0.0, statistics.median(durations))), len(durations), f"median of {what}")


def _kept(name: str, base: SimulatorConfig, note: str) -> Measured:
    return Measured(name, getattr(base, name), 0, note)


def _round(value: float) -> float:
    return round(value, 4)


# -- the section as YAML ------------------------------------------------------------------------
def simulator_yaml(calibration: Calibration) -> str:
    """The ``simulator:`` section, to paste into a config, a comment on each value."""
    lines = ["simulator:"]
    for m in calibration.values:
        said = f"measured from {m.samples} sample(s): {m.note}" if m.samples else m.note
        lines.append(f"  {m.name}: {_yaml_value(m.value)}  # {said}")
    return "\n".join(lines) + "\n"


def _yaml_value(value: float | int | bool) -> str:
    if isinstance(value, bool) or isinstance(value, int):
        return str(value).lower()
    text = f"{value:.4f}".rstrip("0")  # never 1e-05, which YAML reads as a string
    return text + "0" if text.endswith(".") else text
