"""Policy weights and optimizer state between training steps.

Weights version N is the HF folder ``run.weights_dir(N)`` (v0 = the initial model): the rollout
servers and the next step load it as is. Step N writes version N+1 into a temporary folder beside
it and renames it into place, so a reader sees either no v(N+1) or a complete one. The rename is
the step's commit point: a folder ``v(N+1)`` means step N is done (a retry is a no-op).

The trainer keeps float32 master weights whatever ``model.dtype`` says and writes each version
in ``model.dtype``, the dtype the servers run in. An update of lr=1e-6 is far below bfloat16's
resolution for most weights: rounded into the folder and reloaded, it would simply vanish. So
when ``model.dtype`` is not float32 the float32 weights travel with the optimizer state.

That state is one file ``optimizer_dir/adamw-v{N+1}.pt`` (AdamW's state and, where needed, the
float32 weights), tagged with the version it produced; step N+1 uses it only if the tag matches
the weights it starts from, else it starts fresh from the folder's weights and says so. All state
dicts are full (unsharded), so the world size may change between steps: gathered on every rank
(a collective), written by rank 0.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict, set_model_state_dict,
                                                     set_optimizer_state_dict)

from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir

STEP_RECORD = "gyrectl-step.json"
"""The metrics line of the step that produced a version, inside it (re-appended by a retry that
finds the version but not its line)."""
_WEIGHT_FILES = (".safetensors", ".bin", ".pt", "model.safetensors.index.json", STEP_RECORD)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def require_policy(*, run: RunDir, version: int) -> None:
    folder = run.weights_dir(version)
    if not (folder / "config.json").is_file():
        raise UserError(f"{folder}: no weights version {version} (an HF folder with config.json); "
                        f"step {version} trains from it")


def load_policy(*, run: RunDir, version: int, device: torch.device) -> torch.nn.Module:
    """Weights version ``version`` as float32 master weights, sdpa attention (FlexAttention has
    no backward on CPU; :mod:`gyrectl.dedup.mask` builds the dense tree mask sdpa takes)."""
    from transformers import AutoModelForCausalLM

    require_policy(run=run, version=version)
    model = AutoModelForCausalLM.from_pretrained(run.weights_dir(version), dtype=torch.float32,
                                                 attn_implementation="sdpa")
    return model.to(device).train()


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Collective: every rank calls it; rank 0 gets the full CPU tensors, others ``{}``."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Collective, like :func:`full_model_state`."""
    return get_optimizer_state_dict(model, optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_policy(*, run: RunDir, version: int, state: dict[str, torch.Tensor], dtype: torch.dtype,
                step_record: dict[str, Any]) -> Path:
    """Rank 0: writes version ``version`` (config, generation config and tokenizer files from
    ``version - 1``) atomically; returns its folder."""
    from huggingface_hub import save_torch_state_dict
    from transformers import AutoConfig

    source, final = run.weights_dir(version - 1), run.weights_dir(version)
    for stale in run.checkpoints_dir.glob(f".{final.name}.tmp-*"):  # an attempt that crashed
        shutil.rmtree(stale, ignore_errors=True)
    tmp = run.checkpoints_dir / f".{final.name}.tmp-{os.getpid()}"
    tmp.mkdir()
    for item in source.iterdir():
        if item.is_file() and not item.name.endswith(_WEIGHT_FILES):
            shutil.copy2(item, tmp / item.name)
    config = AutoConfig.from_pretrained(source)
    config.dtype = dtype
    config.save_pretrained(tmp)
    # Copies, never views: an untied LM head stays untied (and safetensors refuses shared storage).
    save_torch_state_dict({k: v.to(dtype).contiguous() for k, v in state.items()}, tmp)
    (tmp / STEP_RECORD).write_text(json.dumps(step_record, sort_keys=True) + "\n")
    _fsync_folder(tmp)
    os.rename(tmp, final)
    _fsync_folder(run.checkpoints_dir, files=False)
    return final


def read_step_record(*, run: RunDir, version: int) -> dict[str, Any] | None:
    path = run.weights_dir(version) / STEP_RECORD
    return json.loads(path.read_text()) if path.is_file() else None


def optimizer_file(*, run: RunDir, version: int) -> Path:
    return run.optimizer_dir / f"adamw-v{version}.pt"


def restore_trainer_state(*, run: RunDir, version: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                          is_main: bool, master_weights: bool) -> bool:
    """Collective: the state the step that produced ``version`` left -- AdamW's, and with
    ``master_weights`` the float32 weights whose rounding ``version`` is -- read by rank 0 and
    broadcast to the others. False (a fresh optimizer, weights as in the folder) if there is none."""
    path = optimizer_file(run=run, version=version)
    if not path.is_file():  # the shared filesystem gives every rank the same answer
        return False
    saved = torch.load(path, map_location="cpu", weights_only=True) if is_main else {}
    broadcast = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    if master_weights:
        set_model_state_dict(model, saved.get("master_weights", {}), options=broadcast)
    lrs = [group["lr"] for group in optimizer.param_groups]
    set_optimizer_state_dict(model, optimizer, optim_state_dict=saved.get("optimizer", {}), options=broadcast)
    for group, lr in zip(optimizer.param_groups, lrs):
        group["lr"] = lr  # the config's learning rate wins over the saved one
    return True


def save_trainer_state(*, run: RunDir, version: int, optimizer: dict[str, Any],
                       master_weights: dict[str, torch.Tensor] | None) -> None:
    """Rank 0: the state after producing ``version`` (older files stay until the step commits:
    a retry of this step still needs the one it started from)."""
    run.optimizer_dir.mkdir(parents=True, exist_ok=True)
    final = optimizer_file(run=run, version=version)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    torch.save({"version": version, "optimizer": optimizer, "master_weights": master_weights}, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)


def prune_trainer_state(*, run: RunDir, keep: int) -> None:
    """Rank 0, after the step committed: every state file but version ``keep``'s."""
    for old in run.optimizer_dir.glob("adamw-v*.pt"):
        if old != optimizer_file(run=run, version=keep):
            old.unlink(missing_ok=True)


def _fsync_folder(folder: Path, *, files: bool = True) -> None:
    if files:
        for item in folder.iterdir():
            with open(item, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
