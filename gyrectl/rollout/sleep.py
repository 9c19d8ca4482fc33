"""A rollout server's engine put to sleep while its cell trains, and woken when the cell returns:
vLLM's sleep mode (``--enable-sleep-mode``; control routes need ``VLLM_SERVER_DEV_MODE=1``).

    POST /sleep?level=1     weights to host memory, KV cache freed (GPU memory for the trainer)
    POST /sleep?level=2     weights and KV cache dropped; the newest weights are reloaded on wake
    POST /wake_up           back on the GPU; the caller then syncs the newest weights (the
                            ``reload_weights`` path, which also resets the prefix cache)

vLLM on CPU answers both and keeps everything where it was (its worker logs that CPU has no sleep
mode), so the same calls run in CI. Seconds on a GPU instead of an engine start (vLLM's figures:
2.9 s wake vs 47 s cold for a 30B model).
"""

from __future__ import annotations

from gyrectl.rollout.http import post

SLEEP_TIMEOUT_S = 300.0
"""The longest a sleep or wake call is waited for where the run's ``rollout.wake_timeout_s`` is
not given (offloading a large model's weights to host memory takes a while; a hung server must
not take forever)."""


def sleep_server(url: str, *, level: int, key: str, timeout_s: float = SLEEP_TIMEOUT_S) -> None:
    post(f"{url}/sleep?level={level}", timeout_s=timeout_s, key=key)


def wake_server(url: str, *, key: str, timeout_s: float = SLEEP_TIMEOUT_S) -> None:
    post(f"{url}/wake_up", timeout_s=timeout_s, key=key)
