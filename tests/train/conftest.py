"""The training tests reuse the unit tests' call generators and naive per-path reference."""

import sys
from pathlib import Path

# The call generators (agent_shapes) and the naive per-path reference (naive_paths) the dedup
# proof uses live beside the unit tests; the training proofs reuse them rather than copy them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
