//! The document as a JSON tree that keeps duplicate keys (so that they can be refused with their
//! path), and typed, path-aware access to one object of it.

use super::prescan::sanitize_key;
use super::{DocumentError, MAX_DURATION_S};
use chrono::{DateTime, Datelike, Utc};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

// ---------------------------------------------------------------------------------------------
// Parsing: a JSON tree that keeps duplicate keys (so they can be refused with their path).

#[derive(Debug, Clone, Copy)]
pub(super) enum Num {
    U(u64),
    I(i64),
    F(f64),
}

#[derive(Debug)]
pub(super) enum J {
    Null,
    Bool(bool),
    Num(Num),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            J::Null => "null",
            J::Bool(_) => "a boolean",
            J::Num(_) => "a number",
            J::Str(_) => "a string",
            J::Arr(_) => "an array",
            J::Obj(_) => "an object",
        }
    }

    /// A short rendering for error messages (strings quoted and truncated).
    pub(super) fn describe(&self) -> String {
        match self {
            J::Str(s) => {
                let short: String = s.chars().filter(|c| !c.is_control()).take(64).collect();
                format!("\"{short}\"")
            }
            J::Num(n) => n.to_string(),
            J::Bool(b) => b.to_string(),
            other => other.kind().to_owned(),
        }
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::U(u) => write!(f, "{u}"),
            Num::I(i) => write!(f, "{i}"),
            Num::F(x) => write!(f, "{x}"),
        }
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JVisitor)
    }
}

struct JVisitor;

