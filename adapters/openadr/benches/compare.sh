#!/usr/bin/env bash
# Decode speed against the reference decoders, in one run:
# - OpenADR 2.0b: flexgate's oadr2b::decode (Criterion) vs openleadr 0.5.36's parse_message
#   (timeit), on the same openleadr-generated oadrDistributeEvent files (benches/inputs, 1/10/50
#   events);
# - OpenADR 3: flexgate's oadr3::decode_events and decode_any vs openleadr-rs's own wire types
#   (serde_json::from_str::<Vec<openleadr_wire::Event>>), both in the same Criterion run, on
#   benches/inputs/events_200.json.
#
#   adapters/openadr/benches/compare.sh            # full run (criterion defaults: ~1 min)
#   QUICK=1 adapters/openadr/benches/compare.sh    # shorter criterion measurement (2 s per bench)
#
# Needs the openleadr venv: tests/peers/setup.sh --only oadr2b. Prints, for 2.0b, a table of medians
# and two ratios: openleadr's parse_message time over flexgate's decode (bytes → typed message, the
# like for like: parse_message returns a dict of Python values), and over decode+normalized_json;
# for 3, the three Criterion medians and openleadr-wire's median over each of flexgate's, then the
# same three decoders taking turns (benches/oadr3_interleaved.rs), which a changing load cannot
# tilt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."   # workspace root
PY=${OPENLEADR_PYTHON:-target/peers/oadr2b-venv/bin/python}
[[ -x $PY ]] || { echo "compare.sh: $PY missing; run tests/peers/setup.sh --only oadr2b" >&2; exit 1; }
TARGET_DIR=${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')}
CRIT=$TARGET_DIR/criterion

extra=()
[[ -n ${QUICK:-} ]] && extra=(--warm-up-time 1 --measurement-time 2)
echo "compare: cargo bench -p flexgate-openadr --bench decode (criterion)" >&2
cargo bench -q -p flexgate-openadr --bench decode -- --noplot "${extra[@]}" >&2
echo "compare: cargo bench -p flexgate-openadr --bench oadr3_interleaved (the OpenADR 3 decoders taking turns)" >&2
INTERLEAVED=$(cargo bench -q -p flexgate-openadr --bench oadr3_interleaved 2>/dev/null | grep -v '^$')
echo "compare: openleadr parse_message (timeit, repeat 7)" >&2
OL_JSON=$("$PY" adapters/openadr/benches/openleadr_parse.py --repeat 7)

CRIT="$CRIT" OL_JSON="$OL_JSON" INPUTS=adapters/openadr/benches/inputs "$PY" - <<'PYEOF'
import json, os
crit = os.environ['CRIT']
ol = {r['file']: r for r in json.loads(os.environ['OL_JSON'])['results']}

def median_us(group, name):
    path = os.path.join(crit, group, name, 'new', 'estimates.json')
    with open(path) as f:
        return json.load(f)['median']['point_estimate'] / 1000.0   # ns -> µs

rows = []
for name in sorted(ol, key=lambda n: ol[n]['events']):
    d = median_us('oadr2b_decode', name)
    dj = median_us('oadr2b_decode_json', name)
    o = ol[name]['median_s'] * 1e6
    rows.append((name, ol[name]['events'], ol[name]['bytes'], d, dj, o))
hdr = ('file', 'events', 'bytes', 'flexgate decode µs', 'flexgate decode+json µs', 'openleadr parse_message µs',
       'ratio (decode)', 'ratio (decode+json)')
print('| ' + ' | '.join(hdr) + ' |')
print('|' + '|'.join('---' for _ in hdr) + '|')
for name, ev, size, d, dj, o in rows:
    print(f'| {name} | {ev} | {size} | {d:.1f} | {dj:.1f} | {o:.1f} | {o / d:.0f}x | {o / dj:.0f}x |')

print()
size = os.path.getsize(os.path.join(os.environ['INPUTS'], 'events_200.json'))
events, anydoc, wire = (median_us('oadr3_decode', n) for n in ('decode_events', 'decode_any', 'openleadr_wire'))
hdr = ('file', 'events', 'bytes', 'flexgate decode_events µs', 'flexgate decode_any µs', 'openleadr-wire µs',
       'ratio (decode_events)', 'ratio (decode_any)')
print('| ' + ' | '.join(hdr) + ' |')
print('|' + '|'.join('---' for _ in hdr) + '|')
print(f'| events_200.json | 200 | {size} | {events:.1f} | {anydoc:.1f} | {wire:.1f} | {wire / events:.2f}x | {wire / anydoc:.2f}x |')
PYEOF
echo
echo "$INTERLEAVED"
