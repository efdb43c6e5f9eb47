#!/usr/bin/env bash
# Bring a single-host Grid Engine (Debian's Son of Grid Engine 8.1.9) up, down, or report its status.
#
#   bash scripts/sge.sh up|down|status
#
# Why each step (see shared/notes/running-real-services-here.md): Debian's packages start nothing here (no
# systemd), create no queue, refuse root's jobs (min_uid/min_gid 1000), and commlib denies access unless every
# local host name is an alias of the master's name. `up` preseeds debconf, installs if missing, fixes the host
# aliases, starts sge_qmaster, configures (global config, submit host, exec host, PE smp, @allhosts, all.q,
# a 1-second scheduler), starts sge_execd and waits until all.q accepts jobs (leaves state 'u').
# It writes the environment clients need into $PILOTFISH_SGE_DIR/env (default /var/tmp/pilotfish-sge/env)
# as KEY=VALUE lines; tests read that file. `status` exits 0 only when all.q accepts jobs.
set -euo pipefail

DIR=${PILOTFISH_SGE_DIR:-/var/tmp/pilotfish-sge}
ENV_FILE=$DIR/env
export SGE_ROOT=/var/lib/gridengine
export SGE_CELL=default
COMMON=$SGE_ROOT/$SGE_CELL/common
HOST=localhost
SLOTS=${PILOTFISH_SGE_SLOTS:-8}
WAIT_SECONDS=${PILOTFISH_SGE_WAIT:-60}

say() { echo "sge.sh: $*"; }
die() { echo "sge.sh: ERROR: $*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and starts sge_qmaster/sge_execd)"
}

install_if_missing() {
    local missing=()
    [ -x /usr/sbin/sge_qmaster ] || missing+=(gridengine-master)
    [ -x /usr/sbin/sge_execd ] || missing+=(gridengine-exec)
    command -v qsub >/dev/null || missing+=(gridengine-client)
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]} (apt-get, with debconf preseeded for a master on $HOST)"
    local pkg
    for pkg in gridengine-common gridengine-client gridengine-master gridengine-exec; do
        printf '%s\n' \
            "$pkg shared/gridengineconfig boolean true" \
            "$pkg shared/gridenginecell string $SGE_CELL" \
            "$pkg shared/gridenginemaster string $HOST"
    done | debconf-set-selections
    export DEBIAN_FRONTEND=noninteractive
    local apt=(apt-get -y -q -o DPkg::Lock::Timeout=300 install --no-install-recommends)
    if ! "${apt[@]}" "${missing[@]}" >"$DIR/apt.log" 2>&1; then
        say "install failed; refreshing the package lists and trying once more"
        apt-get -q -o DPkg::Lock::Timeout=300 update >>"$DIR/apt.log" 2>&1 || true
        "${apt[@]}" "${missing[@]}" >>"$DIR/apt.log" 2>&1 \
            || die "apt-get install ${missing[*]} failed; see $DIR/apt.log: $(tail -n 3 "$DIR/apt.log")"
    fi
}

fix_host_names() {
    # commlib resolves every connection's host and refuses names it cannot tie to the master's.
    local names
    names=$(printf '%s\n' "$HOST" "$(hostname)" "$(hostname -s 2>/dev/null || true)" \
        "$(hostname -f 2>/dev/null || true)" | awk 'NF && !seen[$0]++' | tr '\n' ' ')
    mkdir -p "$COMMON"
    echo "$names" >"$COMMON/host_aliases"
    echo "$HOST" >"$COMMON/act_qmaster"
}

qmaster_running() { pgrep -x sge_qmaster >/dev/null; }
execd_running() { pgrep -x sge_execd >/dev/null; }

qmaster_answers() { timeout 10 qstat -u '*' >/dev/null 2>&1; }

# qconf's -m* commands edit an object through $EDITOR; a sed script as the editor makes them scriptable.
qconf_edit() {  # qconf_edit SED_SCRIPT QCONF_ARGS...
    local sed_script=$1 editor
    shift
    editor=$(mktemp "$DIR/editor.XXXXXX")
    printf '#!/bin/bash\nsed -i -e %q "$1"\n' "$sed_script" >"$editor"
    chmod +x "$editor"
    EDITOR=$editor "$@" >/dev/null 2>"$DIR/qconf.err" || {
        rm -f "$editor"
        die "qconf $* failed: $(cat "$DIR/qconf.err")"
    }
    rm -f "$editor"
}

