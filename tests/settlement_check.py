#!/usr/bin/env python3
"""An independent computation of CAISO's 10-in-10 baseline and an event's settlement, for
tests/settlement.rs to hold flexgate's figures against. Python standard library only, written
from the program's rule, not from flexgate's code:

- baseline days: walking back from the day before the event, at most 45 days, the first 10
  weekdays that are not holidays (California's time-of-use list: New Year's Day, Presidents'
  Day, Memorial Day, Independence Day, Labor Day, Veterans Day, Thanksgiving, Christmas; one on
  a Sunday observed on the Monday after), not event days, and with every interval of the event
  window and of the adjustment window;
- each interval's baseline: the mean of those days' load at the same local clock time;
- day-of adjustment: the event day's mean load from 4 h to 1 h before the start over the
  baseline days' mean over the same clock hours, bounded to [0.8, 1.2], multiplying every
  interval's baseline;
- delivered per interval: adjusted baseline less the metered load; the event's delivered kW is
  their mean, its performance factor the sum delivered over the sum committed; the payment
  delivered kWh / 1000 x price per MWh.

Usage: settlement_check.py DUMP.json START_EPOCH END_EPOCH ZONE COMMITTED_KW PRICE_PER_MWH
DUMP.json is write_espi.py --dump's summary (first_start, interval_s, wh per reading).
Prints JSON.
"""

import datetime as dt
import json
import sys
from zoneinfo import ZoneInfo


def nth_weekday(year, month, weekday, n):
    d = dt.date(year, month, 1)
    d += dt.timedelta(days=(weekday - d.weekday()) % 7)
    return d + dt.timedelta(weeks=n - 1)


def last_weekday(year, month, weekday):
    d = dt.date(year, month + 1, 1) - dt.timedelta(days=1) if month < 12 else dt.date(year, 12, 31)
    return d - dt.timedelta(days=(d.weekday() - weekday) % 7)


def holidays(year):
    fixed = [dt.date(year, 1, 1), dt.date(year, 7, 4), dt.date(year, 11, 11), dt.date(year, 12, 25)]
    days = set()
    for d in fixed:
        days.add(d + dt.timedelta(days=1) if d.weekday() == 6 else d)
    days.add(nth_weekday(year, 2, 0, 3))       # Presidents' Day
    days.add(last_weekday(year, 5, 0))         # Memorial Day
    days.add(nth_weekday(year, 9, 0, 1))       # Labor Day
    days.add(nth_weekday(year, 11, 3, 4))      # Thanksgiving
    return days


def main():
    dump_path, start, end, zone, committed, price = sys.argv[1:7]
    start, end, committed, price = int(start), int(end), float(committed), float(price)
    tz = ZoneInfo(zone)
    dump = json.load(open(dump_path))
    step = dump["interval_s"]
    first = dump["first_start"]
    load = {}  # interval start (epoch) -> kW
    for k, wh in enumerate(dump["wh"]):
        if wh is not None:
            load[first + k * step] = wh * 3600.0 / step / 1000.0

    def local(epoch):
        return dt.datetime.fromtimestamp(epoch, tz)

    def same_clock(epoch, day):
        """The epoch of the same local clock time as `epoch` on local date `day`."""
        t = local(epoch)
        return int(dt.datetime(day.year, day.month, day.day, t.hour, t.minute, tzinfo=tz).timestamp())

    event_day = local(start).date()
    window = list(range(start, end, step))
    adjust = list(range(start - 4 * 3600, start - 3600, step))
    days = []
    d = event_day
    for _ in range(45):
        d -= dt.timedelta(days=1)
        if len(days) == 10:
            break
        if d.weekday() >= 5 or d in holidays(d.year):
            continue
        needed = [same_clock(t, d) for t in window + adjust]
        if all(t in load for t in needed):
            days.append(d)
    baseline = [sum(load[same_clock(t, d)] for d in days) / len(days) for t in window]
    day_of = sum(load[t] for t in adjust) / len(adjust)
    base_adjust = sum(load[same_clock(t, d)] for d in days for t in adjust) / (len(days) * len(adjust))
    ratio = min(1.2, max(0.8, day_of / base_adjust))
    adjusted = [b * ratio for b in baseline]
    metered = [load[t] for t in window]
    delivered = [a - m for a, m in zip(adjusted, metered)]
    hours = (end - start) / 3600.0
    delivered_kw = sum(delivered) / len(delivered)
    print(json.dumps({
        "days_used": [str(x) for x in days],
        "ratio": ratio,
        "baseline_kw": baseline,
        "adjusted_kw": adjusted,
        "metered_kw": metered,
        "delivered_kw": delivered_kw,
        "performance_factor": sum(delivered) / (committed * len(delivered)),
        "payment": max(0.0, delivered_kw * hours) / 1000.0 * price,
    }))


if __name__ == "__main__":
    main()
