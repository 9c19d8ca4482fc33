"""submitit, extended to heterogeneous jobs.

submitit 1.5.4 knows nothing of ``#SBATCH hetjob``. :class:`HetJobExecutor` is its
``SlurmExecutor`` with one hook replaced — the text of the submission file — so pickling,
submission, job ids and log folders stay submitit's own. Component 0 runs the submitted function
(the head); component 1 is described by ``worker_directives`` and used by the steps the head
starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from submitit.slurm.slurm import SlurmExecutor

from gyrectl.launch.sbatch import head_command, render_hetjob_sbatch


class HetJobExecutor(SlurmExecutor):
    def __init__(self, folder: str | Path, *, worker_directives: Sequence[str],
                 extra_head_directives: Sequence[str] = (), python: str | None = None):
        super().__init__(folder, python=python, max_num_timeout=0)
        self.worker_directives = tuple(worker_directives)
        self.extra_head_directives = tuple(extra_head_directives)

    @property
    def _submitit_command_str(self) -> str:
        return head_command(self.python, self.folder)

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        return render_hetjob_sbatch(command=command, folder=self.folder, head=self.parameters,
                                    workers=self.worker_directives, extra_head=self.extra_head_directives)
