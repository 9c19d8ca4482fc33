"""How much of a step can move the policy: a GRPO group whose members all got the same reward
(reward std 0, or a single member) has advantage 0 everywhere, so its tokens add nothing to the
gradient; a step made only of such groups trains nothing, however long it runs. With an
exact-match reward and a weak model that is the usual case, and the step's loss and grad norm
alone do not say why (``metrics.jsonl``: ``groups``, ``groups_without_signal``,
``signal_token_share``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Signal:
    groups: int
    """GRPO groups trained (with at least one member that recorded a call)."""
    groups_without_signal: int
    """Of ``groups``, those whose every member has advantage 0."""
    signal_tokens: int
    """Trained tokens (non-zero loss weight) of executions with a non-zero advantage."""
    trained_tokens: int

    @property
    def token_share(self) -> float:
        return self.signal_tokens / self.trained_tokens if self.trained_tokens else 0.0


def batch_signal(*, advantages: Mapping[str, float], groups: Mapping[str, str],
                 trained_tokens: Mapping[str, int]) -> Signal:
    """``advantages``, ``groups`` (execution -> group) and ``trained_tokens`` of each trained execution."""
    present = {groups[execution] for execution in advantages}
    return Signal(groups=len(present), groups_without_signal=len(present - groups_with_signal(advantages, groups)),
                  signal_tokens=sum(n for e, n in trained_tokens.items() if advantages[e] != 0),
                  trained_tokens=sum(trained_tokens.values()))


def groups_with_signal(advantages: Mapping[str, float], groups: Mapping[str, str]) -> set[str]:
    """The groups with a member whose advantage is not 0 (the others train nothing)."""
    return {groups[execution] for execution, advantage in advantages.items() if advantage != 0}
