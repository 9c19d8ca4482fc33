"""A training step's input, built from the run directory: what ``batches/step-NNNNNN.json`` names,
turned into packed micro-batches with per-execution advantages.

    batch file --> recorded calls of those executions --> mini-batches of whole groups
               --> per mini-batch: token trees --> dedup (exact | paths) --> pack to
               training.micro_batch_tokens;  rewards --> group advantages (training.advantage)

With ``training.updates_per_batch`` = k the trained groups are split into k mini-batches
(:func:`split_groups`), each deduplicated and normalised (``training.loss_aggregation``) on its
own: each is what one optimizer step trains. k = 1 is one mini-batch, the whole batch.

The batch file's format and its reader are :mod:`gyrectl.run.batch_file`'s. An execution of it that
recorded no call at all (the harness failed before asking the model) has nothing to train: it is skipped,
counted in ``num_skipped``, and left out of its group's advantage statistics. With
``training.skip_uniform_groups``, the executions of a group without a learning signal (advantage
0 for all) are left out of the trees too, so they do not dilute the loss's token mean.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from gyrectl.capture.source import load_executions
from gyrectl.capture.tree import TokenTree, build_tree
from gyrectl.config.schema import Config
from gyrectl.dedup.exact import exact_dedup
from gyrectl.dedup.packing import PackedMicroBatch, pack
from gyrectl.dedup.paths import paths_dedup
from gyrectl.dedup.weighted import WeightedTree
from gyrectl.errors import UserError
from gyrectl.run.batch_file import BatchFile
from gyrectl.run.rundir import RunDir
from gyrectl.store.damage import log_skipped
from gyrectl.train.grpo import group_advantages
from gyrectl.train.signal import Signal, batch_signal, groups_with_signal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepBatch:
    mini_batches: tuple[tuple[PackedMicroBatch, ...], ...]
    """One optimizer step's packed micro-batches each (``training.updates_per_batch`` of them, or
    fewer when the batch holds fewer groups)."""
    advantages: dict[str, float]
    """Per trained execution."""
    rewards: dict[str, float]
    """Per execution of the batch file (skipped ones included)."""
    num_executions: int
    """Executions trained (with recorded calls)."""
    num_skipped: int
    """Executions of the batch file without any recorded call."""
    naive_tokens: int
    """Sum over calls of prompt + completion length (what per-call training would process)."""
    unique_tokens: int
    """Tokens after dedup, before packing (exact: every trie node; paths: the sampled union)."""
    trained_tokens: int
    """Unique tokens with a non-zero loss weight."""
    signal: Signal
    """Groups, groups without signal, and the trained tokens that carry one."""

    @property
    def micro_batches(self) -> tuple[PackedMicroBatch, ...]:
        """Every mini-batch's micro-batches, in order."""
        return tuple(micro for mini in self.mini_batches for micro in mini)

    @property
    def dedup_ratio(self) -> float:
        return self.naive_tokens / self.unique_tokens if self.unique_tokens else 0.0


def build_step_batch(*, run: RunDir, config: Config, batch: BatchFile) -> StepBatch:
    """Everything the step trains on; identical on every rank (pure given the files)."""
    recorded = _recorded_calls(run, [e.execution for e in batch.entries]) if batch.entries else {}
    present = [e for e in batch.entries if recorded.get(e.execution)]
    groups = {e.execution: e.group_key for e in present}
    advantages = group_advantages(rewards={e.execution: e.reward for e in present}, groups=groups,
                                  estimator=config.training.advantage)
    if config.training.skip_uniform_groups:  # not even in the loss's normaliser
        with_signal = groups_with_signal(advantages, groups)
        trained = [e for e in present if groups[e.execution] in with_signal]
    else:
        trained = present
    tree_minis = [[build_tree(e, recorded[e]) for e in mini]
                  for mini in split_groups([e.execution for e in trained], groups,
                                           parts=config.training.updates_per_batch)]
    weighted_minis = [_weighted_trees(mini, config=config, step=batch.step) for mini in tree_minis]
    trees, weighted = [t for mini in tree_minis for t in mini], [w for mini in weighted_minis for w in mini]
    signal = batch_signal(advantages=advantages, groups=groups,
                          trained_tokens={w.execution: w.num_trained for w in weighted})
    return StepBatch(
        mini_batches=tuple(tuple(pack(mini, budget=config.training.micro_batch_tokens)) for mini in weighted_minis),
        advantages=advantages, rewards={e.execution: e.reward for e in batch.entries},
        num_executions=len(trained), num_skipped=len(batch.entries) - len(present),
        naive_tokens=sum(t.num_naive_tokens for t in trees), unique_tokens=sum(w.num_tokens for w in weighted),
        trained_tokens=sum(w.num_trained for w in weighted), signal=signal)


def split_groups(executions: list[str], groups: Mapping[str, str], *, parts: int) -> list[list[str]]:
    """``executions`` in ``parts`` mini-batches of whole groups (``groups``: execution -> group): the
    groups in order of first appearance, cut into runs as even as they divide, each mini-batch's
    executions in their order in ``executions``. Fewer parts when there are fewer groups, and one
    (maybe empty) at least: ``parts`` = 1 gives ``[executions]``."""
    order = list(dict.fromkeys(groups[e] for e in executions))
    count = max(1, min(parts, len(order)))
    cuts = [len(order) * j // count for j in range(count + 1)]
    part_of = {group: j for j, (a, b) in enumerate(itertools.pairwise(cuts)) for group in order[a:b]}
    return [[e for e in executions if part_of[groups[e]] == j] for j in range(count)]


def _weighted_trees(trees: list[TokenTree], *, config: Config, step: int) -> list[WeightedTree]:
    training = config.training
    if config.dedup.mode == "exact":  # training.loss_aggregation over root-to-leaf paths, exactly
        return exact_dedup(trees, normalisation=training.loss_aggregation, loss_constant=training.loss_constant)
    if training.loss_aggregation != "token_mean" or training.ratio_level != "token":  # config check says so first
        raise UserError("dedup.mode: paths trains a union of sampled paths, each token once: it has no per-path "
                        "loss for training.loss_aggregation or training.ratio_level: sequence (use dedup.mode: exact)")
    # A different sample every step, the same on every rank and on a retry.
    return paths_dedup(trees, j_max=config.dedup.j_max, seed=config.run.seed + step)


def _recorded_calls(run: RunDir, executions: list[str]) -> dict:
    """The batch's calls only (the capture store's index): a step's cost does not grow with the run."""
    # No capture file at all (nothing was ever recorded): every execution of the batch is skipped.
    if not any(run.trajectories_dir.glob("calls*")):
        return {}
    recorded = load_executions(run.path, executions)
    log_skipped(recorded.skipped, log)
    for execution, count in recorded.unrecoverable.items():
        log.warning("execution %s: %d call(s) extend a damaged record and are left out of training", execution, count)
    return recorded.calls
