"""The learning benchmark: ``configs/local-smollm2.yaml``'s whole loop on this machine, then its
learning curve (``curve.py``: held-out pass@1 of v0 against the final weights with a 95 % paired
bootstrap interval over tasks; reward, groups without signal and wall time per step).

    PYTHONPATH=. .venv/bin/python -m benchmarks.learning --steps 60 --every 20   # ~1 h on 2 cores
    PYTHONPATH=. .venv/bin/python -m benchmarks.learning --steps 60 --set training.lr=2e-6

Needs ``models/smollm2`` (``scripts/setup.sh`` builds it). The run directory stays under
``--root`` (``runs/`` by default) for ``gyrectl status`` and TensorBoard; the report is printed as
Markdown and written beside it as ``learning.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.learning.curve import markdown, report

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "local-smollm2.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=20, help="eval.every_steps (v0 and the last are always evaluated)")
    parser.add_argument("--root", type=Path, default=REPO / "runs")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    name = f"learning-{time.strftime('%Y%m%d-%H%M%S')}"
    sets = [f"run.name={name}", f"run.output_root={args.root}", f"run.steps={args.steps}",
            f"eval.every_steps={args.every}", *args.overrides]
    command = [sys.executable, "-m", "gyrectl", "launch", str(CONFIG), "--wait",
               *(part for item in sets for part in ("--set", item))]
    print("$ " + " ".join(command), file=sys.stderr)
    started = time.monotonic()
    launched = subprocess.run(command, cwd=REPO, check=False)
    run_dir = args.root / name
    if launched.returncode != 0:
        print(f"the run failed (exit {launched.returncode}); see gyrectl status {run_dir}", file=sys.stderr)
        return launched.returncode
    result = report(run_dir) | {"wall_s": round(time.monotonic() - started, 1), "overrides": sets}
    (run_dir / "learning.json").write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    print(f"\nwall time {result['wall_s']:.0f} s; run directory {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
