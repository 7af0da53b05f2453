#!/usr/bin/env bash
# A real Slurm on this one host, for trying `gradsync worker` under srun and sbatch
# (tests/integration/test_slurm.py starts and stops it). Needs root and Debian's packages
# slurm-wlm and munge; no systemd.
#
#   scripts/slurm-one-host.sh start    munged (as user munge), slurmctld, slurmd; waits until
#                                      sinfo shows this node idle (GRADSYNC_SLURM_WAIT_S, 30 s)
#   scripts/slurm-one-host.sh stop     cancels the jobs, stops the daemons it started
#   scripts/slurm-one-host.sh status   each daemon's pid, and the node as sinfo sees it
#
# It writes /etc/slurm/slurm.conf, marked with the comment line $MARK below, and refuses to
# replace a slurm.conf without that line. One partition, `debug` (the default), shares this
# host's CPUs among up to 4 tasks each (OverSubscribe=FORCE:4), so `srun -n 4 --overcommit`
# runs on 2 cores. Its state, the daemons' logs and pid files live under $GRADSYNC_SLURM_STATE
# (default /var/lib/gradsync-slurm), which `stop` leaves for reading (each start keeps the
# previous log as NAME.log.1).
#
# `start` when everything runs is a no-op; it restarts slurmctld and slurmd only when the
# configuration it writes changed (another host name, CPU count or memory). Exit 0 on success;
# otherwise 1 and one line naming what failed (the daemon and its log file), or 2 on bad usage.
# `status` exits 0 while slurmctld and slurmd run, 3 otherwise.
set -uo pipefail

STATE=${GRADSYNC_SLURM_STATE:-/var/lib/gradsync-slurm}
WAIT_S=${GRADSYNC_SLURM_WAIT_S:-30}
CONF=/etc/slurm/slurm.conf
MARK="# Written by gradsync's scripts/slurm-one-host.sh, which may rewrite it."
MUNGE_KEY=/etc/munge/munge.key
MUNGE_RUN=/run/munge
ME=slurm-one-host

fail() {
  echo "$ME: $*" >&2
  exit 1
}

# The last line of a log worth quoting (an error if there is one), for a one-line failure.
last_error() {
  local log=$1 line=""
  if [[ -r $log ]]; then
    line=$(grep -iE 'error|fatal' "$log" | tail -n 1)
    [[ -n $line ]] || line=$(tail -n 1 "$log")
  fi
  echo "${line:-no log written}"
}

