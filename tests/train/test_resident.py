"""The resident trainer (``--resident``): a step trained on the model and AdamW kept in memory
gives the weights a fresh process gives from the committed checkpoint, and the trainer leaves
when superseded, when the run stops, when the head stops its group (quietly: no traceback, and
no worker left behind), and with a clear error on a damaged request."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import time

import pytest
import torch

from gyrectl.config import dump_config, load_config
from gyrectl.run.files import write_train_request
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records
from gyrectl.train.step import step_line

from train_run import (
    make_run,
    read_weights,
    record_calls,
    resident_log,
    resident_step,
    rollouts,
    torchrun_step,
    train_step,
    write_batch,
)

STEP0 = {"e0": ("t0", 1.0), "e1": ("t0", 0.0), "e2": ("t1", 0.25), "e3": ("t1", 0.5)}
STEP1 = {"e10": ("t0", 0.0), "e11": ("t0", 1.0), "e12": ("t2", 0.75), "e13": ("t2", 0.5)}


def wait_for(condition, *, run: RunDir, process: subprocess.Popen, timeout: float = 240) -> None:
    """Until ``condition()``; fails with the trainer's output if it exits or the time is up."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"the trainer exited {process.returncode}:\n{log(run)[-4000:]}")
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            pytest.fail(f"timed out; the trainer said:\n{log(run)[-4000:]}")
        time.sleep(0.2)


def finish(process: subprocess.Popen, *, run: RunDir, timeout: float = 60) -> tuple[int, str]:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"the trainer did not exit:\n{log(run)[-4000:]}")
    return process.returncode, log(run)


def log(run: RunDir) -> str:
    return resident_log(run, group="g1").read_text()


def metrics(run: RunDir) -> list[dict]:
    return list(read_records(run.metrics_file))


def committed(run: RunDir, step: int):
    return lambda: any(r["step"] == step for r in metrics(run))


def two_batches(root, *, tiny_model_dir, tiny_model, dtype: str) -> RunDir:
    run = make_run(root, tiny_model_dir=tiny_model_dir)
    config = load_config(run.config_file)
    run.config_file.write_text(dump_config(dataclasses.replace(
        config, model=dataclasses.replace(config.model, dtype=dtype))))
    for step, tasks in enumerate((STEP0, STEP1)):
        batch = rollouts(tiny_model, tasks=tasks, seed=10 * step, version=step)
        record_calls(run, batch)
        write_batch(run, step=step, batch=batch)
    return run


@pytest.mark.parametrize("dtype, nproc", [
    ("float32", 0), ("bfloat16", 0), pytest.param("float32", 2, marks=pytest.mark.torchrun)])
def test_a_reused_trainer_gives_the_weights_of_a_fresh_process(tmp_path, tiny_model_dir, tiny_model, dtype, nproc):
    run = two_batches(tmp_path / "resident", tiny_model_dir=tiny_model_dir, tiny_model=tiny_model, dtype=dtype)
    trainer = resident_step(run, step=0, group="g1", nproc=nproc)
    wait_for(committed(run, 0), run=run, process=trainer)
    # The run as step 0 left it (v1, optimizer/v1, batch 1), for a fresh process to go on from.
    fresh = RunDir(shutil.copytree(run.path, tmp_path / "fresh" / "run"))
    write_train_request(run, 1, "g1")
    wait_for(lambda: str(run.trainer_request_file(2)) in log(run), run=run, process=trainer)
    if nproc:  # under torchrun, stopped as the head stops a group: SIGTERM to the agent
        trainer.send_signal(signal.SIGTERM)
    else:
        run.stop_file.touch()
    code, err = finish(trainer, run=run)
    assert code == (128 + signal.SIGTERM if nproc else 0), err[-4000:]
    assert "Traceback" not in err, err[-4000:]
    # one line per step in the log, from rank 0 only
    assert [line for line in err.splitlines() if line.startswith("step ")] == [step_line(r) for r in metrics(run)]

    done = torchrun_step(fresh, step=1, nproc=nproc) if nproc else train_step(fresh, step=1)
    assert done.returncode == 0, done.stderr[-4000:]
    reused, again = (read_weights(r.weights_dir(2)) for r in (run, fresh))
    assert reused.keys() == again.keys()
    for name in reused:
        assert reused[name].dtype == again[name].dtype == getattr(torch, dtype)
        assert float((reused[name].float() - again[name].float()).abs().max()) <= 1e-6, name
    assert not torch.equal(reused["lm_head.weight"], read_weights(run.weights_dir(1))[
        "lm_head.weight"])
    lines, fresh_line = metrics(run), metrics(fresh)[-1]
    assert [(r["step"], r["trainer"], r["optimizer_state"]) for r in lines] == [
        (0, "started", "fresh"), (1, "reused", "loaded")]
    assert (fresh_line["trainer"], fresh_line["optimizer_state"]) == ("started", "loaded")
    assert lines[1]["loss"] == pytest.approx(fresh_line["loss"], rel=1e-6)
    assert lines[1]["world_size"] == fresh_line["world_size"] == max(nproc, 1)
    # Getting the state in memory ready costs nothing next to loading it from disk.
    assert lines[1]["time_s"]["load"] < fresh_line["time_s"]["load"]
    print(f"time_s.load ({dtype}, {max(nproc, 1)} rank(s)): started {lines[0]['time_s']['load']}, "
          f"reused {lines[1]['time_s']['load']}, fresh step 1 {fresh_line['time_s']['load']}")


