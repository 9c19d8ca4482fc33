"""The one object that owns a run's layout on the shared filesystem.

    <output_root>/<run name>/          created 0700: it holds the run's secrets
      config.yaml                      the resolved config (every default filled in)
      token                            client token (0600): harnesses' API key, client routes only
      admin_token                      admin token (0600): the gateway's admin routes; harnesses never get it
      server_key                       rollout servers' API key (0600): the gateway and control calls send it
      job.json                         backend, job id, layout, submit time
      journal.jsonl                    append-only event log (fsync'd), the coordinator's memory
      nodes.json                       node table written by the head: name, het group, GPUs, role
      cells.json                       cells layout: the Slurm job holding each cell (and its replacement)
      submit/                          sbatch script as submitted (``job.sbatch``)
      trajectories/                    recorded model calls (capture store ``calls.seg``) and
                                       ``executions.jsonl`` (one line per finished execution: task,
                                       reward, status; a later line ``{"execution", "step"}`` says
                                       which training step consumed it)
      batches/step-NNNNNN.json         what training step N consumes: its executions and rewards
      checkpoints/vN/                  policy weights version N (HF folder; v0 = the initial model);
                                       the newest ``training.keep_checkpoints`` stay (gyrectl.launch.retention)
      checkpoints/reference            link to ``training.kl_reference`` (the KL penalty's frozen model), if set
      checkpoints/optimizer/vN/        the trainer's state after the step that produced vN (a DCP
                                       checkpoint: one shard file per rank, ``.metadata``)
      trainer/request-NNNNNN.json      asks a resident trainer to train step N: ``{"step", "group"}``
      metrics.jsonl                    one line per finished training step
      evals.jsonl                      one line per finished evaluation (``eval-executions.jsonl``
                                       under trajectories/ has its executions)
      workdirs/EXECUTION/              each execution's own working directory (``rollout.keep_workdirs``)
      tracking/                        TensorBoard event files, W&B offline runs
      logs/                            head, step and submitit logs
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gyrectl.config.schema import Config
from gyrectl.errors import RuntimeFailure, UserError


class DamagedRunFile(RuntimeFailure):
    """A file of the run directory that gyrectl wrote but cannot read back (truncated, garbage, a
    disk error, a hand edit gone wrong). It is the run's own state, not a mistake in the command,
    so a command that cannot go on without it fails with exit 1."""

    def __init__(self, path: Path, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path} is damaged: {problem}")


@dataclass(frozen=True)
class RunDir:
    path: Path

    # ---- layout -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config_file(self) -> Path:
        return self.path / "config.yaml"

    @property
    def token_file(self) -> Path:
        return self.path / "token"

    @property
    def admin_token_file(self) -> Path:
        return self.path / "admin_token"

    @property
    def server_key_file(self) -> Path:
        return self.path / "server_key"

    @property
    def job_file(self) -> Path:
        return self.path / "job.json"

    @property
    def journal_file(self) -> Path:
        return self.path / "journal.jsonl"

    @property
    def nodes_file(self) -> Path:
        return self.path / "nodes.json"

    @property
    def submit_dir(self) -> Path:
        return self.path / "submit"

    @property
    def sbatch_file(self) -> Path:
        return self.submit_dir / "job.sbatch"

    @property
    def trajectories_dir(self) -> Path:
        return self.path / "trajectories"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def calls_store(self) -> Path:
        """The capture store the head's gateway appends every recorded call to."""
        return self.trajectories_dir / "calls.seg"

    def gateway_calls_store(self, process: int) -> Path:
        """The capture store of gateway process ``process`` when several share the port (readers
        take every ``calls*.seg``)."""
        return self.trajectories_dir / f"calls-g{process}.seg"

    @property
    def executions_file(self) -> Path:
        return self.trajectories_dir / "executions.jsonl"

    @property
    def eval_executions_file(self) -> Path:
        """One line per finished eval execution (``gyrectl.rollout.evals``): never trained on."""
        return self.trajectories_dir / "eval-executions.jsonl"

    @property
    def evals_file(self) -> Path:
        """One line per finished evaluation: reward mean, pass@1, pass@k of a weights version."""
        return self.path / "evals.jsonl"

    @property
    def batches_dir(self) -> Path:
        return self.path / "batches"

    def batch_file(self, step: int) -> Path:
        """What training step ``step`` consumes (written by the coordinator when it claims it)."""
        return self.batches_dir / f"step-{step:06d}.json"

    def weights_dir(self, version: int) -> Path:
        """Policy weights version ``version``: an HF folder the servers and the trainer load."""
        return self.checkpoints_dir / f"v{version}"

    def weight_versions(self) -> list[int]:
        """The weights versions in ``checkpoints/``, in order (a step's temporary ``.vN.tmp-PID``
        folder is not one yet)."""
        if not self.checkpoints_dir.is_dir():
            return []
        with os.scandir(self.checkpoints_dir) as entries:
            names = [entry.name for entry in entries]
        return sorted(int(name[1:]) for name in names if name[:1] == "v" and name[1:].isdecimal())

    @property
    def reference_dir(self) -> Path:
        """The KL penalty's reference weights when ``training.kl_reference`` names them: a link
        made at launch, as v0 is to ``model.path`` (without it the reference is v0)."""
        return self.checkpoints_dir / "reference"

    @property
    def optimizer_dir(self) -> Path:
        return self.checkpoints_dir / "optimizer"

    @property
    def trainer_dir(self) -> Path:
        """Where whoever drives a resident trainer asks it for its next step."""
        return self.path / "trainer"

    def trainer_request_file(self, index: int) -> Path:
        """Asks the resident trainer of one group to train step ``index`` (see ``gyrectl.run.files``)."""
        return self.trainer_dir / f"request-{index:06d}.json"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def servers_file(self) -> Path:
        """The rollout servers' load as the head last saw it (``servers.json``)."""
        return self.path / "servers.json"

    @property
    def cells_file(self) -> Path:
        """Which Slurm job holds each cell (``cells`` layout): ``cells.json``."""
        return self.path / "cells.json"

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    def workdir(self, execution: str) -> Path:
        """Execution ``execution``'s own working directory (the only place a sandboxed harness writes)."""
        return self.path / "workdirs" / execution

    @property
    def harness_nodes_dir(self) -> Path:
        """What the head and the harness agents on harness nodes exchange (``cluster.harnesses``):
        ``agent.json`` (how to run a harness), and per node ``NODE/assigned.jsonl`` (the head's
        assignments), ``NODE/ended.jsonl`` (the agent's ended executions), ``NODE/alive.json``
        (its heartbeat)."""
        return self.path / "harness-nodes"

    @property
    def tracking_dir(self) -> Path:
        """Experiment tracking: ``tensorboard/`` event files, ``wandb/`` (``tracking.wandb``), and
        which scalars were written (``written.json``)."""
        return self.path / "tracking"

    @property
    def submitit_dir(self) -> Path:
        return self.logs_dir / "submitit"

    @property
    def stop_file(self) -> Path:
        """Exists once ``gyrectl stop`` asked the head to end the run."""
        return self.path / "stop-requested"

    # ---- life cycle ---------------------------------------------------------------------
    @classmethod
    def of(cls, config: Config) -> RunDir:
        """The run directory ``config`` names (``run.output_root``/``run.name``), made or not."""
        return cls(Path(config.run.output_root).expanduser().resolve() / config.run.name)

    @classmethod
    def create(cls, output_root: Path, name: str) -> RunDir:
        """Makes a new run directory (0700) with its secret token; refuses to reuse one."""
        output_root = Path(output_root).expanduser().resolve()
        path = output_root / name
        if output_root.exists() and not output_root.is_dir():
            raise UserError(f"run.output_root {output_root} is a file, not a directory; point run.output_root "
                            "at a directory (--set run.output_root=...)")
        try:
            output_root.mkdir(parents=True, exist_ok=True)
            path.mkdir(mode=0o700)
        except FileExistsError:
            raise UserError(
                f"run directory {path} already exists; start it afresh with `gyrectl launch CONFIG --replace` "
                f"(its files are removed), continue it with `gyrectl launch --resume {path}`, or pick another "
                f"name (--set run.name=...); inspect it with: gyrectl status {path}") from None
        except OSError as exc:
            raise UserError(f"cannot create run directory {path}: {exc.strerror}") from None
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
        run = cls(path)
        for sub in (run.submit_dir, run.trajectories_dir, run.batches_dir, run.checkpoints_dir, run.logs_dir):
            sub.mkdir()
        for secret in (run.token_file, run.admin_token_file, run.server_key_file):
            _create_secret(secret)
        return run

    @classmethod
    def open(cls, ref: str | Path, *, output_root: Path | None = None) -> RunDir:
        """Finds an existing run by path, or by name under ``output_root``."""
        candidates = [Path(ref).expanduser()]
        if output_root is not None and os.sep not in str(ref):
            candidates.append(Path(output_root).expanduser() / str(ref))
        for candidate in candidates:
            if (candidate / "config.yaml").is_file():
                return cls(candidate.resolve())
        looked = " or ".join(str(c) for c in candidates)
        raise UserError(f"no gyrectl run at {looked} (a run directory holds config.yaml)")

    def token(self) -> str:
        """The client token: what harnesses present, good for the client routes only."""
        return self.token_file.read_text().strip()

    def admin_token(self) -> str:
        """The gateway's admin token (made on first use in a run created before it existed)."""
        return _read_secret(self.admin_token_file)

    def server_key(self) -> str:
        """The rollout servers' API key (made on first use, as ``admin_token``)."""
        return _read_secret(self.server_key_file)

    def write_json(self, path: Path, data: Any) -> None:
        """Writes ``data`` atomically (temp file + rename), so a reader never sees half a file."""
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)

    def read_json(self, path: Path) -> Any | None:
        """The JSON value in ``path``, None if there is no such file; ``DamagedRunFile`` if there
        is one that does not hold JSON."""
        try:
            return json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DamagedRunFile(path, f"cannot read it ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise DamagedRunFile(path, "not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise DamagedRunFile(path, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
        except RecursionError:
            raise DamagedRunFile(path, "JSON nested too deeply to be what gyrectl wrote") from None


def _create_secret(path: Path) -> None:
    """A fresh random secret in a new 0600 file (O_EXCL: never overwrites one a process already read)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")


def _read_secret(path: Path) -> str:
    if not path.exists():
        try:
            _create_secret(path)
        except FileExistsError:  # another process made it first: read theirs
            pass
    return path.read_text().strip()
