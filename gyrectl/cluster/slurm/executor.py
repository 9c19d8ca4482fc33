"""submitit's executor, extended with what gyrectl's jobs need.

submitit 1.5.4 knows nothing of ``#SBATCH hetjob`` and passes only ``--key=value`` options.
:class:`GyreExecutor` is its ``SlurmExecutor`` with one hook replaced — the text of the submission
file — so pickling, submission, job ids and log folders stay submitit's own. It adds verbatim
``#SBATCH`` lines (``cluster.extra_sbatch``) and, for the ``hetjob`` layout, component 1 (the
worker pool, ``worker_directives``), used by the steps the head starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from submitit.slurm.slurm import SlurmExecutor

from gyrectl.cluster.slurm.sbatch import head_command, render_sbatch


class GyreExecutor(SlurmExecutor):
    def __init__(self, folder: str | Path, *, extra_directives: Sequence[str] = (),
                 worker_directives: Sequence[str] = (), python: str | None = None):
        super().__init__(folder, python=python, max_num_timeout=0)
        self.extra_directives = tuple(extra_directives)
        self.worker_directives = tuple(worker_directives)

    @property
    def _submitit_command_str(self) -> str:
        return head_command(self.python, self.folder)

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        return render_sbatch(command=command, folder=self.folder, params=self.parameters, extra=self.extra_directives,
                             workers=self.worker_directives)
