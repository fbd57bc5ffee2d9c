#!/usr/bin/env bash
# Stop the single-node Slurm cluster started by scripts/start_slurm.sh.
set -uo pipefail

# SIGTERM (via each daemon's pid file) is its clean shutdown; wait for each to exit. The
# controller goes first so that it launches no job on a slurmd that is going away; running
# jobs survive (slurmstepd outlives slurmd) and are picked up again by start_slurm.sh.
for pidfile in /run/slurmctld.pid /run/slurmd.pid /run/munge/munged.pid; do
  pid=$(cat "$pidfile" 2>/dev/null) && kill -TERM "$pid" 2>/dev/null || continue
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then echo "stop_slurm: pid $pid ($pidfile) still running" >&2; exit 1; fi
done
echo "Slurm stopped"
