"""The real test cluster for every test here: brought up once by tests/slurm/up.sh (idempotent,
so it also works when .ci/run already started it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    result = subprocess.run(["bash", str(HERE / "up.sh")], capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        pytest.fail(f"tests/slurm/up.sh failed:\n{result.stdout}\n{result.stderr}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slurm)