def start_waiting(tmp_path, tiny_model_dir, *, nproc: int = 0) -> tuple[RunDir, subprocess.Popen]:
    """A resident trainer whose step 0 is committed already: it waits for request 1 at once."""
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    shutil.copytree(run.weights_dir(0), run.weights_dir(1))
    trainer = resident_step(run, step=0, group="g1", nproc=nproc)
    wait_for(lambda: "waiting for" in log(run), run=run, process=trainer, timeout=120)
    return run, trainer


@pytest.fixture
def waiting(tmp_path, tiny_model_dir):
    return start_waiting(tmp_path, tiny_model_dir)


def test_a_request_for_another_group_makes_the_trainer_exit_0(waiting):
    run, trainer = waiting
    write_train_request(run, 1, "g2")
    code, err = finish(trainer, run=run)
    assert code == 0 and "superseded" in err, err
    assert not run.weights_dir(2).exists()


def test_the_stop_file_makes_the_trainer_exit_0(waiting):
    run, trainer = waiting
    run.stop_file.touch()
    code, err = finish(trainer, run=run)
    assert code == 0 and "stopping" in err, err


@pytest.mark.torchrun
def test_a_killed_agent_takes_its_workers_with_it(tmp_path, tiny_model_dir):
    """The local backend stops a member without grace: SIGTERM, then at once SIGKILL, to the agent's
    process group, which leaves the agent no time to stop its workers; they are in sessions of
    their own (torchrun's choice), and once outlived it, polling on."""
    run, agent = start_waiting(tmp_path, tiny_model_dir, nproc=2)
    workers = [int(pid) for pid in open(f"/proc/{agent.pid}/task/{agent.pid}/children").read().split()]
    assert workers
    agent.kill()
    agent.wait()
    deadline = time.monotonic() + 30
    while (alive := [pid for pid in workers if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for orphan in alive:
        os.kill(orphan, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived their agent:\n{log(run)[-4000:]}"


def running(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_damaged_request_is_a_clear_error_not_a_hang(waiting):
    run, trainer = waiting
    run.trainer_dir.mkdir(exist_ok=True)
    run.trainer_request_file(1).write_text('{"step": 1, "gro')
    code, err = finish(trainer, run=run)
    assert code == 1, err
    assert f"error: {run.trainer_request_file(1)} is damaged: not valid JSON" in err and "Traceback" not in err


def test_the_environment_asks_for_a_resident_trainer_as_the_flags_do(tmp_path, tiny_model_dir, monkeypatch):
    import gyrectl.train.__main__ as entry

    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    served = []
    monkeypatch.setattr(entry, "serve", lambda **kwargs: served.append(kwargs))
    monkeypatch.setenv("GYRECTL_TRAINER_RESIDENT", "1")
    with pytest.raises(SystemExit) as exited:  # resident without a group id: a usage error
        entry.main(["--run-dir", str(run.path), "--step", "3"])
    assert exited.value.code == 2
    monkeypatch.setenv("GYRECTL_TRAINER_GROUP", "g7")
    assert entry.main(["--run-dir", str(run.path), "--step", "3"]) == 0
    assert served == [{"run": RunDir(run.path), "step": 3, "group": "g7"}]
