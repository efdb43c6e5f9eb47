#!/usr/bin/env bash
# Bring a private single-node Slurm (Debian's Slurm 22.05) up, down, or report its status.
#
#   bash scripts/slurm.sh up|down|status
#
# Why a private configuration: tests and developers need a real slurmctld + slurmd on this one host, with
# no systemd and without touching /etc/slurm. Everything (slurm.conf, state, spool, logs, pid files) lives
# in $PILOTFISH_SLURM_DIR (default /var/tmp/pilotfish-slurm). The commands find it through SLURM_CONF,
# which `up` writes into $PILOTFISH_SLURM_DIR/env as KEY=VALUE lines (tests read that file; a shell can
# `source` it). `status` exits 0 only when the node accepts jobs.
#
# The node advertises CPUs=8 on a 2-core host (SlurmdParameters=config_overrides) so that several small
# pilots can run at once in tests; DefMemPerCPU keeps a job without --mem from taking the whole node, and
# batch_sched_delay=0 starts batch jobs at once instead of in 3-second bursts.
set -euo pipefail

DIR=${PILOTFISH_SLURM_DIR:-/var/tmp/pilotfish-slurm}
CONF=$DIR/slurm.conf
ENV_FILE=$DIR/env
NODE=localhost
CPUS=${PILOTFISH_SLURM_CPUS:-8}
WAIT_SECONDS=${PILOTFISH_SLURM_WAIT:-60}

say() { echo "slurm.sh: $*"; }
die() { echo "slurm.sh: ERROR: $*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and starts slurmctld/slurmd/munged)"
}

install_if_missing() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sbatch >/dev/null || missing+=(slurm-client)
    command -v munged >/dev/null || missing+=(munge)
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    local apt=(apt-get -y -q -o DPkg::Lock::Timeout=300 install --no-install-recommends)
    if ! "${apt[@]}" "${missing[@]}" >"$DIR/apt.log" 2>&1; then
        say "install failed; refreshing the package lists and trying once more"
        apt-get -q -o DPkg::Lock::Timeout=300 update >>"$DIR/apt.log" 2>&1 || true
        "${apt[@]}" "${missing[@]}" >>"$DIR/apt.log" 2>&1 \
            || die "apt-get install ${missing[*]} failed; see $DIR/apt.log: $(tail -n 3 "$DIR/apt.log")"
    fi
}

real_memory_mb() {
    # RealMemory must not exceed what slurmd measures, else the node is drained ("Low RealMemory").
    awk '/^MemTotal:/ { printf "%d\n", $2 / 1024 * 0.95 }' /proc/meminfo
}

tmp_disk_mb() {
    # TmpDisk (for --tmp): the size of the file system under TmpFS (/tmp). Without it every --tmp is refused.
    df -Pm /tmp | awk 'NR == 2 { print $2 }'
}

write_conf() {
    local mem tmp disk
    mem=$(real_memory_mb)
    disk=$(tmp_disk_mb)
    tmp=$(mktemp "$DIR/slurm.conf.XXXXXX")
    cat >"$tmp" <<EOF
# Written by scripts/slurm.sh: a private single-node cluster for Pilotfish's tests. Do not edit by hand.
ClusterName=pilotfish
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SchedulerParameters=batch_sched_delay=0
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherParams=OverMemoryKill
KillWait=2
InactiveLimit=0
TmpFS=/tmp
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$mem TmpDisk=$disk State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    if [ -f "$CONF" ] && cmp -s "$tmp" "$CONF"; then
        rm -f "$tmp"
        return 1  # unchanged
    fi
    mv "$tmp" "$CONF"
    return 0
}

pid_alive() {  # pid_alive FILE: true when FILE names a live process
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    munge_ok && return 0
    [ -s /etc/munge/munge.key ] || {
        say "creating the munge key"
        if command -v mungekey >/dev/null; then mungekey --create --force >/dev/null; else create-munge-key -f >/dev/null; fi
        chown munge:munge /etc/munge/munge.key
    }
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged || die "munged did not start; see /var/log/munge/munged.log"
    for _ in $(seq 50); do munge_ok && return 0; sleep 0.1; done
    die "munged started but munge -n | unmunge fails; see /var/log/munge/munged.log"
}

node_state() {  # prints the node's state as sinfo sees it, or nothing
    SLURM_CONF=$CONF timeout 10 sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n 1 || true
}

