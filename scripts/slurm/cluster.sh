#!/usr/bin/env bash
# A real Slurm cluster on this machine, for the `gen slurm` end-to-end tests
# (pipeline/tests/it/slurm.rs): Debian's slurmctld, slurmd and munge. The partition `gen` (the
# default) is one node named after this host with its CPUs; the partition `gen-multi` is two
# more nodes, `gen-n1` and `gen-n2`, for a shard that spans nodes (`--nodes-per-shard 2`). All
# three are real `slurmd` daemons on this host (Slurm built with MULTIPLE_SLURMD), each on its
# own port at 127.0.0.1, started as `slurmd -N NODE`; the two extra nodes claim this host's CPUs
# again (overcommitted: only one multi-node test runs at a time, and `gen` stays one node, as
# two llama-servers at once starve 2 cores). Needs root (or sudo). Idempotent.
#
#   scripts/slurm/cluster.sh start    install the packages when missing, configure, start the
#                                     daemons, wait until the node takes jobs
#   scripts/slurm/cluster.sh stop     stop the daemons this script started (by their pid files)
#   scripts/slurm/cluster.sh status   `sinfo` of the cluster
#
# It writes /etc/slurm/slurm.conf only when there is none or when it wrote the one there (it
# carries a marker line), so it never replaces a real cluster's configuration. Logs go to
# /var/log/slurm/; the daemons' state to /var/lib/slurm/gen-test/.
set -euo pipefail

log() { echo "slurm-cluster: $*" >&2; }
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"

conf=/etc/slurm/slurm.conf
marker="# written by gen scripts/slurm/cluster.sh"
state=/var/lib/slurm/gen-test
ctld_pid=/run/slurmctld-gen.pid
# One pid file per slurmd (`%n`: its node name).
slurmd_pid_pattern=/run/slurmd-gen-%n.pid
# Where one slurmd ran before this script started several: stopped on the change.
legacy_slurmd_pid=/run/slurmd-gen.pid
multi_nodes=(gen-n1 gen-n2)
munge_pid=/run/munge/munged.pid

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
    && command -v munged >/dev/null && command -v sbatch >/dev/null; then
    return
  fi
  log "installing slurmctld, slurmd, slurm-client and munge (Debian packages)"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
}

configure() {
  if [ -f "$conf" ] && ! grep -qxF "$marker" "$conf"; then
    log "$conf exists and was not written by this script: using it as it is"
    return
  fi
  local host cpus memory_mb
  host="$(hostname -s)"
  cpus="$(nproc)"
  memory_mb="$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)"
  $sudo mkdir -p /etc/slurm "$state/ctld" /var/log/slurm
  # Root runs both daemons: jobs run as the submitting user anyway, and the state directories
  # need no ownership dance on a fresh machine. proctrack/linuxproc and task/none need no
  # cgroup setup (this machine may have cgroup v1, v2 or none writable).
  $sudo tee "$conf.tmp" >/dev/null <<EOF
$marker
ClusterName=gen-test
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
# A requeued job waits out the credential lifetime before it starts again (120 s by default).
AuthInfo=cred_expire=10
CryptoType=crypto/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/d/%n
SlurmctldPidFile=$ctld_pid
SlurmdPidFile=$slurmd_pid_pattern
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# Finished jobs stay visible to squeue/scontrol for 5 minutes.
MinJobAge=300
# Schedule pending tasks within a second of a CPU freeing up.
SchedulerParameters=sched_interval=1
KillWait=30
InactiveLimit=0
# Array task ids 0-2 only (1001 by default): a job of more shards is split into several arrays,
# as on a site whose MaxArraySize is below its shard count. No test array here needs more.
MaxArraySize=3
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
# Two tasks may share a CPU: a duplicate or resubmitted task starts while the others run.
PartitionName=gen Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
# The same host twice more, each slurmd on its own port: a two-node partition for one test.
NodeName=${multi_nodes[0]} NodeAddr=127.0.0.1 Port=6819 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
NodeName=${multi_nodes[1]} NodeAddr=127.0.0.1 Port=6820 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=gen-multi Nodes=${multi_nodes[0]},${multi_nodes[1]} MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
EOF
  if cmp -s "$conf.tmp" "$conf"; then
    $sudo rm -f "$conf.tmp"
  else
    $sudo mv "$conf.tmp" "$conf"
    changed=1
  fi
}

changed=0

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Every node: this host's, then the two-node partition's.
nodes() { echo "$(hostname -s)" "${multi_nodes[@]}"; }

slurmd_pid() { echo "${slurmd_pid_pattern//%n/$1}"; }

start() {
  install_packages
  configure
  if ! alive "$munge_pid"; then
    $sudo install -d -o munge -g munge -m 0755 /run/munge
    $sudo runuser -u munge -- /usr/sbin/munged
  fi
  if [ "$changed" = 1 ]; then
    # A new configuration: daemons started with the old one start again.
    local file
    for file in "$legacy_slurmd_pid" $(for n in $(nodes); do slurmd_pid "$n"; done) "$ctld_pid"; do
      if alive "$file"; then stop_pid "$file"; fi
    done
  fi
  alive "$ctld_pid" || $sudo slurmctld
  local node
  for node in $(nodes); do
    $sudo mkdir -p "$state/d/$node"
    alive "$(slurmd_pid "$node")" || $sudo slurmd -N "$node"
  done
  # The nodes register within a few seconds; a node left DOWN by an earlier unclean stop is
  # put back to service.
  local up
  for _ in $(seq 1 60); do
    up=0
    for node in $(nodes); do
      local node_state
      node_state="$(sinfo -h -N -n "$node" -o %T 2>/dev/null || true)"
      case "$node_state" in
        idle*|mixed*|allocated*|completing*) up=$((up + 1)) ;;
        down*|drain*)
          $sudo scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
      esac
    done
    if [ "$up" = "$(nodes | wc -w)" ]; then
      log "cluster up: nodes $(nodes | tr ' ' ',') ($(sinfo -h -N -o '%N %T' | sort -u | tr '\n' ' '))"
      return
    fi
    sleep 1
  done
  log "the nodes did not become idle in 60 s; see /var/log/slurm/slurmctld.log and slurmd-NODE.log"
  sinfo -N -l >&2 || true
  exit 1
}

stop_pid() {
  local pid
  pid="$(cat "$1")"
  $sudo kill "$pid"
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}

stop() {
  local file
  for file in "$legacy_slurmd_pid" $(for n in $(nodes); do slurmd_pid "$n"; done) \
    "$ctld_pid" "$munge_pid"; do
    if alive "$file"; then stop_pid "$file"; fi
  done
  log "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) sinfo -N -l ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
