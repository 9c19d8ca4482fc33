"""The training step's entry point: weights vN + ``batches/step-NNNNNN.json`` -> weights v(N+1).

    torchrun --standalone --nproc_per_node=2 -m gyrectl.train --run-dir runs/my-run --step 0
    python -m gyrectl.train --run-dir runs/my-run --step 0          # one process, no torchrun
    GYRECTL_RUN_DIR=runs/my-run GYRECTL_TRAIN_STEP=0 python -m gyrectl.train.torchrun ... -m gyrectl.train
                                     # as the coordinator does: torchrun, quiet when stopped (gyrectl.train.torchrun)
    python -m gyrectl.train --run-dir runs/my-run --step 0 --resident --group g1   # stays up for step 1, 2, ...

The coordinator starts it (one torchrun member per training cell, one rendezvous); it never
drives the coordinator. What it writes: ``checkpoints/v{N+1}/`` (HF folder), the optimizer state
in ``checkpoints/optimizer/v{N+1}/`` (DCP, one shard file per rank) and one line in
``metrics.jsonl``, and rank 0 prints one line per step on stdout (step, trained tokens, loss,
seconds). Running a step whose v(N+1) exists already does nothing and exits 0. The
recipe is :func:`gyrectl.train.step.run_step`.

With ``--resident`` (or ``GYRECTL_TRAINER_RESIDENT=1``) the group stays up after step N, holding
its model and optimizer, and trains each step requested of its group (``--group`` or
``GYRECTL_TRAINER_GROUP``) in ``trainer/request-NNNNNN.json``, until a request names another group
or the run's stop file appears (exit 0): see :mod:`gyrectl.train.resident`.

Exit codes: 0 done, 1 runtime failure (or a bug: the traceback is printed, this is a log), 2 a
mistake the user can fix (missing batch file or weights, bad config).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import traceback
from pathlib import Path

from gyrectl.errors import EXIT_RUNTIME, GyreError
from gyrectl.run.rundir import RunDir
from gyrectl.train.resident import serve
from gyrectl.train.step import run_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gyrectl.train", description=__doc__.splitlines()[0])
    # The environment defaults are what the coordinator's steps carry (the sbatch script exports
    # GYRECTL_RUN_DIR; a training member gets GYRECTL_TRAIN_STEP).
    run_dir, step = os.environ.get("GYRECTL_RUN_DIR"), os.environ.get("GYRECTL_TRAIN_STEP")
    parser.add_argument("--run-dir", type=Path, default=run_dir, required=run_dir is None,
                        help="the run directory (holds config.yaml; default $GYRECTL_RUN_DIR)")
    parser.add_argument("--step", type=int, default=step, required=step is None,
                        help="step N: trains weights vN into v(N+1) (default $GYRECTL_TRAIN_STEP)")
    parser.add_argument("--resident", action="store_true",
                        default=os.environ.get("GYRECTL_TRAINER_RESIDENT", "") == "1",
                        help="stay up after the step and train the steps requested of --group "
                             "(default $GYRECTL_TRAINER_RESIDENT=1)")
    parser.add_argument("--group", default=os.environ.get("GYRECTL_TRAINER_GROUP"),
                        help="this trainer's group id, which requests name (default $GYRECTL_TRAINER_GROUP)")
    args = parser.parse_args(argv)
    if args.resident and not args.group:
        parser.error("--resident needs a group id: --group ID or $GYRECTL_TRAINER_GROUP")
    _end_with_the_agent()
    try:
        if args.resident:
            serve(run=RunDir.open(args.run_dir), step=args.step, group=args.group)
        else:
            run_step(run=RunDir.open(args.run_dir), step=args.step)
    except GyreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception:  # a bug; under torchrun this is a worker log, so show everything
        traceback.print_exc()
        return EXIT_RUNTIME
    return 0


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _end_with_the_agent() -> None:
    """Under torchrun, asks the kernel to kill this worker when its agent ends. torchrun starts each
    worker in a session of its own, so a stop that reaches only the agent's process group (the
    local backend's SIGTERM then, with no grace, SIGKILL) ended the agent and left its workers
    running: a resident group went on polling for requests, holding its memory. A worker without
    its agent is of no use: its step commits by a rename, so nothing half-written is kept."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


def _exit_now(code: int) -> None:
    """Ends the process without the interpreter's teardown. Everything a step writes is on disk
    (fsynced) before :func:`main` returns; what the teardown adds is a rare abort: with a gloo group
    that ran collectives, destroying torch's C++ objects at interpreter exit sometimes ends in
    ``terminate called without an active exception`` (SIGABRT, exit -6) after the step committed
    (seen once in CI on a resident trainer; pytorch/pytorch#179291 describes gloo's worker threads
    at finalization), and a driver would take that exit for a failed step."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
