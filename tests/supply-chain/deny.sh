#!/usr/bin/env bash
# The supply-chain check of the test command: cargo-deny over the whole workspace (advisories,
# licenses, bans, sources; deny.toml says what and why), offline, against a RustSec advisory
# snapshot. cargo-deny itself is installed by tests/peers/setup.sh (target/peers/cargo-deny).
#
# The snapshot: tests/supply-chain/advisory-db-2026-08-21-bf5c0d2.tar.xz (RustSec advisory-db
# commit bf5c0d245a92671908518d7e765914d437954ed6, 2026-08-21, 1,244 files), unless
# FLEXGATE_ADVISORY_DB names a directory holding a newer copy of the database. cargo-deny
# expects a git checkout at target/advisory-dbs/advisory-db-3157b0e258782691 (the name it
# derives from the database URL); it is made from the snapshot on every run.
set -euo pipefail
cd "$(dirname "$0")/../.."

DENY=${FLEXGATE_CARGO_DENY:-target/peers/cargo-deny/bin/cargo-deny}
[[ -x $DENY ]] || { echo "deny.sh: $DENY is missing: run tests/peers/setup.sh" >&2; exit 1; }
SNAPSHOT=tests/supply-chain/advisory-db-2026-08-21-bf5c0d2.tar.xz
DB=target/advisory-dbs/advisory-db-3157b0e258782691

rm -rf "$DB"
mkdir -p "$DB"
if [[ -n ${FLEXGATE_ADVISORY_DB:-} ]]; then
    [[ -d $FLEXGATE_ADVISORY_DB/crates ]] ||
        { echo "deny.sh: FLEXGATE_ADVISORY_DB=$FLEXGATE_ADVISORY_DB has no crates/ directory" >&2; exit 1; }
    cp -r "$FLEXGATE_ADVISORY_DB"/. "$DB"/
    echo "deny.sh: advisories from $FLEXGATE_ADVISORY_DB"
else
    tar -C "$DB" --strip-components=1 -xJf "$SNAPSHOT"
    echo "deny.sh: advisories from $SNAPSHOT (RustSec advisory-db bf5c0d2, 2026-08-21)"
fi
rm -rf "$DB/.git"
(
    cd "$DB"
    git init -q
    git add -A
    GIT_AUTHOR_DATE=2026-08-21T00:00:00Z GIT_COMMITTER_DATE=2026-08-21T00:00:00Z \
        git -c user.name=snapshot -c user.email=snapshot@invalid -c commit.gpgsign=false \
        commit -q -m "RustSec advisory-db snapshot"
)
"$DENY" --version
# cargo-deny reads the metadata of every platform's dependencies, which a build for this host
# never downloads (android_system_properties, valuable, …): on a fresh machine, fetch them first.
cargo fetch --locked --quiet
"$DENY" --offline --locked check --show-stats advisories licenses bans sources
