"""torchrun as the coordinator starts a training member: ``torchrun`` that ends quietly when stopped.

    python -m gyrectl.train.torchrun --nnodes=1 --nproc-per-node=2 ... -m gyrectl.train --run-dir R --step N

Same arguments and behaviour as ``python -m torch.distributed.run``, except for a stop by signal.
The coordinator stops a member (a resident group at the end of a run or when its cells change, a
member a finished step no longer needs) with SIGTERM: to the member's process group on the local
backend, through ``scancel`` on Slurm. torchrun's agent answers by raising ``SignalException``,
stopping its workers, and letting the exception end the interpreter -- a traceback at the end of
every resident trainer's log that reads as a crash. Here the agent stops its workers just the
same, says so in one line and exits ``128 + signal``, the shell's code for "ended by a signal":
not 0, because a step stopped half-way committed nothing (a caller that did not stop it itself
must not take it for done). A worker that fails is reported as torchrun reports it (its table of
failures), and the member exits as that worker did: ``128 + signal`` for a worker killed by a
signal, so the member whose worker was killed is told from one that failed after it (a peer's
collective broken by the loss).
"""

from __future__ import annotations

import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import main as torchrun


def main(argv: list[str] | None = None) -> int:
    try:
        torchrun(argv)
    except SignalException as stopped:  # raised after the agent stopped its workers
        print(f"torchrun: stopped by {stopped.sigval.name}; its workers were stopped", file=sys.stderr)
        return 128 + stopped.sigval
    except ChildFailedError as failed:
        print(failed, file=sys.stderr)
        code = failed.get_first_failure()[1].exitcode
        return 128 - code if code < 0 else code or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
