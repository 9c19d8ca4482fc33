"""The error types that decide gyrectl's exit codes (mapped in one place: ``gyrectl.cli.app``).

Library code raises these; the CLI turns them into a readable message and an exit code:

* :class:`UserError` (and :class:`ConfigError`) -> exit 2: the user can fix it (bad config,
  bad argument, missing run). Never shown with a traceback.
* :class:`RuntimeFailure` -> exit 1: the cluster or a component failed (sbatch refused, a step
  died). Shown with a readable message.

Anything else is a bug: exit 1 with a short message; ``GYRECTL_TRACEBACK=1`` shows the traceback.
May import: nothing of gyrectl.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2


class GyreError(Exception):
    """Base of the errors gyrectl raises on purpose."""

    exit_code = EXIT_RUNTIME


class UserError(GyreError):
    """A mistake the user can fix: bad argument, unknown run, bad input file."""

    exit_code = EXIT_USAGE


class ConfigError(UserError):
    """An invalid configuration; ``path`` is the dotted field path (``cluster.nodes``)."""

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


class RuntimeFailure(GyreError):
    """The cluster or a component failed at run time."""

    exit_code = EXIT_RUNTIME
