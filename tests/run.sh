#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: this is the README's test command
# and what CI runs. It installs what the tests need, then runs every check.
#
# Today the suite needs only the Rust toolchain: the gateway's peers in these tests are the
# in-process simulated cluster and a real sled ledger on disk. Services (Mosquitto, OpenADR
# servers, Slurm) are added here, started on 127.0.0.1, by the issues that need them.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchain"
cargo --version
rustc --version

step "format"
cargo fmt --all -- --check

step "lint (clippy, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "documentation builds without warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

step "tests (unit, property, gateway in-process, SIGKILL crash rounds, CLI end-to-end, experiment targets)"
cargo test --workspace --locked

step "benchmarks compile and run once (smoke; figures in BENCHMARKS.md come from full runs)"
cargo bench -p flexgate-policies --bench plan --locked -- --test
cargo bench --bench ledger --locked -- --test
cargo bench --bench gateway --locked -- --test

step "main jobs on embedded defaults (release): the gateway demo, then the fleet experiment at 30 %"
cargo run --release --locked --quiet -- demo --speed 600
cargo run --release --locked --quiet -- simulate --quiet --cut 0.3
