#!/usr/bin/env bash
# A real single-node Slurm (Debian's 22.05) for flexgate-slurm's integration test (see "Tests" in
# adapters/slurm/README.md): munge, 8 fake GPUs (character devices made with mknod), slurm.conf
# with JWT as the alternative auth, slurmctld, slurmd, and slurmrestd with JWT on a free TCP port
# and on a unix socket. No systemd; everything lives under BASE.
#
#   bash tests/peers/slurm.sh install      apt-get the packages (as root; skipped when installed)
#   bash tests/peers/slurm.sh start BASE   start Slurm with its state, logs and config in BASE
#   bash tests/peers/slurm.sh stop BASE    cancel every job, wait for the queue to empty, stop
#                                          each daemon and wait for it to exit
#   bash tests/peers/slurm.sh status BASE  say which daemons of BASE run (exit 1 if none)
#   bash tests/peers/slurm.sh check        exit 0 if installed, else say how to install (exit 1)
#
# After `start`, BASE holds:
#   slurm.conf   the config; export SLURM_CONF=BASE/slurm.conf before sbatch/squeue/scontrol
#   rest.port    the TCP port slurmrestd (JWT) listens on, on 127.0.0.1
#   rest.sock    the unix socket the same slurmrestd listens on (JWT as well)
#   token.env    SLURM_JWT=<token> and SLURM_USER_NAME=slurmrest (lifespan 2 h)
#   log/         slurmctld.log, slurmd.log, slurmrestd.log, prolog.log, epilog.log, ...
#
# Only one Slurm can run on a machine at a time here: the node is always called `localhost`.
# `start` records its caller's pid as the owner (BASE/owner.pid; the test process, or
# $FLEXGATE_SLURM_OWNER). An instance of this script in another BASE whose owner has exited is
# a leftover (a test killed before its cleanup ran) and is stopped; one whose owner is alive is
# in use, and `start` fails naming it. So does a Slurm daemon this script did not start. The slurmctld and slurmd ports are chosen free, like the REST port, so a
# foreign service on Slurm's default ports (6817/6818/6820) does not clash.
# Every wait has a timeout and prints the relevant log tail when it expires. Must run as root
# (slurmd, mknod, setpriv); slurmrestd itself runs as the unprivileged user `slurmrest`, because
# it refuses to run as root.
set -euo pipefail

PACKAGES=(munge slurmctld slurmd slurm-client slurmrestd slurm-wlm-jwt-plugin curl)
BINARIES=(munged mungekey munge unmunge slurmctld slurmd slurmrestd sbatch squeue scontrol scancel sinfo curl setpriv setsid mknod)
MARKER=.flexgate-slurm-base
REST_USER=slurmrest

say() { echo "slurm.sh: $*"; }
fail() {
    echo "slurm.sh: FAILED: $1" >&2
    shift
    local f
    for f in "$@"; do
        if [[ -s $f ]]; then
            echo "---- last 30 lines of $f ----" >&2
            tail -n 30 "$f" >&2
        fi
    done
    exit 1
}

need_root() {
    [[ $(id -u) -eq 0 ]] || fail "$1 must run as root (slurmd, mknod and setpriv need it); this is uid $(id -u)"
}

# ---------------------------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------------------------

missing_binaries() {
    local b out=()
    for b in "${BINARIES[@]}"; do
        command -v "$b" >/dev/null 2>&1 || out+=("$b")
    done
    echo "${out[*]}"
}

jwt_plugin_installed() {
    dpkg-query -W -f='${Status}' slurm-wlm-jwt-plugin 2>/dev/null | grep -q 'install ok installed'
}

