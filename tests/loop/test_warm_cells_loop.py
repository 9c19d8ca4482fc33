"""Warm cells in the whole loop on the local backend: under the colocate policy every cell moves
both ways every step, and with ``rollout.sleep_level`` 1 (the default) each cell's vLLM server is
started once for the whole run: it sleeps while its cell trains and wakes when it returns. With
``training.resident`` (the default) one training group is started for the whole run too: it
waits while its cells serve and trains every later step on the model and optimizer it holds.

One short run of the embedded default's config (3 steps, smaller batches) serves every assertion.
Its gateway is two processes sharing one port (``cluster.head.gateway_processes``), so every
drain and return of a cell reaches both, and the trainer reads the calls both recorded. It keeps
two weight versions (``training.keep_checkpoints``), so it ends with fewer than it trained.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gyrectl.capture.source import load_executions
from gyrectl.capture.store import scan
from gyrectl.coordinator.events import PhaseChanged, StepFailed, TrainStarted
from gyrectl.coordinator.journal import read_events
from gyrectl.coordinator.state import Phase
from gyrectl.run.rundir import RunDir

pytestmark = [pytest.mark.loop, pytest.mark.vllm, pytest.mark.slow]
STEPS = 3


@pytest.fixture(scope="module")
def colocated(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    result = cli("launch", "configs/local-tiny.yaml", "--wait", "--json", "--set", f"run.output_root={root}",
                 "--set", f"model.path={tiny_model_dir}", "--set", "run.name=warm", "--set", f"run.steps={STEPS}",
                 "--set", "scheduler.policy=colocate", "--set", "scheduler.min_rollout_cells=0",
                 "--set", "training.batch_executions=16", "--set", "rollout.server_port=18400",
                 "--set", "cluster.head.gateway_processes=2", "--set", "training.keep_checkpoints=2",
                 timeout=2400)
    run_dir = root / "warm"
    head_log = (run_dir / "logs" / "head.log").read_text() if (run_dir / "logs" / "head.log").exists() else ""
    assert result.returncode == 0, f"{result.stderr}\n--- head.log ---\n{head_log[-5000:]}"
    return run_dir


def test_every_cell_moves_both_ways_twice_on_one_server(colocated) -> None:
    events = read_events(colocated / "journal.jsonl")
    phases = [e for e in events if isinstance(e, PhaseChanged)]
    for cell in (0, 1):
        mine = [e for e in phases if e.cell == cell]
        assert sum(e.phase is Phase.DRAINING for e in mine) >= 2 and sum(e.phase is Phase.RETURNING for e in mine) >= 2
        assert len({e.step_id for e in mine if e.step_id}) == 1, "one server step for the whole run"
        assert [e.warm for e in mine if e.phase is Phase.RETURNING] == [True] * sum(e.phase is Phase.RETURNING
                                                                                    for e in mine)
        assert all(e.sleeping_server for e in mine if e.phase is Phase.TRAIN)
    assert not [e for e in events if isinstance(e, StepFailed)]


def test_both_gateway_processes_recorded_calls_that_were_trained(colocated) -> None:
    stores = {path.name: len(scan(path).records) for path in (colocated / "trajectories").glob("calls*.seg")}
    assert set(stores) == {"calls-g0.seg", "calls-g1.seg"} and all(stores.values()), stores
    trained = {json.loads(line)["execution"] for line in (colocated / "trajectories" / "executions.jsonl")
               .read_text().splitlines() if json.loads(line).get("step") is not None}
    recorded = load_executions(colocated, trained).calls
    assert trained and set(recorded) == trained


def test_one_trainer_group_trains_every_step_and_later_steps_reuse_it(colocated) -> None:
    starts = [e for e in read_events(colocated / "journal.jsonl") if isinstance(e, TrainStarted)]
    assert [e.reused for e in starts] == [False] + [True] * (STEPS - 1)
    assert len({e.group for e in starts}) == 1 and len({e.step_ids for e in starts}) == 1
    lines = [json.loads(line) for line in (colocated / "metrics.jsonl").read_text().splitlines()]
    by_step = {line["step"]: line for line in lines}
    assert [by_step[i]["trainer"] for i in range(STEPS)] == ["started"] + ["reused"] * (STEPS - 1)
    assert [by_step[i]["optimizer_state"] for i in range(1, STEPS)] == ["loaded"] * (STEPS - 1)


def test_status_shows_warm_moves_ready_at_once(cli, colocated) -> None:
    result = cli("status", str(colocated), "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert (view["job"]["reason"], len(view["steps"])) == ("completed", STEPS)
    assert [s["trainer"] for s in view["steps"]] == ["started"] + ["reused"] * (STEPS - 1)
    returns = [m for m in view["moves"] if m["to"] == "rollout"]
    assert len(returns) >= 4 and all(m["warm"] and m["ready_s"] is not None for m in returns)
    # (how fast a warm return is, against a cold one, is measured side by side by
    # benchmarks/coordination/warm.py, with its figures in docs/performance.md)
    assert {c["engine"] for c in view["cells"]} <= {"asleep", "awake"}


def test_the_run_ends_with_the_two_newest_weight_versions_and_the_users_model(colocated, tiny_model_dir) -> None:
    """``training.keep_checkpoints=2``: v1 went once the run no longer needed it (the last step's
    servers went with the head); v3, all a resume reads, stays, with its optimizer state only."""
    run = RunDir(colocated)
    assert run.weight_versions() == [0, STEPS - 1, STEPS]
    assert run.weights_dir(0).is_symlink() and run.weights_dir(0).resolve() == tiny_model_dir.resolve()
    assert (tiny_model_dir / "config.json").is_file()
    assert [p.name for p in run.optimizer_dir.glob("v*")] == [f"v{STEPS}"]
