#!/usr/bin/env python3
"""Writes the hand-made hostile seeds of the decode_3 fuzz target into seeds_3/ (standard
library only; run from anywhere). Each file is one idea a hostile or broken VTN could send."""
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'seeds_3')

EVENT = {
    'id': 'e1', 'createdDateTime': '2026-11-30T01:36:22.639004168Z', 'modificationDateTime': '2026-11-30T01:36:22Z',
    'objectType': 'EVENT', 'programID': 'p1', 'eventName': 'n', 'priority': 0,
    'targets': [{'type': 'VEN_NAME', 'values': ['ven-1']}, 'site-a'],
    'reportDescriptors': [{'payloadType': 'USAGE', 'readingType': 'DIRECT_READ', 'units': 'KW', 'aggregate': False,
                           'startInterval': -1, 'numIntervals': -1, 'historical': True, 'frequency': -1, 'repeat': 1}],
    'payloadDescriptors': [{'payloadType': 'IMPORT_CAPACITY_LIMIT', 'units': 'KW'}],
    'intervalPeriod': {'start': '2026-12-01T18:00:00+00:00', 'duration': 'P0Y0M0DT0H15M0S', 'randomizeStart': 'PT5M'},
    'duration': 'PT1H',
    'intervals': [{'id': 0, 'payloads': [{'type': 'IMPORT_CAPACITY_LIMIT', 'values': [800.0]}]},
                  {'id': 1, 'intervalPeriod': {'start': '2026-12-01T18:15:00Z', 'duration': 'PT15M'},
                   'payloads': [{'type': 'IMPORT_CAPACITY_LIMIT', 'values': [650]}, {'type': 'CURVE', 'values': [{'x': 1, 'y': 2}]}]}],
    'x-vendor': {'a': [1, 'b', None, True]},
}


def event(**changes):
    e = dict(EVENT)
    e.update(changes)
    return e


def j(v):
    return json.dumps(v, separators=(',', ':')).encode()


