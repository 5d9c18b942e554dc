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

/// An element path such as `oadrDistributeEvent/oadrEvent[1]/eiEvent`, kept as a chain of
/// borrowed segments on the stack while decoding descends, and written out only when an error or
/// a warning names it: building every path eagerly, as strings, was about a fifth of the decode.
#[derive(Clone, Copy)]
pub(super) enum Path<'p> {
    /// The message element.
    Root(&'p str),
    /// `parent/name`.
    Child(&'p Path<'p>, &'p str),
    /// `parent/name[n]` (1-based, as the schema's readers count).
    Nth(&'p Path<'p>, &'p str, usize),
}

impl Path<'_> {
    pub(super) fn child<'q>(&'q self, name: &'q str) -> Path<'q> {
        Path::Child(self, name)
    }

    /// The `i`-th (0-based) `name` child: written `name[i + 1]`.
    pub(super) fn nth<'q>(&'q self, name: &'q str, i: usize) -> Path<'q> {
        Path::Nth(self, name, i + 1)
    }
}

impl Path<'_> {
    /// The path as a string, e.g. `oadrDistributeEvent/oadrEvent[1]/eiEvent`. Written piece by
    /// piece into one allocation of the right size: this runs for every warning (an
    /// openleadr-style interval has one), and `fmt` machinery cost as much as the rest of a
    /// warning.
    pub(super) fn render(&self) -> String {
        let mut out = String::with_capacity(self.len());
        self.write_to(&mut out);
        out
    }

    fn len(&self) -> usize {
        match self {
            Path::Root(name) => name.len(),
            Path::Child(parent, name) => parent.len() + 1 + name.len(),
            Path::Nth(parent, name, n) => parent.len() + 1 + name.len() + 2 + decimal_len(*n),
        }
    }

    fn write_to(&self, out: &mut String) {
        match self {
            Path::Root(name) => out.push_str(name),
            Path::Child(parent, name) => {
                parent.write_to(out);
                out.push('/');
                out.push_str(name);
            }
            Path::Nth(parent, name, n) => {
                parent.write_to(out);
                out.push('/');
                out.push_str(name);
                out.push('[');
                push_decimal(out, *n);
                out.push(']');
            }
        }
    }
}

fn decimal_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

fn push_decimal(out: &mut String, n: usize) {
    if n >= 10 {
        push_decimal(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

pub(super) fn missing(path: &Path) -> DecodeError {
    DecodeError::Missing { path: path.render() }
}

pub(super) fn invalid(path: &Path, value: &str, reason: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        path: path.render(),
        value: value.to_owned(),
        reason: reason.into(),
    }
}

/// Whether `s` is exactly how `i` is written in decimal (what `i.to_string() == s` says, without
/// the allocation).
pub(super) fn is_decimal_of(s: &str, i: usize) -> bool {
    let canonical = s == "0" || (!s.is_empty() && !s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit()));
    canonical && s.parse::<usize>().is_ok_and(|v| v == i)
}

/// Required child.
pub(super) fn req<'t>(node: Node<'t>, ns: Ns, name: &str, path: &Path) -> Result<Node<'t>, DecodeError> {
    node.child(ns, name).ok_or_else(|| missing(&path.child(name)))
}

/// Required non-empty text of a child.
pub(super) fn req_text(node: Node, ns: Ns, name: &str, path: &Path) -> Result<String, DecodeError> {
    let t = req(node, ns, name, path)?.trimmed();
    if t.is_empty() {
        return Err(invalid(&path.child(name), t, "must not be empty"));
    }
    Ok(t.to_owned())
}

