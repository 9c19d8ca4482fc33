"""``gyrectl``: launch and watch elastic RL runs of LLM agents on Slurm.

Exit codes are decided here and only here: 0 ok, 1 runtime or cluster failure, 2 usage or config
error. A user mistake prints a readable message, never a traceback; ``GYRECTL_TRACEBACK=1`` shows
the traceback of any error for debugging.
"""

from __future__ import annotations

import os
import sys
import traceback

import typer
from rich.markup import escape

from gyrectl.cli import config_cmd, launch_cmd, model_cmd, plan_cmd, replay_cmd, simulate, status_cmd
from gyrectl.cli.render import err
from gyrectl.errors import EXIT_RUNTIME, GyreError

app = typer.Typer(
    name="gyrectl",
    help=("Elastic RL training of long-horizon LLM agents on Slurm: whole nodes move between vLLM "
          "rollout servers and torchrun training steps at run time.\n\n"
          "Start here:  gyrectl launch configs/local-tiny.yaml   then   gyrectl status"),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
)
app.command("launch")(launch_cmd.launch)
app.command("status")(status_cmd.status)
app.command("stop")(status_cmd.stop)
app.command("plan")(plan_cmd.plan)
app.command("simulate")(simulate.simulate_command)
app.command("replay")(replay_cmd.replay)
app.add_typer(config_cmd.app, name="config")
app.add_typer(model_cmd.app, name="model")


def main(argv: list[str] | None = None) -> None:
    show_traceback = os.environ.get("GYRECTL_TRACEBACK", "") not in ("", "0")
    try:
        app(args=argv, prog_name="gyrectl")
    except GyreError as exc:
        if show_traceback:
            traceback.print_exc()
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # a bug: say so briefly, show the traceback only on request
        if show_traceback:
            traceback.print_exc()
        err.print(f"[bold red]internal error:[/] {type(exc).__name__}: {escape(str(exc))}\n"
                  "(set GYRECTL_TRACEBACK=1 to see the traceback, and please report it)",
                  highlight=False, soft_wrap=True)
        sys.exit(EXIT_RUNTIME)


if __name__ == "__main__":
    main()
