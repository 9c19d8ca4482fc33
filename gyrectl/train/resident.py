"""A resident trainer: a training group that stays up after its step and trains the next ones.

    python -m gyrectl.train --run-dir R --step N --resident --group G
    GYRECTL_TRAINER_RESIDENT=1 GYRECTL_TRAINER_GROUP=G torchrun ... -m gyrectl.train --run-dir R --step N

    train step N                     as a one-shot step: join, load vN, shard, restore AdamW, train, commit
    loop:
      offload (GPU), then wait for   trainer/request-(N+1).json or the stop file (every rank polls)
        a request naming group G  -> onload; train step N+1 on the model and AdamW in memory
                                     (no torchrun start, no load); commit; N += 1
        a request naming another  -> exit 0: superseded, another group trains from now on
        the stop file             -> exit 0
      a failed step               -> exit 1 (or 2), as a one-shot step: the driver retries it with a
                                     fresh group
      SIGTERM (the head's stop)   -> ends at once; under torchrun the agent stops its workers and
                                     exits 143 without a traceback (:mod:`gyrectl.train.torchrun`)

Whoever drives the trainer (the coordinator) writes the request with
:func:`gyrectl.run.files.write_train_request` once it wants step N+1 trained; the commit of each
step (the ``checkpoints/v{N+1}`` folder) stays the only "done" signal. The metrics line says
``"trainer": "started"`` for a step that loaded its state from disk, ``"reused"`` for one trained
on the state in memory (its ``time_s.load`` is the onload).

Why the result equals a fresh process's: the state in memory after step N is exactly what step N
committed -- the float32 parameters are the folder's weights (model.dtype float32) or the DCP
master weights (otherwise), and AdamW's state is what the DCP folder holds -- and a fresh step
restores exactly that. The config is read again for every step (its lr wins, as on disk); a
changed ``model.dtype``, or a KL reference model the config now asks for differently
(``training.kl_coef``, ``training.kl_reference``), makes the step load from disk instead. The
reference, frozen, is the same weights in memory as on disk: it travels with the policy.

Why polling and not a collective: an idle group blocked in a collective would hit the process
group's timeout. Each rank polls the run directory on its own (every ``POLL_S``); once each has
seen something, one all-reduce makes them agree -- requests and the stop file are never removed,
so every rank sees what the first one saw within a poll or two -- and anything but "train" wins,
so no rank trains alone.
"""

from __future__ import annotations

import sys
import time
from enum import IntEnum

from gyrectl.config.schema import Config
from gyrectl.run.files import read_train_request
from gyrectl.run.rundir import RunDir
from gyrectl.train.checkpoint import DTYPES
from gyrectl.train.distributed import World, close_world, init_world, max_over_ranks
from gyrectl.train.offload import offload, onload
from gyrectl.train.reference import reference_folder
from gyrectl.train.step import Timer, Trainer, check_step, prepare_trainer, train_step

POLL_S = 0.2


class Verdict(IntEnum):
    """What a waiting trainer does next (the larger wins when ranks disagree)."""

    TRAIN = 0
    SUPERSEDED = 1
    STOP = 2


def serve(*, run: RunDir, step: int, group: str, poll_s: float = POLL_S) -> None:
    """Trains step ``step``, then every step requested of ``group``, until superseded or stopped."""
    world = init_world()
    trainer: Trainer | None = None
    try:
        while True:
            config = check_step(run=run, step=step)
            if config is not None:  # else committed already: nothing to train, the state stays as is
                if trainer is not None and not _holds(trainer, run=run, step=step, config=config):
                    trainer = None  # freed before another one is loaded
                trainer = _train(run=run, step=step, config=config, world=world, trainer=trainer)
            verdict = wait_for_request(run=run, index=step + 1, group=group, world=world, poll_s=poll_s)
            if verdict is not Verdict.TRAIN:
                if world.is_main:
                    why = "superseded by another group" if verdict is Verdict.SUPERSEDED else "the run is stopping"
                    print(f"resident trainer {group}: done after step {step} ({why})", file=sys.stderr)
                return
            step += 1
    finally:
        close_world()


def _holds(trainer: Trainer, *, run: RunDir, step: int, config: Config) -> bool:
    """The state in memory is where step ``step`` starts: v``step``, in the config's dtype, with the
    reference model the config asks for (or none)."""
    held = trainer.reference.folder if trainer.reference is not None else None
    return (trainer.version == step and trainer.dtype == DTYPES[config.model.dtype]
            and held == reference_folder(run, config.training))


def _train(*, run: RunDir, step: int, config: Config, world: World, trainer: Trainer | None) -> Trainer:
    """Step ``step`` as :func:`gyrectl.train.step.run_step` trains it, on ``trainer`` (in memory,
    offloaded) if given, else on a state loaded from disk; returns the state for the next step."""
    timer = Timer()
    with timer("load"):
        if trainer is not None:
            origin = "reused"
            onload(trainer.model, trainer.optimizer, device=world.device)
            if trainer.reference is not None:
                onload(trainer.reference.model, None, device=world.device)
        else:
            origin = "started"
            trainer = prepare_trainer(run=run, step=step, config=config, world=world, memory=timer.memory)
    train_step(trainer, run=run, step=step, config=config, timer=timer, origin=origin)
    offload(trainer.model, trainer.optimizer, device=world.device)
    if trainer.reference is not None:
        offload(trainer.reference.model, None, device=world.device)
    return trainer


def wait_for_request(*, run: RunDir, index: int, group: str, world: World, poll_s: float = POLL_S) -> Verdict:
    """Polls until the request for step ``index`` or the stop file appears; the ranks' agreement."""
    if world.is_main:
        print(f"resident trainer {group}: waiting for {run.trainer_request_file(index)}", file=sys.stderr)
    while (seen := _look(run=run, index=index, group=group)) is None:
        time.sleep(poll_s)
    return Verdict(int(max_over_ranks([float(seen)], world=world)[0]))


def _look(*, run: RunDir, index: int, group: str) -> Verdict | None:
    request = read_train_request(run, index)  # a malformed one raises DamagedRunFile: exit 1
    if request is not None:
        return Verdict.TRAIN if request["group"] == group else Verdict.SUPERSEDED
    return Verdict.STOP if run.stop_file.exists() else None
