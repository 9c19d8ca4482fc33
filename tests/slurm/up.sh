#!/usr/bin/env bash
# tests/slurm/up.sh — bring up gyrectl's test cluster: a real Slurm (Debian's slurmctld, slurmd,
# munge) with one controller and 5 compute nodes on THIS machine, partition "lab", matching
# configs/slurm-local.yaml (node1 takes the head component, node2-5 the worker pool).
#
#   sudo-less as root:  bash tests/slurm/up.sh        (idempotent: re-running only checks/repairs)
#   tear down:          bash tests/slurm/down.sh
#
# Each node gets its own network + UTS namespace (hostname nodeN, address 10.251.0.(10+N) on a
# private bridge, no default route): node-to-node TCP works by name and killing a namespace's
# processes is a real node crash. Without namespace support it falls back to MODE=multi (several
# slurmd on loopback). Every daemon carries GYRE_SLURMLAB=$LAB in its environment, so down.sh
# stops exactly what this script started.
set -euo pipefail

LAB=${LAB:-$(cd "$(dirname "$0")/../.." && pwd)/.slurmlab}
NNODES=${NNODES:-5}
NODE_CPUS=${NODE_CPUS:-4}       # advertised (SlurmdParameters=config_overrides: 2 real cores do)
NODE_MEM=${NODE_MEM:-8000}      # MB advertised
NODE_GPUS=${NODE_GPUS:-2}       # fake GPUs: gres File= entries that are links to /dev/null
MODE=${MODE:-auto}
NET=${NET:-10.251.0}
BR=${BR:-gyrebr0}
CTLD_PORT=${CTLD_PORT:-17817}
SLURMD_PORT=${SLURMD_PORT:-17818}
PARTITION=${PARTITION:-lab}
UP_TIMEOUT=${UP_TIMEOUT:-60}