usable() {  # a busy host can time sinfo out: a few tries before "not usable"
    local try
    for try in 1 2 3; do
        case "$(node_state)" in
            idle|mixed|allocated|completing|planned|idle~|mixed~) return 0 ;;
        esac
        [ $try -lt 3 ] && sleep 1
    done
    return 1
}

write_env() {
    local tmp
    tmp=$(mktemp "$DIR/env.XXXXXX")
    {
        echo "# Written by scripts/slurm.sh up: what clients need to reach this private Slurm."
        echo "SLURM_CONF=$CONF"
        echo "PILOTFISH_SLURM_BIN=$(dirname "$(command -v sbatch)")"
        echo "PILOTFISH_SLURM_NODE=$NODE"
        echo "PILOTFISH_SLURM_CPUS=$CPUS"
    } >"$tmp"
    mv "$tmp" "$ENV_FILE"
}

up() {
    need_root
    local started
    started=$(date +%s.%N)
    mkdir -p "$DIR"/{state,spool,run,log}
    install_if_missing
    local changed=0
    write_conf && changed=1
    export SLURM_CONF=$CONF
    if [ $changed -eq 1 ] && pid_alive "$DIR/run/slurmctld.pid"; then
        say "slurm.conf changed: restarting the daemons"
        scontrol shutdown >/dev/null 2>&1 || true
        for _ in $(seq 100); do
            pid_alive "$DIR/run/slurmctld.pid" || pid_alive "$DIR/run/slurmd.pid" || break
            sleep 0.1
        done
    fi
    start_munge
    if ! pid_alive "$DIR/run/slurmctld.pid"; then
        say "starting slurmctld"
        /usr/sbin/slurmctld -f "$CONF" || die "slurmctld did not start; see $DIR/log/slurmctld.log"
    fi
    if ! pid_alive "$DIR/run/slurmd.pid"; then
        say "starting slurmd"
        /usr/sbin/slurmd -f "$CONF" -N "$NODE" || die "slurmd did not start; see $DIR/log/slurmd.log"
    fi
    local deadline=$((SECONDS + WAIT_SECONDS)) state=""
    while :; do
        state=$(node_state)
        usable && break
        case "$state" in
            down*|drain*|drained*|fail*)
                scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        [ $SECONDS -ge $deadline ] && die "node $NODE not usable after ${WAIT_SECONDS}s (state '${state:-no answer}'); \
see $DIR/log/slurmctld.log and $DIR/log/slurmd.log"
        sleep 0.2
    done
    write_env
    say "up: node $NODE is $state ($CPUS CPUs); SLURM_CONF=$CONF; env in $ENV_FILE; took \
$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')s"
}

down() {
    need_root
    rm -f "$ENV_FILE"
    if [ -f "$CONF" ] && { pid_alive "$DIR/run/slurmctld.pid" || pid_alive "$DIR/run/slurmd.pid"; }; then
        say "stopping slurmctld and slurmd"
        SLURM_CONF=$CONF scontrol shutdown >/dev/null 2>&1 || true
        for _ in $(seq 100); do
            pid_alive "$DIR/run/slurmctld.pid" || pid_alive "$DIR/run/slurmd.pid" || break
            sleep 0.1
        done
        for f in "$DIR/run/slurmctld.pid" "$DIR/run/slurmd.pid"; do
            pid_alive "$f" && { say "still running after scontrol shutdown; sending TERM to $(cat "$f")"; kill "$(cat "$f")"; }
        done
    fi
    if [ -s /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; then
        say "stopping munged"
        kill "$(cat /run/munge/munged.pid)"
    fi
    say "down"
}

status() {
    if [ ! -f "$CONF" ]; then
        say "not configured ($CONF missing); run: bash scripts/slurm.sh up"
        exit 3
    fi
    if usable; then
        say "up: node $NODE is $(node_state); SLURM_CONF=$CONF"
        exit 0
    fi
    local what=""
    pid_alive "$DIR/run/slurmctld.pid" || what+=" slurmctld not running;"
    pid_alive "$DIR/run/slurmd.pid" || what+=" slurmd not running;"
    munge_ok || what+=" munged not answering;"
    say "not usable: node state '$(node_state)';$what run: bash scripts/slurm.sh up"
    exit 3
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: bash scripts/slurm.sh up|down|status  (state in \$PILOTFISH_SLURM_DIR, default $DIR)" >&2; exit 2 ;;
esac
