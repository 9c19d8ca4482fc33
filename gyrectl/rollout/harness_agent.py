"""A harness node's agent: ``python -m gyrectl.rollout.harness_agent RUN_DIR NODE``, the step the
head starts on each harness node (:mod:`gyrectl.rollout.harness_nodes`).

    NODE/assigned.jsonl ──> harness processes (the run's HarnessSettings, this node's CPUs)
    harness exits       ──> NODE/ended.jsonl
    every second        ──> NODE/alive.json (the head's sign that this node still works)

It stops, killing its harnesses, on SIGTERM (the head stopping its step) or once the process that
started it is gone.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from gyrectl.rollout.harness_nodes import AGENT_SETTINGS, ALIVE, ASSIGNED, ENDED, exit_record, node_folder
from gyrectl.rollout.harnesses import HarnessSettings
from gyrectl.rollout.tasks import Assignment
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender, JsonlTail

POLL_S = 0.2
BEAT_S = 1.0


def serve(run: RunDir, node: str, stop: threading.Event) -> None:
    folder = node_folder(run, node)
    settings = HarnessSettings.from_json(json.loads((run.harness_nodes_dir / AGENT_SETTINGS).read_text()))
    settings.sandbox.require()
    runner = settings.runner(run)
    inbox, parent, beat, next_beat = JsonlTail(folder / ASSIGNED), os.getppid(), 0, 0.0
    with JsonlAppender(folder / ENDED) as outbox:
        try:
            while not stop.is_set() and os.getppid() == parent:
                for line in inbox.new():
                    runner.start(Assignment(line["execution"], line["seq"], line["task"]), base_url=line["base_url"])
                for ended in runner.reap():
                    outbox.append(exit_record(ended))
                if time.monotonic() >= next_beat:
                    beat, next_beat = beat + 1, time.monotonic() + BEAT_S
                    run.write_json(folder / ALIVE, {"beat": beat, "host": socket.gethostname(), "pid": os.getpid(),
                                                    "running": runner.num_running})
                stop.wait(POLL_S)
        finally:
            runner.stop_all()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m gyrectl.rollout.harness_agent RUN_DIR NODE", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    serve(RunDir(Path(argv[0])), argv[1], stop)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
