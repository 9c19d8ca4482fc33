"""The memory plan: per-GPU memory of a training rank and of a server replica, host memory per
node, and whether they fit -- a pure function of the config and the model's shape.

Training rank (FSDP2 over the R GPUs of the smallest group that may train: one cell under
``elastic``, ``scheduler.async_train_cells`` cells under ``async``, every cell under ``colocate``):

    parameters        4 P / R        float32 master weights, sharded
    gradients         4 P / R        float32, sharded (reduce-scattered in float32)
    optimizer         8 P / R        AdamW's two float32 moments, sharded
    reference         c P / R        with ``training.kl_coef > 0``: the KL penalty's frozen reference
                                     model, sharded in the compute dtype (its forward runs before
                                     the policy's, whose gathered weights and activations it does
                                     not meet: only its shards add to the peak)
    gathered_weights  c (E + 2 Lp) + 4 Lp
                                     the unsharded root (embedding, head) and two layers (one
                                     prefetched) in the compute dtype, one layer's float32 gradient
    activations       T c A L        A = 7 h + 3 kv + 4 I values kept per token and layer (below)
                      T c (h L + A)  with activation checkpointing: each layer's input, and one
                                     layer recomputed at a time
    logits            T V (c + 8)    the head's output, its float32 copy and that copy's gradient
                                     (an upper bound: the head runs only at sampled tokens' parents)
                      T V (c + 12)   with ``training.entropy_coef > 0``: the entropy's own gradient
                                     before autograd adds it to the logits' (its softmax is made in
                                     chunks of 2^24 values, :mod:`gyrectl.train.regularizers`)
    attention_mask    T^2            the dense bool tree mask sdpa takes (CPU); 8 (T/128)^2 for
                                     FlexAttention's block mask (GPU)
    runtime           2 GB GPU, 0.5 GB CPU: CUDA context, NCCL buffers, fragmentation (assumed)

P parameters, c bytes of ``model.dtype``, T ``training.micro_batch_tokens``, L layers, h hidden,
kv = KV heads x head dim, I the MLP's width, V the vocabulary, E the embedding (and untied head)
parameters, Lp one layer's. A counts what autograd keeps per token in a Qwen2/Llama layer: the
layer input, the normed input, q, k, v, rotated q and k, the attention output, the second norm's
input and output, and the MLP's gate, up, activation and product (the 34 s b h of Korthikanti et
al. 2022 for GPT-3's layer, without dropout masks and with a gated MLP). The 16 bytes per
parameter of the first three rows are ZeRO's 16 Psi for mixed-precision Adam (Rajbhandari et al.
2020).

Server replica (G = tensor_parallel x pipeline_parallel GPUs):

    weights           c P / G
    kv_cache          concurrency x max_len x 2 (L / PP) max(KV / TP, 1) head_dim c
                      every session of ``rollout.concurrency_per_server`` at full
                      ``max-model-len`` (vLLM preempts sessions beyond what its cache holds)
    runtime           2 GB (CUDA graphs, sampler, activations of a forward; assumed)

checked against ``gpu-memory-utilization`` (vLLM's default 0.9) x ``cluster.gpu_memory_gb``.

Host per node: on GPU nodes the larger of a sleeping engine's weights (``rollout.sleep_level`` 1:
the node's share, c P / G per GPU) and an offloaded resident trainer (12 P / R per GPU: weights
and optimizer state, and c P / R more for a KL reference model); on CPU nodes every role lives
in host memory, so a training rank and a server add up.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gyrectl.config.placement import engine_gpus, replicas_per_cell
from gyrectl.config.schema import Config
from gyrectl.plan.shape import ModelShape

GB = 1e9
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
GPU_RUNTIME, CPU_RUNTIME = 2 * GB, 0.5 * GB
FLEX_BLOCK = 128
VLLM_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default share of each GPU for weights, activations and KV cache."""


@dataclass(frozen=True)
class Problem:
    field: str
    message: str


