"""``gyrectl status`` and ``gyrectl stop``: watch and end runs from the login node."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from gyrectl.cli.options import DEFAULT_ROOT, JsonOpt, RootOpt, RunArg
from gyrectl.cli.render import emit_json, err, out, skipped_text, table
from gyrectl.cli.timeline import draw_timeline
from gyrectl.cluster.backend import backend_named
from gyrectl.coordinator.journal import read_events
from gyrectl.coordinator.state import initial_state, limits_from_config
from gyrectl.errors import RuntimeFailure, UserError
from gyrectl.run.files import run_config
from gyrectl.run.rundir import RunDir
from gyrectl.status.faults import GAVE_UP, PENDING, Fault
from gyrectl.status.rows import StepRow
from gyrectl.status.view import RunView, finished_evals, run_view
from gyrectl.store.jsonl import scan_jsonl

WatchOpt = Annotated[bool, typer.Option("--watch", "-w", help="Refresh until the run ends (live view on a terminal).")]
IntervalOpt = Annotated[float, typer.Option(help="Seconds between refreshes with --watch.")]


def _latest_run(root: Path) -> RunDir:
    runs = sorted(root.glob("*/config.yaml"), key=lambda p: p.stat().st_mtime) if root.is_dir() else []
    if not runs:
        raise UserError(f"no runs under {root.resolve()}; name one: gyrectl status RUN_DIR")
    return RunDir(runs[-1].parent.resolve())


def status(
    run: Annotated[str | None, typer.Argument(help="Run directory or run name (default: the latest run under --root).",
                                              show_default=False)] = None,
    root: RootOpt = DEFAULT_ROOT,
    watch: WatchOpt = False,
    interval: IntervalOpt = 2.0,
    timeline: Annotated[Path | None, typer.Option("--timeline", help="Also write a PNG of the cells' roles over "
                                                                     "time, drawn from the run's journal.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Show a run: its job state (pending / running / ended) and every node with its role.

    The job state comes from Slurm (scontrol, then the completion log) or from the local head
    process; the nodes from the node table the head wrote into the run directory.

    Examples:

      gyrectl status                      # the latest run under ./runs

      gyrectl status tiny --watch

      gyrectl status runs/tiny --json | jq .job.state

      gyrectl status tiny --timeline roles.png
    """
    run_dir = RunDir.open(run, output_root=root) if run else _latest_run(root)
    if timeline is not None:
        write_timeline(run_dir, timeline)
    if not watch:
        view = run_view(run_dir)
        emit_json(view.to_json()) if json_ else out.print(render(view))
        return
    if json_ or not sys.stdout.isatty():
        _watch_plain(run_dir, interval=interval, as_json=json_)
        return
    with Live(render(run_view(run_dir)), console=out, refresh_per_second=4, transient=False) as live:
        while True:
            view = run_view(run_dir)
            live.update(render(view))
            if view.job.state == "ended":
                return
            time.sleep(interval)


def _watch_plain(run_dir: RunDir, *, interval: float, as_json: bool) -> None:
    """Not a terminal: one snapshot per change (JSON lines with --json), until the run ends."""
    last = None
    while True:
        view = run_view(run_dir)
        snapshot = view.to_json()
        if snapshot != last:
            emit_json(snapshot) if as_json else out.print(render(view))
            last = snapshot
        if view.job.state == "ended":
            return
        time.sleep(interval)


