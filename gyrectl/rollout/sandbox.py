"""Each execution in a directory of its own, and optionally in a sandbox that lets it write only
there: the command a harness process is started with, as a pure function of the config.

    none       the command as given, run in its working directory
    bwrap      bubblewrap (unprivileged namespaces): a root of read-only binds -- the system
               (/usr, /bin, /lib*, /etc), the Python gyrectl runs with (its prefix and base
               prefix), the launch directory (the harness script, its data) and
               ``rollout.sandbox_read`` -- with the run directory masked by an empty, read-only
               tmpfs (its secrets, the other executions) and the execution's own directory bound
               writable on top; fresh /dev, /proc and /tmp; the network shared (the gateway is on it)
    apptainer  ``apptainer exec --containall`` of ``rollout.apptainer_image``, the working
               directory bound writable and the readable paths read-only (the environment, with
               the gateway's URL and token, passes through as apptainer passes it by default)

Order matters in bwrap's argv: each mount lands on top of the ones before it, so the fresh /tmp
comes before the readable paths (one may be under /tmp), the run directory's mask after the
launch directory (it is usually inside it), and the working directory after the mask.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gyrectl.errors import UserError

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")


@dataclass(frozen=True)
class Sandbox:
    kind: str
    """``none``, ``bwrap`` or ``apptainer`` (``rollout.sandbox``)."""
    readable: tuple[Path, ...] = ()
    """Read-only besides the system and Python: the launch directory and ``rollout.sandbox_read``."""
    hidden: tuple[Path, ...] = ()
    """Masked even where a readable path contains them: the run directory."""
    image: str = ""
    """``rollout.apptainer_image``."""

    def wrap(self, command: Sequence[str], *, workdir: Path) -> list[str]:
        """``command`` as run in ``workdir`` under this sandbox."""
        if self.kind == "bwrap":
            return bwrap_argv(command, workdir=workdir, readable=self._readable(), hidden=self.hidden)
        if self.kind == "apptainer":
            return apptainer_argv(command, workdir=workdir, readable=self._readable(), image=self.image)
        return list(command)

    def require(self) -> None:
        """Refuses a sandbox whose program this machine does not have."""
        program = {"bwrap": "bwrap", "apptainer": "apptainer"}.get(self.kind)
        if program and shutil.which(program) is None:
            hint = " (Debian: apt-get install bubblewrap)" if program == "bwrap" else ""
            raise UserError(f"rollout.sandbox: {self.kind} needs `{program}` on the machine that runs the harnesses, "
                            f"and this one has none{hint}")

    def _readable(self) -> tuple[Path, ...]:
        python = {Path(sys.prefix), Path(sys.base_prefix)}
        return (*sorted(python), *self.readable)


def bwrap_argv(command: Sequence[str], *, workdir: Path, readable: Sequence[Path], hidden: Sequence[Path]) -> list[str]:
    argv = ["bwrap", "--die-with-parent", "--unshare-ipc", "--unshare-pid", "--unshare-uts"]
    for path in SYSTEM:
        argv += ["--ro-bind-try", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]  # before the binds: one may be under /tmp
    for path in readable:
        argv += ["--ro-bind-try", str(path), str(path)]
    for path in hidden:
        argv += ["--tmpfs", str(path)]
    argv += ["--bind", str(workdir), str(workdir)]
    for path in hidden:  # read-only once the working directory's mount point is made in it
        argv += ["--remount-ro", str(path)]
    argv += ["--chdir", str(workdir), "--setenv", "HOME", str(workdir)]
    return [*argv, "--", *command]


def apptainer_argv(command: Sequence[str], *, workdir: Path, readable: Sequence[Path], image: str) -> list[str]:
    argv = ["apptainer", "exec", "--containall", "--no-home", "--bind", f"{workdir}:{workdir}",
            "--pwd", str(workdir)]
    for path in readable:
        argv += ["--bind", f"{path}:{path}:ro"]
    return [*argv, image, *command]
