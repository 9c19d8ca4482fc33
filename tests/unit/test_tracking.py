"""Experiment tracking: a run's scalars from its metrics and journal, written to TensorBoard and
read back with TensorBoard's own reader (``EventAccumulator``); a head that resumes writes only
what is new. The journal is a simulated run's (the real coordinator, actuator and policy)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from gyrectl.config import dump_config
from gyrectl.coordinator.events import TrainEnded
from gyrectl.coordinator.journal import Journal
from gyrectl.coordinator.state import initial_state, limits_from_config
from gyrectl.run.rundir import RunDir
from gyrectl.sim.run import simulate
from gyrectl.tracking.publisher import TrackingPublisher
from gyrectl.tracking.scalars import idle_scalars, move_scalars, run_scalars

from coordinator_cases import small_config, workload

CONFIG = small_config(steps=3)


def metrics_line(step: int) -> dict:
    return {"step": step, "weight_version": step + 1, "reward_mean": 0.25 * step, "loss": -0.1 * step, "kl": 0.01,
            "clip_fraction": 0.0, "dedup_ratio": 2.5, "trained_tokens": 100 + step, "duration_s": 3.0,
            "time_s": {"load": 1.0, "forward_backward": 1.5}, "memory_gb": {"forward_backward": 0.1},
            "trainer": "started", "world_size": 2, "optimizer_state": "fresh"}


@pytest.fixture(scope="module")
def events():
    return simulate(CONFIG, workload_spec=workload([5.0 + (i % 7) for i in range(40)])).events


def test_each_step_metric_becomes_a_scalar_at_its_step(events):
    scalars = run_scalars([metrics_line(s) for s in range(3)], events, initial_state(limits_from_config(CONFIG)))
    tags = {s.tag for s in scalars}
    assert {"train/reward_mean", "train/loss", "train/kl", "train/clip_fraction", "train/dedup_ratio",
            "train/trained_tokens", "train/duration_s", "time_s/load", "time_s/forward_backward",
            "memory_gb/forward_backward", "cells/idle_fraction"} <= tags
    assert not any(tag.startswith("train/trainer") or "optimizer_state" in tag for tag in tags)  # words, not numbers
    rewards = sorted((s.step, s.value) for s in scalars if s.tag == "train/reward_mean")
    assert rewards == [(0, 0.0), (1, 0.25), (2, 0.5)]
    ends = {e.index: e.at for e in events if isinstance(e, TrainEnded)}
    assert all(s.wall == ends[s.step] for s in scalars if s.tag == "train/loss")


def test_the_idle_share_is_a_fraction_and_moves_keep_their_numbers_as_the_journal_grows(events):
    initial = initial_state(limits_from_config(CONFIG))
    ends = {e.index: e.at for e in events if isinstance(e, TrainEnded)}
    idle = idle_scalars(events, initial, ends)
    assert [s.step for s in idle] == sorted(ends) and all(0.0 <= s.value <= 1.0 for s in idle)
    assert any(s.value > 0 for s in idle)  # cells start and switch: not every second is useful
    half = move_scalars(events[:len(events) // 2])
    assert set(half) <= set(move_scalars(events))


def write_run(tmp_path, events, steps: int) -> RunDir:
    run = RunDir.create(tmp_path, "tracked")
    run.config_file.write_text(dump_config(CONFIG))
    ends = [i for i, e in enumerate(events) if isinstance(e, TrainEnded)]
    with Journal(run.journal_file) as journal:
        for event in events[:ends[steps - 1] + 1]:
            journal.append(event)
    run.metrics_file.write_text("".join(json.dumps(metrics_line(s)) + "\n" for s in range(steps)))
    return run


def read_back(run: RunDir) -> EventAccumulator:
    reader = EventAccumulator(str(run.tracking_dir / "tensorboard"))
    reader.Reload()
    return reader


def test_tensorboard_reads_the_runs_scalars_and_a_resumed_head_adds_only_new_ones(tmp_path, events):
    run = write_run(tmp_path, events, steps=2)
    first = TrackingPublisher(run, CONFIG, every_s=3600)
    assert first.publish() and first.publish() == []  # nothing new the second time
    first.close()
    reader = read_back(run)
    assert [(e.step, e.value) for e in reader.Scalars("train/reward_mean")] == [(0, 0.0), (1, 0.25)]
    assert {"time_s/load", "cells/idle_fraction"} <= set(reader.Tags()["scalars"])

    # A head that resumes the run (step 2 trained since) writes step 2 and nothing twice.
    more = events[:[i for i, e in enumerate(events) if isinstance(e, TrainEnded)][2] + 1]
    with Journal(run.journal_file) as journal:
        for event in more[len([1 for _ in run.journal_file.read_text().splitlines()]):]:
            journal.append(event)
    with run.metrics_file.open("a") as f:
        f.write(json.dumps(metrics_line(2)) + "\n")
    second = TrackingPublisher(run, CONFIG, every_s=3600)
    second.close()
    reader = read_back(run)
    assert [(e.step, e.value) for e in reader.Scalars("train/reward_mean")] == [(0, 0.0), (1, 0.25), (2, 0.5)]
    assert [e.step for e in reader.Scalars("cells/idle_fraction")] == [0, 1, 2]


def test_tensorboard_can_be_turned_off(tmp_path, events):
    config = dataclasses.replace(CONFIG, tracking=dataclasses.replace(CONFIG.tracking, tensorboard=False))
    run = write_run(tmp_path, events, steps=1)
    TrackingPublisher(run, config, every_s=3600).close()
    assert not (run.tracking_dir / "tensorboard").exists()


def test_weights_and_biases_offline_logs_the_same_scalars_without_a_network(tmp_path, events, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # belt and braces: no network whatever the config says
    config = dataclasses.replace(CONFIG, tracking=dataclasses.replace(CONFIG.tracking, wandb="offline"))
    run = write_run(tmp_path, events, steps=2)
    TrackingPublisher(run, config, every_s=3600).close()
    (log,) = (run.tracking_dir / "wandb").glob("offline-run-*/run-tracked.wandb")
    # W&B ships no reader for its offline log (its Go core writes it; `wandb sync` uploads it):
    # the logged keys and values are in the records as written.
    data = log.read_bytes()
    assert b"train/reward_mean" in data and b"cells/idle_fraction" in data and b"0.25" in data
    assert read_back(run).Scalars("train/reward_mean")  # TensorBoard beside it, as configured