def render(view: RunView) -> Group:
    job = view.job
    colour = {"running": "green", "pending": "yellow", "ended": "blue"}.get(job.state, "red")
    detail = f" ({job.slurm_state})" if job.slurm_state else ""
    reason = f", {job.reason}" if job.reason else ""
    # Names, reasons and errors come from files and from Slurm: escaped, so a '[' in them is text, not markup.
    head = (f"[bold]{escape(view.name)}[/]  job {escape(job.id)} on {escape(job.backend)}: [{colour}]{job.state}[/]"
            + escape(f"{detail}{reason}\n{view.run_dir} ({_size(view.disk_bytes)} on disk)"))
    if job.components:  # Slurm's own view of each component
        head += escape("\nSlurm: " + "; ".join(f"{c.id} {c.state} on {c.nodes or '-'}"
                                             + (f" (cell {c.cell})" if c.cell is not None else "")
                                             for c in job.components))
    if job.error:
        head += f"\n[red]{escape(job.error)}[/]"
    rows = [(n.name, n.het_group, n.gpus, n.cpus, n.address, n.role) for n in view.nodes]
    parts: list[object] = [head, table("nodes", ["node", "het group", "GPUs", "CPUs", "address", "role"], rows)]
    if view.cells:
        parts.append(_cells_table(view))
    if view.servers and view.job.state == "running":
        parts.append(table(f"rollout servers at {_clock(view.servers_at or 0)}",
                           ["server", "node", "state", "gateway calls", "calls so far", "engine running",
                            "engine waiting", "weights"],
                           [(s.name, s.node or "", s.state, s.gateway_calls, _count(s.calls), _count(s.running),
                             _count(s.waiting), "" if s.weight_version is None else f"v{s.weight_version}")
                            for s in view.servers]))
    if view.moves:
        parts.append(table("recent moves", ["cell", "from", "to", "at", "seconds"],
                           [(m.cell, m.from_role, m.to, _clock(m.at),
                             "under way" if m.duration_s is None else f"{m.duration_s:.2f}")
                            for m in view.moves[-6:]]))
    if view.faults:
        parts.append(faults_text(view.faults))
    if view.steps:
        parts.append(table(f"training steps ({len(view.steps)} of {view.total_steps})",
                           ["step", "reward mean", "executions", "groups (no signal)", "naive tokens",
                            "trained tokens", "weights", "seconds"],
                           [(s.step, f"{s.reward_mean:.3f}", s.executions, _groups(s), s.naive_tokens,
                             s.trained_tokens, f"v{s.weight_version}", f"{s.duration_s:.1f}")
                            for s in view.steps[-10:]]))
        if silent := [s.step for s in view.steps if s.without_signal]:
            parts.append(f"[yellow]warning:[/] {_no_signal(silent)}")
    if view.evals:
        parts.append(table("evaluations (held-out tasks; pass@k over the tasks whose executions all ran)",
                           ["weights", "executions", "infra failures", "reward mean", "pass@1", "pass@k"],
                           [(f"v{e.weight_version}", e.executions, _count(e.infra_failures), _fraction(e.reward_mean),
                             _fraction(e.pass_at_1), f"{_fraction(e.pass_at_k)} (k={e.k})")
                            for e in view.evals[-10:]]))
    if view.skipped:
        parts.append(skipped_text(view.skipped, read=", ".join(
            f"{count} record(s) of {name}" for name, count in view.records_read.items())))
    if view.note:
        parts.append(f"[dim]{escape(view.note)}[/]")
    for name, problem in view.damaged.items():
        parts.append(f"[red]{escape(name)} is damaged[/] " + escape(f"(left out of this view): {problem}"))
    return Group(*parts)


def faults_text(faults: list[Fault], *, most: int = 5) -> Text:
    """The last ``most`` faults, one line each in words (plain text: never markup)."""
    text = Text("faults and recoveries", style="bold")
    if len(faults) > most:
        text.append(f"\n  ... {len(faults) - most} earlier (--json lists them all)")
    for fault in faults[-most:]:
        where = "" if fault.cell is None else f"cell {fault.cell} "
        code = "" if fault.exit_code is None else f" (exit {fault.exit_code})"
        done = fault.recovery if fault.seconds is None else f"{fault.recovery} in {fault.seconds:.1f} s"
        text.append(f"\n  {_clock(fault.at)} {where}{fault.words}{code} -> {done}",
                    style={PENDING: "yellow", GAVE_UP: "red"}.get(fault.recovery, ""))
    return text


def _groups(step: StepRow) -> str:
    if step.groups is None:
        return ""
    return f"{step.groups} ({step.groups_without_signal})" + (" all uniform" if step.without_signal else "")


