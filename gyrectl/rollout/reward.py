"""The reward hook: the user's verifier, loaded from ``rollout.verifier: FILE.py:FUNCTION``, and
the rule that turns one finished execution into a reward or an infrastructure failure.

The contract of a verifier is ``FUNCTION(task: dict, output: dict) -> float``: a pure function
of the task (one line of ``rollout.tasks``) and the harness's output (the last JSON object it
printed). It may raise. The coordinator calls :func:`score_execution`, which decides:

==========================================  =================================================
what happened                               result
==========================================  =================================================
an output, the verifier returns a number    ``ok``, that reward (a timed-out execution too:
                                            it is scored on the output it printed)
the verifier raises (or returns no finite   retried; after ``attempts`` tries
number) every time                          ``infra_failure`` with the last error
no output, stopped at the time limit        scored on ``{}``: running out of time is the
                                            policy's doing, so the verifier decides (the
                                            example verifier gives 0)
no output, the harness exited on its own    ``infra_failure``: a harness that crashed without
                                            printing cannot be told apart from a dead gateway
                                            or node, and a false zero reward would train the
                                            policy on the infrastructure's failure
==========================================  =================================================

An ``infra_failure`` is never trained and never a zero reward. A harness that wants a failure
the *policy* caused to be scored prints an output first (``{"answer": "", "error": ...}``).

``python -m gyrectl.rollout.reward FILE.py:FUNCTION BASE_DIR`` loads the verifier as the head
will and prints ``{"problem": "..."}`` (empty when the function is there): the pre-flight
(:mod:`gyrectl.launch.preflight`) runs it in a process of its own.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import math
import numbers
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gyrectl.errors import ConfigError

Verifier = Callable[[dict[str, Any], dict[str, Any]], float]
FIELD = "rollout.verifier"


@dataclass(frozen=True)
class Scored:
    reward: float | None
    """The verifier's reward; ``None`` for an infrastructure failure."""
    status: Literal["ok", "infra_failure"]
    error: str = ""
    """Why it is an infrastructure failure (the verifier's last error, or the missing output)."""
    attempts: int = 0
    """Times the verifier was called."""


def load_verifier(spec: str, base_dir: str | Path) -> Verifier:
    """The function named by ``FILE.py:FUNCTION`` (``FILE`` relative to ``base_dir``, the launch
    directory). The file is loaded as a standalone module under a private name (its folder is
    not put on ``sys.path``: it imports installed packages only)."""
    file_part, sep, name = spec.rpartition(":")
    if not sep or not file_part or not name:
        raise ConfigError(FIELD, f"expected FILE.py:FUNCTION, got {spec!r}")
    path = Path(base_dir) / file_part
    if not path.is_file():
        raise ConfigError(FIELD, f"no file {path} (from {spec!r}, relative to {base_dir})")
    module_name = "_gyrectl_verifier_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickle look a module up by name
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise ConfigError(FIELD, f"loading {path} failed: {type(exc).__name__}: {exc}") from exc
    function = getattr(module, name, None)
    if not callable(function):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                       and getattr(v, "__module__", None) == module_name)
        raise ConfigError(FIELD, f"{path} has no function {name!r} (functions defined there: "
                                 f"{', '.join(found) or 'none'})")
    return function


def score_execution(verifier: Verifier, task: dict[str, Any], output: dict[str, Any] | None, *,
                    timed_out: bool = False, attempts: int = 3) -> Scored:
    """Scores one finished execution; see the module docstring for the rule."""
    if output is None:
        if not timed_out:
            return Scored(None, "infra_failure", "the harness exited without printing a JSON object")
        output = {}
    error = ""
    for attempt in range(1, attempts + 1):
        try:
            # Copies: a verifier that mutated its arguments and then raised would hand the retry
            # different inputs.
            value = verifier(copy.deepcopy(task), copy.deepcopy(output))
        except Exception as exc:
            error = f"verifier raised {type(exc).__name__}: {exc}"
            continue
        if isinstance(value, numbers.Real) and math.isfinite(value):  # bools too: True is 1.0
            return Scored(float(value), "ok", attempts=attempt)
        error = f"verifier returned {value!r}, not a finite number"
    return Scored(None, "infra_failure", f"{error} ({attempts} attempts)", attempts=attempts)


def _report_verifier_problem(spec: str, base_dir: str) -> None:
    """Loads the verifier and prints what is wrong with it as JSON on stdout, which it keeps for
    that: what the user's module prints at import goes to stderr."""
    verdict = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        load_verifier(spec, base_dir)
        problem = ""
    except ConfigError as exc:
        problem = str(exc)
    verdict.write(json.dumps({"problem": problem}))
    verdict.close()


if __name__ == "__main__":
    _report_verifier_problem(*sys.argv[1:3])
    # Not a normal exit: a thread the module started at import must not keep the process alive.
    os._exit(0)