configure() {
    # Global configuration: root may run jobs; load reports every 5 s (the queue is 'u' until the first);
    # accounting records written at once (not every 15 s) so that `qacct -j` knows a job as soon as it ends.
    local reporting='reporting_params accounting=true reporting=false flush_time=00:00:15 joblog=false'
    reporting+=' sharelog=00:00:00 accounting_flush_time=00:00:00'
    qconf_edit "s/^min_uid .*/min_uid 0/; s/^min_gid .*/min_gid 0/; s/^load_report_time .*/load_report_time 00:00:05/;
/^reporting_params/{ :a; /\\\\\$/{ N; ba; }; s/.*/$reporting/; }" qconf -mconf global
    qconf -as "$HOST" >/dev/null 2>&1 || true
    qconf -ah "$HOST" >/dev/null 2>&1 || true
    if ! qconf -se "$HOST" >/dev/null 2>&1; then
        printf 'hostname %s\nload_scaling NONE\ncomplex_values NONE\nuser_lists NONE\nxuser_lists NONE\nprojects NONE\nxprojects NONE\nusage_scaling NONE\nreport_variables NONE\n' \
            "$HOST" >"$DIR/exechost"
        qconf -Ae "$DIR/exechost" >/dev/null 2>&1 || die "cannot add exec host $HOST: $(qconf -Ae "$DIR/exechost" 2>&1)"
    fi
    if ! qconf -sp smp >/dev/null 2>&1; then
        printf '%s\n' "pe_name smp" "slots 9999" "user_lists NONE" "xuser_lists NONE" "start_proc_args NONE" \
            "stop_proc_args NONE" "allocation_rule \$pe_slots" "control_slaves FALSE" "job_is_first_task TRUE" \
            "urgency_slots min" "accounting_summary FALSE" "qsort_args NONE" >"$DIR/pe_smp"
        qconf -Ap "$DIR/pe_smp" >/dev/null 2>&1 || die "cannot add PE smp: $(qconf -Ap "$DIR/pe_smp" 2>&1)"
    fi
    if ! qconf -shgrp @allhosts >/dev/null 2>&1; then
        printf 'group_name @allhosts\nhostlist %s\n' "$HOST" >"$DIR/allhosts"
        qconf -Ahgrp "$DIR/allhosts" >/dev/null 2>&1 || die "cannot add @allhosts: $(qconf -Ahgrp "$DIR/allhosts" 2>&1)"
    fi
    local queue_edit="s/^hostlist .*/hostlist @allhosts/; s/^slots .*/slots $SLOTS/; s/^load_thresholds .*/load_thresholds NONE/; s/^pe_list .*/pe_list smp/"
    if qconf -sq all.q >/dev/null 2>&1; then
        qconf_edit "$queue_edit" qconf -mq all.q
    else
        qconf_edit "s/^qname .*/qname all.q/; $queue_edit" qconf -aq all.q
    fi
    qconf_edit 's/^schedule_interval .*/schedule_interval 0:0:1/; s/^flush_submit_sec .*/flush_submit_sec 1/; s/^flush_finish_sec .*/flush_finish_sec 1/' \
        qconf -msconf
}

queue_state() {  # prints all.q@HOST's state letters ('' = ready), or '?' when it cannot be read
    local line
    line=$(timeout 10 qstat -f -q "all.q@$HOST" 2>/dev/null | awk -v q="all.q@$HOST" '$1 == q') || true
    [ -n "$line" ] || { echo '?'; return; }
    # Columns: queuename qtype resv/used/tot load_avg arch [states]
    echo "$line" | awk '{ print (NF >= 6 ? $6 : "") }'
}

usable() { qmaster_answers && [ -z "$(queue_state)" ]; }

write_env() {
    local tmp
    tmp=$(mktemp "$DIR/env.XXXXXX")
    {
        echo "# Written by scripts/sge.sh up: what clients need to reach this Grid Engine."
        echo "SGE_ROOT=$SGE_ROOT"
        echo "SGE_CELL=$SGE_CELL"
        echo "PILOTFISH_SGE_BIN=$(dirname "$(command -v qsub)")"
        echo "PILOTFISH_SGE_HOST=$HOST"
        echo "PILOTFISH_SGE_SLOTS=$SLOTS"
    } >"$tmp"
    mv "$tmp" "$ENV_FILE"
}

