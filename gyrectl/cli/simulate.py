"""``gyrectl simulate``: what a scheduling policy would do with a config and a workload, on a
simulated cluster (virtual clock, no GPUs), driving the coordinator's real loop and policy code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gyrectl.cli.options import JsonOpt, SetOpt
from gyrectl.cli.render import emit_json
from gyrectl.cli.simulate_calibrate import calibrate_run
from gyrectl.cli.timeline import draw_timeline
from gyrectl.config import load_config
from gyrectl.coordinator.state import initial_state, limits_from_config
from gyrectl.errors import UserError
from gyrectl.sim.run import simulate
from gyrectl.sim.workload import PRESETS


def simulate_command(
    config: Annotated[Path | None, typer.Argument(
        help="YAML config file (see configs/); with --calibrate, default RUN_DIR/config.yaml.",
        show_default=False)] = None,
    workload: Annotated[str, typer.Option("--workload", "-w", help=f"Preset ({', '.join(PRESETS)}), a JSONL "
                                          "file (one execution per line with duration_s and tokens) or a run "
                                          "directory (runs/NAME): its trained executions, each one's duration "
                                          "alone derived from the load it ran under.")] = "heavy-tail",
    policy: Annotated[str | None, typer.Option("--policy", "-p", help="elastic | colocate | async "
                                               "(default: scheduler.policy of the config).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the workload preset (default: run.seed).")] = None,
    timeline: Annotated[Path | None, typer.Option("--timeline", help="Write a PNG of cell roles over time.")] = None,
    calibrate: Annotated[Path | None, typer.Option(
        "--calibrate", metavar="RUN_DIR", help="Print the simulator: section measured on this finished run "
        "(YAML to paste; --json: the simulator.* fields) instead of simulating.")] = None,
    set_: SetOpt = [],  # noqa: B006
    json_: JsonOpt = False,
) -> None:
    """Simulate a run: makespan, executions trained per hour, GPU idle fraction, switches, staleness.

    Example:  gyrectl simulate configs/sim-32nodes.yaml --workload heavy-tail --policy colocate --json

    A run's own workload:  gyrectl simulate configs/local-tiny.yaml --workload runs/demo --policy colocate

    Calibrate on a finished run:  gyrectl simulate --calibrate runs/demo > simulator.yaml
    """
    if calibrate is not None:
        calibrate_run(calibrate, config=config, overrides=list(set_), json_=json_)
        return
    if config is None:
        raise UserError("Missing argument 'CONFIG': a YAML config file (only --calibrate RUN_DIR runs without one)")
    overrides = list(set_) + ([f"scheduler.policy={policy}"] if policy else [])
    cfg = load_config(config, overrides)
    sim = simulate(cfg, workload_spec=workload, seed=seed)
    if timeline is not None:
        draw_timeline(timeline, initial=initial_state(limits_from_config(cfg)), events=sim.events,
                      title=f"{cfg.scheduler.policy} on {workload} ({cfg.cluster.nodes} nodes, {cfg.num_cells} cells)")
    result = sim.result.as_dict()
    if json_:
        emit_json(result)
        return
    typer.echo(f"{result['policy']} on {result['workload']}: makespan {result['makespan_s'] / 3600:.2f} h "
               f"(lower bound {result['lower_bound_s'] / 3600:.2f} h), {result['throughput_per_hour']:.0f} executions "
               f"trained/hour, GPU idle {100 * result['gpu_idle_fraction']:.1f} %, {result['switches']} switches, "
               f"{result['time_per_step_s']:.0f} s per step (simulated)")
