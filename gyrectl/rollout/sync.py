"""The one interface through which new policy weights reach a live rollout server.

One file per transport fills it: :mod:`gyrectl.rollout.weights` reloads an HF folder from the
shared filesystem over the server's HTTP control routes (works on CPU and GPU); an NCCL broadcast
from the trainer may come later. The rollout side of the loop (``LiveCellServers``) only sees this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class WeightSync(Protocol):
    def sync(self, url: str, weights_dir: Path, version: int) -> float:
        """Makes the live server at ``url`` serve weights ``version`` (the HF folder
        ``weights_dir``) without restarting it; returns the seconds it took. Raises
        ``RuntimeFailure`` if the server does not serve them afterwards."""
