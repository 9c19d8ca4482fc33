"""What a new head carries over from the journal and the executions log (``carry_over``)."""

from __future__ import annotations

from gyrectl.coordinator.events import Dispatched, Finished
from gyrectl.rollout.resume import carry_over


def _record(seq: int, execution: str | None = None, status: str = "ok") -> dict:
    return {"execution": execution or f"e{seq:06d}", "seq": seq, "status": status, "weight_version": 0}


def test_finished_untrained_executions_wait_and_running_ones_run_again() -> None:
    events = [Dispatched(count=4, version=0, at=0), Dispatched(count=2, version=1, at=1)]
    events += [Finished(seq=s, version=0, timed_out=False, at=2) for s in (0, 1, 3)]
    records = [_record(0), _record(1), _record(3), {"execution": "e000000", "step": 0}]
    carried = carry_over(events, records, completed_steps=1)
    assert [r["execution"] for r in carried.finished] == ["e000001", "e000003"]
    assert carried.running == [(2, 0), (4, 1), (5, 1)]
    assert carried.next_seq == 6


def test_claims_of_an_abandoned_step_are_void() -> None:
    events = [Dispatched(count=2, version=0, at=0)] + [Finished(seq=s, version=0, timed_out=False, at=1)
                                                       for s in (0, 1)]
    records = [_record(0), _record(1), {"execution": "e000000", "step": 0}, {"execution": "e000001", "step": 0}]
    carried = carry_over(events, records, completed_steps=0)  # step 0 never ended
    assert [r["execution"] for r in carried.finished] == ["e000000", "e000001"]


def test_a_record_without_its_journaled_finish_runs_again_and_the_rerun_wins() -> None:
    events = [Dispatched(count=1, version=0, at=0)]
    assert carry_over(events, [_record(0)], completed_steps=0).running == [(0, 0)]
    events.append(Finished(seq=0, version=0, timed_out=False, at=5))
    carried = carry_over(events, [_record(0), _record(0, "e000000-r1")], completed_steps=0)
    assert [r["execution"] for r in carried.finished] == ["e000000-r1"] and carried.running == []


def test_lines_that_parse_but_lost_a_field_are_left_out_like_unreadable_ones() -> None:
    """Damage that still parses as JSON (a nested object on a line of its own, a mangled key)
    must not stop a new head from taking over."""
    events = [Dispatched(count=2, version=0, at=0)] + [Finished(seq=s, version=0, timed_out=False, at=1)
                                                       for s in (0, 1)]
    records = [_record(0), {"status": "ok", "execution": "e000001"}, {"prompt": "x"},
               {"execution": "e000000", "step": "0"}, {"step": 0}]
    carried = carry_over(events, records, completed_steps=1)
    assert [r["execution"] for r in carried.finished] == ["e000000"]
