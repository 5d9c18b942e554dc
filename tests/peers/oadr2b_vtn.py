#!/usr/bin/env python3
"""A real OpenADR 2.0b VTN (openleadr 0.5.36's OpenADRServer) for flexgate's integration tests.

Run it with the venv that tests/peers/setup.sh creates:

    target/peers/oadr2b-venv/bin/python tests/peers/oadr2b_vtn.py --port 0 --poll-freq 1

It listens with plain HTTP on 127.0.0.1 (OpenADR at /OpenADR2/Simple/2.0b/<Service>) and prints
`READY <port>` on stdout once it accepts connections (`--port 0` picks a free port). It stops on
SIGTERM/SIGINT or when stdin reaches EOF if `--exit-on-stdin-eof` is given.

OpenADR behaviour is openleadr's own; this harness only plugs in the handlers a VTN operator
writes, and watches:
- any VEN name may register; venIDs are `ven-1`, `ven-2`, ... and registrationIDs `reg-1`, ...
  (a VEN that re-registers with a venID we still know keeps it and gets a new registrationID);
- `ven_lookup` is set, so a message from an unknown or forgotten venID is answered with
  oadrRequestReregistration (openleadr does that itself when the lookup returns None);
- every report a VEN offers in oadrRegisterReport (TELEMETRY_USAGE / TELEMETRY_STATUS; openleadr
  skips the others) is requested at `--report-sampling` seconds, so the VEN sends oadrUpdateReport;
- every oadrCreatedEvent is recorded in full (optType, responseCode/Description, requestID,
  modificationNumber), besides the opt type openleadr hands to the event callback.

Admin routes (JSON in, JSON out; errors are HTTP 400 with {"error": ...}):
- POST /admin/event   {ven_id, event_id?, signal_name="LOAD_DISPATCH", signal_type="setpoint",
                       start?, intervals: [{dtstart?, duration_s, value}], market_context?,
                       targets? {ven_id|group_id|resource_id|party_id: str|[str]},
                       response_required="always", test_event=false, priority=0,
                       measurement? ("powerReal" | "none" | {name, description, unit, scale}; default
                       powerReal W k for LOAD_DISPATCH, none otherwise), current_value?,
                       ramp_up_s?, notification_s?, recovery_s?, start_after_s?, signal_id?,
                       vtn_comment?}
                      -> {event_id, modification_number, ven_id}
                      An interval without dtstart starts where the previous one ended (the first
                      one at `start`).
- POST /admin/modify  {event_id, ven_id?, intervals?, start?, priority?, test_event?,
                       modification_reason?} -> {event_id, modification_number}
                      New intervals replace the old ones; `start` alone shifts them all. The
                      modificationNumber goes up by one (utils.increment_event_modification_number,
                      as openleadr's cancel_event does) and the VEN gets it on its next poll.
- POST /admin/cancel  {event_id, ven_id?} -> {event_id, modification_number, status}
                      (openleadr's OpenADRServer.cancel_event: status cancelled, modNumber + 1).
- POST /admin/forget_ven {ven_id, drop_events=false} -> {ven_id, forgotten}
- GET  /admin/state[?raw=0] -> registrations, events, opt_responses, opt_callbacks,
                       reports_offered, report_requests, reports, report_values, messages (every
                       OpenADR exchange with request/response type and, unless raw=0, the XML).
"""

import argparse
import asyncio
import contextvars
import itertools
import logging
import os
import signal
import sys
from dataclasses import asdict, is_dataclass
from datetime import datetime, timedelta, timezone

from aiohttp import web

from openleadr import OpenADRServer, enums, objects, utils
from openleadr.messaging import parse_message

VTN_ID_DEFAULT = 'flexgate-test-vtn'
MAX_MESSAGES = 5000
logger = logging.getLogger('oadr2b_vtn')


def now():
    return datetime.now(timezone.utc)


def to_jsonable(value):
    """Turn openleadr payloads (dataclasses, datetimes, timedeltas) into plain JSON values."""
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat().replace('+00:00', 'Z')
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def parse_when(value, what):
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected an ISO 8601 date-time string, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value.strip().replace('Z', '+00:00'))
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{what}: {value!r} has no UTC offset")
    return parsed.astimezone(timezone.utc)


