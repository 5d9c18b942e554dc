//! What an instant query's answer must be for the gateway to take it as a power figure: a
//! `success` with exactly one sample (a scalar, or a vector of one series), whose value is a
//! finite number, with the time Prometheus evaluated it at. Pure: no I/O.
//!
//! One sample, not a sum done here: a site meters its feeds in PromQL
//! (`sum(pdu_power_watts{site="a"}) / 1000`), where an operator can read and test it; a query
//! that returns several series is a mistake to report, not to add up silently. An empty answer
//! means the series is gone (the exporter stopped, the target is down, the name changed), which
//! the gateway treats as a missing meter.

use chrono::{DateTime, Utc};
use serde::Deserialize;

/// One value read from Prometheus.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// The value, in the query's own unit.
    pub value: f64,
    /// When Prometheus evaluated the query (for a vector, the evaluation time, not the scrape
    /// time of the sample behind it; use `timestamp(...)` in PromQL to get that).
    pub at: DateTime<Utc>,
}

/// Why an answer is not a power figure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    /// Not the JSON the query API writes.
    #[error("not a Prometheus query answer: {0}")]
    Malformed(String),
    /// Prometheus refused the query (bad PromQL, a timeout on its side, …).
    #[error("Prometheus refused the query ({kind}): {message}")]
    Refused {
        /// `errorType`.
        kind: String,
        /// `error`.
        message: String,
    },
    /// No series: gone, down, or misspelt.
    #[error("the query returned no series (the exporter stopped, the target is down, or the name is wrong)")]
    Empty,
    /// More than one series.
    #[error("the query returned {0} series; it must return one value: aggregate it, e.g. sum(...)")]
    Several(usize),
    /// A matrix or a string: not an instant value.
    #[error("the query returned a {0}, not an instant vector or scalar")]
    WrongType(String),
    /// The value is NaN or infinite.
    #[error("the query's value is {0:?}, not a finite number")]
    NotFinite(String),
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    data: Option<Data>,
    #[serde(rename = "errorType")]
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct Series {
    value: (f64, String),
}

/// Reads the body of `GET /api/v1/query` into one [`Sample`].
///
/// # Errors
/// See [`AnswerError`].
pub fn parse(body: &[u8]) -> Result<Sample, AnswerError> {
    let envelope: Envelope = serde_json::from_slice(body).map_err(|e| AnswerError::Malformed(e.to_string()))?;
    if envelope.status != "success" {
        return Err(AnswerError::Refused {
            kind: envelope.error_type.unwrap_or_else(|| envelope.status.clone()),
            message: envelope.error.unwrap_or_default(),
        });
    }
    let data = envelope
        .data
        .ok_or_else(|| AnswerError::Malformed("a success without data".into()))?;
    let (at, value) = match data.result_type.as_str() {
        "scalar" => {
            serde_json::from_value::<(f64, String)>(data.result).map_err(|e| AnswerError::Malformed(e.to_string()))?
        }
        "vector" => {
            let mut series: Vec<Series> =
                serde_json::from_value(data.result).map_err(|e| AnswerError::Malformed(e.to_string()))?;
            match series.len() {
                0 => return Err(AnswerError::Empty),
                1 => series.remove(0).value,
                n => return Err(AnswerError::Several(n)),
            }
        }
        other => return Err(AnswerError::WrongType(other.to_string())),
    };
    let number: f64 = value
        .parse()
        .map_err(|_| AnswerError::Malformed(format!("the value {value:?} is not a number")))?;
    if !number.is_finite() {
        return Err(AnswerError::NotFinite(value));
    }
    let at = time(at).ok_or_else(|| AnswerError::Malformed(format!("the time {at} is not a Unix time")))?;
    Ok(Sample { value: number, at })
}

/// A Unix time in seconds with a fraction, as Prometheus writes it.
fn time(seconds: f64) -> Option<DateTime<Utc>> {
    if !seconds.is_finite() {
        return None;
    }
    let millis = (seconds * 1000.0).round();
    if millis.abs() > 1.0e15 {
        return None;
    }
    DateTime::from_timestamp_millis(millis as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_series_or_a_scalar_is_a_sample() {
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1764600000.5,"1234.25"]}]}}"#;
        let sample = parse(vector).expect("one series");
        assert_eq!(sample.value, 1234.25);
        assert_eq!(sample.at.timestamp_millis(), 1_764_600_000_500);
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1764600000,"42"]}}"#;
        assert_eq!(parse(scalar).expect("scalar").value, 42.0);
    }

    #[test]
    fn every_other_answer_is_refused_with_the_reason() {
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(parse(empty), Err(AnswerError::Empty));
        let two = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}}"#;
        assert_eq!(parse(two), Err(AnswerError::Several(2)));
        assert!(parse(two).expect_err("two").to_string().contains("sum(...)"));
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert_eq!(parse(matrix), Err(AnswerError::WrongType("matrix".into())));
        for value in ["NaN", "+Inf", "-Inf"] {
            let body = format!(
                r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[1,"{value}"]}}]}}}}"#
            );
            assert_eq!(
                parse(body.as_bytes()),
                Err(AnswerError::NotFinite(value.into())),
                "{value}"
            );
        }
        let refused =
            br#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected end of input"}"#;
        assert!(matches!(parse(refused), Err(AnswerError::Refused { kind, .. }) if kind == "bad_data"));
        for garbage in [
            &b""[..],
            b"<html>",
            b"{}",
            br#"{"status":"success"}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"x"]}]}}"#,
        ] {
            assert!(
                matches!(parse(garbage), Err(AnswerError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(garbage)
            );
        }
    }

    proptest! {
        #[test]
        fn no_body_panics(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse(&body);
        }

        #[test]
        fn any_finite_value_and_time_round_trip(value in -1.0e9f64..1.0e9, seconds in 0.0f64..4.0e9) {
            let body = format!(r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[{seconds},"{value}"]}}]}}}}"#);
            let sample = parse(body.as_bytes()).expect("a sample");
            prop_assert_eq!(sample.value, value);
            prop_assert!((sample.at.timestamp_millis() as f64 - seconds * 1000.0).abs() <= 1.0);
        }
    }
}
