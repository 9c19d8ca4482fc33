"""A run's own workload: ``gyrectl simulate CONFIG --workload runs/NAME`` replays the executions a
finished (or still running) run trained, so a user can ask what another policy or cluster would
have done with them::

    gyrectl simulate configs/local-tiny.yaml --workload runs/tiny-20261206-231952 --policy colocate

Which executions: every training execution the journal saw finish, in dispatch order (sequence
number), that was not an infrastructure failure (never trained). Evaluations are not in the journal's
sequence and are left out; so are executions still running in a partial run. A timed-out execution
is kept, with the duration it reached before the time limit stopped it (so its ``duration_s`` is
capped: it may finish in time under a lighter load, but never runs longer than it did).
``trajectories/executions.jsonl`` gives each one's harness start and end and its execution id (a
re-run after a lost node or a resume has an id and a start of its own); one without that line
(damaged) is left out, and counted.

``duration_s`` (how long it runs alone): the exact inverse of the simulator's rollout model
(:mod:`gyrectl.sim.rollout`). The simulator slows the *whole* life of an execution, tool time
included, by the sessions on its server: it advances at ``speed(n)`` work-seconds per second
(:meth:`SimulatedCosts.execution_speed`, ``n`` the sessions on its server, itself included) and
ends once that adds up to ``duration_s``. So here::

    duration_s = integral over the execution's life of speed(n(t)) dt

where ``n(t)`` counts the executions whose session is on the same server at ``t``. An execution's
session is on the server of its latest call (before its first call: its first call's server; the
gateway keeps an execution on one server, so that is nearly always one server); a session lasts
from its harness start to its end (an execution with no line in ``executions.jsonl``, such as an
evaluation, from its first call to its last). Every execution that held a session counts towards
``n``, evaluations and infrastructure failures included: they loaded the server all the same.
Replaying a run's workload under the same load therefore gives back each execution's measured
wall time; an execution alone on its server gets ``wall x speed(1)`` (``speed(1) < 1`` when
``server_slowdown_at_full > 0``: the simulator slows a lone session too). ``speed`` takes the run's
own ``config.yaml`` (``server_slowdown_at_full``, ``concurrency_per_server``): the load the run had
is that of the servers it ran.

What it assumes, like the simulator: tool time slows with load as much as generation does (on a
real server it does not, so the derived ``duration_s`` of a tool-heavy execution that shared a busy
server is shorter than its unloaded wall time, and a lighter simulated load speeds its tool time up
too); a server's load is its own sessions alone (servers that share compute, as every cell of one
CPU machine does, slow each other, which neither the simulator nor this derivation sees: a
workload recorded on two busy servers replays slow under a policy that runs one; docs/performance.md
measures it); a server's weight-sync pause counts as work (the journal names syncs by cell, the capture
store names servers, and nothing joins the two), at most ``weight_sync_s`` per sync too long.

``tokens``: the size of the execution's token trie, i.e. the suffix tokens of its calls in edit
form (:mod:`gyrectl.capture.edit`): the prompt and generated tokens once each, what exact prefix
dedup trains. Path-sampling dedup and a batch's cross-execution sharing are not counted.

Damaged lines of the journal, ``executions.jsonl`` and the capture store are skipped and reported,
as ``gyrectl replay`` does: what could not be read costs only its own record.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gyrectl.capture.source import Recorded, load
from gyrectl.coordinator.events import Finished
from gyrectl.coordinator.journal import read_journal
from gyrectl.errors import UserError
from gyrectl.run.files import run_config
from gyrectl.run.rundir import RunDir
from gyrectl.sim.models import costs_from_config
from gyrectl.sim.workload import Workload
from gyrectl.store.damage import Skipped, log_skipped
from gyrectl.store.jsonl import scan_jsonl

log = logging.getLogger(__name__)

MIN_DURATION_S = 1e-3
"""A workload's durations are > 0: an execution that ended as it started costs a millisecond."""


@dataclass(frozen=True)
class Call:
    started_at: float
    ended_at: float
    server: str


