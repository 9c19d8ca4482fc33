#!/usr/bin/env bash
# scripts/test.sh — install everything, lint, start the local 5-node Slurm cluster, run the whole
# test suite. This is the command .ci/run calls.   Extra arguments go to pytest (e.g. -m "not vllm").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Lint first (ruff, configured in pyproject.toml): it takes a second, and a tree that fails it starts no cluster.
if ! .venv/bin/ruff check; then
  echo "[test] ruff check failed: '.venv/bin/ruff check --fix' fixes import order and the like; fix the rest by hand" >&2
  exit 1
fi
bash tests/slurm/up.sh
set +e
.venv/bin/python -m pytest tests "$@"
code=$?
set -e
bash tests/slurm/down.sh >/dev/null || true
exit $code
