"""``gyrectl plan``: the memory plan of a config, before anything is submitted."""

from __future__ import annotations

import sys

from rich.markup import escape

from gyrectl.cli.options import ConfigArg, JsonOpt, SetOpt
from gyrectl.cli.render import emit_json, err, out, table
from gyrectl.config import load_config
from gyrectl.errors import EXIT_USAGE
from gyrectl.plan.check import require_plan
from gyrectl.plan.memory import MemoryPlan, gb


def plan(config: ConfigArg, set_: SetOpt = [], json_: JsonOpt = False) -> None:  # noqa: B006
    """Show whether CONFIG's model fits: GB per GPU of a training rank and of a server replica,
    part by part, and host memory per node (exit 2 if something does not fit). With no GPUs
    (cluster.gpus_per_node: 0) the parts are host memory per process.

    The model's shape comes from model.path/config.json, or from a table of published shapes
    when the folder is not on this machine (Qwen2.5-0.5B/1.5B/7B, Qwen3-8B/32B). GPU checks need
    cluster.gpu_memory_gb, host checks cluster.mem_per_node_gb. The formulas, their assumptions
    and how they compare with published and measured figures: docs/memory.md.

    Examples:

      gyrectl plan configs/example-32nodes.yaml

      gyrectl plan configs/example-32nodes.yaml --set training.micro_batch_tokens=65536 --json
    """
    cfg = load_config(config, set_)
    memory = require_plan(cfg)
    if json_:
        emit_json(memory.to_json())
    else:
        shape = memory.shape
        out.print(escape(f"{shape.name}: {shape.params / 1e9:.2f} B parameters, {shape.layers} layers, "
                         f"hidden {shape.hidden}, vocabulary {shape.vocab}"), highlight=False)
        gpus = cfg.cluster.gpus_per_node > 0
        parts = list(dict.fromkeys([*memory.train, *memory.serve]))
        rows = [(part, _gb(memory.train.get(part)), _gb(memory.serve.get(part))) for part in parts]
        rows.append((f"total per {'GPU' if gpus else 'process'}", _gb(sum(memory.train.values())),
                     _gb(sum(memory.serve.values()))))
        out.print(table(_title(memory, gpus=gpus), ["part", "training rank", "server replica"], rows))
        together = "" if gpus else " (a training rank and a server replica together)"
        out.print(f"host memory per node: {gb(memory.host_per_node)} GB{together}", highlight=False)
        unchecked = [name for name, size in (("cluster.gpu_memory_gb", cfg.cluster.gpu_memory_gb if
                                                cfg.cluster.gpus_per_node else 1),
                                               ("cluster.mem_per_node_gb", cfg.cluster.mem_per_node_gb)) if not size]
        note = f" (not checked: {' and '.join(unchecked)} unset)" if unchecked else ""
        out.print(("[green]fits[/]" if memory.fits else "[bold red]does not fit[/]") + escape(note), highlight=False)
    for problem in memory.problems:
        err.print(f"[bold red]error:[/] {escape(problem.field)}: {escape(problem.message)}", highlight=False,
                  soft_wrap=True)
    if not memory.fits:
        sys.exit(EXIT_USAGE)


def _title(memory: MemoryPlan, *, gpus: bool) -> str:
    """What the table counts: GB per GPU, or on a CPU-only config host memory per process (each
    rank and each server replica is one process there)."""
    if gpus:
        return (f"GB per GPU: a training rank (FSDP2 over {memory.train_ranks}) and a server replica "
                f"({memory.gpus_per_replica} GPU(s), {memory.replicas_per_cell} per cell)")
    return (f"GB of host memory per process (no GPUs): a training rank (FSDP2 over {memory.train_ranks} "
            f"process(es)) and a server replica ({memory.replicas_per_cell} per cell)")


def _gb(value: float | None) -> str:
    return "" if value is None else f"{gb(value):.3f}"