def seconds(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}: expected a number of seconds, got {value!r}")
    return timedelta(seconds=value)


def json_route(fn):
    async def wrapper(request):
        try:
            result = await fn(request)
        except (ValueError, KeyError, TypeError) as err:
            return web.json_response({'error': f"{err.__class__.__name__}: {err}"}, status=400)
        except Exception as err:  # noqa: BLE001 - a harness bug; say so instead of a bare 500
            logger.exception("admin route failed")
            return web.json_response({'error': f"{err.__class__.__name__}: {err}"}, status=500)
        return web.json_response(result)
    return wrapper


class TestVtn:
    def __init__(self, args):
        self.args = args
        self.vtn_id = args.vtn_id
        self.poll_freq = timedelta(seconds=args.poll_freq)
        self.report_sampling = timedelta(seconds=args.report_sampling)
        self.report_interval = (timedelta(seconds=args.report_interval)
                                if args.report_interval else None)
        self.ven_counter = itertools.count(1)
        self.reg_counter = itertools.count(1)
        self.event_counter = itertools.count(1)
        self.registrations = {}       # ven_id -> dict (kept after forget/cancel, with "active")
        self.opt_responses = {}       # event_id -> [every eventResponse of every oadrCreatedEvent]
        self.opt_callbacks = {}       # event_id -> [what openleadr handed the event callback]
        self.reports = []             # every oadrReport of every oadrUpdateReport
        self.report_values = {}       # "ven_id/r_id" -> [[dtstart, value]] via openleadr's callbacks
        self.messages = []            # every OpenADR exchange
        self.event_owner = {}         # event_id -> ven_id
        self.current_ven = contextvars.ContextVar('current_ven', default=None)

        self.server = OpenADRServer(vtn_id=self.vtn_id,
                                    http_host=args.host,
                                    http_port=args.port,
                                    requested_poll_freq=self.poll_freq,
                                    ven_lookup=self.ven_lookup)
        self.server.add_handler('on_create_party_registration', self.on_create_party_registration)
        self.server.add_handler('on_cancel_party_registration', self.on_cancel_party_registration)
        self.server.add_handler('on_register_report', self.on_register_report)
        self.server.add_handler('on_update_report', self.on_update_report)
        self._wrap_handler('report_service', 'oadrRegisterReport', self._before_register_report)
        self._wrap_handler('report_service', 'oadrUpdateReport', self._before_update_report)
        self._wrap_handler('event_service', 'oadrCreatedEvent', self._before_created_event)

        app = self.server.app
        app.middlewares.append(self._log_middleware)
        app.add_routes([web.post('/admin/event', json_route(self.admin_event)),
                        web.post('/admin/modify', json_route(self.admin_modify)),
                        web.post('/admin/cancel', json_route(self.admin_cancel)),
                        web.post('/admin/forget_ven', json_route(self.admin_forget_ven)),
                        web.get('/admin/state', json_route(self.admin_state))])

    # ----------------------------------------------------------------- openleadr plumbing

    def _wrap_handler(self, service, message_type, before):
        """Run `before(payload)` ahead of openleadr's own handler for one message type."""
        svc = self.server.services[service]
        original = svc.handlers[message_type]

        async def wrapped(payload):
            before(payload)
            return await original(payload)
        svc.handlers[message_type] = wrapped

    async def ven_lookup(self, ven_id):
        reg = self.registrations.get(ven_id)
        if reg is None or not reg['active']:
            return None   # openleadr answers oadrRequestReregistration
        return {'ven_id': ven_id, 'ven_name': reg['ven_name'],
                'registration_id': reg['registration_id'], 'fingerprint': None}

    async def on_create_party_registration(self, payload):
        ven_name = payload.get('ven_name')
        known = payload.get('ven_id')
        if known and known in self.registrations and self.registrations[known]['active']:
            ven_id = known
        else:
            ven_id = f"ven-{next(self.ven_counter)}"
        registration_id = f"reg-{next(self.reg_counter)}"
        self.registrations[ven_id] = {
            'ven_id': ven_id, 'ven_name': ven_name, 'registration_id': registration_id,
            'active': True, 'registered_at': now(),
            'profile_name': payload.get('profile_name'),
            'transport_name': payload.get('transport_name'),
            'transport_address': payload.get('transport_address'),
            'http_pull_model': payload.get('http_pull_model'),
            'report_only': payload.get('report_only'),
            'xml_signature': payload.get('xml_signature'),
            'request_id': payload.get('request_id'),
        }
        return ven_id, registration_id

    async def on_cancel_party_registration(self, payload):
        ven_id = payload.get('ven_id')
        reg = self.registrations.get(ven_id)
        if reg is not None:
            reg['active'] = False
            reg['cancelled_at'] = now()
        return 'oadrCanceledPartyRegistration', {
            'ven_id': ven_id,
            'registration_id': payload.get('registration_id') or (reg or {}).get('registration_id')}

    def _before_register_report(self, payload):
        self.current_ven.set(payload.get('ven_id'))

    async def on_register_report(self, report):
        """'Full' mode handler: request every numeric data point the VEN offers.

        Status points (x-resourceStatus, TELEMETRY_STATUS) are not requested unless
        --request-status: openleadr 0.5.36's update_report reads `report_payload['value']` of
        every interval and raises KeyError on an oadrPayloadResourceStatus (its own VEN never
        sends one), so the VTN answers 500. Our status reports are checked against the 2.0b XSD
        by the crate's tests; --request-status shows that the usage data keeps flowing anyway.
        """
        ven_id = self.current_ven.get()
        requests = []
        for rd in report.get('report_descriptions') or []:
            if rd.get('report_type') == 'x-resourceStatus' and not self.args.request_status:
                continue
            r_id = rd['r_id']
            key = f"{ven_id}/{r_id}"

            def callback(values, key=key):
                self.report_values.setdefault(key, []).extend(
                    [to_jsonable(dt), v] for dt, v in values)
            if self.report_interval:
                requests.append((r_id, callback, self.report_sampling, self.report_interval))
            else:
                requests.append((r_id, callback, self.report_sampling))
        return requests

    async def on_update_report(self, report):
        # Only reached when no callbacks are registered at all; everything is recorded anyway.
        return None

    def _before_update_report(self, payload):
        for report in payload.get('reports') or []:
            self.reports.append({'ven_id': payload.get('ven_id'), 'received_at': now(),
                                 'report': to_jsonable(report)})

    def _before_created_event(self, payload):
        ven_id = payload.get('ven_id')
        for er in payload.get('event_responses') or []:
            event_id = er.get('event_id')
            self.opt_responses.setdefault(event_id, []).append({
                'ven_id': ven_id, 'opt_type': er.get('opt_type'),
                'modification_number': er.get('modification_number'),
                'response_code': er.get('response_code'),
                'response_description': er.get('response_description'),
                'request_id': er.get('request_id'),
                'received_at': now(),
                'outer_response': to_jsonable(payload.get('response')),
            })

    def _event_callback(self, ven_id, event_id, opt_type):
        self.opt_callbacks.setdefault(event_id, []).append(
            {'ven_id': ven_id, 'opt_type': opt_type, 'at': now()})

    @web.middleware
    async def _log_middleware(self, request, handler):
        if request.path.startswith('/admin/'):
            return await handler(request)
        body = await request.read()   # cached by aiohttp; openleadr reads it again
        entry = {'at': now(), 'path': request.path, 'content_type': request.headers.get('content-type'),
                 'request_type': None, 'ven_id': None}
        try:
            message_type, payload = parse_message(body)
            entry['request_type'] = message_type
            entry['ven_id'] = payload.get('ven_id')
        except Exception as err:  # noqa: BLE001 - log anything unparseable as such
            entry['request_error'] = f"{err.__class__.__name__}: {err}"
        entry['request_xml'] = body.decode('utf-8', errors='replace')
        response = await handler(request)
        entry['status'] = response.status
        text = getattr(response, 'text', None) or ''
        entry['response_xml'] = text
        if text.startswith('<'):
            try:
                entry['response_type'] = parse_message(text)[0]
            except Exception:  # noqa: BLE001
                entry['response_type'] = None
        else:
            entry['response_type'] = None
        self.messages.append(entry)
        del self.messages[:-MAX_MESSAGES]
        return response

    # ----------------------------------------------------------------- events

    def _find_event(self, event_id, ven_id=None):
        ven_id = ven_id or self.event_owner.get(event_id)
        if ven_id is None or ven_id not in self.server.events:
            raise ValueError(f"unknown event_id {event_id!r}")
        event = utils.find_by(self.server.events[ven_id], 'event_descriptor.event_id', event_id)
        if not event:
            raise ValueError(f"event {event_id!r} is no longer queued for {ven_id!r} "
                             "(completed, or its cancellation was confirmed)")
        return ven_id, event

    def _intervals(self, raw, start):
        if not isinstance(raw, list) or not raw:
            raise ValueError("intervals: expected a non-empty list")
        out = []
        cursor = start
        for i, item in enumerate(raw):
            if not isinstance(item, dict):
                raise ValueError(f"intervals[{i}]: expected an object")
            dtstart = (parse_when(item['dtstart'], f"intervals[{i}].dtstart")
                       if item.get('dtstart') is not None else cursor)
            if dtstart is None:
                raise ValueError(f"intervals[{i}]: needs dtstart (or give a top-level start)")
            duration = seconds(item.get('duration_s'), f"intervals[{i}].duration_s")
            value = item.get('value')
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"intervals[{i}].value: expected a number, got {value!r}")
            out.append(objects.Interval(dtstart=dtstart, duration=duration, signal_payload=value))
            cursor = dtstart + duration
        return out

    @staticmethod
    def _measurement(body, signal_name):
        m = body.get('measurement', body.get('item_base', 'default'))
        if m == 'default':
            m = 'powerReal' if signal_name == 'LOAD_DISPATCH' else None
        if m in (None, 'none', False):
            return None
        if m == 'powerReal':
            return objects.Measurement(name='powerReal', description='RealPower', unit='W', scale='k',
                                       power_attributes=objects.PowerAttributes(hertz=60, voltage=120, ac=True))
        if isinstance(m, dict):
            pa = m.get('power_attributes')
            return objects.Measurement(name=m['name'], description=m.get('description', m['name']),
                                       unit=m.get('unit'), scale=m.get('scale', 'none'),
                                       power_attributes=objects.PowerAttributes(**pa) if pa else None)
        raise ValueError(f"measurement: expected 'powerReal', 'none' or an object, got {m!r}")

    @staticmethod
    def _targets_by_type(targets, ven_id):
        if targets is None:
            return {'ven_id': [ven_id]}
        if not isinstance(targets, dict):
            raise ValueError("targets: expected an object like {\"ven_id\": [...], \"group_id\": [...]}")
        out = {}
        for key, value in targets.items():
            if key not in ('ven_id', 'group_id', 'resource_id', 'party_id', 'group_name'):
                raise ValueError(f"targets: unsupported target type {key!r}")
            values = value if isinstance(value, list) else [value]
            if values:
                out[key] = [str(v) for v in values]
        if not out:
            raise ValueError("targets: empty")
        return out

    def _refresh_active_period(self, event):
        intervals = [i for s in event.event_signals for i in s.intervals]
        dtstart = min(i.dtstart for i in intervals)
        end = max(i.dtstart + i.duration for i in intervals)
        event.active_period.dtstart = dtstart
        event.active_period.duration = end - dtstart
        if event.event_descriptor.event_status != enums.EVENT_STATUS.CANCELLED:
            event.event_descriptor.event_status = utils.determine_event_status(event.active_period)

    async def admin_event(self, request):
        body = await request.json()
        ven_id = body.get('ven_id')
        if not ven_id:
            raise ValueError("ven_id is required (the VEN whose poll queue gets the event)")
        signal_name = body.get('signal_name', 'LOAD_DISPATCH')
        signal_type = body.get('signal_type', 'setpoint')
        start = parse_when(body['start'], 'start') if body.get('start') else None
        intervals = self._intervals(body.get('intervals'), start)
        event_id = body.get('event_id') or f"evt-{next(self.event_counter)}"
        if event_id in self.event_owner:
            raise ValueError(f"event_id {event_id!r} already exists")
        response_required = body.get('response_required', 'always')
        if response_required not in ('always', 'never'):
            raise ValueError("response_required: 'always' or 'never'")
        market_context = body.get('market_context', 'http://flexgate.test/program')
        descriptor = objects.EventDescriptor(
            event_id=event_id, modification_number=0, market_context=market_context,
            event_status='far', created_date_time=now(),
            priority=int(body.get('priority', 0)), test_event=bool(body.get('test_event', False)),
            vtn_comment=body.get('vtn_comment'))
        event_signal = objects.EventSignal(
            intervals=intervals, signal_name=signal_name, signal_type=signal_type,
            signal_id=body.get('signal_id') or f"{event_id}-sig",
            current_value=body.get('current_value'),
            measurement=self._measurement(body, signal_name))
        active_period = utils.get_active_period_from_intervals(intervals, False)
        for key, attr in (('ramp_up_s', 'ramp_up_period'), ('notification_s', 'notification_period'),
                          ('recovery_s', 'recovery_period')):
            if body.get(key) is not None:
                setattr(active_period, attr, seconds(body[key], key))
        if body.get('start_after_s') is not None:
            active_period.tolerance = {'startafter': seconds(body['start_after_s'], 'start_after_s')}
        event = objects.Event(event_descriptor=descriptor, event_signals=[event_signal],
                              targets_by_type=self._targets_by_type(body.get('targets'), ven_id),
                              active_period=active_period, response_required=response_required)
        callback = self._event_callback if response_required == 'always' else None
        self.server.add_raw_event(ven_id=ven_id, event=event, callback=callback)
        # openleadr 0.5.36's add_raw_event replaces the event's ActivePeriod with a bare
        # {dtstart, duration} dict (its check looks for event_descriptor.active_period, which never
        # exists), dropping ramp-up/notification/recovery. Put the real one back.
        event.active_period = active_period
        self.event_owner[event_id] = ven_id
        return {'event_id': event_id, 'ven_id': ven_id,
                'modification_number': event.event_descriptor.modification_number,
                'status': event.event_descriptor.event_status}

    async def admin_modify(self, request):
        body = await request.json()
        event_id = body.get('event_id')
        ven_id, event = self._find_event(event_id, body.get('ven_id'))
        signal = event.event_signals[0]
        if body.get('intervals') is not None:
            start = parse_when(body['start'], 'start') if body.get('start') else event.active_period.dtstart
            signal.intervals = self._intervals(body['intervals'], start)
        elif body.get('start'):
            shift = parse_when(body['start'], 'start') - event.active_period.dtstart
            for interval in signal.intervals:
                interval.dtstart = interval.dtstart + shift
        if 'priority' in body:
            event.event_descriptor.priority = int(body['priority'])
        if 'test_event' in body:
            event.event_descriptor.test_event = bool(body['test_event'])
        if body.get('modification_reason') is not None:
            event.event_descriptor.modification_reason = body['modification_reason']
        self._refresh_active_period(event)
        number = utils.increment_event_modification_number(event)
        event.event_descriptor.modification_date_time = now()
        self.server.events_updated[ven_id] = True
        if event.response_required == 'always':
            # openleadr drops the callback after the first response; re-arm it for this version.
            self.server.event_callbacks[event_id] = (event, self._event_callback)
        return {'event_id': event_id, 'ven_id': ven_id, 'modification_number': number,
                'status': event.event_descriptor.event_status}

    async def admin_cancel(self, request):
        body = await request.json()
        event_id = body.get('event_id')
        ven_id, event = self._find_event(event_id, body.get('ven_id'))
        self.server.cancel_event(ven_id, event_id)
        event.event_descriptor.modification_date_time = now()
        if event.response_required == 'always':
            self.server.event_callbacks[event_id] = (event, self._event_callback)
        return {'event_id': event_id, 'ven_id': ven_id,
                'modification_number': event.event_descriptor.modification_number,
                'status': event.event_descriptor.event_status}

    async def admin_forget_ven(self, request):
        body = await request.json()
        ven_id = body.get('ven_id')
        reg = self.registrations.get(ven_id)
        if reg is None:
            raise ValueError(f"unknown ven_id {ven_id!r}")
        reg['active'] = False
        reg['forgotten_at'] = now()
        if body.get('drop_events'):
            self.server.events.pop(ven_id, None)
            self.server.events_updated.pop(ven_id, None)
        return {'ven_id': ven_id, 'forgotten': True}

    async def admin_state(self, request):
        raw = request.query.get('raw', '1') not in ('0', 'false', 'no')
        events = []
        for ven_id, queue in self.server.events.items():
            for event in queue:
                d = event.event_descriptor
                signal = event.event_signals[0]
                events.append({
                    'ven_id': ven_id, 'event_id': d.event_id,
                    'modification_number': d.modification_number, 'status': d.event_status,
                    'priority': d.priority, 'test_event': d.test_event,
                    'market_context': d.market_context, 'created': d.created_date_time,
                    'modified': d.modification_date_time,
                    'response_required': event.response_required,
                    'targets': event.targets_by_type,
                    'start': event.active_period.dtstart, 'duration_s': event.active_period.duration,
                    'signal_name': signal.signal_name, 'signal_type': signal.signal_type,
                    'intervals': [{'dtstart': i.dtstart, 'duration_s': i.duration,
                                   'value': i.signal_payload} for i in signal.intervals]})
        rs = self.server.services['report_service']
        messages = self.messages if raw else [
            {k: v for k, v in m.items() if not k.endswith('_xml')} for m in self.messages]
        state = {
            'vtn_id': self.vtn_id,
            'poll_freq_s': self.poll_freq,
            'registrations': list(self.registrations.values()),
            'events': events,
            'opt_responses': self.opt_responses,
            'opt_callbacks': self.opt_callbacks,
            'reports_offered': rs.registered_reports,
            'report_requests': rs.requested_reports,
            'reports': self.reports,
            'report_values': self.report_values,
            'messages': messages,
        }
        return to_jsonable(state)