def main():
    seeds = {
        # valid documents of each kind, to start from
        'valid_event.json': j(EVENT),
        'valid_events.json': j([EVENT, event(id='e2', priority=3)]),
        'valid_program.json': j({'id': 'p1', 'objectType': 'PROGRAM', 'programName': 'n', 'programLongName': 'l',
                                 'intervalPeriod': {'start': '2026-01-01T00:00:00Z'}, 'targets': ['a'],
                                 'payloadDescriptors': [{'payloadType': 'PRICE'}], 'retailerName': 'r'}),
        'valid_reports.json': j([{'id': 'r1', 'objectType': 'REPORT', 'eventID': 'e1', 'clientName': 'c', 'programID': 'p',
                                  'payloadDescriptors': [{'payloadType': 'USAGE', 'readingType': 'DIRECT_READ', 'units': 'KW'}],
                                  'resources': [{'resourceName': 'AGGREGATED_REPORT', 'intervalPeriod': {'start': '2026-01-01T00:00:00Z'},
                                                 'intervals': [{'id': 0, 'payloads': [{'type': 'USAGE', 'values': [1.5]}]}]}]}]),
        'notification_object_first.json': b'{"object":' + j(EVENT) + b',"operation":"PUT","objectType":"EVENT"}',
        'notification_untyped.json': j({'operation': 'DELETE', 'object': {'id': 'p1', 'programName': 'n'}}),
        'notification_other.json': j({'operation': 'CREATE', 'objectType': 'SUBSCRIPTION', 'object': {'any': [1]}}),
        'mixed_list.json': j([EVENT, {'programName': 'n', 'intervals': 7}]),
        # nesting
        'deep_array.json': b'[' * 5000 + b']' * 5000,
        'deep_object.json': b'{"a":' * 3000 + b'1' + b'}' * 3000,
        'deep_unclosed.json': b'{"a":' * 10000,
        'deep_in_extra.json': j(event(**{'x-deep': json.loads('[' * 40 + ']' * 40)})),
        # numbers
        'huge_numbers.json': b'{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"X","values":'
                             b'[1e999,-1e400,1.7976931348623157e308,123456789012345678901234567890,0.1e-400,5e-324,-0]}]}]}',
        'huge_integer_fields.json': b'{"programID":"p","priority":99999999999999999999,"intervals":[{"id":1e20,"payloads":[]}]}',
        'number_syntax.json': b'[{"programID":"p","priority":01}]',
        'number_trailing_dot.json': b'[{"programID":"p","priority":1.}]',
        'long_number.json': b'{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"X","values":[' + b'9' * 400 + b']}]}]}',
        # NaN in every spelling a VTN might try
        'nan_strings.json': j(event(priority='NaN', intervals=[{'id': 0, 'payloads': [
            {'type': 'IMPORT_CAPACITY_LIMIT', 'values': ['NaN', 'Infinity', '-Infinity', 'nan', '1e999']}]}])),
        'nan_bare.json': b'{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"X","values":[NaN,Infinity,-Infinity]}]}]}',
        # duplicate keys, plain, escaped, at the kind-deciding level, inside values
        'dup_keys.json': b'{"programID":"p","priority":1,"priority":0,"intervals":[{"id":0,"id":1,"payloads":[]}]}',
        'dup_escaped.json': b'{"id":"a","\\u0069d":"b","programID":"p","intervals":[]}',
        'dup_object_type.json': b'{"objectType":"PROGRAM","programName":"n","objectType":"EVENT"}',
        'dup_in_extra.json': b'{"programID":"p","x":{"k":1,"k":2},"intervals":[]}',
        'dup_point.json': b'{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"CURVE","values":[{"x":1,"x":2}]}]}]}',
        'dup_notification.json': b'{"operation":"PUT","object":{"programID":"p"},"object":{"programID":"q"}}',
        # text
        'bad_utf8.json': b'{"programID":"\xff\xfe","intervals":[]}',
        'bad_utf8_overlong.json': b'{"programID":"\xc0\xaf","eventName":"\xed\xa0\x80","intervals":[]}',
        'bad_utf8_key.json': b'{"\xc3\x28":1,"programID":"p"}',
        'lone_surrogates.json': b'{"programID":"\\ud800","eventName":"\\udc00x","x":"\\ud800\\u0041","intervals":[]}',
        'escapes.json': b'{"programID":"\\u00e9\\ud83d\\ude00\\n\\"\\/\\b\\f\\r\\t","intervals":[]}',
        'bad_escape.json': b'{"programID":"a\\qb","intervals":[]}',
        'control_char.json': b'{"programID":"a\x01b","intervals":[]}',
        'bom.json': b'\xef\xbb\xbf' + j(EVENT),
        'long_key.json': b'{"' + b'k' * 5000 + b'":1,"programID":"p"}',
        # sizes
        'enormous_array.json': b'{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"X","values":[' + b','.join([b'0'] * 10001) + b']}]}]}',
        'many_members.json': b'{' + b','.join(b'"k%d":0' % i for i in range(10001)) + b',"programID":"p"}',
        'many_intervals.json': j(event(intervals=[{'id': i, 'payloads': [{'type': 'SIMPLE', 'values': [i % 4]}]} for i in range(600)])),
        # wrong types everywhere
        'wrong_types.json': j([event(intervals={}), event(targets='x'), event(priority='high'), event(id=[]),
                               event(intervalPeriod=5), event(intervals=[{'id': 0, 'payloads': [None]}]),
                               event(intervals=[{'id': 0, 'payloads': [{'type': 'X', 'values': None}]}]),
                               event(intervals=[{'id': 0.5, 'payloads': []}]), event(priority=-1),
                               event(reportDescriptors=[{'payloadType': 5}]), event(targets=[7])]),
        'wrong_types_2.json': j(event(reportDescriptors=[{'payloadType': 'USAGE', 'aggregate': 'yes', 'historical': 1}],
                                      payloadDescriptors=[{'units': 'KW'}])),
        'nulls.json': j(event(id=None, priority=None, targets=None, intervalPeriod=None, intervals=None, duration=None)),
        'null_value.json': b'{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"X","values":[null]}]}]}',
        # timestamps and durations at their edges
        'timestamps_edge.json': j([event(createdDateTime=t) for t in [
            '2016-12-31T23:59:60Z', '2026-07-01T18:00:00+24:00', '9999-12-31T23:59:59-23:59', '0000-01-01T00:00:00+01:00',
            '0001-01-01', '0001-01-01T00:00:00Z', '2026-02-29T00:00:00Z', '2026-07-01t18:00:00z', '2026-07-01 18:00:00Z',
            '2026-07-01T18:00:00.1234567891Z', '2026-07-01T18:00:00']]),
        'durations_edge.json': j([event(duration=d) for d in [
            'P99999999999Y', 'PT1.5H30M', '-PT5M', 'P', 'PT', 'P0Y0M0DT0H0M0.0000000001S', 'P106751991167300D',
            'P9999Y', 'PT0S', 'P1M', 'P1Y2M3DT4H5M6.25S', 'PT1,5S', 'P.5D', '']]),
        'sentinel_forever.json': j(event(intervalPeriod={'start': '0001-01-01T00:00:00Z', 'duration': 'P9999Y'})),
        # truncated and degenerate documents
        'truncated.json': j(EVENT)[:300],
        'trailing_comma.json': b'[{"programID":"p"},]',
        'trailing_garbage.json': j(EVENT) + b' x',
        'empty.json': b'',
        'whitespace.json': b' \n\t\r ',
        'null.json': b'null',
        'empty_list.json': b'[]',
        'empty_object.json': b'{}',
        'list_of_numbers.json': b'[1e5, 2]',
    }
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), 'wb') as f:
            f.write(data)
    print(f'{len(seeds)} seeds in {OUT}')


if __name__ == '__main__':
    main()
