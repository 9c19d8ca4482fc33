#!/usr/bin/env bash
# tests/slurm/down.sh — stop the test cluster that tests/slurm/up.sh started. Stops only what
# up.sh started — processes carrying its GYRE_SLURMLAB marker, processes inside its namespaces,
# and their descendants — always by pid. Idempotent.   KEEP_MUNGE=1 leaves munged running.
set -uo pipefail
LAB=${LAB:-$(cd "$(dirname "$0")/../.." && pwd)/.slurmlab}
KEEP_MUNGE=${KEEP_MUNGE:-0}
MARK="GYRE_SLURMLAB=$LAB"
export SLURM_CONF=$LAB/etc/slurm.conf
[[ -d $LAB ]] || exit 0

marked() { grep -lzx "$MARK" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vx "$$"; }
comm_of() { cat /proc/"$1"/comm 2>/dev/null; }
running() { local s; s=$(cat /proc/"$1"/stat 2>/dev/null) || return 1; s=${s##*) }; [[ ${s%% *} != Z ]]; }
descendants() { # every descendant of the pids given
  local pid ppid; declare -A kids=()
  for f in /proc/[0-9]*/stat; do s=$(cat "$f" 2>/dev/null) || continue; pid=${s%% *}; s=${s##*) }; s=${s#* }; ppid=${s%% *}; kids[$ppid]+=" $pid"; done
  local queue=("$@") out=()
  while ((${#queue[@]})); do pid=${queue[0]}; queue=("${queue[@]:1}"); for k in ${kids[$pid]:-}; do out+=("$k"); queue+=("$k"); done; done
  echo "${out[@]:-}"
}
stop_pids() { # stop_pids GRACE PID...: TERM, wait, KILL
  local grace=$1; shift; [[ $# -gt 0 ]] || return 0
  kill -TERM "$@" 2>/dev/null
  for _ in $(seq $((grace*10))); do local left=0; for p in "$@"; do running "$p" && left=1; done; ((left)) || return 0; sleep 0.1; done
  kill -KILL "$@" 2>/dev/null; sleep 0.2
}

# jobs first, so slurmstepd cleans up their tasks while the controller still answers
if [[ -f $LAB/run/slurmctld.pid ]] && running "$(cat "$LAB/run/slurmctld.pid")"; then
  jobs=$(timeout 5 squeue -h -o %A 2>/dev/null | tr '\n' ' ')
  [[ -n ${jobs// } ]] && timeout 5 scancel $jobs 2>/dev/null
  for _ in $(seq 25); do [[ -z $(for p in $(marked); do [[ $(comm_of "$p") == slurmstepd ]] && echo "$p"; done) ]] && break; sleep 0.2; done
fi
# then the node daemons, their step daemons and everything under them
roots=$(for p in $(marked); do c=$(comm_of "$p"); [[ $c == slurmd || $c == slurmstepd ]] && echo "$p"; done | tr '\n' ' ')
[[ -n ${roots// } ]] && stop_pids 3 $roots $(descendants $roots)
# whatever is still inside the node namespaces is ours too
if [[ -s $LAB/run/netns.list ]]; then
  for ns in $(cat "$LAB/run/netns.list"); do
    left=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' '); [[ -n ${left// } ]] && stop_pids 2 $left
  done
fi
# the controller, then munge
for p in $(marked); do [[ $(comm_of "$p") == munged ]] && continue; stop_pids 5 "$p" $(descendants "$p"); done
if [[ $KEEP_MUNGE != 1 ]]; then
  for p in $(marked); do stop_pids 3 "$p"; done
  rm -f "$LAB/munge/munge.socket" "$LAB/munge/munge.socket.lock"
fi
# network, /etc/hosts block, /etc/slurm links
if [[ -s $LAB/run/netns.list ]]; then
  for ns in $(cat "$LAB/run/netns.list"); do [[ -e /run/netns/$ns ]] && ip netns del "$ns"; done
  rm -f "$LAB/run/netns.list"
fi
if [[ -s $LAB/run/bridge ]]; then br=$(cat "$LAB/run/bridge"); ip link show "$br" >/dev/null 2>&1 && ip link del "$br"; rm -f "$LAB/run/bridge"; fi
if grep -qx "# BEGIN gyrectl slurmlab $LAB" /etc/hosts; then
  kept=$(awk -v b="# BEGIN gyrectl slurmlab $LAB" -v e="# END gyrectl slurmlab $LAB" '$0==b{s=1} !s{print} $0==e{s=0}' /etc/hosts)
  printf '%s\n' "$kept" > /etc/hosts
fi
for f in slurm.conf gres.conf cgroup.conf; do
  [[ -L /etc/slurm/$f && $(readlink "/etc/slurm/$f") == "$LAB/etc/$f" ]] && rm -f "/etc/slurm/$f"
done
rm -f "$LAB"/run/*.pid "$LAB/run/mode"
echo "[slurm-down] down"
exit 0