@dataclass(frozen=True)
class MemoryPlan:
    shape: ModelShape
    train_ranks: int
    train: dict[str, float]
    """Part -> bytes per GPU (per process on CPU) of a training rank."""
    serve: dict[str, float]
    """Part -> bytes per GPU of a server replica."""
    replicas_per_cell: int
    gpus_per_replica: int
    host_per_node: float
    problems: tuple[Problem, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "train": {"per_gpu_gb": gb(sum(self.train.values())), "ranks": self.train_ranks,
                      "parts": {k: gb(v) for k, v in self.train.items()}},
            "serve": {"per_gpu_gb": gb(sum(self.serve.values())), "replicas_per_cell": self.replicas_per_cell,
                      "gpus_per_replica": self.gpus_per_replica, "parts": {k: gb(v) for k, v in self.serve.items()}},
            "host_per_node_gb": gb(self.host_per_node),
            "problems": [{"field": p.field, "message": p.message} for p in self.problems],
            "model": {"name": self.shape.name, "params": self.shape.params, "layers": self.shape.layers,
                      "hidden": self.shape.hidden, "vocab": self.shape.vocab},
        }


def gb(value: float) -> float:
    return round(value / GB, 3)


def memory_plan(config: Config, shape: ModelShape) -> MemoryPlan:
    train, ranks = train_parts(config, shape)
    serve = serve_parts(config, shape)
    plan = MemoryPlan(shape=shape, train_ranks=ranks, train=train, serve=serve,
                      replicas_per_cell=replicas_per_cell(config), gpus_per_replica=engine_gpus(config),
                      host_per_node=host_per_node(config, shape, train=train, serve=serve, ranks=ranks))
    return dataclasses.replace(plan, problems=tuple(problems(config, plan)))


def training_ranks(config: Config) -> int:
    """GPUs (processes on CPU) of the smallest training group the scheduler may start."""
    cells = {"elastic": 1, "async": config.scheduler.async_train_cells, "colocate": config.num_cells}
    return cells[config.scheduler.policy] * config.cells.nodes_per_cell * max(config.cluster.gpus_per_node, 1)


