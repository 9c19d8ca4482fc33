"""Scheduling policies: pure ``decide(state, now) -> list[Action]`` functions, one module each.
Policies never import a backend; the coordinator carries their actions out.
May import: coordinator (state, actions)."""

from __future__ import annotations

from gyrectl.coordinator.actions import Policy
from gyrectl.scheduler import async_split, colocate, elastic

POLICIES: dict[str, Policy] = {"elastic": elastic.decide, "colocate": colocate.decide, "async": async_split.decide}