/// Optional trimmed text of a child (`None` when absent or empty).
pub(super) fn opt_text(node: Node, ns: Ns, name: &str) -> Option<String> {
    node.child(ns, name)
        .map(|c| c.trimmed())
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

pub(super) fn parse_u32(text: &str, path: &Path) -> Result<u32, DecodeError> {
    text.trim()
        .parse::<u32>()
        .map_err(|e| invalid(path, text, e.to_string()))
}

pub(super) fn parse_float(text: &str, path: &Path) -> Result<f64, DecodeError> {
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
pub(super) fn dur(text: &str, path: &Path) -> Result<TimeDelta, DecodeError> {
    let t = text.trim();
    if matches!(t.strip_prefix(['+', '-']).unwrap_or(t), "P" | "PT") {
        return Ok(TimeDelta::zero());
    }
    parse_duration(t).map_err(|e| invalid(path, t, e.to_string()))
}

pub(super) fn date_time(text: &str, path: &Path) -> Result<DateTime<Utc>, DecodeError> {
    parse_date_time(text).map_err(|e| invalid(path, text.trim(), format!("not an ISO 8601 date-time with offset: {e}")))
}

/// The inner element of a `<xcal:duration><xcal:duration>PT1H</xcal:duration></xcal:duration>`
/// -style wrapper under `node/name`, if present. Its path is `path/name/duration`.
fn wrapped_duration_node<'t>(node: Node<'t>, ns: Ns, name: &str, path: &Path) -> Result<Option<Node<'t>>, DecodeError> {
    let Some(outer) = node.child(ns, name) else {
        return Ok(None);
    };
    req(outer, Ns::Xcal, "duration", &path.child(name)).map(Some)
}

/// A wrapped duration under `node/name` (see [`dur`] for the forms accepted).
pub(super) fn opt_wrapped_duration(
    node: Node,
    ns: Ns,
    name: &str,
    path: &Path,
) -> Result<Option<TimeDelta>, DecodeError> {
    wrapped_duration_node(node, ns, name, path)?
        .map(|inner| dur(inner.text(), &path.child(name).child("duration")))
        .transpose()
}

/// Like [`opt_wrapped_duration`], for an event's and its intervals' durations, where a bare `P`
/// or `PT` is refused instead of read as zero: zero means "no set end" for an event, so a
/// malformed duration must not become an open-ended curtailment. An explicit zero (`PT0S`)
/// still says "open-ended", as OpenADR 2.0b defines it.
pub(super) fn opt_wrapped_event_duration(
    node: Node,
    ns: Ns,
    name: &str,
    path: &Path,
) -> Result<Option<TimeDelta>, DecodeError> {
    wrapped_duration_node(node, ns, name, path)?
        .map(|inner| {
            let t = inner.text().trim();
            parse_duration(t).map_err(|e| {
                invalid(
                    &path.child(name).child("duration"),
                    t,
                    format!("{e}; an event duration must say how long (PT0S: no set end)"),
                )
            })
        })
        .transpose()
}

pub(super) fn ei_response(node: Node, path: &Path) -> Result<EiResponse, DecodeError> {
    Ok(EiResponse {
        code: req_text(node, Ns::Ei, "responseCode", path)?,
        description: opt_text(node, Ns::Ei, "responseDescription"),
        request_id: opt_text(node, Ns::Pyld, "requestID"),
    })
}

pub(super) fn parse_bool(text: &str, path: &Path) -> Result<bool, DecodeError> {
    match text.trim() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(invalid(path, other, "expected true|false|1|0")),
    }
}

pub(super) fn req_bool(node: Node, ns: Ns, name: &str, path: &Path) -> Result<bool, DecodeError> {
    parse_bool(req(node, ns, name, path)?.text(), &path.child(name))
}

pub(super) fn opt_bool(node: Node, ns: Ns, name: &str, path: &Path) -> Result<Option<bool>, DecodeError> {
    match node.child(ns, name) {
        Some(b) => parse_bool(b.text(), &path.child(name)).map(Some),
        None => Ok(None),
    }
}