@dataclass(frozen=True)
class Life:
    """One execution's session: from its start to its end, on the servers of its calls."""

    started_at: float
    ended_at: float
    calls: tuple[Call, ...]
    """Its calls, in order of their start."""


@dataclass(frozen=True)
class RecordedRun:
    workload: Workload
    skipped: tuple[Skipped, ...]
    """Damaged lines and records of the journal, ``executions.jsonl`` and the capture store."""
    left_out: int
    """Finished training executions without a readable line in ``executions.jsonl``."""


# -- pure: the load on each server, and an execution's work under it ---------------------------
Segment = tuple[float, float, str]
"""``(start, end, server)``: a stretch of a session on one server."""


def segments(life: Life) -> list[Segment]:
    """Where the session was: on each call's server from that call's start to the next call's
    (before its first call, on the first call's server). Empty without calls: on no server."""
    if not life.calls:
        return []
    starts = [life.started_at] + [c.started_at for c in life.calls[1:]] + [life.ended_at]
    out: list[Segment] = []
    for call, start, end in zip(life.calls, starts, starts[1:], strict=False):
        start, end = max(start, life.started_at), min(end, life.ended_at)
        if end <= start:
            continue
        if out and out[-1][2] == call.server and out[-1][1] == start:
            out[-1] = (out[-1][0], end, call.server)  # one stretch per server visit
        else:
            out.append((start, end, call.server))
    return out


@dataclass(frozen=True)
class ServerLoad:
    """Sessions on one server over time, and the work a session there gets, as a running integral."""

    times: tuple[float, ...]
    """Breakpoints, ascending."""
    sessions: tuple[int, ...]
    """Sessions between ``times[i]`` and ``times[i + 1]``."""
    work: tuple[float, ...]
    """Work-seconds one session did from ``times[0]`` to ``times[i]``."""

    def work_between(self, start: float, end: float, speed: Callable[[int], float]) -> float:
        return self._work_at(end, speed) - self._work_at(start, speed)

    def _work_at(self, t: float, speed: Callable[[int], float]) -> float:
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0:
            return 0.0
        if i >= len(self.sessions):
            return self.work[-1]
        return self.work[i] + (t - self.times[i]) * speed(max(1, self.sessions[i]))


def server_loads(stretches: Iterable[Segment], speed: Callable[[int], float]) -> dict[str, ServerLoad]:
    changes: dict[str, dict[float, int]] = {}
    for start, end, server in stretches:
        at = changes.setdefault(server, {})
        at[start] = at.get(start, 0) + 1
        at[end] = at.get(end, 0) - 1
    loads = {}
    for server, at in changes.items():
        times = sorted(at)
        sessions, work, n = [], [0.0], 0
        for t, t_next in zip(times, times[1:], strict=False):
            n += at[t]
            sessions.append(n)
            work.append(work[-1] + ((t_next - t) * speed(n) if n else 0.0))
        loads[server] = ServerLoad(times=tuple(times), sessions=tuple(sessions), work=tuple(work))
    return loads


def durations_alone(lives: Mapping[str, Life], wanted: Sequence[str], speed: Callable[[int], float]
                    ) -> list[float]:
    """``duration_s`` of each of ``wanted`` (ids of ``lives``): the work-seconds the simulator's
    rollout model gives its session under the load all ``lives`` put on their servers. A session
    on no server (no calls) ran alone: ``wall x speed(1)``."""
    stretches = {execution: segments(life) for execution, life in lives.items()}
    loads = server_loads((s for found in stretches.values() for s in found), speed)
    out = []
    for execution in wanted:
        life = lives[execution]
        if stretches[execution]:
            work = sum(loads[server].work_between(start, end, speed) for start, end, server in stretches[execution])
        else:
            work = max(0.0, life.ended_at - life.started_at) * speed(1)
        out.append(max(MIN_DURATION_S, work))
    return out


