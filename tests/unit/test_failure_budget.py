"""The infrastructure-failure budget (``rollout.infra_failures``): when failed executions stop a run."""

from __future__ import annotations

import pytest

from gyrectl.config import parse_config
from gyrectl.config.schema import InfraFailureBudget
from gyrectl.errors import ConfigError
from gyrectl.rollout.failure_budget import FailureTally, verdict


def _tally(budget: InfraFailureBudget, outcomes: str) -> list[str]:
    """The verdict after each outcome: ``x`` failed, ``.`` ended with a reward."""
    tally = FailureTally(budget)
    return [tally.add(failed=o == "x") for o in outcomes]


def test_a_run_whose_first_executions_all_fail_stops_once_that_many_ended():
    said = _tally(InfraFailureBudget(first=4, window=0), "xxxxx")
    assert said[:3] == ["", "", ""]
    assert said[3] == "the first 4 executions all ended as infrastructure failures (rollout.infra_failures.first=4)"


def test_one_success_among_the_first_lets_the_run_go_on():
    assert not any(_tally(InfraFailureBudget(first=4, window=0), "xxx.xxxxxxxx"))


def test_the_window_stops_a_run_only_past_its_share_of_a_full_window():
    budget = InfraFailureBudget(first=0, window=4, max_share=0.5)
    assert not any(_tally(budget, "xx"))  # the window is not full yet
    assert not any(_tally(budget, "..xx..xx..xx"))  # half is not more than half
    said = _tally(budget, "....x.xx")
    assert said[-1] == ("3 of the last 4 executions ended as infrastructure failures, more than "
                        "rollout.infra_failures.max_share=0.5 of rollout.infra_failures.window=4")
    assert not any(said[:-1])


def test_occasional_failures_of_a_long_run_never_add_up_to_a_stop():
    outcomes = ("." * 19 + "x") * 50  # one in twenty, a thousand executions
    assert not any(_tally(InfraFailureBudget(), outcomes))


def test_zero_turns_each_check_off():
    assert verdict(InfraFailureBudget(first=0, window=0), ended=100, any_ok=False, recent=[True] * 64) == ""


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("first", -1, "must be at least 0"), ("window", -2, "must be at least 0"), ("max_share", 1.0, "must be in [0, 1)")])
def test_config_refuses_a_budget_that_cannot_be(key, value, problem):
    with pytest.raises(ConfigError) as error:
        parse_config({"rollout": {"infra_failures": {key: value}}})
    assert error.value.path == f"rollout.infra_failures.{key}" and problem in error.value.message
