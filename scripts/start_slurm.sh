#!/usr/bin/env bash
# Start a single-node Slurm cluster (munged + slurmctld + slurmd) on this machine.
# Run as root, no systemd needed. Idempotent: daemons that are already running are
# left alone, missing ones are (re)started. Returns once the node is usable.
set -euo pipefail

NODE=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)  # a bit below the machine's
CONF=/etc/slurm/slurm.conf  # where Debian's slurm looks for it
LOG=/var/log/slurm

running() {  # running NAME: a live process (not a zombie) with exactly that name exists
  pgrep -x -r R,S,D "$1" >/dev/null
}

fail() {  # fail MESSAGE [LOGFILE]: print what failed and the tail of its log, then exit
  echo "start_slurm: $1" >&2
  if [[ -n "${2:-}" && -f "$2" ]]; then echo "--- tail of $2:" >&2; tail -n 20 "$2" >&2; fi
  exit 1
}

# 1. Packages.
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge; }
  apt_install >/dev/null || { apt-get update >/dev/null && apt_install >/dev/null; } || fail "apt-get install failed"
fi

# 2. Munge (authentication): key (the munge package usually creates one), run folder, daemon.
mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
if [[ ! -s /etc/munge/munge.key ]]; then
  head -c 1024 /dev/urandom > /etc/munge/munge.key
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 400 /etc/munge/munge.key
if ! running munged; then
  runuser -u munge -- munged --force || fail "munged did not start" /var/log/munge/munged.log
fi

# 3. Slurm configuration. Daemons that are already running keep the one they read at start:
# after changing this, run scripts/stop_slurm.sh and then this script.
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOG"
cat > "$CONF" <<EOF
# Written by scripts/start_slurm.sh
ClusterName=local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# EnforcePartLimits=ALL: reject at submission a job that can never run (e.g. more CPUs than
# the node has) instead of leaving it PENDING forever.
EnforcePartLimits=ALL
# JobRequeue=1: batch jobs may be requeued (scontrol requeue, node failure).
JobRequeue=1
# ReturnToService=2: a node marked DOWN becomes usable again when its slurmd registers.
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=30
# Faster requeue cycles than the defaults: SIGKILL 5 s (not 30) after SIGTERM, a requeued
# job may start again 10 s (not 120) after it ended, pending jobs are scheduled every 5 s.
KillWait=5
AuthInfo=cred_expire=10
SchedulerParameters=sched_interval=5
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

# 4. Slurm daemons (both daemonize themselves). No -c (clean start): they recover their saved
# state, so jobs survive a restart and job ids keep counting up (submitit names its log
# folders after them; a reused id would find an old result there).
if ! running slurmctld; then
  slurmctld || fail "slurmctld did not start" "$LOG/slurmctld.log"
fi
if ! running slurmd; then
  slurmd || fail "slurmd did not start" "$LOG/slurmd.log"
fi

# 5. Wait until the node is up (idle, or busy with jobs if the cluster was already running).
for _ in $(seq 60); do
  STATE=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
  if [[ $STATE =~ ^(idle|mix|alloc|comp)$ ]]; then
    echo "Slurm is up: node $NODE, $CPUS CPUs, partition debug ($STATE)"
    exit 0
  fi
  sleep 1
done
fail "node $NODE not up after 60 s (sinfo state: '${STATE:-none}')" "$LOG/slurmd.log"
