"""The run directory's own files read back with their shape checked: ``job.json``, ``nodes.json``,
``cells.json``, ``servers.json``, the lines of ``metrics.jsonl``, ``config.yaml`` and a resident
trainer's requests (``trainer/request-NNNNNN.json``, which this module also writes).

gyrectl writes each of them, so a file that does not hold what gyrectl writes there (truncated,
garbage, a hand edit gone wrong) raises :class:`~gyrectl.run.rundir.DamagedRunFile` naming the
file and what is wrong, instead of a ``KeyError`` deep inside a view. What a command does with it
is the command's choice: ``gyrectl status`` shows what the other files hold and lists the damaged
ones; ``launch --resume`` refuses (exit 1).
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gyrectl.config import load_config
from gyrectl.config.schema import Config
from gyrectl.errors import ConfigError
from gyrectl.run.rundir import DamagedRunFile, RunDir

_INT = (int,)
_NUMBER = (int, float)
_OPTIONAL_INT = (int, type(None))
_ID = (str, int)

_NODE = {"name": (str,), "het_group": _INT, "gpus": _INT, "cpus": _INT, "role": (str,), "address": (str, type(None))}
_CELL_JOB = {"cell": _INT, "job_id": _ID, "replacement_job_id": (*_ID, type(None))}
_SERVER = {"name": (str,), "state": (str,), "gateway_calls": _INT, "running": _OPTIONAL_INT,
           "waiting": _OPTIONAL_INT, "weight_version": _OPTIONAL_INT}
STEP_METRICS = {"step": _INT, "reward_mean": _NUMBER, "executions": _INT, "naive_tokens": _INT,
                "trained_tokens": _INT, "weight_version": _INT, "duration_s": _NUMBER}
"""The fields of a ``metrics.jsonl`` line that ``status`` and ``launch --wait`` show."""
_OPTIONAL_NUMBER = (int, float, type(None))
EVAL_SUMMARY = {"step": _INT, "weight_version": _INT, "tasks": _INT, "executions": _INT,
                "reward_mean": _OPTIONAL_NUMBER, "pass_at_1": _OPTIONAL_NUMBER, "pass_at_k": _OPTIONAL_NUMBER,
                "k": _INT}
"""The fields of an ``evals.jsonl`` line (``status --json`` ``evals``)."""


def read_job(run: RunDir) -> dict[str, Any] | None:
    """``job.json``: ``job_id``, ``backend`` (``slurm`` or ``local``), ``layout``, ``submitted_at``,
    ``previous_jobs``; None before the first submission wrote it. Only the fields' types are
    checked here: whether a backend wrote it is :func:`gyrectl.cluster.backend.read_job_record`'s
    to say."""
    job = run.read_json(run.job_file)
    if job is None:
        return None
    check_fields(run.job_file, job, {"job_id": (str,), "backend": (str,), "layout": (str, type(None)),
                                     "previous_jobs": (list, type(None))})
    return job


def read_nodes(run: RunDir) -> list[dict[str, Any]] | None:
    """``nodes.json``, the node table; None until the head wrote it."""
    nodes = run.read_json(run.nodes_file)
    return None if nodes is None else _rows(run.nodes_file, nodes, _NODE)


def read_cells(run: RunDir) -> list[dict[str, Any]]:
    """``cells.json`` (cells layout): the Slurm job of each cell and of its replacement."""
    cells = run.read_json(run.cells_file)
    return [] if cells is None else _rows(run.cells_file, cells, _CELL_JOB)


def read_servers(run: RunDir) -> dict[str, Any]:
    """``servers.json``: ``{"at", "servers"}``, the rollout servers' load (empty before the first)."""
    load = run.read_json(run.servers_file)
    if load is None:
        return {"at": None, "servers": []}
    check_fields(run.servers_file, load, {"at": _NUMBER, "servers": (list,)})
    _rows(run.servers_file, load["servers"], _SERVER)
    return load


def run_config(run: RunDir) -> Config:
    """The run's resolved ``config.yaml``, which gyrectl wrote when the run was launched."""
    try:
        return load_config(run.config_file)
    except ConfigError as exc:
        raise DamagedRunFile(run.config_file, f"not a valid config ({exc})") from None


def write_train_request(run: RunDir, index: int, group: str) -> Path:
    """Asks the resident trainer of ``group`` to train step ``index``: ``{"step": index, "group":
    group}``, written atomically (a trainer polling for it sees none or all of it). A trainer of
    another group that finds it exits: it has been superseded. Returns the file."""
    path = run.trainer_request_file(index)
    path.parent.mkdir(exist_ok=True)
    run.write_json(path, {"step": index, "group": group})
    return path


def read_train_request(run: RunDir, index: int) -> dict[str, Any] | None:
    """The request for step ``index`` (``{"step", "group"}``), None while there is none."""
    path = run.trainer_request_file(index)
    request = run.read_json(path)
    if request is None:
        return None
    check_fields(path, request, {"step": _INT, "group": (str,)})
    if request["step"] != index:
        raise DamagedRunFile(path, f"'step' is {request['step']}, but the file asks for step {index}")
    return request


def _rows(path: Path, data: Any, fields: Mapping[str, tuple[type, ...]]) -> list[dict[str, Any]]:
    if not isinstance(data, list):
        raise DamagedRunFile(path, f"{_json_name(data)} where a list belongs")
    for i, row in enumerate(data):
        check_fields(path, row, fields, where=f"entry {i}: ")
    return data


def check_fields(path: Path, obj: Any, fields: Mapping[str, tuple[type, ...]], *, where: str = "") -> None:
    """``obj`` is a JSON object whose ``fields`` have one of their types (``NoneType`` among them:
    the field may be missing)."""
    if not isinstance(obj, dict):
        raise DamagedRunFile(path, f"{where}{_json_name(obj)} where an object belongs")
    for key, types in fields.items():
        value = obj.get(key)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            expected = " or ".join(_JSON_NAMES[t] for t in types)
            raise DamagedRunFile(path, f"{where}{key!r} is {reprlib.repr(value)}, expected {expected}")


_JSON_NAMES = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object",
               bool: "true or false", type(None): "missing"}


def _json_name(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)
