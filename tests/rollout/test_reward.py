"""The reward hook: loading ``rollout.verifier`` and the scoring rule (pure, fast)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from gyrectl.errors import UserError
from gyrectl.rollout.reward import Scored, load_verifier, score_execution

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/agent/verifier.py:score"


def write(tmp_path: Path, text: str, name: str = "verify.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- load_verifier ---------------------------------------------------------------------------

def test_the_example_verifier_loads_relative_to_the_launch_directory():
    score = load_verifier(EXAMPLE, REPO)
    assert score({"id": "t"}, {"answer": "12ab"}) == 0.5


@pytest.mark.parametrize("spec", ["verify.py", "verify.py:", ":score", ""])
def test_a_spec_without_file_and_function_names_the_field(tmp_path, spec):
    write(tmp_path, "def score(task, output):\n    return 1.0\n")
    with pytest.raises(UserError, match=r"rollout\.verifier: expected FILE\.py:FUNCTION"):
        load_verifier(spec, tmp_path)


def test_a_missing_file_names_the_field_and_the_path(tmp_path):
    with pytest.raises(UserError, match=r"rollout\.verifier: no file .*nope\.py"):
        load_verifier("nope.py:score", tmp_path)


def test_a_missing_function_lists_the_functions_the_file_defines(tmp_path):
    write(tmp_path, "import math\ndef reward(task, output):\n    return 1.0\nlimit = 3\n")
    with pytest.raises(UserError, match=r"rollout\.verifier: .* has no function 'score' "
                                        r"\(functions defined there: reward\)"):
        load_verifier("verify.py:score", tmp_path)


def test_a_file_that_fails_to_import_names_the_field_and_the_error(tmp_path):
    write(tmp_path, "import not_a_module_anywhere\n")
    with pytest.raises(UserError, match=r"rollout\.verifier: loading .* failed: ModuleNotFoundError"):
        load_verifier("verify.py:score", tmp_path)


def test_a_verifier_module_may_define_dataclasses(tmp_path):
    # dataclasses look their module up in sys.modules: the loader must register it.
    write(tmp_path, "from dataclasses import dataclass\n@dataclass\nclass Rubric:\n    weight: float = 0.5\n"
                    "def score(task, output):\n    return Rubric().weight\n")
    assert load_verifier("verify.py:score", tmp_path)({}, {}) == 0.5


# -- score_execution -------------------------------------------------------------------------

class Flaky:
    """Raises ``failures`` times, then returns 0.25."""

    def __init__(self, failures: int):
        self.failures, self.calls = failures, 0

    def __call__(self, task, output):
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"sandbox busy ({self.calls})")
        return 0.25


def test_a_verifier_that_raises_twice_then_works_is_scored():
    verifier = Flaky(failures=2)
    assert score_execution(verifier, {"id": "t"}, {"answer": "1"}) == Scored(0.25, "ok", attempts=3)
    assert verifier.calls == 3


def test_a_verifier_that_always_raises_is_an_infrastructure_failure_not_a_zero():
    verifier = Flaky(failures=10)
    scored = score_execution(verifier, {"id": "t"}, {"answer": "1"}, attempts=3)
    assert (scored.reward, scored.status, scored.attempts, verifier.calls) == (None, "infra_failure", 3, 3)
    assert "RuntimeError: sandbox busy (3)" in scored.error


@pytest.mark.parametrize("value", [float("nan"), float("inf"), None, "0.5"])
def test_a_verifier_returning_no_finite_number_is_an_infrastructure_failure(value):
    scored = score_execution(lambda task, output: value, {"id": "t"}, {"answer": "1"})
    assert scored.status == "infra_failure" and scored.reward is None
    assert "not a finite number" in scored.error


def test_integers_and_bools_are_rewards():
    assert score_execution(lambda t, o: 1, {}, {}).reward == 1.0
    assert score_execution(lambda t, o: True, {}, {}).reward == 1.0


def test_a_harness_that_exited_without_output_is_an_infrastructure_failure():
    verifier = Flaky(failures=0)
    scored = score_execution(verifier, {"id": "t"}, None)
    assert (scored.reward, scored.status, verifier.calls) == (None, "infra_failure", 0)
    assert "without printing a JSON object" in scored.error


def test_a_timed_out_execution_is_scored_on_what_it_printed():
    seen = []
    verifier = lambda task, output: seen.append(output) or 0.0  # noqa: E731
    assert score_execution(verifier, {"id": "t"}, None, timed_out=True) == Scored(0.0, "ok", attempts=1)
    assert score_execution(verifier, {"id": "t"}, {"answer": "7", "stopped": True}, timed_out=True).status == "ok"
    assert seen == [{}, {"answer": "7", "stopped": True}]


def test_each_retry_sees_the_original_inputs():
    seen = []

    def mutating(task, output):
        seen.append(dict(output))
        output["answer"] = "changed"
        if len(seen) < 2:
            raise ValueError("first try fails")
        return 1.0

    output = {"answer": "42"}
    assert score_execution(mutating, {"id": "t"}, output).reward == 1.0
    assert seen == [{"answer": "42"}, {"answer": "42"}] and output == {"answer": "42"}


# -- the example verifier --------------------------------------------------------------------

example_score = load_verifier(EXAMPLE, REPO)


def test_example_verifier_values():
    score = example_score
    assert score({}, {"answer": "42"}) == 1.0
    assert score({}, {"answer": " 4 2 x y "}) == 0.5
    assert score({}, {"answer": "no digits"}) == 0.0
    assert score({}, {"answer": ""}) == score({}, {"answer": "   "}) == 0.0
    assert score({}, {}) == score({}, {"answer": None}) == score({}, {"answer": 42}) == 0.0
    # Everything the model wrote counts when the harness reports it, not only the answer.
    assert score({}, {"answer": "42", "written": ["ab", "cd 1", "42"]}) == 3 / 7
    assert score({}, {"answer": "42", "written": []}) == 0.0


@given(st.text())
def test_example_verifier_is_a_fraction(answer):
    value = example_score({}, {"answer": answer, "turns": 3})
    assert 0.0 <= value <= 1.0 and not math.isnan(value)
