#!/usr/bin/env bash
# scripts/test.sh — install everything, start the local 5-node Slurm cluster, run the whole test
# suite. This is the command .ci/run calls.   Extra arguments go to pytest (e.g. -m "not vllm").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash tests/slurm/up.sh
set +e
.venv/bin/python -m pytest tests "$@"
code=$?
set -e
bash tests/slurm/down.sh >/dev/null || true
exit $code
