"""The head stops itself before Slurm's time limit (it never hears the USR2 warning, which Slurm
sends to job steps, and the head is the batch script)."""

from __future__ import annotations

import time

from gyrectl.cluster.slurm import deadline as deadline_module
from gyrectl.cluster.slurm.deadline import SlurmDeadline as Deadline
from gyrectl.errors import RuntimeFailure


def test_outside_a_job_there_is_no_deadline() -> None:
    assert not Deadline("").reached()


def test_it_is_reached_the_margin_before_the_end_and_the_end_is_read_again(monkeypatch) -> None:
    ends = iter([time.time() + 600, time.time() + 60])
    monkeypatch.setattr(deadline_module, "job_end_time", lambda job_id: next(ends))
    monkeypatch.setattr(deadline_module, "REREAD_S", 0.0)
    limit = Deadline("42", stop_before_s=90)
    assert not limit.reached()  # 600 s left
    assert limit.reached()  # the limit was shortened to 60 s left: inside the margin


def test_a_busy_controller_keeps_the_last_answer(monkeypatch) -> None:
    answers = iter([time.time() + 30])

    def end_time(job_id: str) -> float:
        try:
            return next(answers)
        except StopIteration:
            raise RuntimeFailure("squeue timed out") from None

    monkeypatch.setattr(deadline_module, "job_end_time", end_time)
    monkeypatch.setattr(deadline_module, "REREAD_S", 0.0)
    limit = Deadline("42", stop_before_s=90)
    assert limit.reached() and limit.reached()
