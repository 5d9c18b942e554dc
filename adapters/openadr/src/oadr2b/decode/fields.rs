//! Element helpers shared by the decoders: required and optional children, text, numbers,
//! booleans, ISO 8601 durations and date-times, itemBases, and the element paths errors name.
//!
//! Kept apart from the message decoders so that every rule about a single value (trimming,
//! `PT0S` = unset, NaN refused, a bare `P` = zero) is written once.

use chrono::{DateTime, TimeDelta, Utc};

use super::DecodeError;
use crate::oadr2b::model::{EiResponse, ItemBase};
use crate::oadr2b::outgoing;
use crate::oadr2b::xml::{Node, Ns};
use crate::oadr2b::{parse_date_time, parse_duration};

pub(super) fn join(path: &str, name: &str) -> String {
    format!("{path}/{name}")
}

pub(super) fn invalid(path: &str, value: &str, reason: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        path: path.to_owned(),
        value: value.to_owned(),
        reason: reason.into(),
    }
}

/// Required child.
pub(super) fn req<'a>(node: &'a Node<'a>, ns: &Ns, name: &str, path: &str) -> Result<&'a Node<'a>, DecodeError> {
    node.child(ns, name)
        .ok_or_else(|| DecodeError::Missing { path: join(path, name) })
}

/// Required non-empty text of a child.
pub(super) fn req_text(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<String, DecodeError> {
    let t = req(node, ns, name, path)?.trimmed();
    if t.is_empty() {
        return Err(invalid(&join(path, name), t, "must not be empty"));
    }
    Ok(t.to_owned())
}

/// Optional trimmed text of a child (`None` when absent or empty).
pub(super) fn opt_text(node: &Node, ns: &Ns, name: &str) -> Option<String> {
    node.child(ns, name)
        .map(|c| c.trimmed().to_owned())
        .filter(|t| !t.is_empty())
}

pub(super) fn parse_u32(text: &str, path: &str) -> Result<u32, DecodeError> {
    text.trim()
        .parse::<u32>()
        .map_err(|e| invalid(path, text, e.to_string()))
}

pub(super) fn parse_float(text: &str, path: &str) -> Result<f64, DecodeError> {
    let t = text.trim();
    let v = t.parse::<f64>().map_err(|e| invalid(path, t, e.to_string()))?;
    if !v.is_finite() {
        return Err(invalid(path, t, "NaN and infinite values are not accepted"));
    }
    Ok(v)
}

/// A duration element's value. Besides [`parse_duration`]'s ISO 8601 forms this accepts a bare
/// `P` or `PT` as zero: the 2.0b XSD pattern allows them, and openleadr writes a zero
/// `timedelta` as `P` (e.g. the granularity of an on-change report request).
pub(super) fn dur(text: &str, path: &str) -> Result<TimeDelta, DecodeError> {
    let t = text.trim();
    if matches!(t.strip_prefix(['+', '-']).unwrap_or(t), "P" | "PT") {
        return Ok(TimeDelta::zero());
    }
    parse_duration(t).map_err(|e| invalid(path, t, e.to_string()))
}

pub(super) fn date_time(text: &str, path: &str) -> Result<DateTime<Utc>, DecodeError> {
    parse_date_time(text).map_err(|e| invalid(path, text.trim(), format!("not an ISO 8601 date-time with offset: {e}")))
}

/// The text and path of a `<xcal:duration><xcal:duration>PT1H</xcal:duration></xcal:duration>`
/// -style wrapper under `node/name`, if present.
fn wrapped_duration_text<'a>(
    node: &'a Node,
    ns: &Ns,
    name: &str,
    path: &str,
) -> Result<Option<(&'a str, String)>, DecodeError> {
    let Some(outer) = node.child(ns, name) else {
        return Ok(None);
    };
    let p = join(path, name);
    let inner = req(outer, &Ns::Xcal, "duration", &p)?;
    Ok(Some((inner.text.as_ref(), join(&p, "duration"))))
}

/// A wrapped duration under `node/name` (see [`dur`] for the forms accepted).
pub(super) fn opt_wrapped_duration(
    node: &Node,
    ns: &Ns,
    name: &str,
    path: &str,
) -> Result<Option<TimeDelta>, DecodeError> {
    wrapped_duration_text(node, ns, name, path)?
        .map(|(text, at)| dur(text, &at))
        .transpose()
}

