"""The training side of a switch, without the training: a torchrun worker that says when its
process started and when its process group was up, then exits. What it measures is everything a
training step's start costs before the trainer's own work (imports of torch aside)."""

import time

STARTED = time.time()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch.distributed as dist  # noqa: E402

IMPORTED = time.time()
dist.init_process_group("gloo")
dist.barrier()
GROUP_UP = time.time()
dist.destroy_process_group()
with open(sys.argv[1], "a") as out:
    out.write(json.dumps({"rank": int(os.environ["RANK"]), "started": STARTED, "imported": IMPORTED,
                          "group_up": GROUP_UP}) + "\n")
