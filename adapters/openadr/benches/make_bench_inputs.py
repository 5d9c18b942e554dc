#!/usr/bin/env python3
"""Generate the decode-benchmark inputs with openleadr itself, so the XML is what openleadr's VTN
really sends (and passes openleadr's own 2.0b schema validation).

    target/peers/oadr2b-venv/bin/python adapters/openadr/benches/make_bench_inputs.py

Writes benches/inputs/distribute_{1,10,50}.xml: one oadrDistributeEvent with N events; each event
has one LOAD_DISPATCH/setpoint signal with 4 intervals of 15 min, a powerReal kW itemBase, a venID
and a groupID target and a market context. All timestamps and IDs are fixed, so the files are
reproducible (dates are in 2035, so every event is 'far').
"""
import os
from datetime import datetime, timedelta, timezone

from openleadr import objects
from openleadr.messaging import create_message, parse_message, validate_xml_schema

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'inputs')
CREATED = datetime(2035, 1, 1, 0, 0, tzinfo=timezone.utc)


def event(i):
    start = datetime(2035, 7, 1, 12, 0, tzinfo=timezone.utc) + timedelta(hours=i)
    intervals = [objects.Interval(dtstart=start + timedelta(minutes=15 * k), duration=timedelta(minutes=15),
                                  signal_payload=float(800 - 50 * k - i), uid=k) for k in range(4)]
    return objects.Event(
        event_descriptor=objects.EventDescriptor(
            event_id=f'evt-{i:03d}', modification_number=i % 3, market_context='http://flexgate.test/prog-a',
            event_status='far', created_date_time=CREATED, modification_date_time=CREATED, priority=1 + i % 4),
        event_signals=[objects.EventSignal(
            intervals=intervals, signal_name='LOAD_DISPATCH', signal_type='setpoint', signal_id=f'sig-{i:03d}',
            measurement=objects.Measurement(name='powerReal', description='RealPower', unit='W', scale='k',
                                            power_attributes=objects.PowerAttributes(hertz=60, voltage=480, ac=True)),
            current_value=0.0)],
        targets=[objects.Target(ven_id='ven-1'), objects.Target(group_id='gpu-cluster-a')],
        response_required='always')


def main():
    os.makedirs(OUT, exist_ok=True)
    for n in (1, 10, 50):
        xml = create_message('oadrDistributeEvent', vtn_id='flexgate-test-vtn', request_id=f'req-{n}',
                             response={'response_code': 200, 'response_description': 'OK', 'request_id': None},
                             events=[event(i) for i in range(n)])
        for e in [event(i) for i in range(n)]:
            assert e.event_descriptor.event_status == 'far'
        validate_xml_schema(xml.encode())
        kind, payload = parse_message(xml)
        assert kind == 'oadrDistributeEvent' and len(payload['events']) == n
        path = os.path.join(OUT, f'distribute_{n}.xml')
        with open(path, 'w') as f:
            f.write(xml)
        print(f'{path}: {n} events, {len(xml)} bytes')


if __name__ == '__main__':
    main()
