#!/usr/bin/env bash
# scripts/quickstart.sh — install everything and run the main job on the embedded default:
# a tiny locally built model, every role a process on this machine (no cluster needed). The RL
# loop trains configs/local-tiny.yaml's steps (a few minutes on 2 cores), then prints the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[[ -f models/tiny/config.json ]] || .venv/bin/gyrectl model tiny models/tiny
name=tiny-$(date +%Y%m%d-%H%M%S)
.venv/bin/gyrectl launch configs/local-tiny.yaml --set run.name="$name" --wait
.venv/bin/gyrectl status "$name"
