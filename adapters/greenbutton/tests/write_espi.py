#!/usr/bin/env python3
"""Writes a Green Button (NAESB ESPI) Atom feed of interval data, independently of the crate.

The crate's tests import what this writes and compare it with the JSON summary this prints on
stdout. It uses only the standard library (xml.etree.ElementTree), and it is written from the
ESPI schema and the Green Button Alliance's sample files, not from the crate: its own feed
layout (absolute Atom links, the ESPI namespace as a prefix, a cost per reading), its own
quality codes and its own table of what they mean.

    write_espi.py --out FILE [--days 60] [--interval-minutes 5] [--start 2026-05-01T00:00:00Z]
                  [--multiplier 0] [--seed 1] [--base-kw 800] [--amplitude-kw 400]
                  [--noise 0.03] [--estimated-every 97] [--missing-every 211]
                  [--order standard|blocks-first] [--second-meter none|gas|received]
                  [--dump]

Summary (stdout, JSON): readings, interval_s, multiplier, first_start, last_end, blocks,
sum_wh, measured, estimated, missing; with --dump also "wh" (each reading's energy in Wh after
the multiplier, null when missing: Python's int / 10**k is correctly rounded, as the importer's
scaling is) and "quality" (measured/estimated/missing) per reading.
"""

import argparse
import datetime as dt
import json
import math
import random
import sys
import xml.etree.ElementTree as ET

ATOM = "http://www.w3.org/2005/Atom"
ESPI = "http://naesb.org/espi"
BASE = "https://utility.example/DataCustodian/espi/1_1/resource"

# ESPI QualityOfReading codes this writer uses, and the class a settlement counts each as:
# valid, raw, validated, verified, revenue quality are the meter's; manual edit, the two
# estimates, derived are not.
QUALITY_CLASS = {0: "measured", 14: "measured", 17: "measured", 18: "measured", 19: "measured",
                 7: "estimated", 8: "estimated", 9: "estimated", 11: "estimated"}
MEASURED_CODES = [None, None, None, 0, 14, 17, 19]   # None: no ReadingQuality element
ESTIMATED_CODES = [8, 9, 7, 11]


def a(tag):
    return "{%s}%s" % (ATOM, tag)


def e(tag):
    return "{%s}%s" % (ESPI, tag)


def sub(parent, tag, text=None):
    el = ET.SubElement(parent, tag)
    if text is not None:
        el.text = str(text)
    return el


def entry(feed, eid, title, links, updated):
    en = sub(feed, a("entry"))
    sub(en, a("id"), eid)
    for rel, href in links:
        ln = sub(en, a("link"))
        ln.set("rel", rel)
        ln.set("href", href)
    sub(en, a("title"), title)
    sub(en, a("published"), updated)
    sub(en, a("updated"), updated)
    return sub(en, a("content"))


