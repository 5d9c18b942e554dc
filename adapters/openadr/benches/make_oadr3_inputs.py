#!/usr/bin/env python3
"""Generate the OpenADR 3 decode-benchmark input (standard library only):

    python3 adapters/openadr/benches/make_oadr3_inputs.py

Writes benches/inputs/events_200.json: a `GET /events` answer with 200 events, written the way
openleadr-rs 0.1 (openleadr-wire, OpenADR 3.0) serializes them: RFC 3339 times with `+00:00`,
verbose durations (`P0Y0M0DT0H15M0S`), floats with a fraction (`800.0`), 3.0 valuesMap targets,
and a report descriptor with every default written out. Each event is what the 2.0b bench's
events carry, in 3.0 terms: one IMPORT_CAPACITY_LIMIT payload type in kW over 4 intervals of
15 minutes, a VEN_NAME and a GROUP target, a program. IDs and dates are fixed, so the file is
reproducible. The bench (decode.rs) checks before timing that flexgate's decoder and
openleadr-wire both accept the file and agree on every event's id, program and values.
"""
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'inputs', 'events_200.json')


def event(i):
    created = '2035-01-01T00:00:%02d.639004168+00:00' % (i % 60)
    return {
        'id': 'evt-%05d' % i,
        'createdDateTime': created,
        'modificationDateTime': created,
        'objectType': 'EVENT',
        'programID': 'prg-%03d' % (i % 7),
        'eventName': 'capacity-%d' % i,
        'priority': i % 4,
        'targets': [
            {'type': 'VEN_NAME', 'values': ['ven-1']},
            {'type': 'GROUP', 'values': ['group-%d' % (i % 3)]},
        ],
        'reportDescriptors': [{
            'payloadType': 'USAGE', 'readingType': 'DIRECT_READ', 'units': 'KW', 'aggregate': False,
            'startInterval': -1, 'numIntervals': -1, 'historical': True, 'frequency': -1, 'repeat': 1,
        }],
        'payloadDescriptors': [{'payloadType': 'IMPORT_CAPACITY_LIMIT', 'units': 'KW'}],
        'intervalPeriod': {
            'start': '2035-07-01T%02d:00:00+00:00' % (i % 24),
            'duration': 'P0Y0M0DT0H15M0S',
        },
        'intervals': [
            {'id': k, 'payloads': [{'type': 'IMPORT_CAPACITY_LIMIT', 'values': [float(800 - 50 * k - i)]}]}
            for k in range(4)
        ],
    }


def main():
    body = json.dumps([event(i) for i in range(200)], separators=(',', ':'))
    with open(OUT, 'w') as f:
        f.write(body)
    print(f'{OUT}: {len(body)} bytes')


if __name__ == '__main__':
    main()
