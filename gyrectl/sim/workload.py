"""Workloads for the simulator: what each execution costs.

File format (JSONL, one execution per line, so a recorded real run can be replayed)::

    {"duration_s": 412.5, "tokens": 38100, "task": "django-1234", "calls": 57}

``duration_s``: how long the execution runs when served alone (no contention, no time limit);
``tokens``: tokens it generates and trains (after dedup); ``task`` and ``calls`` are optional and
only carried along. A run that needs more executions than the file has reuses it from the top.

Presets (seeded, synthetic; the shapes are modelling choices, see docs/scheduling.md):

* ``short-tail``: lognormal durations, median 120 s, sigma 0.35 (chat-like tool use).
* ``heavy-tail``: lognormal, median 300 s, sigma 1.1 (agentic terminal/SWE tasks: most finish in
  minutes, a few run for an hour).
* ``near-time-limit``: lognormal with median at 0.6 x the time limit, sigma 0.6: a large share
  reaches the cap.

Tokens are ``duration_s x 100`` tokens/s, jittered +-20 % (context re-read per call included).

A run directory (``runs/NAME``, what ``gyrectl launch`` writes) is replayed as its own workload:
its trained executions in dispatch order, each one's duration alone derived from the load it ran
under (:mod:`gyrectl.sim.recorded`); :func:`write_workload` saves any workload in the format above.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gyrectl.errors import UserError

PRESETS = ("short-tail", "heavy-tail", "near-time-limit")
TOKENS_PER_S = 100.0


@dataclass(frozen=True)
class Workload:
    name: str
    duration_s: tuple[float, ...]
    tokens: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.duration_s)


def preset_workload(name: str, *, size: int, seed: int, time_limit_s: float) -> Workload:
    rng = np.random.default_rng(seed)
    if name == "short-tail":
        durations = rng.lognormal(np.log(120.0), 0.35, size)
    elif name == "heavy-tail":
        durations = rng.lognormal(np.log(300.0), 1.1, size)
    elif name == "near-time-limit":
        durations = rng.lognormal(np.log(0.6 * time_limit_s), 0.6, size)
    else:
        raise UserError(f"unknown workload preset {name!r}; presets: {', '.join(PRESETS)} (or a JSONL file)")
    tokens = durations * TOKENS_PER_S * rng.uniform(0.8, 1.2, size)
    return Workload(name=name, duration_s=tuple(float(d) for d in durations),
                    tokens=tuple(int(t) for t in tokens))


def read_workload(path: Path) -> Workload:
    durations, tokens = [], []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UserError(f"cannot read workload file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"workload file {path} is not UTF-8 text") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            duration, token_count = float(record["duration_s"]), int(record["tokens"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError) as exc:
            raise UserError(f"{path}:{number}: each line needs numbers 'duration_s' and 'tokens' ({exc})") from None
        if not 0 < duration < math.inf or token_count < 0:  # NaN fails the first test too
            raise UserError(f"{path}:{number}: duration_s must be a finite number > 0 and tokens >= 0")
        durations.append(duration)
        tokens.append(token_count)
    if not durations:
        raise UserError(f"workload file {path} holds no executions")
    return Workload(name=Path(path).name, duration_s=tuple(durations), tokens=tuple(tokens))


def write_workload(workload: Workload, path: Path) -> None:
    """``workload`` as the JSONL file :func:`read_workload` reads (to keep or edit a run's own)."""
    Path(path).write_text("".join(json.dumps({"duration_s": d, "tokens": t}) + "\n"
                                  for d, t in zip(workload.duration_s, workload.tokens, strict=True)),
                          encoding="utf-8")


def load_workload(spec: str, *, size: int, seed: int, time_limit_s: float) -> Workload:
    """A preset name, a JSONL file path or a run directory."""
    if spec in PRESETS:
        return preset_workload(spec, size=size, seed=seed, time_limit_s=time_limit_s)
    if not Path(spec).exists():
        raise UserError(f"workload {spec!r} is neither a preset ({', '.join(PRESETS)}) nor an existing file "
                        "or run directory")
    if Path(spec).is_dir():
        # Imported here: recorded.py builds a Workload, so it imports this module.
        from gyrectl.sim.recorded import recorded_workload
        return recorded_workload(Path(spec))
    return read_workload(Path(spec))