async def main(args):
    vtn = TestVtn(args)
    runner = web.AppRunner(vtn.server.app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host=args.host, port=args.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"READY {port}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if args.exit_on_stdin_eof:
        async def watch_stdin():
            await loop.run_in_executor(None, sys.stdin.read)
            stop.set()
        loop.create_task(watch_stdin())
    await stop.wait()
    await runner.cleanup()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('port_pos', nargs='?', type=int, help='port (same as --port)')
    p.add_argument('--port', type=int, default=None,
                   help='TCP port; 0 picks a free one (default: $OADR2B_VTN_PORT or 8080)')
    p.add_argument('--host', default=os.environ.get('OADR2B_VTN_HOST', '127.0.0.1'))
    p.add_argument('--vtn-id', default=os.environ.get('OADR2B_VTN_ID', VTN_ID_DEFAULT))
    p.add_argument('--poll-freq', type=float, default=float(os.environ.get('OADR2B_VTN_POLL_FREQ', '1')),
                   help='oadrRequestedOadrPollFreq in seconds (default 1)')
    p.add_argument('--report-sampling', type=float,
                   default=float(os.environ.get('OADR2B_VTN_REPORT_SAMPLING', '2')),
                   help='granularity requested for every offered report, seconds (default 2)')
    p.add_argument('--report-interval', type=float, default=None,
                   help='reportBackDuration in seconds (default: same as the sampling)')
    p.add_argument('--request-status', action='store_true',
                   help="also request the x-resourceStatus (TELEMETRY_STATUS) points, as stock openleadr "
                        "does: openleadr 0.5.36 then answers 500 to every update that carries one")
    p.add_argument('--exit-on-stdin-eof', action='store_true',
                   help='stop when stdin is closed (the test harness died)')
    p.add_argument('--verbose', '-v', action='store_true', help='openleadr INFO logging on stderr')
    args = p.parse_args(argv)
    if args.port is None:
        args.port = args.port_pos if args.port_pos is not None else int(os.environ.get('OADR2B_VTN_PORT', '8080'))
    return args


if __name__ == '__main__':
    ARGS = parse_args(sys.argv[1:])
    logging.basicConfig(stream=sys.stderr, level=logging.INFO if ARGS.verbose else logging.WARNING,
                        format='%(asctime)s %(name)s %(levelname)s %(message)s')
    # openleadr/client.py sets the 'openleadr' logger to INFO on import; keep the VTN quiet.
    logging.getLogger('openleadr').setLevel(logging.INFO if ARGS.verbose else logging.WARNING)
    asyncio.run(main(ARGS))
