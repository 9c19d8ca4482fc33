"""Agent harnesses on nodes of their own (``cluster.harnesses.nodes``): the head keeps the
coordinator, the gateway and the journal; a harness agent on each harness node (a step the head
starts there, :mod:`gyrectl.rollout.harness_agent`) runs the harness processes with the same
:class:`~gyrectl.rollout.harnesses.HarnessRunner` the head would. They talk through the run
directory (a shared filesystem on Slurm), and the harnesses reach the gateway over the network:

    head  ──> agent.json              how a harness is started (HarnessSettings)
    head  ──> NODE/assigned.jsonl     an execution to start: its assignment and gateway URL
    agent ──> NODE/ended.jsonl        each ended execution
    agent ──> NODE/alive.json         a heartbeat every second

A node is *lost* when its agent step ends or its heartbeat stops for ``silent_s`` (a crashed
node's step may take Slurm's ``SlurmdTimeout`` to end). Its running executions come back from
:meth:`RemoteHarnesses.reap` with ``lost_on`` set, so the caller records them as infrastructure
failures and runs them again; new executions go to the nodes left, the least busy first. With
every node lost the run fails (``gyrectl launch --resume`` asks for harness nodes again).
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gyrectl.cluster.base import Cluster, Node, StepSpec
from gyrectl.errors import RuntimeFailure
from gyrectl.rollout.harnesses import HarnessExit, HarnessSettings
from gyrectl.rollout.tasks import Assignment
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender, JsonlTail

log = logging.getLogger(__name__)

AGENT_SETTINGS, ASSIGNED, ENDED, ALIVE = "agent.json", "assigned.jsonl", "ended.jsonl", "alive.json"
SILENT_S = 15.0
"""How long a harness node's heartbeat may stop before the node counts as lost."""
STARTUP_S = 120.0
"""How long an agent may take to send its first heartbeat (its step waits for srun, Python imports)."""


def node_folder(run: RunDir, node: str) -> Path:
    return run.harness_nodes_dir / node


def exit_record(ended: HarnessExit) -> dict[str, Any]:
    """An ended execution as the agent writes it to ``ended.jsonl``."""
    return {"execution": ended.assignment.execution, "timed_out": ended.timed_out, "exit_code": ended.exit_code,
            "output": ended.output, "started_at": ended.started_at, "ended_at": ended.ended_at, "host": ended.host}


@dataclass
class _Agent:
    node: Node
    step_id: str
    inbox: JsonlAppender
    outbox: JsonlTail
    heartbeat: Path
    heard_at: float
    """When (monotonic) its heartbeat last changed, or when it was started."""
    last_beat: Any = None
    running: dict[str, tuple[Assignment, float]] = field(default_factory=dict)
    """Execution -> (its assignment, when it was sent)."""
    lost: bool = False


class RemoteHarnesses:
    """:class:`~gyrectl.rollout.harnesses.HarnessRunner`'s interface over harness agents on ``nodes``."""

    def __init__(self, *, run: RunDir, cluster: Cluster, nodes: Sequence[Node], settings: HarnessSettings,
                 silent_s: float = SILENT_S, startup_s: float = STARTUP_S):
        self._run, self._cluster = run, cluster
        self._silent_s, self._startup_s = silent_s, startup_s
        run.harness_nodes_dir.mkdir(exist_ok=True)
        run.write_json(run.harness_nodes_dir / AGENT_SETTINGS, settings.to_json())
        self._agents = [self._start_agent(node) for node in nodes]

    @property
    def num_running(self) -> int:
        return sum(len(agent.running) for agent in self._agents)

    def start(self, assignment: Assignment, *, base_url: str) -> None:
        alive = [agent for agent in self._agents if not agent.lost]
        if not alive:
            raise RuntimeFailure(f"every harness node was lost (cluster.harnesses.nodes): none is left to run the "
                                 f"agent harnesses (agent logs: {self._run.logs_dir / 'harness-nodes'}); "
                                 "`gyrectl launch --resume` asks for new ones")
        agent = min(alive, key=lambda a: len(a.running))
        agent.inbox.append({"execution": assignment.execution, "seq": assignment.seq, "task": assignment.task,
                            "base_url": base_url})
        agent.running[assignment.execution] = (assignment, time.time())

    def reap(self) -> list[HarnessExit]:
        """Executions that ended since the last call, and those of nodes found lost (``lost_on``)."""
        ended: list[HarnessExit] = []
        for agent in self._agents:
            if agent.lost:
                continue
            for record in agent.outbox.new():
                sent = agent.running.pop(str(record.get("execution")), None)
                if sent is not None:
                    ended.append(HarnessExit(sent[0], timed_out=bool(record["timed_out"]),
                                             exit_code=record["exit_code"], output=record["output"],
                                             started_at=record["started_at"], ended_at=record["ended_at"],
                                             host=record["host"]))
            if why := self._lost(agent):
                ended += self._give_up(agent, why)
        return ended

    def stop_all(self) -> None:
        """Stops every agent (which kills its harnesses)."""
        for agent in self._agents:
            self._cluster.stop_step(agent.step_id, grace_s=5.0)
            agent.running.clear()
            agent.inbox.close()

    def _start_agent(self, node: Node) -> _Agent:
        folder = node_folder(self._run, node.name)
        shutil.rmtree(folder, ignore_errors=True)  # a previous head's exchange with its own agent
        folder.mkdir(parents=True)
        spec = StepSpec(name=f"harnesses-{node.name}", nodes=(node.name,),
                        command=(sys.executable, "-m", "gyrectl.rollout.harness_agent", str(self._run.path), node.name),
                        cpus_per_node=max(node.cpus, 1),
                        log_path=self._run.logs_dir / "harness-nodes" / f"{node.name}.log")
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        step_id = self._cluster.start_step(spec)
        return _Agent(node=node, step_id=step_id, inbox=JsonlAppender(folder / ASSIGNED),
                      outbox=JsonlTail(folder / ENDED), heartbeat=folder / ALIVE, heard_at=time.monotonic())

    def _lost(self, agent: _Agent) -> str:
        """Why the agent counts as lost (empty: it does not)."""
        now, beat = time.monotonic(), _read_beat(agent.heartbeat)
        if beat is not None and beat != agent.last_beat:
            agent.last_beat, agent.heard_at = beat, now
        if self._cluster.step_status(agent.step_id).state.ended:
            return "its agent exited"
        limit = self._silent_s if agent.last_beat is not None else self._startup_s
        if now - agent.heard_at > limit:
            return f"no heartbeat for {now - agent.heard_at:.0f} s"
        return ""

    def _give_up(self, agent: _Agent, why: str) -> list[HarnessExit]:
        agent.lost = True
        log.warning("harness node %s lost (%s): %d execution(s) run again elsewhere", agent.node.name, why,
                    len(agent.running))
        self._cluster.stop_step(agent.step_id, grace_s=0.0)  # whatever of it still runs
        now = time.time()
        lost = [HarnessExit(assignment, timed_out=False, exit_code=None, output=None, started_at=sent, ended_at=now,
                            lost_on=agent.node.name) for assignment, sent in agent.running.values()]
        agent.running.clear()
        agent.inbox.close()
        return lost


def _read_beat(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet, or mid-replace on a filesystem without atomic rename
        return None
