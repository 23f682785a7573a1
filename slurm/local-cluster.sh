#!/bin/bash
# A real one-node Slurm cluster on this machine, for tests and for trying the
# sbatch templates without a site cluster.
#
#   slurm/local-cluster.sh up       start munged, slurmctld and slurmd (what is not running)
#   slurm/local-cluster.sh down     cancel the cluster's jobs and stop the daemons it started
#   slurm/local-cluster.sh status   say what runs; exit 0 when the cluster is up, 3 when not
#   slurm/local-cluster.sh env      print "export SLURM_CONF=...", for eval
#
# Everything lives in one directory the script owns, $DSMPI_SLURM_DIR (default
# /tmp/dsmpi-slurm-<uid>): slurm.conf, state, spool, logs, pid files, and a
# munged of its own on a socket there.  Slurm commands find the cluster through
# SLURM_CONF, so clusters in different directories (two build trees, say) do
# not meet, and a site's Slurm, if any, is left alone: the ports are chosen
# free at start-up.  Only processes whose pid file is in that directory, whose
# name matches and whose command line names the directory are ever signalled.
#
# Needs root (the daemons run as root, munged as the munge user) and the
# Debian packages munge, slurmctld, slurmd and slurm-client
# (cmake/setup-debian.sh installs them).  Exit code 77 when they are missing,
# which CTest reads as "skipped".
#
# The node declares DSMPI_SLURM_CPUS CPUs (default: 8, or the real count when
# higher) with SlurmdParameters=config_overrides, so that `srun -n 8` runs
# oversubscribed on a 2-core machine, and DSMPI_SLURM_GPUS GPUs (default 4;
# 0 for none) as gres backed by device nodes in the cluster directory, so that
# jobs asking for GPUs are scheduled and see SLURM_GPUS_ON_NODE and
# CUDA_VISIBLE_DEVICES as on a GPU cluster.  There are no GPUs behind them.
set -euo pipefail

usage() {
    echo "usage: ${0##*/} up|down|status|env" >&2
    exit 2
}
[ $# -eq 1 ] || usage
action=$1
case $action in up | down | status | env) ;; *) usage ;; esac

dir=${DSMPI_SLURM_DIR:-/tmp/dsmpi-slurm-$(id -u)}
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
conf=$dir/slurm.conf
munge_dir=$dir/munge
socket=$munge_dir/munge.socket
node=$(hostname -s)

if [ "$action" = env ]; then
    printf 'export SLURM_CONF=%s\n' "$conf"
    exit 0
fi

say() { echo "local-cluster: $*"; }
die() {
    echo "local-cluster: $*" >&2
    exit 1
}

missing=""
for command in munged munge unmunge slurmctld slurmd srun sbatch scontrol sinfo squeue scancel; do
    command -v "$command" >/dev/null 2>&1 || missing="$missing $command"
done
if [ -n "$missing" ]; then
    echo "local-cluster: Slurm or munge is not installed (missing:$missing); install the" \
        "Debian packages munge slurmctld slurmd slurm-client (cmake/setup-debian.sh)" >&2
    exit 77
fi
[ "$(id -u)" -eq 0 ] || die "must run as root (slurmd runs jobs as their users, munged as munge)"

# Slurm commands of this script talk to this cluster only, whatever job or
# cluster the caller is in.
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep '^SLURM_' || true)
export SLURM_CONF=$conf

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# alive PIDFILE NAME: the process of the pid file runs (a zombie does not),
# is called NAME and was started for this directory.
alive() {
    local pidfile=$1 name=$2 pid state
    [ -r "$pidfile" ] || return 1
    pid=$(tr -dc '0-9' 2>/dev/null <"$pidfile") || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/status" ] || return 1
    state=$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/" || return 1
    echo "$pid"
}

# stop PIDFILE NAME: TERM, then KILL after 10 s; prints the name when it stopped something.
stop() {
    local pid i
    pid=$(alive "$1" "$2") || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
        alive "$1" "$2" >/dev/null || break
        sleep 0.05
    done
    if alive "$1" "$2" >/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.1
    fi
    printf ' %s' "$2"
}

