"""``gyrectl config ...``: validate and explain configs without launching anything."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gyrectl.cli.options import ConfigArg, JsonOpt, SetOpt
from gyrectl.cli.render import emit_json, out, table
from gyrectl.config import dump_config, load_config
from gyrectl.config.loader import field_docs
from gyrectl.config.schema import Config
from gyrectl.launch.preflight import check_loop_inputs
from gyrectl.plan.check import require_fit

app = typer.Typer(help="Check, show and document configs.", no_args_is_help=True)


@app.command("check")
def check(config: ConfigArg, set_: SetOpt = [], json_: JsonOpt = False,  # noqa: B006
          config_only: Annotated[bool, typer.Option(
              "--config-only", help="Check the config alone, not the files it names (a config written for "
                                    "another machine's files).")] = False) -> None:
    """Validate CONFIG: types, unknown keys, cross-field arithmetic, and the memory plan where the
    model's shape is known; then, when it names a loop (model.path and rollout.harness_command),
    read what launch would read, relative to this directory: the model folder (config.json, a
    tokenizer), every line of rollout.tasks and eval.tasks, the verifier (imported in a process of
    its own) and the harness command's program and scripts. Exit 2 if anything is wrong, naming
    the field (and FILE:LINE for a bad line); nothing is created.

    Example:  gyrectl config check configs/local-tiny.yaml --set rollout.tasks=my-tasks.jsonl
    """
    cfg = load_config(config, set_)
    memory = require_fit(cfg)
    if not config_only:
        check_loop_inputs(cfg, Path.cwd())
    summary = {"valid": True, "config": str(config), "backend": cfg.cluster.backend,
               "nodes": cfg.cluster.nodes, "cells": cfg.num_cells, "nodes_per_cell": cfg.cells.nodes_per_cell,
               "gpus": cfg.cluster.nodes * cfg.cluster.gpus_per_node, "policy": cfg.scheduler.policy,
               "plan": memory.to_json() if memory else None}
    if json_:
        emit_json(summary)
        return
    out.print(f"[green]ok[/] {escape(str(config))}: {cfg.cluster.backend} backend, "
              f"{cfg.cluster.nodes} worker node(s) = "
              f"{cfg.num_cells} cell(s) of {cfg.cells.nodes_per_cell}, {summary['gpus']} GPU(s), "
              f"{cfg.scheduler.policy} scheduling", highlight=False, soft_wrap=True)
    if memory is None:
        out.print("memory plan: not made (the model's shape is unknown here: gyrectl plan says why)")
    else:
        figures = summary["plan"]
        plan, each = ("memory plan", "GPU") if cfg.cluster.gpus_per_node else ("memory plan (no GPUs)", "process")
        out.print(f"{plan}: training rank {figures['train']['per_gpu_gb']} GB per {each}, server replica "
                  f"{figures['serve']['per_gpu_gb']} GB per {each}, host {figures['host_per_node_gb']} GB per node",
                  highlight=False, soft_wrap=True)


@app.command("show")
def show(config: ConfigArg, set_: SetOpt = []) -> None:  # noqa: B006
    """Print CONFIG resolved, defaults filled in and overrides applied.

    Example:  gyrectl config show configs/local-tiny.yaml --set run.steps=3
    """
    typer.echo(dump_config(load_config(config, set_)), nl=False)


@app.command("docs")
def docs(json_: JsonOpt = False) -> None:
    """List every config field with its type, default and meaning: a table on a terminal, one
    line per field when piped.

    Example:  gyrectl config docs | grep scheduler
    """
    rows = list(_fields(Config, ""))
    if json_:
        emit_json([{"key": k, "type": t, "default": d, "doc": doc} for k, t, d, doc in rows])
        return
    if out.is_terminal:  # as wide as the terminal: every key whole, the rest wraps beside it
        out.print(table("config fields", ["key", "type, default and meaning"],
                        [(key, f"{type_}, default {default}\n{doc}") for key, type_, default, doc in rows],
                        whole=("key",)))
        return
    # Piped (grep, less): one line per field, never wrapped or cut, so a grep shows the whole field.
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for *columns, doc in rows:
        typer.echo("  ".join([*(value.ljust(width) for value, width in zip(columns, widths, strict=True)),
                              " ".join(doc.split())]))


def _fields(cls: type, prefix: str) -> typing.Iterator[tuple[str, str, str, str]]:
    hints = typing.get_type_hints(cls)
    docs_ = field_docs(cls)
    default = cls()
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _fields(hints[f.name], f"{key}.")
        else:
            type_name = getattr(hints[f.name], "__name__", None) or str(hints[f.name]).replace("typing.", "")
            yield key, type_name, repr(getattr(default, f.name)), docs_.get(f.name, "")
