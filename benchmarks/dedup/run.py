"""Data-plane benchmarks: (a) capture store bytes per unique token, (b) tree building + dedup +
packing throughput on one core, (c) tokens trained and train-step time, naive vs packed, on the
tiny model (CPU).

    PYTHONPATH=. python benchmarks/dedup/run.py            # default scale, a few minutes
    PYTHONPATH=. python benchmarks/dedup/run.py --quick    # seconds, for a smoke test

Prints one JSON object (also written to --out). Workloads come from ``synthetic.py`` beside
this file (documented there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # "on one core"

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from gyrectl.capture.prefix import PrefixIndex  # noqa: E402
from gyrectl.capture.store import CaptureWriter, read_store  # noqa: E402
from gyrectl.capture.stored import StoredCall  # noqa: E402
from gyrectl.capture.tree import build_tree  # noqa: E402
from gyrectl.dedup.exact import exact_dedup  # noqa: E402
from gyrectl.dedup.packing import pack  # noqa: E402
from gyrectl.dedup.paths import paths_dedup  # noqa: E402

from synthetic import AgentShape, agent_execution  # noqa: E402

BIG = AgentShape()
MEDIUM = AgentShape(num_calls=120, max_context=120_000, growth=1_500)
QUICK = AgentShape(num_calls=40, max_context=40_000, growth=1_500)
PACK_BUDGET = 1 << 20  # a micro-batch holds the longest (700K) path


def workload(quick: bool):
    if quick:
        return [("quick-0", QUICK, 0)]
    return [("big-0", BIG, 0)] + [(f"medium-{i}", MEDIUM, i + 1) for i in range(3)]


def bench_store_and_dedup(quick: bool) -> dict:
    timers = dict(prefix_index=0.0, build_tree=0.0, exact_dedup=0.0, paths_dedup=0.0, pack=0.0,
                  store_read=0.0)
    naive = unique = 0
    store_bytes = logprob_bytes = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calls.seg"
        trees = []
        with CaptureWriter(path, fsync=False) as writer:
            for execution, shape, seed in workload(quick):
                index, calls = PrefixIndex(), []
                for call in agent_execution(execution, shape, seed):
                    tokens = call.tokens
                    naive += len(tokens)
                    logprob_bytes += 4 * len(call.logprobs)
                    start = time.perf_counter()
                    edit = index.add(tokens)
                    timers["prefix_index"] += time.perf_counter() - start
                    calls.append(StoredCall(edit, len(call.prompt), call.logprobs, call.meta))
                    writer.append_tokens(call.meta, tokens, prompt_len=len(call.prompt), logprobs=call.logprobs)
                start = time.perf_counter()
                trees.append(build_tree(execution, calls))
                timers["build_tree"] += time.perf_counter() - start
                unique += trees[-1].num_tokens
                del calls, index
        store_bytes = path.stat().st_size
        start = time.perf_counter()
        stored = read_store(path).calls
        timers["store_read"] = time.perf_counter() - start
        assert sum(len(c.edit.suffix) for calls in stored.values() for c in calls) == unique
        del stored
    for name, fn in (("exact_dedup", lambda: exact_dedup(trees)), ("paths_dedup", lambda: paths_dedup(trees, j_max=4))):
        start = time.perf_counter()
        weighted = fn()
        timers[name] = time.perf_counter() - start
    start = time.perf_counter()
    batches = pack(exact_dedup(trees), budget=PACK_BUDGET)
    timers["pack"] = time.perf_counter() - start
    from_sequences = timers["prefix_index"] + timers["build_tree"] + timers["exact_dedup"] + timers["pack"]
    from_store = timers["store_read"] + timers["build_tree"] + timers["exact_dedup"] + timers["pack"]
    del weighted
    return {
        "a_store": {"naive_tokens": naive, "unique_tokens": unique, "store_bytes": store_bytes,
                    "bytes_per_unique_token": round(store_bytes / unique, 3),
                    "x_of_4_bytes": round(store_bytes / unique / 4, 3),
                    "x_of_4_bytes_without_logprobs": round((store_bytes - logprob_bytes) / unique / 4, 3),
                    "logprob_bytes": logprob_bytes},
        "b_throughput": {"seconds": {k: round(v, 3) for k, v in timers.items()},
                         "naive_tokens_per_s_from_sequences": round(naive / from_sequences),
                         "naive_tokens_per_s_from_store": round(naive / from_store),
                         "unique_tokens_per_s_from_sequences": round(unique / from_sequences),
                         "micro_batches": len(batches), "packed_tokens": sum(b.num_tokens for b in batches),
                         "executions": len(trees), "calls": sum(len(t.calls) for t in trees)},
    }


def bench_train_step(quick: bool, model_dir: Path | None) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from gyrectl.model.tiny import build_tiny_model
    from gyrectl.train.forward import packed_loss
    from gyrectl.train.packed import packed_tensors

    torch.set_num_threads(1)
    if model_dir is None:
        model_dir = Path(tempfile.mkdtemp()) / "tiny"
        build_tiny_model(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    shape = AgentShape(num_calls=20, max_context=3_900, growth=150, system_tokens=300, completion_tokens=(20, 60),
                       p_subagent=0.0, vocab=4096)
    executions = [list(agent_execution(f"chain-{i}", shape, seed=i)) for i in range(2 if quick else 8)]
    trees = []
    for e in executions:
        index = PrefixIndex()
        trees.append(build_tree(e[0].meta.execution, [
            StoredCall(index.add(c.tokens), len(c.prompt), c.logprobs, c.meta) for c in e]))
    batches = [packed_tensors(b) for b in pack(exact_dedup(trees), budget=4096)]
    calls = [c for e in executions for c in e]
    naive_tokens = sum(len(c.tokens) for c in calls)
    num_completion = sum(len(c.completion) for c in calls)

    def naive_step(calls=calls):
        # Per-call training: every call's prompt + completion is its own sequence, loss on the
        # completion only (token mean over the batch).
        for c in calls:
            ids = torch.from_numpy(c.tokens.astype(np.int64))[None]
            logits = model(input_ids=ids).logits[0, len(c.prompt) - 1:-1]
            loss = torch.nn.functional.cross_entropy(logits, ids[0, len(c.prompt):], reduction="sum")
            (loss / num_completion).backward()

    def packed_step(batches=batches):
        for b in batches:
            packed_loss(model, b).backward()

    timings = {}
    naive_step(calls[-1:])  # warm-up: allocator and kernels at the longest length
    packed_step(batches[:1])
    for name, step in (("naive", naive_step), ("packed", packed_step)):
        start = time.perf_counter()
        step()
        timings[name] = time.perf_counter() - start
        model.zero_grad()
    return {"c_train_step": {
        "executions": len(trees), "calls": len(calls), "naive_tokens": naive_tokens,
        "packed_tokens": sum(t.num_tokens for t in trees), "micro_batches": len(batches),
        "trained_tokens_naive": num_completion, "trained_tokens_packed": int(sum(t.trainable.sum() for t in trees)),
        "naive_step_s": round(timings["naive"], 3), "packed_step_s": round(timings["packed"], 3),
        "speedup": round(timings["naive"] / timings["packed"], 2), "threads": torch.get_num_threads()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--model", type=Path, help="tiny model folder (default: build one, ~5 s)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {**bench_store_and_dedup(args.quick), **bench_train_step(args.quick, args.model)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
