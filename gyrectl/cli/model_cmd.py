"""``gyrectl model ...``: models built locally (no hub download)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gyrectl.cli.options import JsonOpt
from gyrectl.cli.render import emit_json, err, out

app = typer.Typer(help="Build and inspect policy models.", no_args_is_help=True)


@app.command("tiny")
def tiny(out_dir: Annotated[Path, typer.Argument(help="Folder to write the model into.", show_default=False)],
         seed: Annotated[int, typer.Option(help="Seed of the random initialisation.")] = 0,
         json_: JsonOpt = False) -> None:
    """Build a tiny random-initialised Qwen2 model folder (no download).

    About 1.3 M parameters, a tokenizer trained locally and a chat template, saved as an
    HF-format folder (safetensors) that vLLM and transformers load like any checkpoint.

    Example:  gyrectl model tiny models/tiny
    """
    from gyrectl.model.tiny import TinyModelSpec, build_tiny_model

    with err.status("training the tokenizer and saving the model..."):
        summary = build_tiny_model(out_dir, TinyModelSpec(seed=seed))
    if json_:
        emit_json(summary)
    else:
        out.print(f"[green]built[/] {escape(str(summary['path']))}: {summary['params']:,} parameters, "
                  f"vocabulary {summary['vocab']}", highlight=False, soft_wrap=True)