up() {
    need_root
    local started
    started=$(date +%s.%N)
    mkdir -p "$DIR"
    install_if_missing
    fix_host_names
    if ! qmaster_running; then
        say "starting sge_qmaster"
        /usr/sbin/sge_qmaster || die "sge_qmaster did not start; see /var/spool/gridengine/qmaster/messages"
    fi
    local deadline=$((SECONDS + WAIT_SECONDS))
    until qmaster_answers; do
        [ $SECONDS -ge $deadline ] && die "sge_qmaster does not answer after ${WAIT_SECONDS}s: \
$(qstat 2>&1 | head -n 2); see /var/spool/gridengine/qmaster/messages"
        sleep 0.2
    done
    local before
    before=$(qconf -sconf global 2>/dev/null | awk '$1 == "min_uid" { print $2 }')
    configure
    if execd_running && [ "$before" != 0 ]; then
        say "restarting sge_execd (it reads min_uid/min_gid at start)"
        qconf -ke "$HOST" >/dev/null 2>&1 || true
        for _ in $(seq 100); do execd_running || break; sleep 0.1; done
    fi
    if ! execd_running; then
        say "starting sge_execd"
        /usr/sbin/sge_execd || die "sge_execd did not start; see /var/spool/gridengine/execd/$HOST/messages"
    fi
    local state
    while :; do
        state=$(queue_state)
        [ -z "$state" ] && break
        case "$state" in
            *E*|*d*|*D*|*s*|*S*) qmod -c "all.q@$HOST" >/dev/null 2>&1 || true
                                 qmod -e "all.q@$HOST" >/dev/null 2>&1 || true ;;
        esac
        [ $SECONDS -ge $deadline ] && die "queue all.q@$HOST not usable after ${WAIT_SECONDS}s (state '$state'); \
see /var/spool/gridengine/qmaster/messages and /var/spool/gridengine/execd/$HOST/messages"
        sleep 0.2
    done
    write_env
    say "up: all.q@$HOST accepts jobs ($SLOTS slots); SGE_ROOT=$SGE_ROOT SGE_CELL=$SGE_CELL; env in $ENV_FILE; took \
$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')s"
}

down() {
    need_root
    rm -f "$ENV_FILE"
    if execd_running; then
        say "stopping sge_execd"
        qconf -ke "$HOST" >/dev/null 2>&1 || true
    fi
    if qmaster_running; then
        say "stopping sge_qmaster"
        qconf -km >/dev/null 2>&1 || true
    fi
    # sge_qmaster's controlled shutdown takes ~10 s here; `up` must not find a dying qmaster and wait on it.
    local i f
    for i in $(seq 300); do
        qmaster_running || execd_running || break
        if [ "$i" -eq 200 ]; then
            for f in /var/spool/gridengine/qmaster/qmaster.pid "/var/spool/gridengine/execd/$HOST/execd.pid"; do
                if [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; then
                    say "still running 20 s after qconf -k*: sending TERM to $(cat "$f") ($f)"
                    kill "$(cat "$f")" 2>/dev/null || true
                fi
            done
        fi
        sleep 0.1
    done
    if qmaster_running || execd_running; then
        die "sge_qmaster/sge_execd still running 30 s after shutdown (pids $(pgrep -x sge_qmaster) $(pgrep -x sge_execd))"
    fi
    say "down"
}

status() {
    if ! command -v qstat >/dev/null; then
        say "not installed; run: bash scripts/sge.sh up"
        exit 3
    fi
    if usable; then
        say "up: all.q@$HOST accepts jobs; SGE_ROOT=$SGE_ROOT SGE_CELL=$SGE_CELL"
        exit 0
    fi
    local what=""
    qmaster_running || what+=" sge_qmaster not running;"
    execd_running || what+=" sge_execd not running;"
    say "not usable: queue state '$(queue_state)';$what run: bash scripts/sge.sh up"
    exit 3
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: bash scripts/sge.sh up|down|status  (env file in \$PILOTFISH_SGE_DIR, default $DIR)" >&2; exit 2 ;;
esac