cmd_install() {
    local missing
    missing=$(missing_binaries)
    if [[ -z $missing ]] && jwt_plugin_installed; then
        say "Slurm $(slurmctld -V 2>/dev/null | awk '{print $2}') and munge already installed"
        return
    fi
    need_root install
    command -v apt-get >/dev/null 2>&1 ||
        fail "apt-get not found; install by hand: ${PACKAGES[*]}"
    local log=/tmp/flexgate-slurm-apt.log
    say "apt-get install ${PACKAGES[*]} (about 10 s; log in $log)"
    { apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"; } \
        >"$log" 2>&1 || fail "apt-get install failed" "$log"
    missing=$(missing_binaries)
    [[ -z $missing ]] || fail "still missing after apt-get: $missing" "$log"
    say "installed Slurm $(slurmctld -V | awk '{print $2}')"
}

# ---------------------------------------------------------------------------------------------
# process helpers (plain /proc, so no procps needed)
# ---------------------------------------------------------------------------------------------

# True while pid $1 runs (a zombie, waiting for a container's PID 1 to reap it, counts as gone).
alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null && [[ $(awk '{print $3}' 2>/dev/null <"/proc/$1/stat") != Z ]]; }

# Live (not zombie) processes whose command name is $1.
pids_named() {
    local d
    for d in /proc/[0-9]*; do
        [[ $(cat "$d/comm" 2>/dev/null) == "$1" ]] && alive "${d#/proc/}" && echo "${d#/proc/}"
    done
    return 0
}

# The SLURM_CONF a process was started with ('' if none or unreadable).
conf_of() { { tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | sed -n 's/^SLURM_CONF=//p' | head -n 1; } || true; }

# Waits up to $2 seconds for pid $1 to exit; SIGKILL after that. Returns 1 if it was killed.
wait_exit() {
    local pid=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        alive "$pid" || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        alive "$pid" || return 1
        sleep 0.1
    done
    return 1
}