# Whether process `pid` is alive (not a zombie) and is `name`.
is_running() {
  local pid=$1 name=$2 stat
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  # The state follows the command name's closing parenthesis; Z is a zombie.
  [[ ${stat##*) } != Z* ]]
}

# The pid in a pid file when that process is alive and is `name`, else nothing.
live_pid() {
  local pidfile=$1 name=$2 pid
  # The daemon may remove its pid file at any moment.
  pid=$({ tr -dc 0-9 <"$pidfile"; } 2>/dev/null)
  [[ -n $pid ]] && is_running "$pid" "$name" || return 1
  echo "$pid"
}

# Sends SIGTERM, waits up to 10 s, then SIGKILL. Returns whether a process was stopped.
stop_pid() {
  local pidfile=$1 name=$2 pid i
  pid=$(live_pid "$pidfile" "$name") || return 1
  kill -TERM "$pid" 2>/dev/null
  # The pid, not the pid file: a daemon removes its pid file before it has exited.
  for ((i = 0; i < 100; i++)); do
    is_running "$pid" "$name" || break
    sleep 0.1
  done
  if is_running "$pid" "$name"; then
    kill -KILL "$pid" 2>/dev/null
    for ((i = 0; i < 20; i++)); do
      is_running "$pid" "$name" || break
      sleep 0.1
    done
  fi
  rm -f "$pidfile"
  return 0
}

munge_works() {
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1
}

# The node's state as sinfo reports it ("idle", "mix", "down*", ...), or nothing.
node_state() {
  timeout 5 sinfo -h -n "$HOST" -o %t 2>/dev/null | head -n 1
}

# The configuration this host gets; its first line is the mark.
write_conf() {
  local cpus mem_mb
  cpus=$(nproc)
  # What slurmd measures (sysinfo), in MiB; a node configured with more is drained.
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  cat <<EOF
$MARK
# A single-host Slurm for gradsync (scripts/slurm-one-host.sh start, stop, status).
ClusterName=gradsync
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# No systemd, no cgroups: processes tracked by their parent pids, no task confinement.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
# No mail program here: without this slurmctld logs an error at every start.
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# A node that was down (slurmd restarted) comes back by itself.
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
# Up to 4 tasks share each CPU: srun -n 4 --overcommit on 2 cores.
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

conf_is_ours() {
  [[ ! -e $CONF ]] || grep -qxF "$MARK" "$CONF"
}

start_munge() {
  if munge_works; then
    return 0  # ours from an earlier start, or a munged this script did not start: left alone
  fi
  if [[ ! -s $MUNGE_KEY ]]; then
    mkdir -p "$(dirname "$MUNGE_KEY")"
    mungekey -c -k "$MUNGE_KEY" >/dev/null 2>&1 || fail "mungekey -c -k $MUNGE_KEY failed"
  fi
  # munged refuses a key that is not its user's, or that others may read.
  chown munge:munge "$(dirname "$MUNGE_KEY")" "$MUNGE_KEY"
  chmod go-w "$(dirname "$MUNGE_KEY")"
  chmod go-rwx "$MUNGE_KEY"
  mkdir -p "$MUNGE_RUN" "$STATE/munge" /var/lib/munge
  chown munge:munge "$MUNGE_RUN" "$STATE/munge" /var/lib/munge
  chmod 0755 "$MUNGE_RUN"
  chmod 0700 "$STATE/munge"
  # munged refuses a stale socket left by one that was killed.
  if ! live_pid "$STATE/munge/munged.pid" munged >/dev/null; then
    rm -f "$MUNGE_RUN/munge.socket.2" "$MUNGE_RUN/munge.socket.2.lock"
  fi
  local log="$STATE/munge/munged.log" i
  [[ ! -e $log ]] || mv -f "$log" "$log.1"
  # munged refuses a log file that is not its user's.
  touch "$log"
  chown munge:munge "$log"
  chmod 0600 "$log"
  runuser -u munge -- /usr/sbin/munged --log-file="$log" --pid-file="$STATE/munge/munged.pid" \
    2>>"$log" </dev/null || fail "munged did not start: $(last_error "$log") (log: $log)"
  touch "$STATE/munged.started"
  for ((i = 0; i < 50; i++)); do
    munge_works && return 0
    sleep 0.2
  done
  fail "munged started, but munge -n | unmunge fails: $(last_error "$log") (log: $log)"
}

# Starts slurmctld or slurmd unless running; a daemon that dies at once fails here.
start_daemon() {
  local name=$1 log="$STATE/$1.log"
  live_pid "$STATE/$name.pid" "$name" >/dev/null && return 0
  # A fresh log, so that a failure quotes this start's error; the previous one is kept.
  [[ ! -e $log ]] || mv -f "$log" "$log.1"
  # -c: no state from an earlier run (no old jobs; slurmd's shared memory cleaned).
  # Anything it says before its log file is open goes to the same log.
  "/usr/sbin/$name" -c 2>>"$log" </dev/null
  local rc=$? i
  [[ $rc -eq 0 ]] || fail "$name exited $rc at start: $(last_error "$log") (log: $log)"
  for ((i = 0; i < 50; i++)); do
    live_pid "$STATE/$name.pid" "$name" >/dev/null && return 0
    sleep 0.1
  done
  fail "$name did not stay up: $(last_error "$log") (log: $log)"
}

stop_slurm_daemons() {
  local stopped=()
  stop_pid "$STATE/slurmd.pid" slurmd && stopped+=(slurmd)
  stop_pid "$STATE/slurmctld.pid" slurmctld && stopped+=(slurmctld)
  echo "${stopped[*]}"
}

cmd_start() {
  [[ $(id -u) -eq 0 ]] || fail "start needs root (the daemons run as root and munge)"
  local tool
  for tool in munged mungekey slurmctld slurmd sinfo; do
    command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] ||
      fail "$tool not found (apt-get install slurm-wlm munge)"
  done
  conf_is_ours || fail "$CONF was not written by this script (no line '$MARK'); refusing to" \
    "replace it: move it away, or use the Slurm it configures"
  mkdir -p "$STATE/slurmctld" "$STATE/slurmd" "$(dirname "$CONF")"
  chmod 0755 "$STATE"

  start_munge

  local new="$STATE/slurm.conf.new"
  write_conf >"$new"
  if ! cmp -s "$new" "$CONF"; then
    # A changed node (host name, CPUs, memory) needs both daemons restarted to take it.
    stop_slurm_daemons >/dev/null
    mv "$new" "$CONF"
    chmod 0644 "$CONF"
  else
    rm -f "$new"
  fi

  start_daemon slurmctld
  start_daemon slurmd

  local state="" deadline=$((SECONDS + WAIT_S))
  while ((SECONDS < deadline)); do
    state=$(node_state)
    case $state in
      idle | mix | alloc | comp) echo "$ME: node $HOST is $state (state and logs in $STATE)"
        return 0 ;;
    esac
    # A daemon that died while we waited is the reason: name it at once.
    live_pid "$STATE/slurmctld.pid" slurmctld >/dev/null ||
      fail "slurmctld exited: $(last_error "$STATE/slurmctld.log") (log: $STATE/slurmctld.log)"
    live_pid "$STATE/slurmd.pid" slurmd >/dev/null ||
      fail "slurmd exited: $(last_error "$STATE/slurmd.log") (log: $STATE/slurmd.log)"
    sleep 0.2
  done
  if [[ -z $state ]]; then
    fail "sinfo got no answer from slurmctld in ${WAIT_S} s:" \
      "$(last_error "$STATE/slurmctld.log") (log: $STATE/slurmctld.log)"
  fi
  local reason
  reason=$(timeout 5 sinfo -h -R -n "$HOST" -o %E 2>/dev/null | head -n 1)
  fail "node $HOST is '$state', not idle, after ${WAIT_S} s${reason:+ (reason: $reason)}:" \
    "$(last_error "$STATE/slurmd.log") (logs: $STATE/slurmd.log, $STATE/slurmctld.log)"
}

cmd_stop() {
  [[ $(id -u) -eq 0 ]] || fail "stop needs root"
  local i
  if live_pid "$STATE/slurmctld.pid" slurmctld >/dev/null; then
    # Jobs first, so that no slurmstepd outlives slurmd.
    local jobs
    read -r -a jobs <<<"$(timeout 5 squeue -h -o %i 2>/dev/null | tr '\n' ' ')"
    [[ ${#jobs[@]} -eq 0 ]] || timeout 5 scancel --full --quiet "${jobs[@]}" 2>/dev/null
    for ((i = 0; i < 50; i++)); do
      [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  local stopped
  read -r -a stopped <<<"$(stop_slurm_daemons)"
  if [[ -e $STATE/munged.started ]]; then
    stop_pid "$STATE/munge/munged.pid" munged && stopped+=(munged)
    rm -f "$STATE/munged.started"
  fi
  if [[ ${#stopped[@]} -eq 0 ]]; then
    echo "$ME: nothing of ours was running"
  else
    echo "$ME: stopped ${stopped[*]} (logs in $STATE)"
  fi
}

cmd_status() {
  local name pid running=0
  for name in munged slurmctld slurmd; do
    local pidfile="$STATE/$name.pid"
    [[ $name == munged ]] && pidfile="$STATE/munge/munged.pid"
    if pid=$(live_pid "$pidfile" "$name"); then
      echo "$name: running (pid $pid)"
      [[ $name == munged ]] || running=$((running + 1))
    elif [[ $name == munged ]] && munge_works; then
      echo "munged: running (not started by this script)"
    else
      echo "$name: stopped"
    fi
  done
  if [[ $running -eq 2 ]]; then
    echo "node $HOST: $(node_state || true)"
    return 0
  fi
  return 3
}

HOST=$(hostname -s)
case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status" >&2
     exit 2 ;;
esac
