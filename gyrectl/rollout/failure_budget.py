"""When infrastructure failures stop a run (``rollout.infra_failures``).

A harness that cannot start (a script that fails on import, a missing package on the harness
nodes) fails every execution as an infrastructure failure: none is trained, and a run that went
on would "complete" having trained nothing. So the run fails once the outcomes of the executions
that ended say the harness, not the occasional node, is broken: its first ``first`` executions
all failed, or more than ``max_share`` of the last ``window`` did.

:func:`verdict` decides on plain counts; :class:`FailureTally` keeps those counts as executions
end (in the order the head reaps them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection

from gyrectl.config.schema import InfraFailureBudget


def verdict(budget: InfraFailureBudget, *, ended: int, any_ok: bool, recent: Collection[bool]) -> str:
    """Why the run must stop ("" while within budget). ``ended``: executions that ended so far;
    ``any_ok``: whether one of them did not fail; ``recent``: whether each of the latest ones
    (at most ``budget.window``) failed."""
    if budget.first and not any_ok and ended >= budget.first:
        return (f"the first {ended} executions all ended as infrastructure failures "
                f"(rollout.infra_failures.first={budget.first})")
    failed = sum(recent)
    if budget.window and len(recent) >= budget.window and failed > budget.max_share * len(recent):
        return (f"{failed} of the last {len(recent)} executions ended as infrastructure failures, more than "
                f"rollout.infra_failures.max_share={budget.max_share:g} of rollout.infra_failures.window="
                f"{budget.window}")
    return ""


class FailureTally:
    """The outcomes :func:`verdict` needs, kept as executions end."""

    def __init__(self, budget: InfraFailureBudget):
        self._budget = budget
        self._ended, self._any_ok = 0, False
        self._recent: deque[bool] = deque(maxlen=max(budget.window, 1))

    def add(self, *, failed: bool) -> str:
        """Counts one ended execution; returns why the run must stop ("" while within budget)."""
        self._ended += 1
        self._any_ok = self._any_ok or not failed
        self._recent.append(failed)
        return verdict(self._budget, ended=self._ended, any_ok=self._any_ok, recent=self._recent)