# -- reading a run directory ------------------------------------------------------------------
def read_recorded_run(path: Path, *, speed: Callable[[int], float] | None = None) -> RecordedRun:
    """The workload of the run in ``path`` (``speed``: the per-session speed rule, by default the
    run's own config's)."""
    run = RunDir(Path(path))
    if not run.journal_file.is_file():
        raise UserError(f"{path} is not a run directory (no {run.journal_file.name}); --workload takes a preset, "
                        "a JSONL file or a run directory that gyrectl launch wrote")
    journal = read_journal(run.journal_file)
    finished = sorted({e.seq: e for e in journal.events if isinstance(e, Finished) and not e.infra_failure}.items())
    if not finished:
        raise UserError(f"{path}: its journal holds no finished training execution yet")
    recorded = load(run.path)
    harness, bad = _harness_lives(run)
    lives = {execution: Life(start, end, _calls(recorded, execution)) for execution, (_, start, end) in harness.items()}
    for execution in recorded.calls.keys() - lives.keys():  # evaluations, executions still running
        calls = _calls(recorded, execution)
        lives[execution] = Life(min(c.started_at for c in calls), max(c.ended_at for c in calls), calls)
    id_of = {seq: execution for execution, (seq, _, _) in harness.items() if seq is not None}
    wanted = [(seq, id_of[seq]) for seq, _ in finished if seq in id_of]
    if not wanted:
        raise UserError(f"{path}: none of its {len(finished)} finished training executions has a readable line "
                        f"in {run.executions_file}")
    speed = speed or costs_from_config(run_config(run)).execution_speed
    durations = durations_alone(lives, [execution for _, execution in wanted], speed)
    tokens = [sum(len(call.edit.suffix) for call in recorded.calls.get(execution, ())) for _, execution in wanted]
    skipped = _unique([*journal.skipped, *recorded.skipped, *bad])
    workload = Workload(name=run.name, duration_s=tuple(durations), tokens=tuple(tokens))
    return RecordedRun(workload=workload, skipped=tuple(skipped), left_out=len(finished) - len(wanted))


def recorded_workload(path: Path) -> Workload:
    """:func:`read_recorded_run`'s workload; what it skipped and left out is logged as warnings."""
    recorded = read_recorded_run(path)
    damaged = [s for s in recorded.skipped if not s.torn_tail]  # a torn tail is a live writer's, not news
    if damaged:
        log.warning(f"{path}: skipped {len(damaged)} unreadable span(s); read {len(recorded.workload)} execution(s)")
    log_skipped(damaged, log)
    if recorded.left_out:
        log.warning(f"{path}: {recorded.left_out} finished execution(s) have no readable line in "
                    "executions.jsonl and are left out of the workload")
    return recorded.workload


def _harness_lives(run: RunDir) -> tuple[dict[str, tuple[int | None, float, float]], list[Skipped]]:
    """Per execution id with a line in ``executions.jsonl``: its sequence number (None for a lost
    attempt, which ran again under another id) and its harness's start and end."""
    contents = scan_jsonl(run.executions_file)
    lives: dict[str, tuple[int | None, float, float]] = {}
    bad = []
    for i, obj in enumerate(contents.records):
        if "started_at" not in obj:  # a step's claim: {"execution", "step"}
            continue
        seq, start, end = obj.get("seq"), obj.get("started_at"), obj.get("ended_at")
        if not (isinstance(obj.get("execution"), str) and _number(start) and _number(end)
                and (seq is None or isinstance(seq, int) and not isinstance(seq, bool))):
            bad.append(contents.refused(i, "an execution's line needs 'execution', 'started_at', 'ended_at' "
                                           "and an integer 'seq'"))
            continue
        lost = obj.get("status") == "infra_failure" or obj.get("rerun") or obj.get("eval") is not None
        lives[obj["execution"]] = (None if lost else seq, float(start), float(end))
    return lives, bad


def _calls(recorded: Recorded, execution: str) -> tuple[Call, ...]:
    calls = (c.meta for c in recorded.calls.get(execution, ()))
    return tuple(sorted((Call(m.started_at, m.ended_at, m.server) for m in calls), key=lambda c: c.started_at))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _unique(skipped: Iterable[Skipped]) -> list[Skipped]:
    """``executions.jsonl`` is read by the capture source too: each span once."""
    by_span: dict[tuple[str, int], Skipped] = {}
    for span in skipped:
        by_span.setdefault((span.path, span.offset), span)
    return list(by_span.values())