# True when any socket (listening, connected, or in TIME_WAIT) holds local port $1: a daemon
# that binds it later would fail with "Address already in use".
port_in_use() {
    local hex
    hex=$(printf '%04X' "$1")
    # column 2 is local address:port in hex
    awk -v p=":$hex" 'NR > 1 && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# A free port below the kernel's ephemeral range, so that no socket bound to port 0 by a test
# running at the same time (agents, gateways, clients) can take it between this check and the
# daemon's bind (that race once failed slurmrestd's start in CI).
free_port() {
    local p i low=20000 high=32767 ephemeral
    if read -r ephemeral _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && ((ephemeral > low + 1000)); then
        high=$((ephemeral - 1))
    fi
    for ((i = 0; i < 200; i++)); do
        p=$((low + RANDOM % (high - low)))
        if ! port_in_use "$p" && [[ " ${TAKEN_PORTS:-} " != *" $p "* ]]; then
            TAKEN_PORTS="${TAKEN_PORTS:-} $p"
            echo "$p"
            return 0
        fi
    done
    fail "no free TCP port found in $low-$high"
}

# Waits up to $2 seconds for the command in "${@:3}" to succeed; on timeout fails with message
# $1 and the tails of the logs listed in WAIT_LOGS.
wait_for() {
    local what=$1 secs=$2 i
    shift 2
    for ((i = 0; i < secs * 10; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    fail "$what (waited ${secs} s)" "${WAIT_LOGS[@]}"
}

# ---------------------------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------------------------

abs_base() {
    [[ -n ${1:-} ]] || { echo "usage: $0 start|stop|status BASE" >&2; exit 2; }
    mkdir -p "$1"
    (cd "$1" && pwd -P)
}

base_running() {
    local b=$1 f
    for f in "$b"/run/*.pid; do
        [[ -e $f ]] || continue
        alive "$(cat "$f")" && return 0
    done
    return 1
}

# Stops Slurm daemons left over from another BASE of this script; fails on foreign ones.
clear_leftovers() {
    local base=$1 name pid conf dir
    for name in slurmctld slurmd slurmrestd slurmstepd; do
        for pid in $(pids_named "$name"); do
            conf=$(conf_of "$pid")
            dir=${conf%/slurm.conf}
            [[ -n $conf && $dir == "$base" ]] && continue
            if [[ -n $conf && -e $dir/$MARKER ]]; then
                local owner
                owner=$(cat "$dir/owner.pid" 2>/dev/null || true)
                if alive "$owner"; then
                    fail "a Slurm started by this script in $dir is in use by pid $owner ($(tr '\0' ' ' 2>/dev/null <"/proc/$owner/cmdline")). Only one single-node Slurm can run at a time: wait for it, or run: bash $0 stop $dir"
                fi
                say "stopping a leftover Slurm from $dir ($name pid $pid; its owner pid ${owner:-?} has exited)"
                cmd_stop "$dir"
                continue 2
            fi
            if alive "$pid"; then
                fail "$name (pid $pid: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")) is running with SLURM_CONF=${conf:-/etc/slurm/slurm.conf}, not started by this script. Only one single-node Slurm (node 'localhost') can run at a time: stop it first."
            fi
        done
    done
}

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    local base=$1
    if munge_works; then
        say "munged already running; using it"
        return
    fi
    [[ -s /etc/munge/munge.key ]] || mungekey --create >/dev/null 2>&1 || fail "mungekey --create failed"
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    # -F: stay in the foreground (munged's own daemonizing leaves a zombie under a container's
    # PID 1). setpriv execs, unlike runuser, so the pid recorded is munged's
    # own and `stop` waits for munged itself to exit.
    setsid setpriv --reuid=munge --regid=munge --init-groups munged -F </dev/null >"$base/log/munged.out" 2>&1 &
    echo $! >"$base/run/munged.pid"
    WAIT_LOGS=("$base/log/munged.out" /var/log/munge/munged.log)
    wait_for "munged did not answer (munge -n | unmunge)" 10 munge_works
}

write_config() {
    local base=$1 ctld_port=$2 d_port=$3 i
    for i in 0 1 2 3 4 5 6 7; do
        [[ -c $base/fakegpu/nvidia$i ]] || {
            rm -f "$base/fakegpu/nvidia$i"
            mknod "$base/fakegpu/nvidia$i" c 1 3 || fail "mknod $base/fakegpu/nvidia$i failed (needs CAP_MKNOD and a filesystem without nodev)"
        }
    done
    [[ -s $base/jwt.key ]] || { head -c 32 /dev/urandom >"$base/jwt.key"; }
    chmod 600 "$base/jwt.key"
    cat >"$base/slurm.conf" <<EOF
# Written by tests/peers/slurm.sh (flexgate): single node, 8 fake GPUs, JWT as the alternative auth.
ClusterName=flexgate-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$base/jwt.key
StateSaveLocation=$base/state
SlurmdSpoolDir=$base/spool
SlurmctldPidFile=$base/run/ctld.pidfile
SlurmdPidFile=$base/run/d.pidfile
SlurmctldLogFile=$base/log/slurmctld.log
SlurmdLogFile=$base/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
SchedulerParameters=sched_interval=1,bf_interval=1
Prolog=$base/prolog.sh
Epilog=$base/epilog.sh
PrologFlags=Alloc
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Gres=gpu:h100:8 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    printf 'AutoDetect=off\nNodeName=localhost Name=gpu Type=h100 File=%s/fakegpu/nvidia[0-7]\n' "$base" >"$base/gres.conf"
    # Logging stand-ins; the real prolog/epilog live in deploy/slurm/. The $ are for the script.
    # shellcheck disable=SC2016
    printf '#!/bin/sh\necho "$SLURM_JOB_ID $SLURM_JOB_GPUS" >> %s/log/prolog.log\n' "$base" >"$base/prolog.sh"
    # shellcheck disable=SC2016
    printf '#!/bin/sh\necho "$SLURM_JOB_ID $SLURM_JOB_GPUS" >> %s/log/epilog.log\n' "$base" >"$base/epilog.sh"
    chmod 755 "$base" "$base/run" "$base/prolog.sh" "$base/epilog.sh"
    chmod 644 "$base/slurm.conf" "$base/gres.conf"
}

ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
node_idle() { [[ $(sinfo -h -n localhost -o %T 2>/dev/null) == idle ]]; }
rest_up() { curl -s -o /dev/null "http://127.0.0.1:$1/openapi/v3"; }

cmd_start() {
    need_root start
    local missing
    missing=$(missing_binaries)
    [[ -z $missing ]] || fail "Slurm is not installed (missing: $missing). Run as root: bash tests/peers/slurm.sh install"
    local base
    base=$(abs_base "${1:-}")
    export SLURM_CONF=$base/slurm.conf

    if [[ -e $base/$MARKER ]] && base_running "$base"; then
        echo "${FLEXGATE_SLURM_OWNER:-$PPID}" >"$base/owner.pid"
        if ctld_up && node_idle && [[ -s $base/rest.port ]] && rest_up "$(cat "$base/rest.port")"; then
            say "already running in $base"
            return
        fi
        say "a partial Slurm runs in $base; restarting it"
        cmd_stop "$base"
    fi
    clear_leftovers "$base"

    mkdir -p "$base"/{state,spool,log,run,fakegpu}
    touch "$base/$MARKER"
    echo "${FLEXGATE_SLURM_OWNER:-$PPID}" >"$base/owner.pid"
    rm -f "$base"/run/*.pid "$base/rest.port" "$base/token.env" "$base/rest.sock"
    local t0=$SECONDS
    start_munge "$base"

    local ctld_port d_port rest_port
    ctld_port=$(free_port)
    d_port=$(free_port)
    rest_port=$(free_port)
    [[ $rest_port != "$ctld_port" && $rest_port != "$d_port" && $ctld_port != "$d_port" ]] || rest_port=$(free_port)
    write_config "$base" "$ctld_port" "$d_port"

    setsid slurmctld -D -i </dev/null >"$base/log/ctld.out" 2>&1 &
    echo $! >"$base/run/slurmctld.pid"
    WAIT_LOGS=("$base/log/ctld.out" "$base/log/slurmctld.log")
    wait_for "slurmctld did not answer scontrol ping" 30 ctld_up

    setsid slurmd -D -N localhost </dev/null >"$base/log/d.out" 2>&1 &
    echo $! >"$base/run/slurmd.pid"
    WAIT_LOGS=("$base/log/d.out" "$base/log/slurmd.log" "$base/log/slurmctld.log")
    wait_for "node localhost did not become idle (sinfo -n localhost -o %T: $(sinfo -h -n localhost -o %T 2>&1 || true))" 30 node_idle

    id "$REST_USER" >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin "$REST_USER" ||
        fail "useradd $REST_USER failed"
    # slurmrestd refuses to run as root, and needs -s openapi/v0.0.38 (the dbv* plugins want
    # slurmdbd); SLURM_JWT=daemon, or it rejects every token.
    mkdir -p "$base/rest"
    chown "$REST_USER" "$base/rest"
    chmod 755 "$base/rest"
    setsid setpriv --reuid="$REST_USER" --regid="$(id -g "$REST_USER")" --init-groups \
        env SLURM_CONF="$SLURM_CONF" SLURM_JWT=daemon slurmrestd -a rest_auth/jwt -s openapi/v0.0.38 "127.0.0.1:$rest_port" "unix:$base/rest/jwt.sock" \
        </dev/null >"$base/log/slurmrestd.log" 2>&1 &
    echo $! >"$base/run/slurmrestd.pid"
    WAIT_LOGS=("$base/log/slurmrestd.log")
    wait_for "slurmrestd did not answer on 127.0.0.1:$rest_port" 20 rest_up "$rest_port"
    ln -sfn "$base/rest/jwt.sock" "$base/rest.sock"
    echo "$rest_port" >"$base/rest.port"

    local token
    token=$(scontrol token username="$REST_USER" lifespan=7200 2>"$base/log/token.err") ||
        fail "scontrol token failed" "$base/log/token.err" "$base/log/slurmctld.log"
    [[ $token == SLURM_JWT=* ]] || fail "scontrol token printed no SLURM_JWT=...: $token"
    printf '%s\nSLURM_USER_NAME=%s\n' "$token" "$REST_USER" >"$base/token.env"
    chmod 600 "$base/token.env"
    say "Slurm $(slurmctld -V | awk '{print $2}') up in $((SECONDS - t0)) s: SLURM_CONF=$SLURM_CONF, slurmrestd on 127.0.0.1:$rest_port and $base/rest.sock"
}

# ---------------------------------------------------------------------------------------------
# stop
# ---------------------------------------------------------------------------------------------

queue_empty() { [[ -z $(squeue -h -o %i 2>/dev/null) ]] && squeue -h >/dev/null 2>&1; }

cmd_stop() {
    local base
    base=$(abs_base "${1:-}")
    if [[ ! -e $base/$MARKER ]]; then
        say "no Slurm of this script in $base; nothing to stop"
        return
    fi
    local t0=$SECONDS
    (
        export SLURM_CONF=$base/slurm.conf
        local ctld
        ctld=$(cat "$base/run/slurmctld.pid" 2>/dev/null || true)
        if alive "$ctld" && alive "$(cat "$base/run/slurmd.pid" 2>/dev/null || true)" && ctld_up; then
            # slurmstepd outlives slurmd: cancel every job first and wait for the queue to empty.
            local jobs
            jobs=$(squeue -h -o %i 2>/dev/null || true)
            if [[ -n $jobs ]]; then
                # shellcheck disable=SC2086
                scancel $jobs 2>/dev/null || true
                local i
                for ((i = 0; i < 300; i++)); do
                    queue_empty && break
                    sleep 0.1
                done
                queue_empty || echo "slurm.sh: warning: jobs still queued after 30 s: $(squeue -h -o '%i %T' 2>&1 | tr '\n' ' ')" >&2
            fi
        fi
        local name pid
        for name in slurmrestd slurmd slurmctld munged; do
            pid=$(cat "$base/run/$name.pid" 2>/dev/null || true)
            if alive "$pid"; then
                kill -TERM "$pid" 2>/dev/null || true
                wait_exit "$pid" 15 || echo "slurm.sh: warning: $name (pid $pid) ignored SIGTERM for 15 s; sent SIGKILL" >&2
            fi
            rm -f "$base/run/$name.pid"
        done
        # Any slurmstepd of this BASE that survived (a job that ignored the cancel).
        for pid in $(pids_named slurmstepd); do
            if [[ $(conf_of "$pid") == "$base/slurm.conf" ]] ||
                tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q "$base"; then
                kill -KILL "$pid" 2>/dev/null || true
                echo "slurm.sh: warning: killed a leftover slurmstepd (pid $pid)" >&2
            fi
        done
    )
    rm -f "$base/rest.port" "$base/rest.sock"
    say "stopped Slurm of $base in $((SECONDS - t0)) s"
}

cmd_status() {
    local base name pid any=1
    base=$(abs_base "${1:-}")
    for name in munged slurmctld slurmd slurmrestd; do
        pid=$(cat "$base/run/$name.pid" 2>/dev/null || true)
        if alive "$pid"; then
            say "$name running (pid $pid)"
            any=0
        else
            say "$name not running"
        fi
    done
    return $any
}

cmd_check() {
    local missing
    missing=$(missing_binaries)
    if [[ -n $missing ]] || ! jwt_plugin_installed; then
        echo "slurm.sh: Slurm is not installed (missing: ${missing:-slurm-wlm-jwt-plugin})." >&2
        echo "slurm.sh: install it (Debian/Ubuntu, as root, about 10 s): bash tests/peers/slurm.sh install" >&2
        exit 1
    fi
    say "Slurm $(slurmctld -V | awk '{print $2}') installed"
}

case ${1:-} in
check) cmd_check ;;
install) cmd_install ;;
start) cmd_start "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
status) cmd_status "${2:-}" ;;
*)
    echo "usage: $0 check | install | start BASE | stop BASE | status BASE" >&2
    exit 2
    ;;
esac
