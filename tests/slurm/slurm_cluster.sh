#!/bin/bash
# Sourced by slurm_test.sh: a one-node Slurm cluster (munged, slurmctld, slurmd) in a temporary directory, on free
# loopback ports, with gpupool's SPANK plugin in its plugstack. Needs root (slurmd starts steps as their users).
#
#   slurm_cluster_start DIR PLUGIN [PLUGSTACK ARGS...]   sets SLURM_CONF and starts the daemons; returns 77 (skip)
#                                                        when the machine will not run them
#   slurm_cluster_stop                                   stops whatever slurm_cluster_start started

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

SLURM_CLUSTER_PIDS=()

# Stops the processes given: SIGTERM to all, up to 5 s each to end, then SIGKILL; reaps them.
stop_processes() {
  local pid
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "$@"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
}

slurm_cluster_stop() {
  stop_processes "${SLURM_CLUSTER_PIDS[@]}"
  SLURM_CLUSTER_PIDS=()
}

# Prints the tail of the daemons' logs (on a failure to start).
slurm_cluster_logs() {
  local log
  for log in "$SLURM_DIR"/munged.log "$SLURM_DIR"/slurmctld.log "$SLURM_DIR"/slurmd.log; do
    [[ -f $log ]] && { echo "--- $log"; tail -n 25 "$log"; }
  done
}

slurm_cluster_start() {
  SLURM_DIR=$1
  local plugin=$2
  shift 2
  if ((EUID != 0)); then
    echo "SKIP: slurmd must run as root to start job steps as their users; this test runs as uid $EUID"
    return 77
  fi
  local munged slurmctld slurmd
  munged=$(command -v munged || echo /usr/sbin/munged)
  slurmctld=$(command -v slurmctld || echo /usr/sbin/slurmctld)
  slurmd=$(command -v slurmd || echo /usr/sbin/slurmd)
  for exe in "$munged" "$slurmctld" "$slurmd" "$(command -v srun)"; do
    if [[ ! -x $exe ]]; then
      echo "FAIL: Slurm or munge is not installed (scripts/setup.sh installs slurmctld slurmd slurm-client munge)"
      return 1
    fi
  done
  mkdir -p "$SLURM_DIR"/state "$SLURM_DIR"/spool "$SLURM_DIR"/munge
  chmod 0700 "$SLURM_DIR"/munge
  dd if=/dev/urandom of="$SLURM_DIR"/munge/munge.key bs=1024 count=1 status=none
  chmod 0400 "$SLURM_DIR"/munge/munge.key
  "$munged" --force --key-file="$SLURM_DIR"/munge/munge.key --socket="$SLURM_DIR"/munge/munge.socket \
    --pid-file="$SLURM_DIR"/munge/munged.pid --log-file="$SLURM_DIR"/munged.log \
    --seed-file="$SLURM_DIR"/munge/munged.seed --foreground >>"$SLURM_DIR"/munged.log 2>&1 &
  SLURM_CLUSTER_PIDS+=($!)
  for _ in $(seq 100); do [[ -S $SLURM_DIR/munge/munge.socket ]] && break; sleep 0.1; done
  if [[ ! -S $SLURM_DIR/munge/munge.socket ]]; then
    echo "SKIP: munged did not start on this machine:"; slurm_cluster_logs; slurm_cluster_stop; return 77
  fi

  local node ctld_port slurmd_port
  node=$(hostname -s)
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(free_port); done
  {
    echo "plugin $plugin $*" | sed 's/^plugin/required/'
  } >"$SLURM_DIR"/plugstack.conf
  cat >"$SLURM_DIR"/slurm.conf <<CONF
ClusterName=gpupooltest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SLURM_DIR/munge/munge.socket
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=debug
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
PlugStackConfig=$SLURM_DIR/plugstack.conf
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
  export SLURM_CONF=$SLURM_DIR/slurm.conf
  "$slurmctld" -D -i -f "$SLURM_CONF" >>"$SLURM_DIR"/slurmctld.log 2>&1 &
  SLURM_CLUSTER_PIDS+=($!)
  "$slurmd" -D -f "$SLURM_CONF" -N "$node" >>"$SLURM_DIR"/slurmd.log 2>&1 &
  SLURM_CLUSTER_PIDS+=($!)
  local state=""
  for _ in $(seq 150); do
    state=$(sinfo -h -n "$node" -o %T 2>/dev/null)
    [[ $state == idle* ]] && break
    sleep 0.2
  done
  if [[ $state != idle* ]]; then
    echo "SKIP: slurmctld and slurmd did not bring node $node up on this machine (state '${state:-none}'):"
    slurm_cluster_logs
    slurm_cluster_stop
    return 77
  fi
  return 0
}
