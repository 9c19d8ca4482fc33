"""``gyrectl simulate --calibrate RUN_DIR``: the ``simulator:`` section measured on a finished run
(:mod:`gyrectl.sim.calibrate`), read here from the run directory's files.

    gyrectl simulate --calibrate runs/demo            # YAML to paste into a config, a comment per value
    gyrectl simulate --calibrate runs/demo --json     # {"engine_start_s": 41.2, ...}: simulator.* fields only
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from gyrectl.cli.render import emit_json, err, skipped_text
from gyrectl.config import load_config
from gyrectl.coordinator.journal import read_journal
from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir
from gyrectl.sim.calibrate import calibrate, simulator_yaml
from gyrectl.store.jsonl import scan_jsonl


def calibrate_run(run_dir: Path, *, config: Path | None, overrides: list[str], json_: bool) -> None:
    """Prints the section (``--json``: one object, the ``simulator.*`` fields); damaged lines and
    the values that could not be measured are said on stderr."""
    run = RunDir(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"--calibrate: {run_dir} is not a run directory")
    if not run.journal_file.is_file():
        raise UserError(f"--calibrate: {run_dir} has no {run.journal_file.name}: not a run directory, or its "
                        "coordinator never ran")
    config_file = config or run.config_file
    if not config_file.is_file():
        raise UserError(f"--calibrate: no config at {config_file} (give the run's config as CONFIG)")
    cfg = load_config(config_file, overrides)
    journal, metrics = read_journal(run.journal_file), scan_jsonl(run.metrics_file)
    skipped = journal.skipped + metrics.skipped
    if skipped:  # as `gyrectl replay` says it: on stderr, so --json stays data only
        read = (f"{len(journal.records)} record(s) of {run.journal_file.name}, {len(metrics.records)} of "
                f"{run.metrics_file.name}")
        err.print(skipped_text(skipped, read=read), soft_wrap=True)
    if not journal.events:
        raise UserError(f"--calibrate: {run.journal_file} holds no coordinator events: nothing to measure")
    calibration = calibrate(events=journal.events, metrics=metrics.records, config=cfg)
    if calibration.unused_metrics:
        err.print(Text(f"{calibration.unused_metrics} line(s) of {run.metrics_file.name} without an integer step "
                       "and unique_tokens were not used", style="yellow"), soft_wrap=True)
    if json_:
        if calibration.not_measured:
            err.print(Text(f"not measured (the config's values): {', '.join(calibration.not_measured)}",
                           style="yellow"), soft_wrap=True)
        emit_json(calibration.as_dict())
        return
    typer.echo(simulator_yaml(calibration), nl=False)