# wait_for SECONDS COMMAND...: retries COMMAND every 50 ms.
wait_for() {
    local limit=$1 i
    shift
    for ((i = 0; i < limit * 20; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    return 1
}

port_in_use() {
    local hex
    hex=$(printf '%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p=":$hex" '$2 ~ p "$" { found = 1 } END { exit !found }'
}

# Two free ports below the ephemeral range, starting from a place that
# depends on the directory so that clusters seldom even try the same ones.
choose_ports() {
    local previous_ctld previous_d base i
    previous_ctld=$(sed -n 's/^SlurmctldPort=//p' "$conf" 2>/dev/null || true)
    previous_d=$(sed -n 's/^SlurmdPort=//p' "$conf" 2>/dev/null || true)
    if [ -n "$previous_ctld" ] && [ -n "$previous_d" ] && ! port_in_use "$previous_ctld" &&
        ! port_in_use "$previous_d"; then
        echo "$previous_ctld $previous_d"
        return 0
    fi
    base=$((20000 + ($(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 6000) * 2))
    for ((i = 0; i < 6000; i++)); do
        if ! port_in_use "$base" && ! port_in_use $((base + 1)); then
            echo "$base $((base + 1))"
            return 0
        fi
        base=$((base + 2))
        [ "$base" -lt 32000 ] || base=20000
    done
    die "no two free TCP ports between 20000 and 32000"
}

no_jobs() { [ -z "$(squeue -h -o %i 2>/dev/null)" ]; }
node_state() { sinfo -h -n "$node" -o %T 2>/dev/null | head -n 1; }
node_idle() { case $(node_state) in idle | mixed | allocated) return 0 ;; *) return 1 ;; esac; }

write_config() {
    local cpus gpus memory ctld_port d_port i
    cpus=${DSMPI_SLURM_CPUS:-$(($(nproc) > 8 ? $(nproc) : 8))}
    gpus=${DSMPI_SLURM_GPUS:-4}
    [[ $cpus =~ ^[1-9][0-9]*$ ]] || die "DSMPI_SLURM_CPUS '$cpus' is not a positive count"
    [[ $gpus =~ ^[0-9]+$ ]] || die "DSMPI_SLURM_GPUS '$gpus' is not a count"
    memory=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo)
    read -r ctld_port d_port <<<"$(choose_ports)"
    mkdir -p "$dir/state" "$dir/spool" "$dir/tmp" "$dir/dev"
    local gres="" gres_types=""
    rm -f "$dir"/dev/gpu* "$dir/gres.conf"
    if [ "$gpus" -gt 0 ]; then
        for ((i = 0; i < gpus; i++)); do
            # A character device Slurm accepts; it is /dev/null underneath.
            mknod "$dir/dev/gpu$i" c 1 3 2>/dev/null || touch "$dir/dev/gpu$i"
        done
        gres="Gres=gpu:$gpus"
        gres_types="GresTypes=gpu"
        printf 'NodeName=%s Name=gpu File=%s/dev/gpu[0-%d]\n' "$node" "$dir" $((gpus - 1)) >"$dir/gres.conf"
    fi
    cat >"$conf.new" <<EOF
# Written by slurm/local-cluster.sh: a one-node cluster for tests.
ClusterName=dsmpi
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
# No cgroups: the machine may not delegate them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Debian's Open MPI is built against PMIx; pmi2 or none make MPI_Init abort.
MpiDefault=pmix
# The node may declare more CPUs than the machine has.
SlurmdParameters=config_overrides
# sbatch --wait polls every 2 s and finds the job's record to return its exit code.
SchedulerParameters=batch_sched_delay=0
MinJobAge=5
KillWait=5
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
$gres_types
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory $gres State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$conf.new" "$conf"
}

start_munged() {
    [ -r /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing (reinstall the munge package)"
    mkdir -p "$munge_dir"
    chown munge:munge "$munge_dir"
    chmod 711 "$munge_dir"
    rm -f "$socket" "$socket.lock"
    runuser -u munge -- munged --socket="$socket" --pid-file="$munge_dir/munged.pid" \
        --log-file="$munge_dir/munged.log" --seed-file="$munge_dir/munged.seed" \
        </dev/null >/dev/null 2>&1 8>&- 9>&- ||
        die "munged did not start: $(tail -n 1 "$munge_dir/munged.log" 2>/dev/null)"
    wait_for 10 alive "$munge_dir/munged.pid" munged || die "munged did not start (see $munge_dir/munged.log)"
    munge -S "$socket" -n </dev/null | unmunge -S "$socket" >/dev/null ||
        die "munge credential self-test failed on $socket"
}

# A clean environment for the daemons: the caller's (a test's MPI settings,
# a job's SLURM_*) must not leak into the jobs they run.
daemon() {
    (cd "$dir" && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@" </dev/null >/dev/null 2>&1 8>&- 9>&-)
}

up() {
    local started="" t0 munge_up ctld_up d_up
    t0=$(now)
    munge_up=$(alive "$munge_dir/munged.pid" munged || true)
    ctld_up=$(alive "$dir/slurmctld.pid" slurmctld || true)
    d_up=$(alive "$dir/slurmd.pid" slurmd || true)
    if [ -n "$munge_up" ] && [ -n "$ctld_up" ] && [ -n "$d_up" ] && node_idle; then
        return 0
    fi
    if ! getent hosts "$node" >/dev/null; then
        printf '127.0.1.1\t%s\n' "$node" >>/etc/hosts
        say "added $node to /etc/hosts"
    fi
    if [ -z "$ctld_up" ] && [ -z "$d_up" ]; then
        # Clusters of other directories choose their ports under the same lock,
        # held until slurmctld and slurmd listen.
        exec 8>/tmp/dsmpi-slurm-ports.lock
        flock 8
        write_config
    fi
    if [ -z "$munge_up" ]; then
        start_munged
        started="$started munged"
    fi
    if [ -z "$ctld_up" ]; then
        daemon slurmctld -i -f "$conf" || die "slurmctld did not start (see $dir/slurmctld.log)"
        started="$started slurmctld"
    fi
    wait_for 20 scontrol ping || die "slurmctld does not answer (see $dir/slurmctld.log)"
    if [ -z "$d_up" ]; then
        daemon slurmd -f "$conf" -N "$node" || die "slurmd did not start (see $dir/slurmd.log)"
        started="$started slurmd"
    fi
    if ! wait_for 20 node_idle; then
        # A node remembered as down or drained from an earlier run.
        scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
        wait_for 10 node_idle ||
            die "node $node is '$(node_state)', not idle (see $dir/slurmd.log and $dir/slurmctld.log)"
    fi
    exec 8>&-
    say "up in $(elapsed "$t0") s (started:${started:- nothing}); node $node:" \
        "$(sinfo -h -n "$node" -o '%c CPUs, %G'); export SLURM_CONF=$conf"
}

down() {
    local stopped="" jobs
    if alive "$dir/slurmctld.pid" slurmctld >/dev/null; then
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            wait_for 15 no_jobs || true
            stopped=" jobs $(echo "$jobs" | tr '\n' ',' | sed 's/,$//')"
        fi
    fi
    stopped="$stopped$(stop "$dir/slurmd.pid" slurmd)"
    stopped="$stopped$(stop "$dir/slurmctld.pid" slurmctld)"
    stopped="$stopped$(stop "$munge_dir/munged.pid" munged)"
    [ -z "$stopped" ] || say "stopped$stopped"
}

status() {
    local running=0 pid name pidfile
    for name in munged slurmctld slurmd; do
        pidfile=$dir/$name.pid
        [ "$name" != munged ] || pidfile=$munge_dir/munged.pid
        if pid=$(alive "$pidfile" "$name"); then
            echo "$name: running (pid $pid)"
            running=$((running + 1))
        else
            echo "$name: not running"
        fi
    done
    if [ "$running" -eq 3 ]; then
        echo "node $node: $(node_state)"
        echo "SLURM_CONF=$conf"
        node_idle && return 0
    fi
    return 3
}

mkdir -p "$dir"
# One script at a time per directory; the lock file descriptor is closed in
# the daemons so it does not outlive this script.
exec 9>"$dir/lock"
flock 9
case $action in
up) up ;;
down) down ;;
status) status ;;
esac
