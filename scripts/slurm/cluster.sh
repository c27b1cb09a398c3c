#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for the `gen slurm` end-to-end tests
# (pipeline/tests/it/slurm.rs): Debian's slurmctld, slurmd and munge, one node named after this
# host with its CPUs, one partition `gen`. Needs root (or sudo). Idempotent.
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
slurmd_pid=/run/slurmd-gen.pid
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
  $sudo mkdir -p /etc/slurm "$state/ctld" "$state/d" /var/log/slurm
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
SlurmdSpoolDir=$state/d
SlurmctldPidFile=$ctld_pid
SlurmdPidFile=$slurmd_pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
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
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
# Two tasks may share a CPU: a duplicate or resubmitted task starts while the others run.
PartitionName=gen Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
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
    for file in "$slurmd_pid" "$ctld_pid"; do
      if alive "$file"; then stop_pid "$file"; fi
    done
  fi
  alive "$ctld_pid" || $sudo slurmctld
  alive "$slurmd_pid" || $sudo slurmd
  local host
  host="$(hostname -s)"
  # The node registers within a few seconds; a node left DOWN by an earlier unclean stop is
  # put back to service.
  for _ in $(seq 1 60); do
    local node_state
    node_state="$(sinfo -h -n "$host" -o %T 2>/dev/null || true)"
    case "$node_state" in
      idle*|mixed*|allocated*|completing*)
        log "cluster up: node $host $node_state"
        return ;;
      down*|drain*)
        $sudo scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 1
  done
  log "the node did not become idle in 60 s; see /var/log/slurm/slurmctld.log and slurmd.log"
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
  for file in "$slurmd_pid" "$ctld_pid" "$munge_pid"; do
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