impl<'de> Visitor<'de> for JVisitor {
    type Value = J;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<J, E> {
        Ok(J::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<J, E> {
        Ok(if v >= 0 {
            J::Num(Num::U(v.unsigned_abs()))
        } else {
            J::Num(Num::I(v))
        })
    }
    fn visit_u64<E>(self, v: u64) -> Result<J, E> {
        Ok(J::Num(Num::U(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<J, E> {
        Ok(J::Num(Num::F(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<J, E> {
        Ok(J::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<J, E> {
        Ok(J::Str(v))
    }
    fn visit_unit<E>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_none<E>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<J>()? {
            items.push(item);
        }
        Ok(J::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, J>()? {
            entries.push((k, v));
        }
        Ok(J::Obj(entries))
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing: typed, path-aware access to one object.

pub(super) struct Obj<'a> {
    /// Path of this object (empty for the root).
    pub(super) path: String,
    pub(super) entries: &'a [(String, J)],
}

impl<'a> Obj<'a> {
    pub(super) fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Refuse unknown and duplicate keys.
    pub(super) fn check_keys(&self, allowed: &[&str]) -> Result<(), DocumentError> {
        for (idx, (k, _)) in self.entries.iter().enumerate() {
            if !allowed.contains(&k.as_str()) {
                return Err(DocumentError::new(
                    self.field(&sanitize_key(k)),
                    format!("unknown field; expected one of: {}", allowed.join(", ")),
                ));
            }
            if self.entries.iter().take(idx).any(|(prev, _)| prev == k) {
                return Err(DocumentError::new(
                    self.field(k),
                    "appears more than once; send each field once",
                ));
            }
        }
        Ok(())
    }

    /// The value of `key`; `null` counts as absent.
    pub(super) fn get(&self, key: &str) -> Option<&'a J> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .filter(|v| !matches!(v, J::Null))
    }

    pub(super) fn req(&self, key: &str) -> Result<&'a J, DocumentError> {
        self.get(key)
            .ok_or_else(|| DocumentError::new(self.field(key), "missing (or null); this field is required"))
    }

    pub(super) fn wrong(&self, key: &str, expected: &str, got: &J) -> DocumentError {
        DocumentError::new(self.field(key), format!("must be {expected}, got {}", got.describe()))
    }

    pub(super) fn as_str(&self, key: &str, v: &'a J) -> Result<&'a str, DocumentError> {
        match v {
            J::Str(s) => Ok(s),
            other => Err(self.wrong(key, "a string", other)),
        }
    }

    pub(super) fn req_str(&self, key: &str) -> Result<&'a str, DocumentError> {
        self.as_str(key, self.req(key)?)
    }

    pub(super) fn opt_str(&self, key: &str) -> Result<Option<&'a str>, DocumentError> {
        self.get(key).map(|v| self.as_str(key, v)).transpose()
    }

    pub(super) fn opt_bool(&self, key: &str) -> Result<Option<bool>, DocumentError> {
        match self.get(key) {
            None => Ok(None),
            Some(J::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong(key, "true or false", other)),
        }
    }

    /// A non-negative integer. Integral floats (`600.0`) are accepted, as JSON does not
    /// distinguish them; negative and fractional numbers are refused.
    pub(super) fn as_uint(&self, key: &str, what: &str, v: &J) -> Result<u64, DocumentError> {
        const MAX_EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: larger floats are not exact integers
        match *v {
            J::Num(Num::U(u)) => Ok(u),
            J::Num(Num::F(f)) if f.is_finite() && f.fract() == 0.0 && (0.0..=MAX_EXACT).contains(&f) => Ok(f as u64),
            ref other => Err(self.wrong(key, &format!("a non-negative integer {what}"), other)),
        }
    }

    pub(super) fn req_uint(&self, key: &str, what: &str) -> Result<u64, DocumentError> {
        self.as_uint(key, what, self.req(key)?)
    }

    pub(super) fn opt_uint(&self, key: &str, what: &str) -> Result<Option<u64>, DocumentError> {
        self.get(key).map(|v| self.as_uint(key, what, v)).transpose()
    }

    /// A duration in whole seconds, at most [`MAX_DURATION_S`].
    pub(super) fn opt_secs(&self, key: &str) -> Result<Option<u64>, DocumentError> {
        let v = self.opt_uint(key, "number of seconds")?;
        if let Some(s) = v
            && s > MAX_DURATION_S
        {
            return Err(DocumentError::new(
                self.field(key),
                format!("{s} s is longer than the {MAX_DURATION_S} s (7 days) allowed"),
            ));
        }
        Ok(v)
    }

    pub(super) fn opt_f64(&self, key: &str) -> Result<Option<f64>, DocumentError> {
        match self.get(key) {
            None => Ok(None),
            Some(J::Num(Num::U(u))) => Ok(Some(*u as f64)),
            Some(J::Num(Num::I(i))) => Ok(Some(*i as f64)),
            Some(J::Num(Num::F(f))) if f.is_finite() => Ok(Some(*f)),
            Some(other) => Err(self.wrong(key, "a finite number", other)),
        }
    }

    pub(super) fn opt_time(&self, key: &str) -> Result<Option<DateTime<Utc>>, DocumentError> {
        let Some(s) = self.opt_str(key)? else {
            return Ok(None);
        };
        let t = DateTime::parse_from_rfc3339(s.trim())
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                DocumentError::new(
                    self.field(key),
                    format!(
                        "{} is not an RFC 3339 timestamp with an offset ({e}); write it like 2026-07-14T19:00:00Z",
                        J::Str(s.to_owned()).describe()
                    ),
                )
            })?;
        // RFC 3339 has four-digit years: an offset can carry 9999-12-31T23:59-23:59 into year
        // 10000 (or 0000-01-01T00:00+00:01 into year -1) in UTC, an instant the gateway could
        // not write back as RFC 3339 (chrono writes "+10000-…", which this parser refuses).
        if !(0..=9999).contains(&t.year()) {
            return Err(DocumentError::new(
                self.field(key),
                format!(
                    "{} is outside the years 0000 to 9999 once converted to UTC, which RFC 3339 cannot write",
                    J::Str(s.to_owned()).describe()
                ),
            ));
        }
        Ok(Some(t))
    }

    pub(super) fn req_time(&self, key: &str) -> Result<DateTime<Utc>, DocumentError> {
        self.opt_time(key)?
            .ok_or_else(|| DocumentError::new(self.field(key), "missing (or null); this field is required"))
    }

    pub(super) fn as_obj(&self, key: &str, v: &'a J) -> Result<Obj<'a>, DocumentError> {
        match v {
            J::Obj(entries) => Ok(Obj {
                path: self.field(key),
                entries,
            }),
            other => Err(self.wrong(key, "an object", other)),
        }
    }

    pub(super) fn req_obj(&self, key: &str) -> Result<Obj<'a>, DocumentError> {
        self.as_obj(key, self.req(key)?)
    }

    pub(super) fn opt_obj(&self, key: &str) -> Result<Option<Obj<'a>>, DocumentError> {
        self.get(key).map(|v| self.as_obj(key, v)).transpose()
    }

    pub(super) fn opt_arr(&self, key: &str) -> Result<Option<&'a [J]>, DocumentError> {
        match self.get(key) {
            None => Ok(None),
            Some(J::Arr(items)) => Ok(Some(items)),
            Some(other) => Err(self.wrong(key, "an array", other)),
        }
    }
}
