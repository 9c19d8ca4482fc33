"""Building a step's batch as the run ages: reading one batch's calls from a capture store of S
steps and of 10 S steps, through the store's index by execution against a whole read filtered to
the batch (what a training rank did before the index), side by side in one run.

    PYTHONPATH=. python benchmarks/dedup/capture_index.py            # about a minute
    PYTHONPATH=. python benchmarks/dedup/capture_index.py --quick    # seconds, a smoke test

Each step's batch is ``--batch`` executions of the synthetic agent shape below (``synthetic.py``);
the batch read is always the last step's. Prints one JSON object (also written to --out).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gyrectl.capture.index import index_path  # noqa: E402
from gyrectl.capture.store import CaptureWriter, read_store  # noqa: E402

from synthetic import AgentShape, agent_execution  # noqa: E402

SHAPE = AgentShape(num_calls=30, max_context=30_000, growth=1_000, system_tokens=500)
ROUNDS = 5


def write_steps(writer: CaptureWriter, steps: range, batch: int, *, period: int) -> None:
    """Seeds repeat every ``period`` steps, so the last step of either store holds the same calls."""
    for step in steps:
        for i in range(batch):
            for call in agent_execution(f"s{step}-e{i}", SHAPE, seed=(step % period) * 1000 + i):
                writer.append_tokens(call.meta, call.tokens, prompt_len=len(call.prompt), logprobs=call.logprobs)


def timed(read) -> float:
    """Median seconds of ``ROUNDS`` reads."""
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(store: Path, *, last_step: int, batch: int) -> dict:
    wanted = {f"s{last_step}-e{i}" for i in range(batch)}
    indexed = read_store(store, executions=wanted)
    assert set(indexed.calls) == wanted and not indexed.skipped
    return {
        "store_mb": round(store.stat().st_size / 2**20, 2),
        "index_kb": round(index_path(store).stat().st_size / 2**10, 1),
        "calls_in_batch": sum(len(calls) for calls in indexed.calls.values()),
        "indexed_s": round(timed(lambda: read_store(store, executions=wanted)), 5),
        "whole_read_s": round(timed(lambda: {e: c for e, c in read_store(store).calls.items() if e in wanted}), 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="steps in the smaller store (the larger has 10x)")
    parser.add_argument("--batch", type=int, default=8, help="executions per step")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    steps, batch = (1, 2) if args.quick else (args.steps, args.batch)
    with tempfile.TemporaryDirectory() as directory:
        store, small = Path(directory) / "calls.seg", Path(directory) / "small" / "calls.seg"
        small.parent.mkdir()
        with CaptureWriter(store, fsync=False) as writer:
            write_steps(writer, range(steps), batch, period=steps)
            shutil.copy(store, small)
            shutil.copy(index_path(store), index_path(small))
            write_steps(writer, range(steps, 10 * steps), batch, period=steps)
        results = {"steps": {"1x": steps, "10x": 10 * steps}, "batch_executions": batch,
                   "1x": measure(small, last_step=steps - 1, batch=batch),
                   "10x": measure(store, last_step=10 * steps - 1, batch=batch)}
    for way in ("indexed_s", "whole_read_s"):
        results[f"{way[:-2]}_growth_10x"] = round(results["10x"][way] / results["1x"][way], 2)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
