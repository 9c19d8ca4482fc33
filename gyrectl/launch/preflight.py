"""The pre-flight: what a run's loop reads from the launch directory, read before anything is
created or submitted (``gyrectl config check`` and ``gyrectl launch``), with the code the head
reads it with later, so that a bad input is refused here rather than after the run started:

    model.path                config.json and a tokenizer (tokenizer.json / tokenizer_config.json)
    training.kl_reference     with training.kl_coef > 0: config.json, and the vocabulary of model.path
    rollout.tasks             every line, by load_tasks (the head's reader)
    eval.tasks                the same, when the run evaluates (eval.tasks set)
    rollout.verifier          loaded by load_verifier in a process of its own: what the module does
                              at import stays there, and an import that hangs is stopped
    rollout.harness_command   its program, and each of its .py scripts
    tracking.wandb, scheduler.grow_running_step, rollout.sandbox: what this machine and a real
                              allocation can do

Each problem names its field (and ``FILE:LINE`` for a line of a file); all are reported at once.
The launch directory is where ``gyrectl launch`` runs: the head runs there too (locally as a
process, on Slurm in the directory sbatch was called from, which the shared file system shows
the nodes).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from gyrectl.cluster.backend import backend_for
from gyrectl.config.schema import Config
from gyrectl.errors import UserError
from gyrectl.rollout.reward import load_verifier
from gyrectl.rollout.sandbox import Sandbox
from gyrectl.rollout.tasks import load_tasks

VERIFIER_LOAD_TIMEOUT_S = 60.0
"""How long loading the verifier may take: a module that imports a heavy package (torch takes
seconds) passes; one that does something at import that never ends is stopped and named."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def runnable(config: Config) -> bool:
    """Whether the config describes a loop to run (a model and a harness), not just an allocation."""
    return bool(config.model.path and config.rollout.harness_command)


def harness_argv(command: tuple[str, ...], launch_dir: Path) -> list[str]:
    """The harness command as run: ``python`` is the interpreter gyrectl runs under (a login
    node's ``python`` may be another one, without the harness's packages), and a relative path
    (a ``.py`` script, a program such as ``bin/agent``) is taken from the launch directory, since
    each execution runs in a working directory of its own."""
    program, *args = command
    if program in ("python", "python3"):
        program = sys.executable
    elif os.sep in program and not os.path.isabs(program):
        program = str(launch_dir / program)
    return [program] + [str(launch_dir / a) if a.endswith(".py") and not os.path.isabs(a) else a for a in args]


def check_loop_inputs(config: Config, launch_dir: Path) -> None:
    """Refuses (one ``UserError`` listing every problem) a runnable config whose inputs the head
    could not read; a config without a loop has none to check."""
    if not runnable(config):
        return
    problems = []
    for check in _CHECKS:
        try:
            check(config, launch_dir)
        except UserError as exc:
            problems.append(str(exc))
    if len(problems) == 1:
        raise UserError(problems[0])
    if problems:
        raise UserError(f"{len(problems)} problems with the run's inputs:\n" + "\n".join(f"  {p}" for p in problems))


def verifier_problem(spec: str, launch_dir: Path, *, timeout_s: float = VERIFIER_LOAD_TIMEOUT_S) -> str:
    """What keeps the head from loading the verifier ``spec`` (empty: nothing), found by
    :func:`~gyrectl.rollout.reward.load_verifier` in a process of its own (in a session of its
    own, so that whatever the module started is stopped with it at ``timeout_s``)."""
    argv = [sys.executable, "-m", load_verifier.__module__, spec, str(launch_dir)]
    with subprocess.Popen(argv, cwd=launch_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True) as child:
        try:
            verdict, stderr = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return (f"rollout.verifier: loading {spec} did not finish in {timeout_s:g} s (does the module "
                    "do something at import that does not end?)")
    try:
        return json.loads(verdict)["problem"]
    except (ValueError, KeyError, TypeError):  # the process ended before it could say (sys.exit, a crash)
        last = [line for line in stderr.splitlines() if line.strip()][-5:]
        return (f"rollout.verifier: loading {spec} ended its process (exit code {child.returncode})"
                + "".join(f"\n    {line}" for line in last))


