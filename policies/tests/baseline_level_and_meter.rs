//! `firm_service_level`, `meter_before_after`, the per-event performance on them, and the
//! report's JSON.
//!
//! Worked example: a firm service level is given, not computed, and the meter before/after is
//! the audit's own rule; both are checked here by hand.

mod baseline_common;

use baseline_common::*;
use chrono::Duration;
use flexgate_policies::baseline::{BaselineError, HolidayCalendar, Method, MethodId, compute, performance};
use std::collections::BTreeSet;

/// 15-minute data around Wednesday 10 June 2026, 14:00–15:00 UTC: 100 kW before 14:00, the
/// event's four intervals reading 60, 70, (missing), 40 kW, then 80 kW after 15:00.
fn around_event() -> (
    flexgate_policies::intervals::IntervalSeries,
    chrono::DateTime<chrono::Utc>,
) {
    let tz = tz("UTC");
    let start = local(tz, 2026, 6, 10, 14, 0);
    let data = series(start - Duration::days(2), start + Duration::days(1), 15, |t| {
        let k = (t - start).num_minutes() / 15;
        match k {
            ..0 => Some(100.0),
            0 => Some(60.0),
            1 => Some(70.0),
            2 => None,
            3 => Some(40.0),
            _ => Some(80.0),
        }
    });
    (data, start)
}

/// Before (100 kW over the hour before) and after (80 kW over the hour after): 90 kW on every
/// interval. Committed 30 kW: delivered 30, 20, —, 50 kW; factors 1, 2/3, —, 5/3; over-delivery
/// 0, 0, —, 20 kW. For the event, the missing interval delivers nothing: (30 + 20 + 0 + 50) / 4
/// = 25 kW, a factor of 25/30, and over-delivery 20 / 4 = 5 kW.
#[test]
fn meter_before_after_and_the_events_performance() {
    let tz = tz("UTC");
    let (data, start) = around_event();
    let end = start + Duration::hours(1);
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let method = Method::MeterBeforeAfter {
        before_s: 3600,
        after_s: 3600,
    };
    let report = compute(&method, &input(&data, start, end, tz, &events, &holidays)).expect("baseline");
    assert_eq!(report.intervals.len(), 4);
    assert!(report.days_used.is_empty() && report.adjustment.is_none());
    for i in &report.intervals {
        close(i.adjusted_baseline_kw.expect("kw"), 90.0);
    }
    let p = performance(&report, &data, Some(30.0));
    let delivered: Vec<_> = p.intervals.iter().map(|i| i.delivered_kw).collect();
    assert_eq!(delivered, [Some(30.0), Some(20.0), None, Some(50.0)]);
    let over: Vec<_> = p.intervals.iter().map(|i| i.over_delivery_kw).collect();
    assert_eq!(over, [Some(0.0), Some(0.0), None, Some(20.0)]);
    close(p.intervals[1].performance_factor.expect("pf"), 20.0 / 30.0);
    assert_eq!((p.intervals_metered, p.intervals_missing), (3, 1));
    close(p.delivered_kw.expect("kw"), 25.0);
    close(p.performance_factor.expect("pf"), 25.0 / 30.0);
    close(p.over_delivery_kw.expect("kw"), 5.0);
    // No commitment given: delivered, but no factor.
    let p = performance(&report, &data, None);
    assert!(p.performance_factor.is_none() && p.delivered_kw.is_some());
}

/// After the event there is no data yet: the baseline is the meter before alone, and the notes
/// say so; with neither window, refused; with both windows empty, a bad parameter.
#[test]
fn meter_before_alone_and_the_refusals() {
    let tz = tz("UTC");
    let (full, start) = around_event();
    let end = start + Duration::hours(1);
    let data = flexgate_policies::intervals::IntervalSeries::new(
        full.intervals().iter().filter(|i| i.start < end).cloned().collect(),
    )
    .expect("series");
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let method = Method::MeterBeforeAfter {
        before_s: 1800,
        after_s: 900,
    };
    let report = compute(&method, &input(&data, start, end, tz, &events, &holidays)).expect("baseline");
    close(report.mean_adjusted_kw().expect("kw"), 100.0);
    assert!(report.notes.iter().any(|n| n.contains("before alone")));
    let late = start + Duration::days(3);
    let err = compute(
        &method,
        &input(&data, late, late + Duration::hours(1), tz, &events, &holidays),
    );
    assert!(
        matches!(err, Err(BaselineError::NoMeterBeforeOrAfter { .. })),
        "{err:?}"
    );
    let none = Method::MeterBeforeAfter {
        before_s: 0,
        after_s: 0,
    };
    let err = compute(&none, &input(&data, start, end, tz, &events, &holidays));
    assert!(matches!(err, Err(BaselineError::InvalidParameter { .. })), "{err:?}");
}

