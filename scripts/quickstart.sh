#!/usr/bin/env bash
# scripts/quickstart.sh — install everything and run the main job on the embedded default:
# a tiny locally built model, every role a process on this machine (no cluster needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[[ -f models/tiny/config.json ]] || .venv/bin/gyrectl model tiny models/tiny
name=tiny-$(date +%Y%m%d-%H%M%S)
.venv/bin/gyrectl launch configs/local-tiny.yaml --set run.name="$name"
.venv/bin/gyrectl status "$name"