def _no_signal(steps: list[int]) -> str:
    named = ", ".join(map(str, steps[-5:])) + (f" and {len(steps) - 5} more" if len(steps) > 5 else "")
    return (f"step{'s' if len(steps) > 1 else ''} {named} trained nothing: every group's executions got the same "
            "reward, so every advantage was 0 (an easier task, a reward with partial credit, or more executions "
            "per task give the groups a spread; training.skip_uniform_groups keeps such groups out of a batch)")


def _cells_table(view: RunView) -> object:
    training = view.training
    ex = view.executions
    assert ex is not None  # cells and counts come from the same replayed journal
    failures = f" ({ex.infra_failures} infrastructure failures, never trained)" if ex.infra_failures else ""
    if ex.uniform_skipped:
        failures += f" ({ex.uniform_skipped} in groups without signal, kept out)"
    title = (f"cells: executions {ex.finished} finished{failures}, {ex.trained} trained, {ex.in_flight} in flight; "
             + (f"training step {training.index} on cells {list(training.cells)} since {_clock(training.started_at)}"
                if training else "no training step running"))
    rows = [(c.id, ",".join(c.nodes), c.role, c.phase + (" (in step)" if c.in_training_step else ""),
             _clock(c.since), c.engine, "" if c.weight_version is None else f"v{c.weight_version}")
            for c in view.cells]
    return table(title, ["cell", "nodes", "role", "phase", "since", "engine", "weights"], rows)


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _size(num_bytes: int) -> str:
    """``517.3 MB``: decimal units, as ``du --si`` says them."""
    if num_bytes < 1000:
        return f"{num_bytes} B"
    size = num_bytes / 1000
    for unit in ("kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            break
        size /= 1000
    return f"{size:.1f} {unit}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else "-"


def write_timeline(run: RunDir, path: Path) -> None:
    """The cells' roles over the run so far, from its journal (stderr says where it went)."""
    events = read_events(run.journal_file)
    if not events:
        raise UserError(f"{run.path}: the journal holds no coordinator event yet; nothing to draw")
    config = run_config(run)
    evals, _ = finished_evals(scan_jsonl(run.evals_file))  # the lines status shows, checked the same way
    marks = [(e.record["at"], f"eval v{e.weight_version}: pass@1 {e.pass_at_1}") for e in evals
             if isinstance(e.record.get("at"), int | float)]
    draw_timeline(path, initial=initial_state(limits_from_config(config)), events=events, wall_clock=True,
                  title=f"{run.name}: {config.scheduler.policy}, {config.num_cells} cells", marks=marks)
    err.print(escape(f"timeline written to {path}"), highlight=False, soft_wrap=True)


def stop(run: RunArg, root: RootOpt = DEFAULT_ROOT) -> None:
    """Ask a run to end cleanly; the head records that it was stopped.

    Example:  gyrectl stop tiny
    """
    run_dir = RunDir.open(run, output_root=root)
    view = run_view(run_dir)
    if view.job.state == "ended":
        out.print(escape(f"{run_dir.name} has already ended ({view.job.reason or view.job.slurm_state})"),
                  highlight=False, soft_wrap=True)
        return
    run_dir.stop_file.write_text(f"{time.time()}\n")
    backend = backend_named(view.job.backend)
    if backend is None:
        damaged = view.damaged.get(run_dir.job_file.name)
        raise RuntimeFailure(f"wrote {run_dir.stop_file}, which ends the run if its head runs, but cannot tell the "
                             "run's job to cancel it while it waits: "
                             + (f"{run_dir.job_file} is damaged: {damaged}" if damaged else view.job.reason))
    backend.cancel_waiting(view.job)  # Slurm: a job still waiting for nodes runs no head to read the stop file
    out.print(escape(f"asked {run_dir.name} (job {view.job.id}) to stop; follow with: "
                     f"gyrectl status {run_dir.path} --watch"),
              highlight=False, soft_wrap=True)
