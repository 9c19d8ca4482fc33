"""Policy weights and optimizer state between training steps.

Weights version N is the HF folder ``run.weights_dir(N)`` (v0 = the initial model): the rollout
servers and the next step load it as is. Step N writes version N+1 into a temporary folder beside
it and renames it into place, so a reader sees either no v(N+1) or a complete one. The rename is
the step's commit point: a folder ``v(N+1)`` means step N is done (a retry is a no-op).

The trainer keeps float32 master weights whatever ``model.dtype`` says and writes each version
in ``model.dtype``, the dtype the servers run in. An update of lr=1e-6 is far below bfloat16's
resolution for most weights: rounded into the folder and reloaded, it would simply vanish. So
when ``model.dtype`` is not float32 the float32 weights travel with the optimizer state.

That state (AdamW's and, where needed, the float32 weights) is a torch.distributed.checkpoint
(DCP) folder ``optimizer_dir/v{N+1}/`` named after the version it produced: every rank writes the
shards it holds (``__R_0.distcp`` per rank, ``.metadata`` by rank 0) into ``.v{N+1}.tmp`` and rank
0 renames it into place after a barrier; older folders go once the step committed. No rank ever
holds the full state. Step N+1 uses ``v{N}`` only if it is there for the weights it starts from,
else it starts fresh from the folder's weights and says so. DCP reshards on load, so the world
size may change between steps. The single-file ``adamw-vN.pt`` of earlier runs is not read: such
a run's next step starts its optimizer fresh (with that warning), and the file is pruned.

The HF weights folder is written and read shard by shard too: :mod:`gyrectl.train.policy_export`
(every rank writes the tensors assigned to it, rank 0 the index, then the rename) and
:mod:`gyrectl.train.policy_load` (every rank reads its rows of each tensor).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir
from gyrectl.store.folders import commit_folder

STEP_RECORD = "gyrectl-step.json"
"""The metrics line of the step that produced a version, inside it (re-appended by a retry that
finds the version but not its line)."""
INDEX = "model.safetensors.index.json"
"""Which of a version's ``*.safetensors`` files holds each tensor (HF's sharded layout)."""
WEIGHT_FILES = (".safetensors", ".bin", ".pt", INDEX, STEP_RECORD)
"""What a version folder holds besides its config, tokenizer and generation files."""

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def require_policy(*, run: RunDir, version: int) -> None:
    folder = run.weights_dir(version)
    if not (folder / "config.json").is_file():
        raise UserError(f"{folder}: no weights version {version} (an HF folder with config.json); "
                        f"step {version} trains from it")


def read_step_record(*, run: RunDir, version: int) -> dict[str, Any] | None:
    path = run.weights_dir(version) / STEP_RECORD
    return json.loads(path.read_text()) if path.is_file() else None


def trainer_state_dir(*, run: RunDir, version: int) -> Path:
    """The DCP checkpoint of the trainer's state after the step that produced ``version``."""
    return run.optimizer_dir / f"v{version}"


def restore_trainer_state(*, run: RunDir, version: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                          master_weights: bool) -> bool:
    """Collective: the state the step that produced ``version`` left -- AdamW's, and with
    ``master_weights`` the float32 weights whose rounding ``version`` is -- each rank reading the
    slices of its own shards (DCP reshards when the world size changed). False (a fresh
    optimizer, weights as in the folder) if there is none."""
    folder = trainer_state_dir(run=run, version=version)
    if not (folder / ".metadata").is_file():  # the shared filesystem gives every rank the same answer
        return False
    # DCP loads in place: the state dicts to fill come from the model and a fresh AdamW (which
    # get_optimizer_state_dict initialises with one zero-gradient, zero-lr step).
    state = _sharded_state(model, optimizer, master_weights=master_weights)
    dcp.load(state, checkpoint_id=folder)
    if master_weights:
        set_model_state_dict(model, state["model"])
    lrs = [group["lr"] for group in optimizer.param_groups]
    set_optimizer_state_dict(model, optimizer, optim_state_dict=state["optimizer"])
    for group, lr in zip(optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr  # the config's learning rate wins over the saved one
    return True


def save_trainer_state(*, run: RunDir, version: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                       master_weights: bool, is_main: bool) -> None:
    """Collective: every rank writes its own shards of the state after producing ``version`` into
    a temporary folder; rank 0 renames it into place once all are written. Older versions stay
    until the step commits: a retry of this step still needs the one it started from."""
    final = trainer_state_dir(run=run, version=version)
    tmp = final.with_name(f".{final.name}.tmp")  # one name for every rank: they write into it together
    if is_main:
        shutil.rmtree(tmp, ignore_errors=True)  # an attempt that crashed
        shutil.rmtree(final, ignore_errors=True)  # uncommitted (v{version} absent): a crashed attempt's
        tmp.mkdir(parents=True)
    dist.barrier()
    dcp.save(_sharded_state(model, optimizer, master_weights=master_weights), checkpoint_id=tmp)
    dist.barrier()  # dcp.save returns once the metadata is written; the barrier makes the order plain
    if is_main:
        commit_folder(tmp, final)


def _sharded_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
                   master_weights: bool) -> dict[str, Any]:
    """This rank's shards (DTensors): never a full state dict, whatever the model's size."""
    state: dict[str, Any] = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    if master_weights:
        state["model"] = get_model_state_dict(model)
    return state


def prune_trainer_state(*, run: RunDir, keep: int) -> None:
    """Rank 0, after the step committed: every state folder but version ``keep``'s (and the
    single-file ``adamw-v*.pt`` of runs before the DCP layout)."""
    kept = trainer_state_dir(run=run, version=keep)
    for old in run.optimizer_dir.glob("v*"):
        if old != kept and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    for old in run.optimizer_dir.glob("adamw-v*.pt"):
        old.unlink(missing_ok=True)
