"""The rollout side of a real run (local processes or Slurm steps), wired as the coordinator sees
it: one object per port, sharing the head's gateway, the harnesses and one outbox.

::

    LiveExecutions   Executions   harness processes: dispatch, reap, score, executions.jsonl
    LiveCellServers  CellServers  the cells' vLLM replicas: route, drain, sleep, wake, live reload
    BatchClaims      Batches      finished executions -> batches/step-N.json
    EvalDriver       (inside)     held-out evaluations once a server serves due weights
    WallClock        Clock        wall-clock time, a poll interval
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gyrectl.cluster.base import Node
from gyrectl.config.schema import InfraFailureBudget
from gyrectl.gateway.control import GatewayControl
from gyrectl.rollout.cell_servers import LiveCellServers
from gyrectl.rollout.claims import BatchClaims
from gyrectl.rollout.clock import WallClock
from gyrectl.rollout.eval_driver import EvalDriver
from gyrectl.rollout.evals import EvalPlan
from gyrectl.rollout.executions import InfraFailures, LiveExecutions
from gyrectl.rollout.harnesses import Harnesses
from gyrectl.rollout.outbox import Outbox
from gyrectl.rollout.replicas import CellServer
from gyrectl.rollout.reward import Verifier
from gyrectl.rollout.sleep import SLEEP_TIMEOUT_S
from gyrectl.rollout.sync import WeightSync
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender


@dataclass(frozen=True)
class LiveRollouts:
    executions: LiveExecutions
    servers: LiveCellServers
    claims: BatchClaims
    evals: EvalDriver | None
    clock: WallClock

    def evaluating(self) -> set[int]:
        """Weights versions whose evaluation is due or running (none without an evaluation plan)."""
        return set() if self.evals is None else self.evals.evaluating()

    def close(self) -> None:
        self.executions.close()


def live_rollouts(*, run: RunDir, gateway: GatewayControl, harnesses: Harnesses, tasks: list[dict[str, Any]],
                  executions_per_task: int, batch_executions: int, verifier: Verifier,
                  servers: Sequence[Sequence[CellServer]],
                  replicas_of: Callable[[int, Sequence[Node]], Sequence[CellServer]], weight_sync: WeightSync,
                  server_key: str = "", poll_s: float = 0.25, stopping: Callable[[], bool] = lambda: False,
                  evals: EvalPlan | None = None,
                  infra_failures: InfraFailureBudget = InfraFailureBudget(),
                  wake_timeout_s: float = SLEEP_TIMEOUT_S) -> LiveRollouts:
    """``servers``: each cell's replicas; ``replicas_of(cell, nodes)``: a cell's replicas on other
    nodes (after ``place``); ``stopping()``: whether the run is being stopped; ``wake_timeout_s``:
    how long a server's sleep or wake call may take."""
    outbox, log = Outbox(), JsonlAppender(run.executions_file)
    claims = BatchClaims(run=run, batch_executions=batch_executions, group_size=executions_per_task, log=log)
    driver = None if evals is None else EvalDriver(run=run, plan=evals, gateway=gateway, harnesses=harnesses,
                                                   verifier=verifier, outbox=outbox)
    cell_servers = LiveCellServers(run=run, gateway=gateway, servers=servers, replicas_of=replicas_of,
                                   weight_sync=weight_sync, outbox=outbox, server_key=server_key,
                                   serving=driver.serving if driver is not None else lambda version: None,
                                   wake_timeout_s=wake_timeout_s)
    executions = LiveExecutions(gateway=gateway, harnesses=harnesses, tasks=tasks,
                                executions_per_task=executions_per_task, verifier=verifier, log=log, claims=claims,
                                outbox=outbox, failures=InfraFailures(run, infra_failures, outbox), evals=driver,
                                stopping=stopping)
    return LiveRollouts(executions=executions, servers=cell_servers, claims=claims, evals=driver,
                        clock=WallClock(poll_s))
