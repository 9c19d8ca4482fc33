"""The RL loop on a real allocation: what the head runs once it knows its nodes.

    checkpoints/v0 -> the configured model
    gateway (background thread, capture store sink) + harnesses (on the head, or agents on the
        harness nodes) + live rollouts
    actuator over the Cluster (vLLM server steps, torchrun training members)
    run_coordinator(policy) until the configured steps are trained (and, with eval.at_end, the
        final weights evaluated) or the run is stopped
    checkpoint retention (each idle round, and at the end): old checkpoints/vN no one reads go
    tracking (background thread): metrics and journal -> TensorBoard (and W&B) scalars

Everything the coordinator decides goes to the journal; the node table follows the cells' phases
so ``gyrectl status`` shows each node's role.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gyrectl.capture.store import CaptureWriter
from gyrectl.cluster.base import HARNESS_GROUP, Cluster, Node
from gyrectl.config.placement import replicas_per_cell
from gyrectl.config.schema import Config
from gyrectl.coordinator.actuator import Actuator, cells_of
from gyrectl.coordinator.events import CellLost, CellPlaced, Event, PhaseChanged, Resumed, apply
from gyrectl.coordinator.journal import Journal, read_events, replay
from gyrectl.coordinator.loop import run_coordinator
from gyrectl.coordinator.state import CoordinatorState, Phase, limits_from_config
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.gateway.control import GatewayControl
from gyrectl.gateway.limits import raise_open_files
from gyrectl.gateway.processes import GatewayProcesses
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.launch.head_log import event_line
from gyrectl.launch.preflight import harness_argv
from gyrectl.launch.retention import CheckpointRetention
from gyrectl.launch.steps import step_factory
from gyrectl.launch.trainers import RunDirTrainers
from gyrectl.rollout.evals import EvalPlan
from gyrectl.rollout.harness_nodes import RemoteHarnesses
from gyrectl.rollout.harnesses import HarnessSettings
from gyrectl.rollout.live import live_rollouts
from gyrectl.rollout.load import LoadPublisher
from gyrectl.rollout.resume import carry_over
from gyrectl.rollout.reward import load_verifier
from gyrectl.rollout.sandbox import Sandbox
from gyrectl.rollout.server import served_model_name
from gyrectl.rollout.tasks import load_tasks
from gyrectl.rollout.weights import HttpWeightSync
from gyrectl.run.rundir import RunDir
from gyrectl.scheduler import POLICIES
from gyrectl.store.jsonl import read_records
from gyrectl.tracking.publisher import TrackingPublisher

log = logging.getLogger(__name__)


class NodeRoles:
    """The journal as the coordinator's event sink, keeping ``nodes.json`` roles in step and
    telling ``logs/head.log`` what happened."""

    def __init__(self, run: RunDir, journal: Journal, table: list[dict[str, object]],
                 cell_nodes: list[tuple[str, ...]]):
        self._run, self._journal, self._table, self._cell_nodes = run, journal, table, list(cell_nodes)
        self._workers = [row for row in table if row["het_group"] == 1]
        for row in table:
            if row["het_group"] == 0:
                row["role"] = "coordinator"  # the head: coordinator, gateway (and harnesses, without harness nodes)
            elif row["het_group"] == HARNESS_GROUP:
                row["role"] = "harnesses"
        run.write_json(run.nodes_file, table)

    def append(self, event: Event) -> None:
        self._journal.append(event)
        if line := event_line(event):
            log.log(*line)
        match event:
            case PhaseChanged(cell=cell, phase=phase, at=at):
                self._set_role(cell, phase, at)
            case CellLost(cell=cell, at=at):
                self._set_role(cell, Phase.LOST, at)
            case CellPlaced(cell=cell, nodes=nodes, at=at):  # rows for nodes the run had not held yet
                self._cell_nodes[cell] = nodes
                known = {row["name"] for row in self._table}
                shape = {key: self._workers[0][key] for key in ("het_group", "gpus", "cpus")}
                self._table += [{"name": name, **shape, "address": ""} for name in nodes if name not in known]
                self._set_role(cell, Phase.IDLE, at)

    def _set_role(self, cell: int, phase: Phase, at: float) -> None:
        names = set(self._cell_nodes[cell])
        for row in self._table:
            if row["name"] in names:
                row["role"], row["cell"], row["since"] = phase.value, cell, at
        self._run.write_json(self._run.nodes_file, self._table)


def run_loop(*, run: RunDir, config: Config, cluster: Cluster, nodes: Sequence[Node], table: list[dict[str, object]],
             launch_dir: Path, stopped: Callable[[], bool]) -> CoordinatorState:
    """Runs the coordinator until the run is done (``CoordinatorState.done``) or ``stopped()``;
    returns its final state. A journal that already holds events is a run to continue (``launch --resume``,
    a requeued job): the state is replayed from it and the work in flight carried over."""
    tasks = load_tasks(launch_dir / config.rollout.tasks)
    verifier = load_verifier(config.rollout.verifier, launch_dir)
    _link_initial_weights(run, config, launch_dir)
    token, server_key, served = run.token(), run.server_key(), served_model_name(config)
    harness_nodes = cluster.harness_nodes()
    # A call waits for a server as long as its execution may run: while a crashed cell's server
    # restarts, or while every cell is between roles, harnesses see a slow call, not an error.
    # Harnesses on other nodes reach the gateway at the head's cluster address (as servers bind theirs).
    reach = {"host": nodes[0].address or nodes[0].name} if harness_nodes else {}
    settings = GatewaySettings(token=token, admin_token=run.admin_token(), server_key=server_key,
                               models=(served,), server_wait_s=config.rollout.execution_time_limit_s, **reach)
    processes = config.cluster.head.gateway_processes
    sessions = config.num_cells * replicas_per_cell(config) * config.rollout.concurrency_per_server
    if shortfall := raise_open_files(math.ceil(sessions / processes)):  # the processes inherit the limit
        log.warning(shortfall)
    writer = None if processes > 1 else CaptureWriter(run.calls_store)
    gateway: GatewayControl = (GatewayProcesses(run=run, settings=settings, processes=processes) if writer is None
                               else BackgroundGateway(settings, sink=writer))
    steps = step_factory(config, run=run)
    cell_nodes = cells_of(nodes, config.cells.nodes_per_cell)
    node_of = {node.name: node for node in nodes}
    servers = [steps.replicas(cell=cell, nodes=[node_of[name] for name in names])
               for cell, names in enumerate(cell_nodes)]
    harness = HarnessSettings(command=tuple(harness_argv(config.rollout.harness_command, launch_dir)),
                              launch_dir=launch_dir, env={"OPENAI_API_KEY": token, "OPENAI_MODEL": served},
                              time_limit_s=config.rollout.execution_time_limit_s,
                              sandbox=harness_sandbox(config, run, launch_dir),
                              keep_workdirs=config.rollout.keep_workdirs)
    if harness_nodes:  # each agent checks the sandbox's program on its own node
        harnesses = RemoteHarnesses(run=run, cluster=cluster, nodes=harness_nodes, settings=harness)
    else:
        harness.sandbox.require()
        harnesses = harness.runner(run)
    rollouts = live_rollouts(run=run, gateway=gateway, harnesses=harnesses, tasks=tasks,
                             executions_per_task=config.rollout.executions_per_task,
                             batch_executions=config.training.batch_executions, verifier=verifier, servers=servers,
                             replicas_of=lambda cell, placed: steps.replicas(cell=cell, nodes=placed),
                             weight_sync=HttpWeightSync(server_key=server_key), server_key=server_key,
                             stopping=stopped, evals=eval_plan(config, launch_dir),
                             infra_failures=config.rollout.infra_failures, wake_timeout_s=config.wake_timeout_s)
    load = LoadPublisher(run, gateway, replica_of=rollouts.servers.replica_of)
    tracking = TrackingPublisher(run, config)
    retention = CheckpointRetention(run, keep=config.training.keep_checkpoints, reloading=rollouts.servers.reloading,
                                    evaluating=rollouts.evaluating)
    actuator = Actuator(cluster=cluster, executions=rollouts.executions, servers=rollouts.servers,
                        batches=rollouts.claims, clock=rollouts.clock, steps=steps,
                        trainers=RunDirTrainers(run), cell_nodes=cell_nodes, checkpoints=retention)
    try:
        past = read_events(run.journal_file)
        with Journal(run.journal_file) as journal:
            state = replay(past, limits_from_config(config))
            if past:  # a run another head began: take it over where the journal says it was
                resumed = Resumed(at=time.time(), job_id=os.environ.get("SLURM_JOB_ID", ""))
                state = apply(state, resumed)
                journal.append(resumed)
                carried = carry_over(past, read_records(run.executions_file), completed_steps=state.version)
                rollouts.executions.take_over(carried, resume=sum(isinstance(e, Resumed) for e in past) + 1)
            state = run_coordinator(state=state, decide=POLICIES[config.scheduler.policy], actuator=actuator,
                                    journal=NodeRoles(run, journal, table, cell_nodes),
                                    now=rollouts.clock.now, stop=lambda s: s.done or stopped())
            retention.finish(state)  # the servers go with the head: what they served is not kept
            return state
    finally:
        rollouts.close()
        tracking.close()
        load.close()
        gateway.close()
        if writer is not None:
            writer.close()


def eval_plan(config: Config, launch_dir: Path) -> EvalPlan | None:
    """The run's evaluations (None: it runs none). The final version is due by number, so an
    ``eval.every_steps`` that does not divide ``run.steps`` still ends on an evaluation, which
    the coordinator waits for (``Limits.eval_final``)."""
    evaluation = config.eval
    if not evaluation.evaluates:
        return None
    return EvalPlan(tasks=tuple(load_tasks(launch_dir / evaluation.tasks, field="eval.tasks")),
                    every_steps=evaluation.every_steps, executions_per_task=evaluation.executions_per_task,
                    pass_threshold=evaluation.pass_threshold, temperature=evaluation.temperature,
                    at_start=evaluation.at_start, final_version=config.run.steps if evaluation.at_end else None)


def harness_sandbox(config: Config, run: RunDir, launch_dir: Path) -> Sandbox:
    """The sandbox of ``rollout.sandbox``: the launch directory and ``rollout.sandbox_read``
    readable, the run directory (its secrets, the other executions) hidden."""
    rollout = config.rollout
    readable = (launch_dir.resolve(), *(Path(p).expanduser().resolve() for p in rollout.sandbox_read))
    return Sandbox(rollout.sandbox, readable=readable, hidden=(run.path.resolve(),), image=rollout.apptainer_image)


def _link_initial_weights(run: RunDir, config: Config, launch_dir: Path) -> None:
    """v0 -> model.path, and (with a KL penalty naming one) the reference model's link: the
    trainer reads both from the run directory, wherever its processes start."""
    v0 = run.weights_dir(0)
    if not v0.exists():
        os.symlink((launch_dir / config.model.path).resolve(), v0)
    if config.training.kl_coef > 0 and config.training.kl_reference:
        target = (launch_dir / config.training.kl_reference).resolve()
        link = run.reference_dir
        if link.is_symlink() and link.resolve() != target:  # a resume whose config names another one
            link.unlink()
        if not link.is_symlink():
            os.symlink(target, link)
