#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: this is the README's test command
# and what CI runs. It installs what the tests need, then runs every check.
#
# Besides the Rust toolchain it needs the real OpenADR peers, installed by tests/peers/setup.sh
# (idempotent; a fresh machine spends about 5 minutes here, mostly `cargo install openadr`):
# openleadr 0.5.36 from PyPI (a 2.0b VTN, and the 2.0b XSD our encoder is checked against) and
# openadr 0.4.0 from crates.io (a 3.1 VTN); Mosquitto, strace and Slurm from Debian; cargo-deny
# 0.20.2 from crates.io for the supply-chain check; etcd 3.4 from Debian (three-member clusters
# for the replicas' election and fencing). The tests start the peers on 127.0.0.1
# themselves and fail loudly, never skip, if they are missing. The cluster is the in-process
# simulator; the ledger is real sled on disk.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# A clean clone gains nothing from an incremental cache, and it costs disk: CI machines have
# run out of space building the test binaries (see the profiles in Cargo.toml).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

step "toolchain"
cargo --version
rustc --version

step "peers: openleadr 0.5.36 (OpenADR 2.0b VTN + XSD) and openadr 0.4.0 (OpenADR 3.1 VTN)"
bash tests/peers/setup.sh

step "format"
cargo fmt --all -- --check

step "supply chain: cargo deny (advisories from the RustSec snapshot in tests/supply-chain, licenses, bans, sources)"
bash tests/supply-chain/deny.sh

step "lint (clippy, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "documentation builds without warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

step "the training-side throughput helper (deploy/flexgate_throughput.py, Python standard library only)"
python3 -m unittest -v deploy/test_flexgate_throughput.py

step "tests (unit, property, gateway in-process, SIGKILL crash rounds, CLI end-to-end, experiment targets, real OpenADR VTNs)"
cargo test --workspace --locked

# The smoke runs and the main jobs use the test build (debug assertions and overflow checks
# on), so CI compiles the workspace once rather than a second time with optimisations: the
# figures in BENCHMARKS.md come from `cargo bench` (release) runs, and `cargo run --release`
# builds the same code.
step "benchmarks compile and run once (smoke, test build; figures in BENCHMARKS.md come from full release runs)"
cargo test -p flexgate-lab --bench plan --locked -- --test
cargo test --bench ledger --locked -- --test
cargo test --bench gateway --locked -- --test
cargo test --bench mqtt --locked -- --test
cargo test --bench agents --locked -- --test
cargo test --bench agents --locked -- --test --tls
cargo test --bench ha --locked -- --test
cargo test --bench settlement --locked -- --test
cargo test -p flexgate-openadr --bench decode --locked -- --test

step "main jobs on embedded defaults (test build): the gateway demo, then the fleet experiment at 30 %"
cargo run --locked --quiet -- demo --speed 600
cargo run --locked --quiet -- simulate --quiet --cut 0.3

step "disk used by the build (CI machines have limited space)"
du -sh target 2>/dev/null || true
df -h . | tail -1
