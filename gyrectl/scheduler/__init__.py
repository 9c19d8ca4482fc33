"""Scheduling policies: pure ``decide(state, now) -> list[Action]`` functions, one module each.
Policies never import a backend; the coordinator carries their actions out."""

from __future__ import annotations

from collections.abc import Callable

from gyrectl.coordinator.state import CoordinatorState
from gyrectl.scheduler import async_split, colocate, elastic
from gyrectl.scheduler.actions import Action

Policy = Callable[[CoordinatorState, float], list[Action]]

POLICIES: dict[str, Policy] = {"elastic": elastic.decide, "colocate": colocate.decide, "async": async_split.decide}
