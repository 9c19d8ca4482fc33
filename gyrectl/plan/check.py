"""The memory plan of a config, where the model's shape can be found, and the refusal of one
that does not fit (``config check``, ``launch`` and ``launch --dry-run`` call it)."""

from __future__ import annotations

from gyrectl.config.schema import Config
from gyrectl.errors import ConfigError
from gyrectl.plan.memory import MemoryPlan, memory_plan
from gyrectl.plan.shape import PUBLISHED, model_shape


def plan_for(config: Config) -> MemoryPlan | None:
    """None when ``model.path`` has no readable config.json and names no published shape."""
    shape = model_shape(config.model.path) if config.model.path else None
    return memory_plan(config, shape) if shape is not None else None


def require_plan(config: Config) -> MemoryPlan:
    plan = plan_for(config)
    if plan is None:
        known = ", ".join(shape.name for shape in PUBLISHED.values())
        raise ConfigError("model.path", f"{config.model.path!r} has no config.json here and names no published "
                                        f"shape ({known}); point it at the model folder")
    return plan


def require_fit(config: Config) -> MemoryPlan | None:
    """Raises the first problem of the plan, naming its field; the plan (or None) otherwise."""
    plan = plan_for(config)
    if plan is not None and plan.problems:
        first, more = plan.problems[0], len(plan.problems) - 1
        raise ConfigError(first.field, first.message + (f" (and {more} more problem(s): gyrectl plan CONFIG)"
                                                        if more else ""))
    return plan
