"""Nodes crash (kill -9 of every process in the node's network namespace: slurmd, the cell job's
batch script, the vLLM server or torchrun), in the default ``cells`` layout.

Slurm marks the node down and ends that cell's job; the coordinator marks the cell lost, the
gateway re-sends its calls to the other server, the harnesses see no error and the run goes on
with one cell. The cell's replacement job waits: the other free nodes are held by another user's
job, so it starts only when the crashed node returns (its slurmd is started again), and the cell
serves again there. The run completes with every trajectory trained once.

A node crashes under a running training step: the step is abandoned, its batch goes back to the
buffer and is trained by a later step on the cell that is left, from the same weights; no
trajectory is lost or trained twice.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from gyrectl.coordinator.events import CellLost, CellPlaced, Finished, PhaseChanged, TrainEnded, TrainStarted
from gyrectl.coordinator.state import Phase

from runs import (
    batches,
    crash_node,
    events,
    execution_records,
    idle_nodes,
    launch_loop,
    reused_step_under_way,
    status,
    wait_for,
    wait_until_ended,
)

pytestmark = [pytest.mark.usefixtures("slurm_cluster"), pytest.mark.vllm, pytest.mark.loop, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
STEPS = 4
BATCH = 8


def _node_state(node: str) -> str:
    return subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def _launch_beside_another_users_job(cli, tiny_model_dir: Path, root: Path, name: str) -> tuple[str, Path]:
    """The other user's job holds every node the run does not take, so a lost cell can come back
    only on the node that crashed."""
    wait_for(lambda: idle_nodes() == 5, timeout=120, what="an idle cluster")
    blocker = subprocess.run(["sbatch", "--parsable", "-N2", "-c4", "-J", "other-user", "-o", "/dev/null",
                              "--wrap", "sleep 3000"], capture_output=True, text=True, check=True).stdout.strip()
    run_dir = launch_loop(cli, root=root, model=tiny_model_dir, name=name,
                          extra=("--set", f"run.steps={STEPS}", "--set", f"training.batch_executions={BATCH}",
                                 "--set", "rollout.execution_time_limit_s=400"))
    return blocker, run_dir


@pytest.fixture(scope="module")
def crashed(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    blocker, run_dir = _launch_beside_another_users_job(cli, tiny_model_dir, tmp_path_factory.mktemp("runs"), "crash")
    try:
        view = wait_for(lambda: (v := status(cli, run_dir))["steps"] and v["executions"]["in_flight"] > 0
                        and any(c["phase"] == "rollout" for c in v["cells"]) and v,
                        timeout=600, what="a trained step and executions in flight on a serving cell")
        victim_cell = next(c for c in view["cells"] if c["phase"] == "rollout")
        victim = victim_cell["nodes"][0]
        time.sleep(2.0)  # let the sessions get mid-call
        crashed_at = time.time()
        crash_node(victim)
        try:
            wait_for(lambda: "down" in _node_state(victim), timeout=120, what=f"Slurm to mark {victim} down")
            lost_view = wait_for(lambda: (v := status(cli, run_dir))
                                 and v["cells"][victim_cell["id"]]["phase"] == "lost" and v,
                                 timeout=60, what="status to show the cell lost")
            # The run goes on without it: more executions finish after the loss.
            finished_then = lost_view["executions"]["finished"]
            wait_for(lambda: status(cli, run_dir)["executions"]["finished"] >= finished_then + 4, timeout=600,
                     what="executions to finish with one cell")
            down_while_lost = _node_state(victim)
        finally:
            # the node returns
            subprocess.run(["bash", str(REPO / "tests/slurm/up.sh")], check=True, capture_output=True)
        returned_at = time.time()
        final = wait_until_ended(cli, run_dir, timeout=1500)
    finally:
        subprocess.run(["scancel", blocker], check=False)
    return {"run_dir": run_dir, "victim": victim, "cell": victim_cell["id"], "crashed_at": crashed_at,
            "returned_at": returned_at, "down_while_lost": down_while_lost, "lost_view": lost_view, "final": final}


def test_the_run_completes_with_every_trajectory_trained_once(crashed) -> None:
    run_dir, final = crashed["run_dir"], crashed["final"]
    assert (final["job"]["reason"], len(final["steps"])) == ("completed", STEPS), final["job"]
    journal = events(run_dir)
    assert [e.index for e in journal if isinstance(e, TrainEnded)] == list(range(STEPS))
    trained = [e for step in batches(run_dir).values() for e in step]
    assert len(trained) == len(set(trained)) == STEPS * BATCH, "lost 0, trained twice 0"


def test_the_cell_is_lost_its_calls_move_and_no_harness_sees_an_error(crashed) -> None:
    run_dir, cell = crashed["run_dir"], crashed["cell"]
    journal = events(run_dir)
    lost = [e for e in journal if isinstance(e, CellLost)]
    assert [(e.cell, e.nodes) for e in lost] == [(cell, (crashed["victim"],))]
    assert lost[0].at - crashed["crashed_at"] < 30, "noticed within Slurm's node timeout"
    records = execution_records(run_dir)
    cut = [r for r in records if r["started_at"] < crashed["crashed_at"] < r["ended_at"]]
    assert cut, "sessions were running when the node crashed"
    # harness-visible errors: 0 (each harness exits non-zero on an API error)
    assert [r for r in records if r["status"] != "ok" or r["exit_code"] != 0] == []
    after_loss = [e for e in journal[journal.index(lost[0]):] if isinstance(e, Finished)]
    placed = next(e for e in journal if isinstance(e, CellPlaced))
    assert sum(e.at < placed.at for e in after_loss) >= 4, "the run went on with fewer cells"


def test_the_cell_rejoins_when_its_node_returns(crashed) -> None:
    run_dir, cell, victim = crashed["run_dir"], crashed["cell"], crashed["victim"]
    assert "down" in crashed["down_while_lost"]
    journal = events(run_dir)
    placed = [e for e in journal if isinstance(e, CellPlaced)]
    assert [(e.cell, e.nodes) for e in placed] == [(cell, (victim,))]
    assert placed[0].at >= crashed["returned_at"] - 1, "placed only once the node was back"
    after = [e.phase for e in journal[journal.index(placed[0]):] if isinstance(e, PhaseChanged) and e.cell == cell]
    assert after[:2] == [Phase.STARTING, Phase.ROLLOUT], "the cell serves again"
    # Slurm's view agrees: the lost cell's job ended with its node, the replacement holds the node.
    jobs = crashed["lost_view"]["job"]["components"]
    assert any(c.get("cell") == cell and c["state"] in ("NODE_FAIL", "CANCELLED", "ENDED") for c in jobs), jobs


@pytest.fixture(scope="module")
def crashed_in_training(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    blocker, run_dir = _launch_beside_another_users_job(cli, tiny_model_dir, tmp_path_factory.mktemp("runs"),
                                                        "crash-train")
    try:
        # Into a training step after the first: the resident member is at work on the state it holds.
        view = wait_for(lambda: (v := status(cli, run_dir))["steps"] and v, timeout=600, every=0.5,
                        what="a trained step")
        cell = next(e for e in events(run_dir) if isinstance(e, TrainStarted)).cells[0]
        victim = view["cells"][cell]["nodes"][0]
        index = wait_for(lambda: reused_step_under_way(run_dir), timeout=600, every=0.02,
                         what="a training step under way")
        crashed_at = time.time()
        crash_node(victim)
        try:
            wait_for(lambda: status(cli, run_dir)["cells"][cell]["phase"] == "lost", timeout=90,
                     what="status to show the training cell lost")
        finally:
            subprocess.run(["bash", str(REPO / "tests/slurm/up.sh")], check=True, capture_output=True)
        final = wait_until_ended(cli, run_dir, timeout=1500)
    finally:
        subprocess.run(["scancel", blocker], check=False)
    return {"run_dir": run_dir, "cell": cell, "index": index, "crashed_at": crashed_at,
            "final": final}


def test_a_training_step_on_a_crashed_node_is_abandoned_and_its_batch_trained_once_later(crashed_in_training) -> None:
    run_dir, cell, index = crashed_in_training["run_dir"], crashed_in_training["cell"], crashed_in_training["index"]
    final = crashed_in_training["final"]
    assert (final["job"]["reason"], len(final["steps"])) == ("completed", STEPS), final["job"]
    journal = events(run_dir)
    lost = next(e for e in journal if isinstance(e, CellLost))
    assert lost.cell == cell
    before, after = journal[:journal.index(lost)], journal[journal.index(lost):]
    started = [e for e in before if isinstance(e, TrainStarted)]
    assert started[-1].index == index and cell in started[-1].cells, "the step was running on the lost cell"
    assert started[-1].reused, "in the resident member, on the state it held"
    assert not any(isinstance(e, TrainEnded) and e.index == index for e in before)
    assert [e.index for e in after if isinstance(e, TrainStarted)][:1] == [index], "the same step, started again"
    assert [e.index for e in journal if isinstance(e, TrainEnded)] == list(range(STEPS))
    trained = [e for step in batches(run_dir).values() for e in step]
    assert len(trained) == len(set(trained)) == STEPS * BATCH, "lost 0, trained twice 0"
    records = execution_records(run_dir)
    assert [r for r in records if r["status"] != "ok" or r["exit_code"] != 0] == []