def load_kw(t, args, rng):
    """A data centre's day: a base, a daytime rise peaking mid-afternoon, a little noise."""
    hour = (t % 86400) / 3600.0
    cycle = 0.5 - 0.5 * math.cos(2 * math.pi * (hour - 3.0) / 24.0)
    kw = args.base_kw + args.amplitude_kw * cycle
    return max(0.0, kw * (1.0 + rng.gauss(0.0, args.noise)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--days", type=int, default=60)
    p.add_argument("--interval-minutes", type=int, default=5)
    p.add_argument("--start", default="2026-05-01T00:00:00Z")
    p.add_argument("--multiplier", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--base-kw", type=float, default=800.0)
    p.add_argument("--amplitude-kw", type=float, default=400.0)
    p.add_argument("--noise", type=float, default=0.03)
    p.add_argument("--estimated-every", type=int, default=97)
    p.add_argument("--missing-every", type=int, default=211)
    p.add_argument("--order", choices=["standard", "blocks-first"], default="standard")
    p.add_argument("--second-meter", choices=["none", "gas", "received"], default="none")
    p.add_argument("--dump", action="store_true")
    args = p.parse_args()

    rng = random.Random(args.seed)
    start = int(dt.datetime.fromisoformat(args.start.replace("Z", "+00:00")).timestamp())
    step = args.interval_minutes * 60
    per_day = 86400 // step
    updated = dt.datetime.fromtimestamp(start + args.days * 86400, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    ET.register_namespace("", ATOM)
    ET.register_namespace("espi", ESPI)
    feed = ET.Element(a("feed"))
    sub(feed, a("id"), "urn:uuid:9b6c7063-0000-4000-8000-000000000001")
    sub(feed, a("title"), "Green Button Usage Feed (test writer)")
    sub(feed, a("updated"), updated)

    up = BASE + "/RetailCustomer/9b6c7063/UsagePoint"
    meters = [("01", "07", "electric")]
    if args.second_meter != "none":
        meters.append(("02", "08", args.second_meter))

    def meter_entries(n, rt, what):
        mr = "%s/01/MeterReading/%s" % (up, n)
        c = entry(feed, "urn:uuid:mr-%s" % n, "Meter reading %s" % n,
                  [("self", mr), ("up", up + "/01/MeterReading"),
                   ("related", mr + "/IntervalBlock"), ("related", BASE + "/ReadingType/" + rt)], updated)
        sub(c, e("MeterReading"))
        # The ReadingType's own self link is relative: the importer must match it to the
        # MeterReading's absolute related link.
        c = entry(feed, "urn:uuid:rt-%s" % rt, "Type of meter reading data",
                  [("self", "ReadingType/" + rt), ("up", "ReadingType")], updated)
        r = sub(c, e("ReadingType"))
        if what == "electric":
            fields = [("accumulationBehaviour", 4), ("commodity", 1), ("currency", 840),
                      ("dataQualifier", 12), ("flowDirection", 1), ("intervalLength", step),
                      ("kind", 12), ("phase", 769), ("powerOfTenMultiplier", args.multiplier),
                      ("timeAttribute", 0), ("uom", 72)]
        elif what == "gas":
            fields = [("accumulationBehaviour", 4), ("commodity", 7), ("flowDirection", 1),
                      ("intervalLength", 3600), ("kind", 58), ("powerOfTenMultiplier", 0), ("uom", 169)]
        else:  # energy the site sent to the grid
            fields = [("accumulationBehaviour", 4), ("commodity", 1), ("flowDirection", 19),
                      ("intervalLength", step), ("kind", 12), ("powerOfTenMultiplier", 0), ("uom", 72)]
        for name, value in fields:
            sub(r, e(name), value)
        return mr

    def usage_point():
        c = entry(feed, "urn:uuid:up-01", "Site",
                  [("self", up + "/01"), ("up", up), ("related", up + "/01/MeterReading"),
                   ("related", BASE + "/LocalTimeParameters/01")], updated)
        u = sub(c, e("UsagePoint"))
        sc = sub(u, e("ServiceCategory"))
        sub(sc, e("kind"), 0)
        c = entry(feed, "urn:uuid:ltp-01", "DST For North America",
                  [("self", BASE + "/LocalTimeParameters/01"), ("up", BASE + "/LocalTimeParameters")], updated)
        lt = sub(c, e("LocalTimeParameters"))
        sub(lt, e("dstEndRule"), "B40E2000")
        sub(lt, e("dstOffset"), 3600)
        sub(lt, e("dstStartRule"), "360E2000")
        sub(lt, e("tzOffset"), -18000)

    summary = {"readings": 0, "interval_s": step, "multiplier": args.multiplier,
               "first_start": start, "last_end": start + args.days * 86400, "blocks": 0,
               "sum_wh": 0.0, "measured": 0, "estimated": 0, "missing": 0}
    wh_list, q_list = [], []

    def blocks(mr):
        n = 0
        for day in range(args.days):
            day_start = start + day * 86400
            c = entry(feed, "urn:uuid:ib-%d" % day, "Interval block %d" % day,
                      [("self", "%s/IntervalBlock/%d" % (mr, day + 1)), ("up", mr + "/IntervalBlock")], updated)
            ib = sub(c, e("IntervalBlock"))
            iv = sub(ib, e("interval"))
            sub(iv, e("duration"), 86400)
            sub(iv, e("start"), day_start)
            for k in range(per_day):
                t = day_start + k * step
                ir = sub(ib, e("IntervalReading"))
                kwh = load_kw(t, args, rng) * step / 3600.0
                raw = int(round(kwh * 1000.0 / (10.0 ** args.multiplier)))
                sub(ir, e("cost"), int(round(kwh * 12000)))   # 0.12 $/kWh in 1/100000 $
                if n % args.missing_every == args.missing_every - 1:
                    cls, wh = "missing", None
                    qr = sub(ir, e("ReadingQuality"))
                    sub(qr, e("quality"), 10 if n % 2 else 8)
                elif n % args.estimated_every == args.estimated_every - 1:
                    code = ESTIMATED_CODES[n % len(ESTIMATED_CODES)]
                    qr = sub(ir, e("ReadingQuality"))
                    sub(qr, e("quality"), code)
                    cls = QUALITY_CLASS[code]
                else:
                    code = MEASURED_CODES[n % len(MEASURED_CODES)]
                    if code is not None:
                        qr = sub(ir, e("ReadingQuality"))
                        sub(qr, e("quality"), code)
                    cls = "measured"
                tp = sub(ir, e("timePeriod"))
                sub(tp, e("duration"), step)
                sub(tp, e("start"), t)
                if cls != "missing":
                    sub(ir, e("value"), raw)
                    if args.multiplier >= 0:
                        wh = float(raw * 10 ** args.multiplier)
                    else:
                        wh = raw / 10 ** (-args.multiplier)
                    summary["sum_wh"] += wh
                summary[cls] += 1
                summary["readings"] += 1
                wh_list.append(wh)
                q_list.append(cls)
                n += 1
            summary["blocks"] += 1

    def other_blocks(mr, what):
        # A day of the second meter's data, hourly: it must be skipped, not imported.
        c = entry(feed, "urn:uuid:ib2", "Second meter",
                  [("self", mr + "/IntervalBlock/1"), ("up", mr + "/IntervalBlock")], updated)
        ib = sub(c, e("IntervalBlock"))
        iv = sub(ib, e("interval"))
        length = 3600 if what == "gas" else step
        sub(iv, e("duration"), 86400)
        sub(iv, e("start"), start)
        for k in range(86400 // length):
            ir = sub(ib, e("IntervalReading"))
            tp = sub(ir, e("timePeriod"))
            sub(tp, e("duration"), length)
            sub(tp, e("start"), start + k * length)
            sub(ir, e("value"), 3 + k % 5)

    usage_point()
    if args.order == "blocks-first":
        blocks(up + "/01/MeterReading/01")
        mrs = [meter_entries(*m) for m in meters]
    else:
        mrs = [meter_entries(*m) for m in meters]
        blocks(mrs[0])
    if args.second_meter != "none":
        other_blocks(up + "/01/MeterReading/02", args.second_meter)

    ET.indent(feed, space="  ")
    with open(args.out, "wb") as f:
        ET.ElementTree(feed).write(f, encoding="UTF-8", xml_declaration=True)
    if args.dump:
        summary["wh"] = wh_list
        summary["quality"] = q_list
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
