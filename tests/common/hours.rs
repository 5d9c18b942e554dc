//! The forecast's steps gathered into clock hours, written independently of the gateway's
//! `clock_hours`, as the oracle the declaration tests check the export and the API against.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde_json::Value;

/// Each clock hour (UTC, on the hour) the steps of a `GET /v1/forecast` document touch, with the
/// least `p10` over those steps, W, in time order.
pub fn least_p10_by_clock_hour(forecast: &Value) -> Vec<(DateTime<Utc>, f64)> {
    let time = |v: &Value| {
        DateTime::parse_from_rfc3339(v.as_str().expect("a time"))
            .expect("RFC 3339")
            .with_timezone(&Utc)
    };
    let mut out: Vec<(DateTime<Utc>, f64)> = Vec::new();
    for step in forecast["steps"].as_array().expect("steps") {
        let (start, end) = (time(&step["start"]), time(&step["end"]));
        let p10 = step["available_w"]["p10"].as_f64().expect("p10");
        let mut hour = start.duration_trunc(TimeDelta::hours(1)).expect("truncates");
        while hour < end {
            match out.last_mut() {
                Some(last) if last.0 == hour => last.1 = last.1.min(p10),
                _ => out.push((hour, p10)),
            }
            hour += TimeDelta::hours(1);
        }
    }
    out
}

/// RFC 3339 in UTC with seconds and `Z`, as the gateway writes hours.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