def train_parts(config: Config, shape: ModelShape) -> tuple[dict[str, float], int]:
    ranks, c = training_ranks(config), DTYPE_BYTES[config.model.dtype]
    tokens, p = config.training.micro_batch_tokens, shape.params
    per_token_layer = 7 * shape.hidden + 3 * shape.kv_dim + 4 * shape.intermediate
    if config.training.activation_checkpointing:
        activations = tokens * c * (shape.hidden * shape.layers + per_token_layer)
    else:
        activations = tokens * c * per_token_layer * shape.layers
    root = shape.params - shape.layers * shape.layer_params
    gpu = config.cluster.gpus_per_node > 0
    mask = 8 * (-(-tokens // FLEX_BLOCK)) ** 2 if gpu else tokens ** 2
    sharded = {"parameters": 4 * p / ranks, "gradients": 4 * p / ranks, "optimizer": 8 * p / ranks}
    if config.training.kl_coef > 0:
        sharded["reference"] = reference_bytes(config, shape) / ranks
    logits_bytes = c + 8 + (4 if config.training.entropy_coef > 0 else 0)
    return {
        **sharded,
        "gathered_weights": c * (root + 2 * shape.layer_params) + 4 * shape.layer_params,
        "activations": activations, "logits": tokens * shape.vocab * logits_bytes, "attention_mask": mask,
        "runtime": GPU_RUNTIME if gpu else CPU_RUNTIME,
    }, ranks


def reference_bytes(config: Config, shape: ModelShape) -> float:
    """The KL penalty's reference model, whole, in the compute dtype (0 without ``kl_coef``); the
    policy's shape stands for it (it must share the tokenizer; a reference of another size is
    not planned)."""
    return DTYPE_BYTES[config.model.dtype] * shape.params if config.training.kl_coef > 0 else 0.0


def max_model_len(config: Config, shape: ModelShape) -> int:
    given = config.rollout.engine_arg("max-model-len")
    return int(given) if given is not None else shape.max_positions


def serve_parts(config: Config, shape: ModelShape) -> dict[str, float]:
    model, c = config.model, DTYPE_BYTES[config.model.dtype]
    gpus = engine_gpus(config)
    kv_heads_per_gpu = max(shape.kv_heads / model.tensor_parallel, 1)
    kv_per_token = 2 * (shape.layers / model.pipeline_parallel) * kv_heads_per_gpu * shape.head_dim * c
    tokens = config.rollout.concurrency_per_server * max_model_len(config, shape)
    return {"weights": c * shape.params / gpus, "kv_cache": tokens * kv_per_token,
            "runtime": GPU_RUNTIME if config.cluster.gpus_per_node else CPU_RUNTIME}


def host_per_node(config: Config, shape: ModelShape, *, train: dict[str, float], serve: dict[str, float],
                  ranks: int) -> float:
    gpus = config.cluster.gpus_per_node
    if gpus == 0:
        return sum(train.values()) + sum(serve.values())
    sleeping_engine = gpus * serve["weights"] if config.rollout.sleep_level == 1 else 0.0
    offloaded_trainer = gpus * (12 * shape.params + reference_bytes(config, shape)) / ranks \
        if config.training.resident else 0.0
    return max(sleeping_engine, offloaded_trainer)


def problems(config: Config, plan: MemoryPlan) -> list[Problem]:
    found = []
    gpu_bytes = config.cluster.gpu_memory_gb * GB
    if config.cluster.gpus_per_node and gpu_bytes:
        found += _train_problems(config, plan, gpu_bytes)
        found += _serve_problems(config, plan, gpu_bytes)
    if config.cluster.mem_per_node_gb and plan.host_per_node > config.cluster.mem_per_node_gb * GB:
        field = "rollout.sleep_level" if config.cluster.gpus_per_node and config.rollout.sleep_level == 1 \
            else "cluster.mem_per_node_gb"
        found.append(Problem(field, (
            f"a node needs {gb(plan.host_per_node)} GB of host memory but cluster.mem_per_node_gb is "
            f"{config.cluster.mem_per_node_gb}" + (" (sleep_level 2 keeps no weights in host memory)"
                                                   if field == "rollout.sleep_level" else ""))))
    return found


def _train_problems(config: Config, plan: MemoryPlan, gpu_bytes: float) -> list[Problem]:
    total = sum(plan.train.values())
    if total <= gpu_bytes:
        return []
    sharded = sum(plan.train.get(part, 0.0) for part in ("parameters", "gradients", "optimizer", "reference"))
    sum_text = " + ".join(f"{name} {gb(v)}" for name, v in plan.train.items())
    need = (f"a training rank needs {gb(total)} GB per GPU ({sum_text}) but cluster.gpu_memory_gb is "
            f"{config.cluster.gpu_memory_gb:g}")
    if sharded > gpu_bytes:
        return [Problem("cells.nodes_per_cell", (
            f"{need}; its sharded state alone ({gb(sharded)} GB: {_sharded_bytes(config)} bytes x "
            f"{plan.shape.params:,} parameters / {plan.train_ranks} GPUs) does not fit: shard over more GPUs "
            "(more nodes per cell)"))]
    hint = "" if config.training.activation_checkpointing else ", or set training.activation_checkpointing"
    return [Problem("training.micro_batch_tokens", (
        f"{need}; {config.training.micro_batch_tokens} tokens per micro-batch is too many: lower it{hint}"))]


def _sharded_bytes(config: Config) -> str:
    """Bytes per parameter of the sharded state: ``16``, or ``16 + 2`` with a bfloat16 reference."""
    return f"16 + {DTYPE_BYTES[config.model.dtype]}" if config.training.kl_coef > 0 else "16"


def _serve_problems(config: Config, plan: MemoryPlan, gpu_bytes: float) -> list[Problem]:
    utilization = float(config.rollout.engine_arg("gpu-memory-utilization") or VLLM_GPU_MEMORY_UTILIZATION)
    budget, total = utilization * gpu_bytes, sum(plan.serve.values())
    if total <= budget:
        return []
    sum_text = " + ".join(f"{name} {gb(v)}" for name, v in plan.serve.items())
    need = (f"a server replica needs {gb(total)} GB per GPU ({sum_text}) but vLLM may use {gb(budget)} GB "
            f"({utilization:g} x cluster.gpu_memory_gb={config.cluster.gpu_memory_gb:g})")
    if plan.serve["weights"] + plan.serve["runtime"] > budget:
        return [Problem("model.tensor_parallel", f"{need}; the weights alone do not fit: raise tensor_parallel")]
    return [Problem("rollout.concurrency_per_server", (
        f"{need}; the KV cache of {config.rollout.concurrency_per_server} sessions at max-model-len "
        f"{max_model_len(config, plan.shape)} is too large: lower the concurrency or max-model-len"))]
