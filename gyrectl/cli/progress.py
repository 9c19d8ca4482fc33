"""``launch --wait``: follow a run until it ends, with a live view on a terminal (the status view
under a progress bar of training steps) and one line per finished step otherwise."""

from __future__ import annotations

import sys
import time

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gyrectl.cli.render import err, out
from gyrectl.cli.status_cmd import render
from gyrectl.errors import RuntimeFailure
from gyrectl.run.rundir import RunDir
from gyrectl.status.view import RunView, run_view


def wait_for_end(run: RunDir, *, interval: float = 1.0, quiet: bool = False) -> None:
    """Returns once the run completed; raises ``RuntimeFailure`` if it ended any other way."""
    view = _follow_live(run, interval) if sys.stdout.isatty() and not quiet else _follow_plain(run, interval)
    if view.job.reason != "completed":
        error = f": {view.job.error}" if view.job.error else ""
        raise RuntimeFailure(f"run {run.name} ended without completing ({view.job.reason or 'unknown'}){error}; "
                             f"see {run.logs_dir / 'head.log'}")


def _follow_live(run: RunDir, interval: float) -> RunView:
    progress = Progress(TextColumn("[bold]training steps"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    task = progress.add_task("steps", total=None)
    view = run_view(run)
    with Live(Group(progress, render(view)), console=out, refresh_per_second=4) as live:
        while view.job.state != "ended":
            time.sleep(interval)
            view = run_view(run)
            progress.update(task, completed=len(view.steps), total=view.total_steps or None)
            live.update(Group(progress, render(view)))
    return view


def _follow_plain(run: RunDir, interval: float) -> RunView:
    seen = 0
    view = run_view(run)
    while True:
        for step in view.steps[seen:]:
            signal = "" if step.groups is None else (
                f", {step.groups_without_signal} of {step.groups} groups without signal"
                + (" (nothing trained)" if step.without_signal else ""))
            err.print(f"step {step.step}: reward mean {step.reward_mean:.3f}, {step.executions} executions{signal}, "
                      f"{step.trained_tokens} trained tokens, {step.duration_s:.1f} s", highlight=False)
        seen = len(view.steps)
        if view.job.state == "ended":
            return view
        time.sleep(interval)
        view = run_view(run)
