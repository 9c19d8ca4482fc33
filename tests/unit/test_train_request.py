"""The resident trainer's request file (``trainer/request-NNNNNN.json``): written by whoever
drives the trainer, read by every rank while it waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from gyrectl.run.files import read_train_request, write_train_request
from gyrectl.run.rundir import DamagedRunFile, RunDir


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return RunDir.create(tmp_path, "r")


def test_written_atomically_where_the_layout_says_and_read_back(run: RunDir) -> None:
    assert read_train_request(run, 7) is None  # none yet: the trainer keeps waiting
    path = write_train_request(run, 7, "g-3")
    assert path == run.trainer_request_file(7) == run.path / "trainer" / "request-000007.json"
    assert read_train_request(run, 7) == {"step": 7, "group": "g-3"}
    assert [p.name for p in run.trainer_dir.iterdir()] == ["request-000007.json"]  # no temp file left
    assert read_train_request(run, 8) is None


def test_a_later_request_for_the_same_step_replaces_it(run: RunDir) -> None:
    write_train_request(run, 1, "old")
    write_train_request(run, 1, "new")
    assert read_train_request(run, 1)["group"] == "new"


@pytest.mark.parametrize("content, problem", [
    ('{"step": 2, "gro', "not valid JSON"),
    ("[2]", "where an object belongs"),
    ('{"step": 2}', "'group' is None, expected a string"),
    ('{"step": "2", "group": "g"}', "'step' is '2', expected an integer"),
    ('{"step": true, "group": "g"}', "'step' is True, expected an integer"),
    ('{"step": 3, "group": "g"}', "'step' is 3, but the file asks for step 2"),
])
def test_a_damaged_request_names_the_file_and_the_problem(run: RunDir, content: str, problem: str) -> None:
    run.trainer_dir.mkdir()
    run.trainer_request_file(2).write_text(content)
    with pytest.raises(DamagedRunFile, match="request-000002.json is damaged: ") as caught:
        read_train_request(run, 2)
    assert problem in str(caught.value)
