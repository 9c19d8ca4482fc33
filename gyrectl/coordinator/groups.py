"""Whole GRPO groups: the rule every side of a run applies to finished executions before a
training step may take them.

Execution ``seq`` belongs to group ``seq // group_size`` (``rollout.executions_per_task``
consecutive executions of one task). A group enters the buffer when its *last* member ends, whole:
a batch of completed executions in completion order would hold pieces of groups, and a piece's
advantage baseline is taken over whichever members happened to finish first (a piece of one
member has none at all). Its members were dispatched with the weights of its *oldest* member or
newer, so the group counts as that version: staleness is measured on the oldest member.

Three sides apply the rule and must agree, group for group: the coordinator's fold (counts, in
:mod:`gyrectl.coordinator.events`), the head's batch claims (records) and the simulator's (sequence
numbers), both through :class:`GroupGate`.

A member that ended in an infrastructure failure still ends its group: the group is trained on
the members that ran (their baseline is theirs alone), and a group left with one member gets an
advantage of 0 (no baseline: it cannot push the policy). Running the failed member again instead
would hold the whole group back on a failure that often repeats (a harness that crashes on that
task), and the failure budget (``rollout.infra_failures``) already stops a run that fails often.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

Member = TypeVar("Member")


@dataclass(frozen=True)
class OpenGroup:
    """What the coordinator's fold keeps of a group some of whose members ended."""

    ended: int
    oldest_version: int
    rewards: tuple[float, ...] = ()
    """Rewards of the members that ended with one (infrastructure failures have none)."""
    unscored: bool = False
    """A member ended without an infrastructure failure but its reward is not known (a simulated
    execution, a journal from before ``Finished`` carried rewards): the group's signal is unknown."""

    def with_member(self, *, version: int, reward: float | None, infra_failure: bool) -> OpenGroup:
        return OpenGroup(ended=self.ended + 1, oldest_version=min(self.oldest_version, version),
                         rewards=self.rewards + ((reward,) if reward is not None else ()),
                         unscored=self.unscored or (reward is None and not infra_failure))

    @property
    def uniform(self) -> bool:
        """No learning signal: the members that ran got one reward (or fewer than two ran), so every
        advantage of the group is 0 (:mod:`gyrectl.train.signal`)."""
        return not self.unscored and not has_signal(self.rewards)


class OpenGroups:
    """The open groups by number: an immutable map whose change copies one of its shards. The
    fold replaces it on every finished execution, and at 20,000 executions in flight a plain
    dict copy of ~2,500 groups cost more than the rest of the event (28 us against ~20 us)."""

    SHARDS = 64
    __slots__ = ("_shards", "_count")

    def __init__(self, shards: tuple[dict[int, OpenGroup], ...] | None = None, count: int = 0):
        self._shards = shards if shards is not None else tuple({} for _ in range(self.SHARDS))
        self._count = count

    def get(self, number: int) -> OpenGroup | None:
        return self._shards[number % self.SHARDS].get(number)

    def put(self, number: int, group: OpenGroup | None) -> OpenGroups:
        """A copy with ``number`` set to ``group`` (None: removed)."""
        index = number % self.SHARDS
        shard = dict(self._shards[index])
        had = shard.pop(number, None) is not None
        if group is not None:
            shard[number] = group
        count = self._count - had + (group is not None)
        return OpenGroups(self._shards[:index] + (shard,) + self._shards[index + 1:], count)

    def as_dict(self) -> dict[int, OpenGroup]:
        return {number: group for shard in self._shards for number, group in shard.items()}

    def __len__(self) -> int:
        return self._count

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpenGroups) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OpenGroups({self.as_dict()})"


def has_signal(rewards: Sequence[float]) -> bool:
    """Whether a group whose members that ran got ``rewards`` can move the policy: GRPO's
    advantages are all 0 when they are one reward (or fewer than two members ran)."""
    return len(set(rewards)) > 1


def group_of(seq: int, *, group_size: int) -> int:
    return seq // group_size


def block_of_group(group: int, *, group_size: int, batch_executions: int) -> int:
    """The dispatch-order block (``seq // batch_executions``) a group lies in: one block, since
    ``training.batch_executions`` is a multiple of the group size (``config check`` says so)."""
    return group * group_size // batch_executions


class GroupGate(Generic[Member]):
    """Members of groups that have not ended yet; hands a group back when its last member ends."""

    def __init__(self, group_size: int):
        self._size = group_size
        self._open: dict[int, list[Member]] = {}

    def ended(self, seq: int, member: Member) -> tuple[int, list[Member]] | None:
        """Execution ``seq`` ended as ``member``: its group and all of its members if it was the
        group's last one, else None."""
        group = group_of(seq, group_size=self._size)
        members = self._open.setdefault(group, [])
        members.append(member)
        if len(members) < self._size:
            return None
        return group, self._open.pop(group)