CONF=$LAB/etc/slurm.conf
MARK="GYRE_SLURMLAB=$LAB"
MS=$LAB/munge/munge.socket
NODES=$(seq -f 'node%g' 1 "$NNODES")
say() { echo "[slurm-up] $*"; }
die() { echo "[slurm-up] ERROR: $*" >&2; exit 1; }
alive() { # alive PIDFILE COMM: the pid in PIDFILE runs COMM and is not a zombie
  local p c s; p=$(cat "$1" 2>/dev/null) || return 1
  { read -r c < /proc/"$p"/comm && read -r s < /proc/"$p"/stat; } 2>/dev/null || return 1
  s=${s##*) }; [[ $c == "$2" && ${s%% *} != Z ]]
}

[[ $(id -u) == 0 ]] || die "run as root (it starts slurmctld, slurmd and munged)"
for b in slurmctld slurmd munged sinfo scontrol; do command -v $b >/dev/null || die "$b missing: apt-get install slurmctld slurmd slurm-client munge"; done
mkdir -p "$LAB"/{etc,log,run,state,spool,dev,munge,bin}
chmod 755 "$LAB" "$LAB/munge"

# ---- mode: a running cluster keeps its own -----------------------------------------------
if [[ -s $LAB/run/mode ]] && alive "$LAB/run/slurmctld.pid" slurmctld; then
  MODE=$(cat "$LAB/run/mode")
elif [[ $MODE == auto ]]; then
  MODE=multi
  if command -v ip >/dev/null && command -v nsenter >/dev/null && ip netns add gyreprobe$$ 2>/dev/null; then
    ip link add gyrepv$$ type veth peer name gyrepp$$ 2>/dev/null && ip link del gyrepv$$ 2>/dev/null \
      && ip link add gyrepb$$ type bridge 2>/dev/null && ip link del gyrepb$$ && MODE=netns
    ip netns del gyreprobe$$ || true
  fi
fi
[[ $MODE == netns || $MODE == multi ]] || die "MODE must be netns, multi or auto"

# ---- munge: a private daemon, key and socket ---------------------------------------------
[[ -s $LAB/munge/munge.key ]] || dd if=/dev/urandom of="$LAB/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$LAB/munge/munge.key"
if ! alive "$LAB/munge/munged.pid" munged; then
  rm -f "$MS" "$MS.lock"
  env "$MARK" munged -S "$MS" --key-file="$LAB/munge/munge.key" --pid-file="$LAB/munge/munged.pid" \
    --log-file="$LAB/munge/munged.log" --seed-file="$LAB/munge/munged.seed" --num-threads=4 --force
fi
for _ in $(seq 50); do munge -S "$MS" -n </dev/null 2>/dev/null | unmunge -S "$MS" >/dev/null 2>&1 && break; sleep 0.1; done
munge -S "$MS" -n </dev/null | unmunge -S "$MS" >/dev/null || die "munge does not work, see $LAB/munge/munged.log"

# ---- config --------------------------------------------------------------------------------
[[ $MODE == netns ]] && CTL_ADDR=$NET.1 || CTL_ADDR=127.0.0.1
CTL_HOST=$(hostname -s)   # slurmctld only starts where SlurmctldHost equals its short hostname
{
  cat <<CONF
# written by tests/slurm/up.sh (MODE=$MODE); edit the script, not this file
ClusterName=gyrelab
SlurmctldHost=$CTL_HOST($CTL_ADDR)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket=$MS,cred_expire=10
StateSaveLocation=$LAB/state
SlurmdSpoolDir=$LAB/spool/%n
SlurmctldPidFile=$LAB/run/slurmctld.pid
SlurmdPidFile=$LAB/run/slurmd-%n.pid
SlurmctldLogFile=$LAB/log/slurmctld.log
SlurmdLogFile=$LAB/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# no cgroups or systemd in a container: track processes by parentage, bind no tasks
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
SwitchType=switch/none
MpiDefault=none
# no accounting database: finished jobs stay visible for MinJobAge s and in the completion log
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LAB/log/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
MinJobAge=600
ReturnToService=2
# short timeouts, so tests see failures in seconds
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=5
BatchStartTimeout=10
SchedulerParameters=bf_interval=5,batch_sched_delay=0
GresTypes=gpu
CONF
  i=0; for n in $NODES; do i=$((i+1))
    if [[ $MODE == netns ]]; then where="NodeHostname=$n NodeAddr=$NET.$((10+i))"
    else where="NodeHostname=$CTL_HOST NodeAddr=127.0.0.1 Port=$((SLURMD_PORT+i))"; fi
    gres=""; [[ $NODE_GPUS -gt 0 ]] && gres=" Gres=gpu:$NODE_GPUS"
    echo "NodeName=$n $where CPUs=$NODE_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$NODE_CPUS ThreadsPerCore=1 RealMemory=$NODE_MEM$gres State=UNKNOWN"
  done
  echo "PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} > "$CONF.new"
{
  echo "AutoDetect=off"
  if [[ $NODE_GPUS -gt 0 ]]; then
    for g in $(seq 0 $((NODE_GPUS-1))); do ln -sfn /dev/null "$LAB/dev/gpu$g"; done
    echo "NodeName=node[1-$NNODES] Name=gpu File=$LAB/dev/gpu[0-$((NODE_GPUS-1))]"
  fi
} > "$LAB/etc/gres.conf.new"
# slurmd 22.05 always loads a cgroup plugin; the default (autodetect) dies where no cgroup fs is
# visible. cgroup/v1 loads without touching one, which is all proctrack/linuxproc needs.
echo "CgroupPlugin=cgroup/v1" > "$LAB/etc/cgroup.conf"
if alive "$LAB/run/slurmctld.pid" slurmctld && { ! cmp -s "$CONF.new" "$CONF" || ! cmp -s "$LAB/etc/gres.conf.new" "$LAB/etc/gres.conf"; }; then
  say "config changed under a running cluster: restarting it"
  KEEP_MUNGE=1 LAB=$LAB bash "$(dirname "$0")/down.sh" >/dev/null
fi
mv -f "$CONF.new" "$CONF"; mv -f "$LAB/etc/gres.conf.new" "$LAB/etc/gres.conf"
echo "$MODE" > "$LAB/run/mode"
# Clients find the cluster through /etc/slurm (linked) or by sourcing env.sh. The sacct shim
# answers from the completion log, since plain sacct needs slurmdbd (submitit polls sacct).
REAL_SACCT=$(command -v sacct)
[[ $REAL_SACCT == "$LAB/bin/sacct" ]] && REAL_SACCT=/usr/bin/sacct
printf '#!/bin/sh\n# no slurmdbd here: answer from the job completion log\nexec %s --completion "$@"\n' "$REAL_SACCT" > "$LAB/bin/sacct"
chmod +x "$LAB/bin/sacct"
printf 'export SLURM_CONF=%s\nexport PATH=%s/bin:$PATH\n' "$CONF" "$LAB" > "$LAB/env.sh"
mkdir -p /etc/slurm
for f in slurm.conf gres.conf cgroup.conf; do
  if [[ -L /etc/slurm/$f || ! -e /etc/slurm/$f ]]; then ln -sfn "$LAB/etc/$f" "/etc/slurm/$f"
  else say "/etc/slurm/$f is a real file; clients need: source $LAB/env.sh"; fi
done
export SLURM_CONF=$CONF

# ---- network: one namespace per node on a private bridge -----------------------------------
hosts_block="# BEGIN gyrectl slurmlab $LAB"$'\n'
if [[ $MODE == netns ]]; then
  if ! ip link show "$BR" >/dev/null 2>&1; then
    ip link add "$BR" type bridge
    echo "$BR" > "$LAB/run/bridge"
  fi
  ip addr replace "$NET.1/24" dev "$BR"; ip link set "$BR" up
  i=0; for n in $NODES; do i=$((i+1))
    ns=gyre-$n
    [[ -e /run/netns/$ns ]] || ip netns add "$ns"
    ip link show "gyrev$i" >/dev/null 2>&1 || ip link add "gyrev$i" type veth peer name eth0 netns "$ns"
    ip -n "$ns" addr replace "$NET.$((10+i))/24" dev eth0
    ip link set "gyrev$i" master "$BR" up
    ip -n "$ns" link set lo up; ip -n "$ns" link set eth0 up
    # no default route: name lookups fail fast instead of hanging on an unreachable resolver
    hosts_block+="$NET.$((10+i)) $n"$'\n'
    grep -qx "$ns" "$LAB/run/netns.list" 2>/dev/null || echo "$ns" >> "$LAB/run/netns.list"
  done
else
  for n in $NODES; do hosts_block+="127.0.0.1 $n"$'\n'; done
fi
hosts_block+="# END gyrectl slurmlab $LAB"
# rewrite /etc/hosts in place (same inode: it is often a bind mount)
kept=$(awk -v b="# BEGIN gyrectl slurmlab $LAB" -v e="# END gyrectl slurmlab $LAB" '$0==b{s=1} !s{print} $0==e{s=0}' /etc/hosts)
printf '%s\n%s\n' "$kept" "$hosts_block" > /etc/hosts

# ---- daemons -------------------------------------------------------------------------------
if ! alive "$LAB/run/slurmctld.pid" slurmctld; then
  rm -rf "$LAB"/state/* "$LAB"/spool/*   # a fresh controller: no old jobs, ids restart
  env "$MARK" slurmctld -i
fi
for _ in $(seq $((UP_TIMEOUT*10))); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1; done
scontrol ping | grep -q 'is UP' || die "slurmctld does not answer, see $LAB/log/slurmctld.log"
for n in $NODES; do
  alive "$LAB/run/slurmd-$n.pid" slurmd && continue
  if [[ $MODE == netns ]]; then
    # nsenter, not "ip netns exec": the latter remounts /sys and slurmd's cgroup init then fails
    env "$MARK" nsenter --net=/run/netns/gyre-$n unshare --uts sh -c "hostname $n && exec slurmd -N $n"
  else
    env "$MARK" slurmd -N "$n"
  fi
done
for _ in $(seq $((UP_TIMEOUT*5))); do
  total=$(sinfo -h -N -o '%N' 2>/dev/null | sort -u | wc -l)
  bad=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /unk|down|\*|fail|boot|drain/' | wc -l)
  [[ $total -ge $NNODES && $bad == 0 ]] && break
  sleep 0.2
done
[[ $bad == 0 ]] || { sinfo -N; die "nodes did not come up, see $LAB/log/slurmd-*.log"; }
say "up: $NNODES nodes (MODE=$MODE), partition $PARTITION; clients: sinfo, sbatch, squeue, scontrol"