/// Like [`opt_wrapped_duration`], for an event's and its intervals' durations, where a bare `P`
/// or `PT` is refused instead of read as zero: zero means "no set end" for an event, so a
/// malformed duration must not become an open-ended curtailment. An explicit zero (`PT0S`)
/// still says "open-ended", as OpenADR 2.0b defines it.
pub(super) fn opt_wrapped_event_duration(
    node: &Node,
    ns: &Ns,
    name: &str,
    path: &str,
) -> Result<Option<TimeDelta>, DecodeError> {
    wrapped_duration_text(node, ns, name, path)?
        .map(|(text, at)| {
            let t = text.trim();
            parse_duration(t).map_err(|e| {
                invalid(
                    &at,
                    t,
                    format!("{e}; an event duration must say how long (PT0S: no set end)"),
                )
            })
        })
        .transpose()
}

pub(super) fn ei_response(node: &Node, path: &str) -> Result<EiResponse, DecodeError> {
    Ok(EiResponse {
        code: req_text(node, &Ns::Ei, "responseCode", path)?,
        description: opt_text(node, &Ns::Ei, "responseDescription"),
        request_id: opt_text(node, &Ns::Pyld, "requestID"),
    })
}

pub(super) fn parse_bool(text: &str, path: &str) -> Result<bool, DecodeError> {
    match text.trim() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(invalid(path, other, "expected true|false|1|0")),
    }
}

pub(super) fn req_bool(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<bool, DecodeError> {
    parse_bool(&req(node, ns, name, path)?.text, &join(path, name))
}

pub(super) fn opt_bool(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<Option<bool>, DecodeError> {
    match node.child(ns, name) {
        Some(b) => parse_bool(&b.text, &join(path, name)).map(Some),
        None => Ok(None),
    }
}

pub(super) fn opt_date_time(
    node: &Node,
    ns: &Ns,
    name: &str,
    path: &str,
) -> Result<Option<DateTime<Utc>>, DecodeError> {
    match node.child(ns, name) {
        Some(x) => date_time(&x.text, &join(path, name)).map(Some),
        None => Ok(None),
    }
}

/// `xcal:dtstart/xcal:date-time` under `node`, if present.
pub(super) fn opt_dtstart(node: &Node, path: &str) -> Result<Option<DateTime<Utc>>, DecodeError> {
    match node.child(&Ns::Xcal, "dtstart") {
        Some(ds) => {
            let dp = join(path, "dtstart");
            date_time(&req(ds, &Ns::Xcal, "date-time", &dp)?.text, &join(&dp, "date-time")).map(Some)
        }
        None => Ok(None),
    }
}

/// `PT0S` becomes `None` (OpenADR's "unset"); negative durations are errors.
pub(super) fn nonzero(d: Option<TimeDelta>, path: &str) -> Result<Option<TimeDelta>, DecodeError> {
    match d {
        Some(d) if d < TimeDelta::zero() => Err(invalid(path, "", "negative duration")),
        Some(d) if d == TimeDelta::zero() => Ok(None),
        other => Ok(other),
    }
}

pub(super) fn opt_type(node: &Node, path: &str) -> Result<outgoing::OptType, DecodeError> {
    match req(node, &Ns::Ei, "optType", path)?.trimmed() {
        "optIn" => Ok(outgoing::OptType::OptIn),
        "optOut" => Ok(outgoing::OptType::OptOut),
        other => Err(invalid(&join(path, "optType"), other, "expected optIn|optOut")),
    }
}

/// An itemBase element: anything carrying `itemUnits`/`itemDescription` or a scale code.
pub(super) fn is_item_base(c: &Node) -> bool {
    c.children
        .iter()
        .any(|x| x.name == "itemUnits" || x.name == "itemDescription" || x.is(&Ns::Scale, "siScaleCode"))
}

pub(super) fn item_base(c: &Node) -> ItemBase {
    ItemBase {
        kind: c.name.to_string(),
        description: c
            .children
            .iter()
            .find(|x| x.name == "itemDescription")
            .map(|x| x.trimmed().to_owned()),
        units: c
            .children
            .iter()
            .find(|x| x.name == "itemUnits")
            .map(|x| x.trimmed().to_owned()),
        scale: opt_text(c, &Ns::Scale, "siScaleCode"),
    }
}

pub(super) fn opt_float(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<Option<f64>, DecodeError> {
    match node.child(ns, name) {
        Some(x) => parse_float(&x.text, &join(path, name)).map(Some),
        None => Ok(None),
    }
}
