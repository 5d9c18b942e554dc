#!/usr/bin/env python3
"""Smoke test for tests/peers/oadr2b_vtn.py (run with the openleadr venv; exit status 0 = pass).

    target/peers/oadr2b-venv/bin/python tests/peers/smoke_oadr2b_vtn.py

Part 1 speaks raw XML over HTTP (VEN messages built with openleadr.messaging.create_message, the
way `curl --data-binary @poll.xml` would send them): registration, poll, event, opt responses,
modify, cancel, forget_ven. Part 2 runs openleadr's own OpenADRClient against the VTN for a few
seconds to exercise oadrRegisterReport -> oadrReportRequest -> oadrUpdateReport.
"""

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

from openleadr import OpenADRClient
from openleadr.messaging import create_message, parse_message, validate_xml_schema

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = 0


def check(cond, what):
    global CHECKS
    CHECKS += 1
    if not cond:
        raise SystemExit(f"FAIL: {what}")


def http(url, data=None, content_type='application/xml'):
    req = urllib.request.Request(url, data=data, headers={'Content-Type': content_type} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def main():
    vtn = subprocess.Popen([sys.executable, os.path.join(HERE, 'oadr2b_vtn.py'), '--port', '0',
                            '--poll-freq', '1', '--report-sampling', '1', '--exit-on-stdin-eof'],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = vtn.stdout.readline().split()
        check(line[:1] == ['READY'], f"VTN did not print READY: {line}")
        base = f"http://127.0.0.1:{line[1]}"
        run_scenario(base)
    finally:
        vtn.stdin.close()
        vtn.wait(timeout=10)
    print(f"smoke_oadr2b_vtn: ok ({CHECKS} checks)")


def run_scenario(base):
    oadr = base + '/OpenADR2/Simple/2.0b/'

    def send(service, message_type, **payload):
        status, body = http(oadr + service, create_message(message_type, **payload).encode())
        check(status == 200, f"{message_type}: HTTP {status}")
        return body, parse_message(body)

    def admin(route, **body):
        _, out = http(base + '/admin/' + route, json.dumps(body).encode(), 'application/json')
        return json.loads(out)

    def state():
        return json.loads(http(base + '/admin/state?raw=0')[1])

    _, (t, p) = send('EiRegisterParty', 'oadrQueryRegistration', request_id='q1')
    check(t == 'oadrCreatedPartyRegistration' and p['vtn_id'] == 'flexgate-test-vtn', 'query registration')
    check(p['requested_oadr_poll_freq'] == timedelta(seconds=1), 'poll freq 1 s')
    _, (t, p) = send('EiRegisterParty', 'oadrCreatePartyRegistration', request_id='c1', ven_name='site-a',
                     profile_name='2.0b', transport_name='simpleHttp', transport_address=None,
                     report_only=False, xml_signature=False, http_pull_model=True)
    ven_id = p['ven_id']
    check(t == 'oadrCreatedPartyRegistration' and ven_id == 'ven-1' and p['registration_id'] == 'reg-1',
          'create party registration')
    _, (t, _) = send('OadrPoll', 'oadrPoll', ven_id=ven_id)
    check(t == 'oadrResponse', 'empty poll -> oadrResponse')
    _, (t, p) = send('OadrPoll', 'oadrPoll', ven_id='nobody')
    check(t == 'oadrRequestReregistration' and p['ven_id'] == 'nobody', 'unknown venID -> reregistration')

    start = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(microsecond=0)
    ev = admin('event', ven_id=ven_id, event_id='E1', start=start.isoformat(), priority=1,
               market_context='http://flexgate.test/prog', targets={'group_id': 'g1', 'ven_id': ven_id},
               ramp_up_s=300, start_after_s=60,
               intervals=[{'duration_s': 900, 'value': v} for v in (800, 650, 650, 800)])
    check(ev == {'event_id': 'E1', 'ven_id': ven_id, 'modification_number': 0, 'status': 'far'}, f"event: {ev}")
    check('error' in admin('event', ven_id=ven_id, intervals=[]), 'bad event -> error')
    xml, (t, p) = send('OadrPoll', 'oadrPoll', ven_id=ven_id)
    validate_xml_schema(xml)
    check(t == 'oadrDistributeEvent' and len(p['events']) == 1, 'poll -> oadrDistributeEvent')
    e = p['events'][0]
    check(e['event_descriptor']['modification_number'] == 0 and e['event_descriptor']['priority'] == 1, 'E1 v0')
    check(len(e['event_signals'][0]['intervals']) == 4, '4 intervals')
    check(b'<power:powerReal' in xml and b'<scale:siScaleCode>k<' in xml, 'powerReal kW itemBase')
    check(b'x-eiRampUp' in xml and b'startafter' in xml, 'ramp-up and tolerance kept')
    _, (t, _) = send('OadrPoll', 'oadrPoll', ven_id=ven_id)
    check(t == 'oadrResponse', 'second poll -> nothing pending')

    def created(mod, opt, rid):
        return send('EiEvent', 'oadrCreatedEvent', ven_id=ven_id,
                    response={'response_code': 200, 'response_description': 'OK', 'request_id': rid},
                    event_responses=[{'response_code': 200, 'response_description': 'OK', 'request_id': rid,
                                      'event_id': 'E1', 'modification_number': mod, 'opt_type': opt}])[1]

    t, p = created(0, 'optIn', 'r0')
    check(t == 'oadrResponse' and p['response']['response_code'] == 200, 'optIn accepted')
    m = admin('modify', event_id='E1', intervals=[{'duration_s': 1800, 'value': 500}])
    check(m['modification_number'] == 1, f"modify: {m}")
    _, (t, p) = send('OadrPoll', 'oadrPoll', ven_id=ven_id)
    check(t == 'oadrDistributeEvent' and p['events'][0]['event_descriptor']['modification_number'] == 1,
          'poll after modify -> modificationNumber 1')
    t, p = created(1, 'optOut', 'r1')
    check(p['response']['response_code'] == 200, 'optOut v1 accepted')
    t, p = created(0, 'optIn', 'r-stale')
    check(p['response']['response_code'] == 452, 'stale modificationNumber -> 452 INVALID ID')
    c = admin('cancel', event_id='E1')
    check(c['modification_number'] == 2 and c['status'] == 'cancelled', f"cancel: {c}")
    _, (t, p) = send('OadrPoll', 'oadrPoll', ven_id=ven_id)
    check(p['events'][0]['event_descriptor']['event_status'] == 'cancelled', 'poll -> cancelled')
    created(2, 'optIn', 'r2')

    s = state()
    check([r['opt_type'] for r in s['opt_responses']['E1']] == ['optIn', 'optOut', 'optIn', 'optIn'],
          f"opt responses: {s['opt_responses']}")
    check([r['opt_type'] for r in s['opt_callbacks']['E1']] == ['optIn', 'optOut', 'optIn'],
          f"opt callbacks: {s['opt_callbacks']}")
    check(s['events'] == [], 'cancelled event removed after its confirmation')
    check(admin('forget_ven', ven_id=ven_id)['forgotten'], 'forget_ven')
    _, (t, _) = send('OadrPoll', 'oadrPoll', ven_id=ven_id)
    check(t == 'oadrRequestReregistration', 'forgotten VEN -> oadrRequestReregistration')

    # Part 2: openleadr's own VEN, for the report path.
    asyncio.run(run_openleadr_ven(oadr.rstrip('/'), base, admin))
    s = state()
    ven2 = [r for r in s['registrations'] if r['ven_name'] == 'openleadr-ven'][0]['ven_id']
    check(s['report_requests'].get(ven2), 'VTN requested the offered report')
    check(any(r['ven_id'] == ven2 for r in s['reports']), 'oadrUpdateReport received')
    values = s['report_values'].get(f"{ven2}/meter-1")
    check(values and all(v[1] == 42.0 for v in values), f"report values via callback: {values}")
    check(s['opt_callbacks'].get('E2', [{}])[0].get('opt_type') == 'optIn', 'openleadr VEN opted in to E2')
    check(any(m['request_type'] == 'oadrUpdateReport' and m['response_type'] == 'oadrUpdatedReport'
              for m in s['messages']), 'message log')


async def run_openleadr_ven(vtn_url, base, admin):
    client = OpenADRClient(ven_name='openleadr-ven', vtn_url=vtn_url, allow_jitter=False)
    client.add_report(callback=lambda: 42.0, resource_id='meter-1', measurement='power_real',
                      sampling_rate=timedelta(seconds=1), report_specifier_id='rs-1', r_id='meter-1')

    async def on_event(event):
        return 'optIn'
    client.add_handler('on_event', on_event)
    await client.run()
    for _ in range(50):
        if client.ven_id:
            break
        await asyncio.sleep(0.1)
    start = (datetime.now(timezone.utc) + timedelta(hours=2)).isoformat()
    await asyncio.get_running_loop().run_in_executor(None, lambda: admin(
        'event', ven_id=client.ven_id, event_id='E2', start=start, intervals=[{'duration_s': 600, 'value': 1}]))
    await asyncio.sleep(5)
    await client.stop()


if __name__ == '__main__':
    main()
