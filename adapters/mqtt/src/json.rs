//! A JSON tree that refuses duplicate object keys, for the two places that read event
//! documents before the application does: the signature check and the event screen.
//!
//! `serde_json::Value` keeps the *last* of two equal keys. A verifier that canonicalizes with
//! one rule and an application that reads with another is how a signed body smuggles a second
//! value past the signature, so every document is refused here if any object repeats a key.
//! Nesting is bounded by `serde_json`'s recursion limit (128), so hostile input cannot
//! overflow the stack; the size is bounded by the caller.

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// One JSON value, numbers kept as parsed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    U(u64),
    I(i64),
    F(f64),
    Str(String),
    Arr(Vec<Node>),
    /// Members in document order; keys are unique.
    Obj(Vec<(String, Node)>),
}

impl Node {
    /// The member `key` of an object.
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Obj(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A short name of the value's kind, for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::U(_) | Node::I(_) | Node::F(_) => "a number",
            Node::Str(_) => "a string",
            Node::Arr(_) => "an array",
            Node::Obj(_) => "an object",
        }
    }

    /// The tree of a `serde_json::Value` (whose keys are unique by construction).
    pub(crate) fn from_value(v: &serde_json::Value) -> Node {
        use serde_json::Value;
        match v {
            Value::Null => Node::Null,
            Value::Bool(b) => Node::Bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => Node::U(u),
                (None, Some(i), _) => Node::I(i),
                (None, None, Some(f)) => Node::F(f),
                // Unreachable without serde_json's arbitrary_precision; null is a safe stand-in.
                (None, None, None) => Node::Null,
            },
            Value::String(s) => Node::Str(s.clone()),
            Value::Array(a) => Node::Arr(a.iter().map(Node::from_value).collect()),
            Value::Object(m) => Node::Obj(m.iter().map(|(k, v)| (k.clone(), Node::from_value(v))).collect()),
        }
    }

    /// The same tree as a `serde_json::Value`, for canonicalisation. Lossless because keys are
    /// unique; `None` only for a non-finite float, which no parsed document holds.
    pub(crate) fn to_value(&self) -> Option<serde_json::Value> {
        use serde_json::Value;
        Some(match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::U(u) => Value::from(*u),
            Node::I(i) => Value::from(*i),
            Node::F(f) => Value::Number(serde_json::Number::from_f64(*f)?),
            Node::Str(s) => Value::String(s.clone()),
            Node::Arr(items) => Value::Array(items.iter().map(Node::to_value).collect::<Option<_>>()?),
            Node::Obj(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| Some((k.clone(), v.to_value()?)))
                    .collect::<Option<_>>()?,
            ),
        })
    }
}

/// Parses one JSON document (nothing may follow it), refusing duplicate keys. The error is
/// `serde_json`'s message, which names the duplicate key.
pub(crate) fn parse_strict(bytes: &[u8]) -> Result<Node, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let node = Node::deserialize(&mut de)?;
    de.end()?;
    Ok(node)
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

/// The key serde_json uses for numbers under its `arbitrary_precision` feature.
const ARBITRARY_PRECISION_KEY: &str = "$serde_json::private::Number";

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::U(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::I(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::F(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut members: Vec<(String, Node)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == ARBITRARY_PRECISION_KEY {
                // Either serde_json's `arbitrary_precision` feature is on somewhere in the
                // build (numbers then arrive as this one-key map), or a document imitates it to
                // make an object canonicalize like a number. Refuse both.
                return Err(A::Error::custom(
                    "numbers arrive as maps (serde_json's arbitrary_precision feature is enabled), or a key \
                     imitates them; refusing the document",
                ));
            }
            if !seen.insert(key.clone()) {
                let shown: String = key.chars().filter(|c| !c.is_control()).take(64).collect();
                return Err(A::Error::custom(format!("duplicate key {shown:?}")));
            }
            let value = map.next_value::<Node>()?;
            members.push((key, value));
        }
        Ok(Node::Obj(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_refused_at_any_depth() {
        assert!(parse_strict(br#"{"a":1,"a":2}"#).is_err());
        let e = parse_strict(br#"{"x":[{"k":1,"k":1}]}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate key \"k\""), "{e}");
        // Escapes are decoded before comparing: "\u0061" is "a".
        assert!(parse_strict(br#"{"a":1,"\u0061":2}"#).is_err());
        assert!(parse_strict(br#"{"a":1,"b":{"a":2}}"#).is_ok());
    }

    #[test]
    fn the_arbitrary_precision_marker_is_refused() {
        assert!(parse_strict(br#"{"x":{"$serde_json::private::Number":"5"}}"#).is_err());
    }

    #[test]
    fn trailing_data_and_garbage_are_refused() {
        for bad in [&b"{} {}"[..], b"", b"{", b"\xff", b"[1,]", b"\"\\ud800\""] {
            assert!(parse_strict(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let deep = "[".repeat(100_000);
        assert!(parse_strict(deep.as_bytes()).is_err());
    }

    #[test]
    fn numbers_keep_their_kind() {
        let n = parse_strict(br#"[1,-1,1.5,18446744073709551615]"#).unwrap();
        assert_eq!(
            n,
            Node::Arr(vec![Node::U(1), Node::I(-1), Node::F(1.5), Node::U(u64::MAX)])
        );
    }
}