def _check_settings_here(config: Config, launch_dir: Path) -> None:
    """Settings this machine, or a real allocation, cannot honour."""
    if config.tracking.wandb != "off" and importlib.util.find_spec("wandb") is None:
        raise UserError("tracking.wandb: the wandb package is not installed here (pip install wandb, "
                        "or set tracking.wandb=off)")
    if config.scheduler.grow_running_step:
        raise UserError("scheduler.grow_running_step: only `gyrectl simulate` models a training step that grows "
                        "while it runs; a real step's rendezvous is fixed when it starts (set it to false)")
    if backend_for(config).head_runs_here:  # else the head checks on its own node
        Sandbox(config.rollout.sandbox).require()


def _check_model(config: Config, launch_dir: Path) -> None:
    folder = launch_dir / config.model.path
    if not (folder / "config.json").is_file():
        hint = " (build the tiny one: gyrectl model tiny models/tiny)" if config.model.path == "models/tiny" else ""
        raise UserError(f"model.path: {folder} is not an HF model folder (no config.json){hint}")
    _read_json_object(folder / "config.json")
    tokenizer = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not tokenizer:
        raise UserError(f"model.path: {folder} has no tokenizer (neither {' nor '.join(TOKENIZER_FILES)})")
    for path in tokenizer:
        _read_json_object(path)


def _check_kl_reference(config: Config, launch_dir: Path) -> None:
    """The KL penalty's reference model (loaded by every training rank only once a step starts)."""
    training = config.training
    if training.kl_coef <= 0 or not training.kl_reference:  # none, or v0 = model.path (checked above)
        return
    folder = launch_dir / training.kl_reference
    if not (folder / "config.json").is_file():
        raise UserError(f"training.kl_reference: {folder} is not an HF model folder (no config.json); it names the "
                        "KL penalty's reference model (leave it empty for the run's starting weights, model.path)")
    vocab = _read_json_object(folder / "config.json", field="training.kl_reference").get("vocab_size")
    policy = launch_dir / config.model.path / "config.json"
    policy_vocab = _read_json_object(policy).get("vocab_size") if policy.is_file() else None
    if isinstance(vocab, int) and isinstance(policy_vocab, int) and vocab != policy_vocab:
        raise UserError(f"training.kl_reference: {folder} has a vocabulary of {vocab} tokens but model.path's has "
                        f"{policy_vocab}: the reference must score the policy's token ids (the same tokenizer)")


def _read_json_object(path: Path, *, field: str = "model.path") -> dict:
    try:
        value = json.loads(path.read_bytes())
    except OSError as exc:
        raise UserError(f"{field}: cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:  # not JSON, or not UTF-8
        raise UserError(f"{field}: {path} is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise UserError(f"{field}: {path} is not a JSON object")
    return value


def _check_tasks(config: Config, launch_dir: Path) -> None:
    load_tasks(launch_dir / config.rollout.tasks)


def _check_eval_tasks(config: Config, launch_dir: Path) -> None:
    if config.eval.evaluates:
        load_tasks(launch_dir / config.eval.tasks, field="eval.tasks")


def _check_verifier(config: Config, launch_dir: Path) -> None:
    if problem := verifier_problem(config.rollout.verifier, launch_dir):
        raise UserError(problem)


def _check_harness(config: Config, launch_dir: Path) -> None:
    program, *args = harness_argv(config.rollout.harness_command, launch_dir)
    # Under apptainer the program is looked up in the image, which this machine does not search.
    if config.rollout.sandbox != "apptainer" and shutil.which(program) is None:
        raise UserError(f"rollout.harness_command: no program {program!r} here (neither on PATH nor an "
                        f"executable file)")
    for script in args:
        if script.endswith(".py") and not Path(script).is_file():
            raise UserError(f"rollout.harness_command: no script {script} (a relative path is taken from the "
                            f"launch directory, {launch_dir})")


_CHECKS: tuple[Callable[[Config, Path], None], ...] = (
    _check_settings_here, _check_model, _check_kl_reference, _check_tasks, _check_eval_tasks, _check_verifier,
    _check_harness)
