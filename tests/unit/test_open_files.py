"""The gateway's open-files limit: raised toward the hard limit for the sessions a run serves,
and a shortfall said with its numbers instead of calls failing later."""

from __future__ import annotations

import resource

import pytest

from gyrectl.gateway import limits


@pytest.fixture
def rlimit(monkeypatch: pytest.MonkeyPatch):
    """A fake RLIMIT_NOFILE this process's own is never changed through."""
    current = {"soft": 1024, "hard": 4096}
    monkeypatch.setattr(resource, "getrlimit", lambda which: (current["soft"], current["hard"]))

    def set_limit(which, values):
        assert which == resource.RLIMIT_NOFILE and values[1] == current["hard"] and values[0] <= current["hard"]
        current["soft"] = values[0]

    monkeypatch.setattr(resource, "setrlimit", set_limit)
    return current


def test_the_soft_limit_is_raised_to_what_the_sessions_need(rlimit):
    assert limits.raise_open_files(1000) == ""
    assert rlimit["soft"] == 1000 * 2 + limits.SPARE


def test_a_soft_limit_already_high_enough_is_left_alone(rlimit):
    rlimit["soft"] = 4000
    assert limits.raise_open_files(10) == "" and rlimit["soft"] == 4000


def test_a_hard_limit_too_low_is_said_with_its_numbers(rlimit):
    message = limits.raise_open_files(20_000)
    assert rlimit["soft"] == 4096  # as far as it goes
    assert "20000 concurrent sessions need about 40256 open files" in message and "may open 4096" in message
    assert "ulimit -n" in message and "rollout.concurrency_per_server" in message
