"""A check shared by the real-run tests (local backend and Slurm): every batch file of a run holds
whole GRPO groups, each entry numbered with its own group."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from gyrectl.store.jsonl import read_records


def assert_whole_groups(run_dir: Path, *, group_size: int) -> int:
    """Asserts on every ``batches/step-N.json`` of ``run_dir``; returns how many groups they hold."""
    seq_of = {r["execution"]: r["seq"] for r in read_records(run_dir / "trajectories" / "executions.jsonl")
              if "status" in r}
    paths = sorted((run_dir / "batches").glob("step-*.json"))
    assert paths, f"no batch file in {run_dir}"
    groups = 0
    for path in paths:
        batch = json.loads(path.read_text())
        members = Counter(seq_of[e["execution"]] // group_size for e in batch["executions"])
        members.update(seq_of[e] // group_size for e in batch["left_out"])
        assert set(members.values()) == {group_size}, f"{path.name} holds pieces of groups: {dict(members)}"
        assert all(e["group"] == seq_of[e["execution"]] // group_size for e in batch["executions"]), path.name
        groups += len(members)
    return groups