/// A firm service level of 65 kW: no baseline on any interval, the level on each, the notes
/// saying so; compliance is the meter at or under it: 60 (yes, 5 kW under), 70 (no, 5 over),
/// missing (no), 40 (yes).
#[test]
fn a_firm_service_level_has_no_baseline_and_its_compliance_is_the_meter() {
    let tz = tz("UTC");
    let (data, start) = around_event();
    let end = start + Duration::hours(1);
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let method = Method::FirmServiceLevel { level_kw: 65.0 };
    let report = compute(&method, &input(&data, start, end, tz, &events, &holidays)).expect("report");
    assert_eq!(report.method, MethodId::FirmServiceLevel);
    assert!(report.mean_adjusted_kw().is_none());
    assert!(report.notes.iter().any(|n| n.starts_with("no baseline")));
    for i in &report.intervals {
        assert_eq!((i.baseline_kw, i.adjusted_baseline_kw), (None, None));
        assert_eq!(i.firm_service_level_kw, Some(65.0));
    }
    let p = performance(&report, &data, Some(30.0));
    let compliant: Vec<_> = p.intervals.iter().map(|i| i.compliant).collect();
    assert_eq!(compliant, [Some(true), Some(false), Some(false), Some(true)]);
    let margins: Vec<_> = p.intervals.iter().map(|i| i.margin_kw).collect();
    assert_eq!(margins, [Some(5.0), Some(-5.0), None, Some(25.0)]);
    assert_eq!(p.intervals_compliant, Some(2));
    assert_eq!(
        (p.performance_factor, p.delivered_kw, p.committed_kw),
        (None, None, None)
    );
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let err = compute(
            &Method::FirmServiceLevel { level_kw: bad },
            &input(&data, start, end, tz, &events, &holidays),
        );
        assert!(matches!(
            err,
            Err(BaselineError::InvalidParameter {
                parameter: "level_kw",
                ..
            })
        ));
    }
}

/// The JSON `flexgate baseline --json` prints: method, version, time zone, the days used and
/// excluded, the adjustment and one interval object per interval with its baseline figures.
#[test]
fn the_report_serializes_with_the_documented_fields() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 6, 11, 14, 0), local(tz, 2026, 6, 11, 15, 0));
    let data = series(start - Duration::days(50), start, 30, |_| Some(12.5));
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::Caiso10In10, &input(&data, start, end, tz, &events, &holidays)).expect("baseline");
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["method"], "caiso_10in10");
    assert_eq!(json["version"], 1);
    assert_eq!(json["time_zone"], "America/New_York");
    assert_eq!(json["interval_s"], 1800);
    assert_eq!(json["holidays"]["sets"][0], "nerc");
    assert_eq!(json["days_used"][0]["date"], "2026-06-10");
    assert_eq!(json["days_used"][0]["counted"], true);
    assert_eq!(json["days_excluded"][0]["reason"], "weekend");
    assert_eq!(json["adjustment"]["kind"], "multiplicative");
    assert_eq!(json["adjustment"]["cap"], 0.2);
    assert_eq!(json["adjustment"]["bound"], false);
    assert_eq!(json["detail"]["kind"], "like_days");
    let intervals = json["intervals"].as_array().expect("intervals");
    assert_eq!(intervals.len(), 2);
    assert_eq!(intervals[0]["start"], "2026-06-11T18:00:00Z");
    assert_eq!(intervals[0]["end"], "2026-06-11T18:30:00Z");
    assert_eq!(intervals[0]["baseline_kw"], 12.5);
    assert_eq!(intervals[0]["adjusted_baseline_kw"], 12.5);
    assert!(intervals[0].get("firm_service_level_kw").is_none());
    let refusal = serde_json::to_value(BaselineError::EmptyWindow).expect("json");
    assert_eq!(refusal["refused"], "empty_window");
}
