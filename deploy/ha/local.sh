#!/usr/bin/env bash
# Watch a takeover on one machine before deploying replicas on three: a three-member etcd
# cluster, two simulated GPU nodes (flexgate-agent --simulate) and two gateway replicas, all on
# 127.0.0.1, in a scratch directory. Ctrl-C stops everything.
#
#   bash deploy/ha/local.sh            # binaries from target/release (cargo build --release)
#   FLEXGATE_BIN=... bash deploy/ha/local.sh
#
# Then, in another terminal (the script prints these with the real paths):
#   flexgate ha status --config DIR/gw-a.toml          # who leads, epochs, lag
#   curl -s localhost:18081/v1/status | jq .replication
#   kill -9 <the leader's pid>                           # the standby leads within ~term_ttl_s + 5 s
#
# Needs Debian's etcd-server (/usr/bin/etcd).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${FLEXGATE_BIN:-target/release}
for b in "$BIN/flexgate" "$BIN/flexgate-agent" /usr/bin/etcd; do
    [[ -x $b ]] || { echo "local.sh: $b is missing (cargo build --release; apt-get install etcd-server)" >&2; exit 1; }
done
DIR=$(mktemp -d /tmp/flexgate-ha.XXXXXX)
PIDS=()
stop() {
    echo; echo "local.sh: stopping (logs and data stay in $DIR)"
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT TERM

INITIAL="m1=http://127.0.0.1:12380,m2=http://127.0.0.1:22380,m3=http://127.0.0.1:32380"
for i in 1 2 3; do
    /usr/bin/etcd --name "m$i" --data-dir "$DIR/etcd-m$i" \
        --listen-client-urls "http://127.0.0.1:${i}2379" --advertise-client-urls "http://127.0.0.1:${i}2379" \
        --listen-peer-urls "http://127.0.0.1:${i}2380" --initial-advertise-peer-urls "http://127.0.0.1:${i}2380" \
        --initial-cluster "$INITIAL" --initial-cluster-token flexgate-local >"$DIR/etcd-m$i.log" 2>&1 &
    PIDS+=($!)
done

TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s' "$TOKEN" >"$DIR/agent.token"
chmod 600 "$DIR/agent.token"
for n in 1 2; do
    "$BIN/flexgate-agent" --simulate --gpus 8 --hostname "node-$n" --listen "127.0.0.1:1945$n" \
        --token-file "$DIR/agent.token" --state-dir "$DIR/agent-$n" >"$DIR/agent-$n.log" 2>&1 &
    PIDS+=($!)
done

for r in a b; do
    port=$([[ $r == a ]] && echo 18080 || echo 18081)
    cat >"$DIR/gw-$r.toml" <<TOML
[gateway]
site = "local-site"
data_dir = "$DIR/gw-$r"
api_token = "local-demo-token"
telemetry_interval_s = 2

[backend]
type = "agents"
token_file = "$DIR/agent.token"
renew_every_s = 10
nodes = [
  { name = "node-1", url = "http://127.0.0.1:19451" },
  { name = "node-2", url = "http://127.0.0.1:19452" },
]

[ha]
replica = "gw-$r"
endpoints = ["http://127.0.0.1:12379", "http://127.0.0.1:22379", "http://127.0.0.1:32379"]
advertise_url = "http://127.0.0.1:$port"
term_ttl_s = 10
TOML
    "$BIN/flexgate" run --config "$DIR/gw-$r.toml" --listen "127.0.0.1:$port" >"$DIR/gw-$r.log" 2>&1 &
    PIDS+=($!)
    echo "local.sh: gw-$r on http://127.0.0.1:$port (pid $!, log $DIR/gw-$r.log)"
done

cat <<TEXT

local.sh: etcd on 127.0.0.1:12379/22379/32379, agents on :19451/:19452, replicas on :18080/:18081.
Watch:   $BIN/flexgate ha status --config $DIR/gw-a.toml
Status:  curl -s 127.0.0.1:18080/v1/status | python3 -m json.tool | grep -A12 replication
Event:   curl -s -X POST -H 'Authorization: Bearer local-demo-token' 127.0.0.1:18080/v1/events -d @your-event.json
Kill the leader's pid above (kill -9): the other replica leads within term_ttl_s + a few seconds,
and the agents' caps stay in force (their logs show no restore).
Ctrl-C stops everything.
TEXT
wait
