#!/usr/bin/env python3
"""Time openleadr 0.5.36's `openleadr.messaging.parse_message(xml_string)` on the bench inputs.

    target/peers/oadr2b-venv/bin/python adapters/openadr/benches/openleadr_parse.py [--repeat 7] [FILE...]

parse_message is xmltodict plus openleadr's normalize_dict: the same job as flexgate's
decode + normalized_json (it does not validate against the XSD; the VTN/VEN do that separately).
For each file: timeit with `repeat` rounds (>= 7) of `number` calls, `number` chosen so a round
takes about 0.2 s; the median of the per-call times is reported. Output: JSON on stdout,
{"tool": "openleadr", "version": ..., "results": [{"file", "bytes", "events", "repeat", "number",
"median_s", "min_s"}]}.
"""
import argparse
import glob
import json
import logging
import os
import statistics
import timeit
from importlib.metadata import version

from openleadr.messaging import parse_message

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser()
    p.add_argument('files', nargs='*')
    p.add_argument('--repeat', type=int, default=7)
    p.add_argument('--round-s', type=float, default=0.2, help='target seconds per timeit round')
    args = p.parse_args()
    if args.repeat < 7:
        p.error('--repeat must be >= 7')
    # parse_message logs every message at DEBUG; make sure logging costs nothing.
    logging.getLogger('openleadr').setLevel(logging.WARNING)
    files = args.files or sorted(glob.glob(os.path.join(HERE, 'inputs', '*.xml')),
                                 key=lambda f: (len(f), f))
    results = []
    for path in files:
        with open(path, encoding='utf-8') as f:
            xml = f.read()
        kind, payload = parse_message(xml)
        events = len(payload.get('events') or []) if kind == 'oadrDistributeEvent' else None
        timer = timeit.Timer(lambda: parse_message(xml))
        number, _ = timer.autorange()
        one = timer.timeit(number) / number
        number = max(1, int(args.round_s / one))
        rounds = [t / number for t in timer.repeat(repeat=args.repeat, number=number)]
        results.append({'file': os.path.basename(path), 'bytes': len(xml.encode()), 'events': events,
                        'repeat': args.repeat, 'number': number,
                        'median_s': statistics.median(rounds), 'min_s': min(rounds)})
    print(json.dumps({'tool': 'openleadr', 'version': version('openleadr'), 'results': results}, indent=1))


if __name__ == '__main__':
    main()