pub(super) fn opt_date_time(node: Node, ns: Ns, name: &str, path: &Path) -> Result<Option<DateTime<Utc>>, DecodeError> {
    match node.child(ns, name) {
        Some(x) => date_time(x.text(), &path.child(name)).map(Some),
        None => Ok(None),
    }
}

/// `xcal:dtstart/xcal:date-time` under `node`, if present.
pub(super) fn opt_dtstart(node: Node, path: &Path) -> Result<Option<DateTime<Utc>>, DecodeError> {
    match node.child(Ns::Xcal, "dtstart") {
        Some(ds) => {
            let dp = path.child("dtstart");
            date_time(req(ds, Ns::Xcal, "date-time", &dp)?.text(), &dp.child("date-time")).map(Some)
        }
        None => Ok(None),
    }
}

/// `PT0S` becomes `None` (OpenADR's "unset"); negative durations are errors.
pub(super) fn nonzero(d: Option<TimeDelta>, path: &Path) -> Result<Option<TimeDelta>, DecodeError> {
    match d {
        Some(d) if d < TimeDelta::zero() => Err(invalid(path, "", "negative duration")),
        Some(d) if d == TimeDelta::zero() => Ok(None),
        other => Ok(other),
    }
}

pub(super) fn opt_type(node: Node, path: &Path) -> Result<outgoing::OptType, DecodeError> {
    match req(node, Ns::Ei, "optType", path)?.trimmed() {
        "optIn" => Ok(outgoing::OptType::OptIn),
        "optOut" => Ok(outgoing::OptType::OptOut),
        other => Err(invalid(&path.child("optType"), other, "expected optIn|optOut")),
    }
}

/// An itemBase element: anything carrying `itemUnits`/`itemDescription` or a scale code.
pub(super) fn is_item_base(c: Node) -> bool {
    c.children()
        .any(|x| x.name() == "itemUnits" || x.name() == "itemDescription" || x.is(Ns::Scale, "siScaleCode"))
}

pub(super) fn item_base(c: Node) -> ItemBase {
    ItemBase {
        kind: c.name().to_owned(),
        description: c
            .children()
            .find(|x| x.name() == "itemDescription")
            .map(|x| x.trimmed().to_owned()),
        units: c
            .children()
            .find(|x| x.name() == "itemUnits")
            .map(|x| x.trimmed().to_owned()),
        scale: opt_text(c, Ns::Scale, "siScaleCode"),
    }
}

pub(super) fn opt_float(node: Node, ns: Ns, name: &str, path: &Path) -> Result<Option<f64>, DecodeError> {
    match node.child(ns, name) {
        Some(x) => parse_float(x.text(), &path.child(name)).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_as_before() {
        let root = Path::Root("oadrDistributeEvent");
        let ev = root.nth("oadrEvent", 0);
        let ei = ev.child("eiEvent");
        let p = ei.child("eventDescriptor");
        assert_eq!(p.render(), "oadrDistributeEvent/oadrEvent[1]/eiEvent/eventDescriptor");
        assert_eq!(root.render(), "oadrDistributeEvent");
        for i in [0, 8, 9, 10, 98, 99, 100, 12_345, usize::MAX - 1] {
            let nth = root.nth("oadrEvent", i);
            let expected = format!("oadrDistributeEvent/oadrEvent[{}]", i + 1);
            assert_eq!((nth.render(), nth.len()), (expected.clone(), expected.len()));
        }
    }

    #[test]
    fn decimal_of_matches_to_string() {
        for s in [
            "",
            "0",
            "00",
            "01",
            "1",
            "+1",
            "-0",
            " 1",
            "1 ",
            "10",
            "9",
            "18446744073709551616",
            "x",
            "٣",
        ] {
            for i in [0usize, 1, 9, 10, 11, usize::MAX] {
                assert_eq!(is_decimal_of(s, i), i.to_string() == s, "{s:?} {i}");
            }
        }
        assert!(is_decimal_of(&usize::MAX.to_string(), usize::MAX));
    }
}
