"""The job's time limit, as the head sees it coming.

Slurm's ``--signal=USR2@90`` (which submitit sets) reaches job *steps*, and the head runs in the
batch script itself (``use_srun=False``), so it would only hear the SIGTERM of the kill, with
``KillWait`` seconds left. Instead the head reads when its job ends and stops by itself
``STOP_BEFORE_S`` seconds before, leaving the run directory consistent and ``status`` saying
``time_limit``. The end time is read again now and then: an admin may extend the limit.
"""

from __future__ import annotations

import os
import time

from gyrectl.cluster.slurm.cli import job_end_time
from gyrectl.errors import GyreError

STOP_BEFORE_S = 90.0
"""As submitit's signal delay: time to stop the steps and cancel the cell jobs."""
REREAD_S = 60.0


class SlurmDeadline:
    def __init__(self, job_id: str | None = None, *, stop_before_s: float = STOP_BEFORE_S):
        self._job_id = job_id if job_id is not None else os.environ.get("SLURM_JOB_ID", "")
        self._stop_before_s = stop_before_s
        self._end: float | None = None
        self._next_read = 0.0

    def reached(self) -> bool:
        """Whether the head should stop now to end before Slurm kills it (never without a job)."""
        if not self._job_id:
            return False
        now = time.time()
        if now >= self._next_read:
            self._next_read = now + REREAD_S
            try:
                self._end = job_end_time(self._job_id)
            except GyreError:  # the controller is busy: keep the last answer
                pass
        return self._end is not None and now >= self._end - self._stop_before_s
