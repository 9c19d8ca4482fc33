"""Rules checked once the types are right: every value's text and numbers (:func:`check_values`),
then the cross-field rules. Each error names the field and shows the arithmetic, so the fix is
obvious from the message alone."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from gyrectl.config.placement import engine_gpus
from gyrectl.config.schema import Config
from gyrectl.errors import ConfigError

# Patterns are matched whole (fullmatch): `$` would also accept a trailing newline.
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SLURM_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_VERIFIER = re.compile(r"[^:]+\.py:[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""C0 and C1 control characters (newline, tab, NUL, escape...) and Unicode's line separators."""


def parse_time_limit_s(text: str) -> int:
    """Seconds in a Slurm time string: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``."""
    match = _SLURM_TIME.fullmatch(text)
    if not match:
        raise ValueError(text)
    days, a, b, c = match.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def _at_least(path: str, value: int | float, minimum: int | float) -> None:
    if value < minimum:
        raise ConfigError(path, f"must be at least {minimum}, got {value}")


def check_values(value: Any, path: str = "") -> None:
    """Every string of the config (keys of mappings too) is one line of printable text, and every
    number is finite and fits 64 bits. Strings reach shell lines, ``#SBATCH`` lines, srun and command lines and
    environment variables: a newline there starts a line of its own (an injected directive or
    command), and a NUL ends a command-line argument. NaN slips through every range check (each
    comparison with it is false)."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            check_values(getattr(value, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and (problem := _control_problem(key)):
                raise ConfigError(path, f"key {key!r} {problem}")
            check_values(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_values(item, f"{path}[{i}]")
    elif isinstance(value, str) and (problem := _control_problem(value)):
        raise ConfigError(path, problem)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(path, f"must be a finite number, got {value}")
    elif isinstance(value, int) and not -2**63 <= value < 2**63:
        raise ConfigError(path, f"{value} does not fit a 64-bit integer (numpy, torch and Slurm take no more)")


def _control_problem(text: str) -> str:
    control = _CONTROL.search(text)
    if control is None:
        return ""
    return (f"holds the control character {control.group()!r} at position {control.start()}; config values "
            "reach shell, #SBATCH and command lines, so each must be one line of printable text")


def check_config(config: Config) -> None:
    check_values(config)
    run, cluster, model, cells = config.run, config.cluster, config.model, config.cells
    if not _RUN_NAME.fullmatch(run.name):
        raise ConfigError("run.name", f"{run.name!r} may only hold letters, digits, '.', '_' and '-' "
                                      "(it names a directory)")
    if not run.output_root.strip():
        raise ConfigError("run.output_root", "must not be empty")
    _at_least("run.seed", run.seed, 0)  # numpy's generators take no negative seed
    _at_least("run.steps", run.steps, 1)
    try:
        limit_s = parse_time_limit_s(cluster.time_limit)
    except ValueError:
        raise ConfigError("cluster.time_limit", f"{cluster.time_limit!r} is not a Slurm time "
                                                "(MM, HH:MM:SS or D-HH:MM:SS)") from None
    if limit_s <= 0:
        raise ConfigError("cluster.time_limit", f"{cluster.time_limit!r} is zero")
    _at_least("cluster.nodes", cluster.nodes, 1)
    _at_least("cluster.gpus_per_node", cluster.gpus_per_node, 0)
    _at_least("cluster.cpus_per_node", cluster.cpus_per_node, 1)
    _at_least("cluster.mem_per_node_gb", cluster.mem_per_node_gb, 0)
    _at_least("cluster.gpu_memory_gb", cluster.gpu_memory_gb, 0)
    _at_least("cluster.head.cpus", cluster.head.cpus, 1)
    _at_least("cluster.head.gateway_processes", cluster.head.gateway_processes, 1)
    _at_least("cluster.head.mem_gb", cluster.head.mem_gb, 0)
    _at_least("cluster.harnesses.nodes", cluster.harnesses.nodes, 0)
    _at_least("cluster.harnesses.cpus", cluster.harnesses.cpus, 1)
    _at_least("cluster.harnesses.mem_gb", cluster.harnesses.mem_gb, 0)
    for i, line in enumerate(cluster.extra_sbatch):
        if line.lstrip().startswith("#SBATCH"):
            raise ConfigError(f"cluster.extra_sbatch[{i}]", f"write the option without '#SBATCH' "
                                                            f"(e.g. {line.split('#SBATCH', 1)[1].strip()!r})")

    _at_least("model.tensor_parallel", model.tensor_parallel, 1)
    _at_least("model.pipeline_parallel", model.pipeline_parallel, 1)
    _at_least("cells.nodes_per_cell", cells.nodes_per_cell, 1)
    if cluster.nodes % cells.nodes_per_cell:
        raise ConfigError("cells.nodes_per_cell", (
            f"cluster.nodes={cluster.nodes} is not a multiple of cells.nodes_per_cell={cells.nodes_per_cell} "
            f"({cluster.nodes} % {cells.nodes_per_cell} = {cluster.nodes % cells.nodes_per_cell} node(s) "
            f"would belong to no cell)"))
    server_gpus = engine_gpus(config)
    if cluster.gpus_per_node > 0:
        cell_gpus = cells.nodes_per_cell * cluster.gpus_per_node
        if server_gpus > cell_gpus:
            raise ConfigError("cells.nodes_per_cell", (
                f"cells.nodes_per_cell={cells.nodes_per_cell} with {cluster.gpus_per_node} GPUs/node "
                f"({cell_gpus} GPUs per cell) cannot host model.tensor_parallel={model.tensor_parallel} x "
                f"model.pipeline_parallel={model.pipeline_parallel} = {server_gpus} GPUs"))
        if server_gpus > cluster.gpus_per_node and server_gpus % cluster.gpus_per_node:
            raise ConfigError("model.tensor_parallel", (
                f"tensor_parallel x pipeline_parallel = {server_gpus} GPUs is more than a node's "
                f"{cluster.gpus_per_node} but not a whole number of nodes ({server_gpus} % {cluster.gpus_per_node} = "
                f"{server_gpus % cluster.gpus_per_node}): an engine spans whole nodes"))
        if cell_gpus % server_gpus:
            raise ConfigError("model.tensor_parallel", (
                f"a cell's {cell_gpus} GPUs ({cells.nodes_per_cell} nodes x {cluster.gpus_per_node}) are not a "
                f"multiple of tensor_parallel x pipeline_parallel = {server_gpus}, so the training layout "
                f"leaves {cell_gpus % server_gpus} GPU(s) of every cell unused"))
    elif server_gpus > 1:
        raise ConfigError("model.tensor_parallel", (
            f"cluster.gpus_per_node=0 (CPU only) cannot run tensor_parallel x pipeline_parallel = "
            f"{server_gpus} > 1"))

    rollout, training, dedup, scheduler = config.rollout, config.training, config.dedup, config.scheduler
    _at_least("rollout.concurrency_per_server", rollout.concurrency_per_server, 1)
    _at_least("rollout.executions_per_task", rollout.executions_per_task, 1)
    if rollout.execution_time_limit_s <= 0:
        raise ConfigError("rollout.execution_time_limit_s", f"must be positive, got {rollout.execution_time_limit_s}")
    if rollout.wake_timeout_s is not None and rollout.wake_timeout_s <= 0:
        raise ConfigError("rollout.wake_timeout_s", f"must be positive, got {rollout.wake_timeout_s:g}")
    if rollout.execution_time_limit_s > limit_s:
        raise ConfigError("rollout.execution_time_limit_s", (
            f"{rollout.execution_time_limit_s:g} s is longer than the job's cluster.time_limit="
            f"{cluster.time_limit} ({limit_s} s): no execution could reach its limit"))
    if rollout.verifier and not _VERIFIER.fullmatch(rollout.verifier):
        raise ConfigError("rollout.verifier", f"{rollout.verifier!r} is not FILE.py:FUNCTION "
                                              "(e.g. examples/agent/verifier.py:score)")
    if rollout.harness_command:
        for field in ("tasks", "verifier"):
            if not getattr(rollout, field):
                raise ConfigError(f"rollout.{field}", "must be set when rollout.harness_command is: "
                                                      "executions need tasks and a reward")
    if rollout.sandbox == "apptainer" and not rollout.apptainer_image:
        raise ConfigError("rollout.apptainer_image", "must name the image (.sif) when rollout.sandbox is apptainer")
    budget = rollout.infra_failures
    _at_least("rollout.infra_failures.first", budget.first, 0)
    _at_least("rollout.infra_failures.window", budget.window, 0)
    if not 0 <= budget.max_share < 1:
        raise ConfigError("rollout.infra_failures.max_share", f"must be in [0, 1), got {budget.max_share:g} "
                                                              "(set rollout.infra_failures.window=0 to turn it off)")
    if not 1024 <= rollout.server_port <= 65535 - 2000:
        raise ConfigError("rollout.server_port", f"{rollout.server_port} leaves no room above it: the local "
                                                 "backend's cells take the next ports and training steps' "
                                                 "rendezvous ports 1000-1999 above it (use 1024-63535)")
    _at_least("training.batch_executions", training.batch_executions, 1)
    if training.batch_executions % rollout.executions_per_task:
        raise ConfigError("training.batch_executions", (
            f"{training.batch_executions} is not a multiple of rollout.executions_per_task="
            f"{rollout.executions_per_task}: GRPO groups would be split across steps "
            f"({training.batch_executions} % {rollout.executions_per_task} = "
            f"{training.batch_executions % rollout.executions_per_task})"))
    _at_least("training.max_batch_draws", training.max_batch_draws, 1)
    if training.skip_uniform_groups and scheduler.batch_order != "completion":
        raise ConfigError("training.skip_uniform_groups", (
            f"needs scheduler.batch_order=completion, not {scheduler.batch_order}: a dispatch-order block "
            "with a group kept out would never fill"))
    if training.lr <= 0:
        raise ConfigError("training.lr", f"must be positive, got {training.lr:g}")
    _check_optimizer(config)
    _check_regularizers(config)
    _at_least("training.micro_batch_tokens", training.micro_batch_tokens, 1)
    if not 0 < training.clip_eps < 1:
        raise ConfigError("training.clip_eps", f"must be in (0, 1), got {training.clip_eps:g}")
    _check_policy_loss(config)
    if training.max_importance_weight < 1:
        raise ConfigError("training.max_importance_weight",
                          "must be at least 1 (1 = no correction of stale tokens), "
                          f"got {training.max_importance_weight:g}")
    _at_least("training.keep_checkpoints", training.keep_checkpoints, 0)  # 0: keep every version
    _at_least("dedup.j_max", dedup.j_max, 1)
    evaluation = config.eval
    _at_least("eval.every_steps", evaluation.every_steps, 0)
    _at_least("eval.executions_per_task", evaluation.executions_per_task, 1)
    if evaluation.every_steps and not evaluation.tasks:
        raise ConfigError("eval.tasks", f"must name a tasks file when eval.every_steps is {evaluation.every_steps}")
    if evaluation.temperature is not None and evaluation.temperature < 0:
        raise ConfigError("eval.temperature", f"must be at least 0, got {evaluation.temperature:g}")
    _at_least("scheduler.max_staleness", scheduler.max_staleness, 0)

    num_cells = config.num_cells
    if scheduler.policy == "async":
        if not 1 <= scheduler.async_train_cells < num_cells:
            raise ConfigError("scheduler.async_train_cells", (
                f"async needs at least one training and one rollout cell: {scheduler.async_train_cells} "
                f"training cell(s) of {num_cells} ({cluster.nodes} nodes / {cells.nodes_per_cell} per cell)"))
    if scheduler.policy == "elastic":
        _at_least("scheduler.min_rollout_cells", scheduler.min_rollout_cells, 0)
        if scheduler.min_rollout_cells >= num_cells:
            raise ConfigError("scheduler.min_rollout_cells", (
                f"{scheduler.min_rollout_cells} of {num_cells} cells may never leave rollout, so no cell "
                f"could ever train ({cluster.nodes} nodes / {cells.nodes_per_cell} per cell = {num_cells} cells)"))

    sim = config.simulator
    for name in ("server_slowdown_at_full", "train_step_overhead_s", "rollout_to_train_s", "train_to_rollout_s",
                 "engine_start_s", "weight_sync_s", "step_restart_s", "move_cost_s"):
        _at_least(f"simulator.{name}", getattr(sim, name), 0)
    if sim.train_tokens_per_s_per_gpu <= 0:
        raise ConfigError("simulator.train_tokens_per_s_per_gpu",
                          f"must be positive, got {sim.train_tokens_per_s_per_gpu:g}")
    _at_least("simulator.workload_size", sim.workload_size, 0)
    if sim.workload_size % config.rollout.executions_per_task:
        raise ConfigError("simulator.workload_size", (
            f"{sim.workload_size} is not a multiple of rollout.executions_per_task="
            f"{config.rollout.executions_per_task}: the last GRPO group would never be whole"))


def _check_optimizer(config: Config) -> None:
    """The learning-rate schedule, weight decay and gradient clipping (``gyrectl.train.optim``)."""
    training, steps = config.training, config.run.steps
    _at_least("training.warmup_steps", training.warmup_steps, 0)
    if training.warmup_steps > steps:
        raise ConfigError("training.warmup_steps", (
            f"{training.warmup_steps} is more than run.steps={steps}: the learning rate would never "
            f"reach training.lr (step {steps - 1} would train at {(steps - 1) / training.warmup_steps:.3g} x lr)"))
    _at_least("training.weight_decay", training.weight_decay, 0)
    if training.lr * training.weight_decay >= 1:
        raise ConfigError("training.weight_decay", (
            f"training.lr x training.weight_decay = {training.lr:g} x {training.weight_decay:g} = "
            f"{training.lr * training.weight_decay:g}: AdamW multiplies every weight by 1 - that each step, "
            "which zeroes or flips them (it must be below 1)"))
    if training.max_grad_norm < 0:
        raise ConfigError("training.max_grad_norm",
                          f"must be at least 0 (0: no clipping), got {training.max_grad_norm:g}")
    _at_least("training.updates_per_batch", training.updates_per_batch, 1)
    groups = training.batch_executions // config.rollout.executions_per_task
    if training.updates_per_batch > groups:
        raise ConfigError("training.updates_per_batch", (
            f"{training.updates_per_batch} is more than the {groups} GRPO group(s) of a batch "
            f"(training.batch_executions={training.batch_executions} / rollout.executions_per_task="
            f"{config.rollout.executions_per_task}): each update trains whole groups"))


def _check_regularizers(config: Config) -> None:
    """The entropy bonus and the KL penalty (``gyrectl.train.regularizers``). Whether the KL
    reference's folder exists is a launch-time check (``gyrectl.launch.preflight``), as model.path's."""
    training = config.training
    for name in ("entropy_coef", "kl_coef"):
        value = getattr(training, name)
        if value < 0:
            raise ConfigError(f"training.{name}", (
                f"must be at least 0 (0: off), got {value:g}: a negative coefficient would reward "
                + ("lower entropy, i.e. collapse" if name == "entropy_coef" else "moving away from the reference")))


def _check_policy_loss(config: Config) -> None:
    """The clip range, the loss aggregation and the ratio level (``gyrectl.train.grpo``,
    ``gyrectl.dedup.exact``, ``gyrectl.train.sequence_ratio``)."""
    training, mode = config.training, config.dedup.mode
    low, high, dual = training.clip_eps_low, training.clip_eps_high, training.dual_clip
    if low is not None and not 0 < low < 1:
        raise ConfigError("training.clip_eps_low", f"must be in (0, 1), got {low:g}: the ratio is clipped at "
                                                   f"1 - clip_eps_low = {1 - low:g}, which must stay positive")
    if high is not None and high <= 0:
        raise ConfigError("training.clip_eps_high", f"must be positive, got {high:g}: the ratio is clipped at "
                                                    f"1 + clip_eps_high = {1 + high:g}, which must be above 1")
    if dual is not None and dual <= 1:
        raise ConfigError("training.dual_clip", f"must be above 1, got {dual:g}: the floor dual_clip x A under a "
                                                "negative advantage A must lie below the unclipped ratio's 1 x A")
    constant = training.loss_constant
    if training.loss_aggregation == "constant" and constant is None:
        raise ConfigError("training.loss_constant", "must be set with training.loss_aggregation: constant (the "
                                                    "fixed divisor of each path's token sum, e.g. the most tokens "
                                                    "a path may hold)")
    if constant is not None and constant <= 0:
        raise ConfigError("training.loss_constant", f"must be positive, got {constant:g}")
    if mode != "exact":
        for name, value, default in (("loss_aggregation", training.loss_aggregation, "token_mean"),
                                     ("ratio_level", training.ratio_level, "token")):
            if value != default:
                raise ConfigError(f"training.{name}", (
                    f"{value} needs dedup.mode: exact, not {mode}: paths mode trains the union of its sampled "
                    "paths with each token once and its own per-execution mean, so it has no per-path loss to "
                    "aggregate or per-path ratio to clip"))
