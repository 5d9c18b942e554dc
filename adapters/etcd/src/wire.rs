//! etcd's v3 API as its JSON gateway speaks it: requests and answers as serde types, with the
//! two encodings the gateway uses (int64 as a decimal string, bytes as base64) decoded here and
//! nowhere else. Pure: no I/O.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes as the gateway sends them (base64).
pub(crate) mod b64 {
    use super::{Deserialize, Deserializer, STANDARD, Serializer};
    use base64::Engine as _;

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = Option::<String>::deserialize(d)?.unwrap_or_default();
        STANDARD.decode(text.as_bytes()).map_err(serde::de::Error::custom)
    }
}

/// An int64 as the gateway sends it: a decimal string (a number is accepted too); absent is 0.
pub(crate) mod int64 {
    use super::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Number(i64),
    }

    #[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
    pub(crate) fn serialize<S: Serializer>(n: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&n.to_string())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        match Option::<Either>::deserialize(d)? {
            None => Ok(0),
            Some(Either::Number(n)) => Ok(n),
            Some(Either::Text(t)) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_empty(b: &[u8]) -> bool {
    b.is_empty()
}

/// The header of every answer: the store's revision when it was served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ResponseHeader {
    /// The key-value store's revision.
    #[serde(default, with = "int64")]
    pub revision: i64,
    /// The Raft term of the member that answered.
    #[serde(default, with = "int64")]
    pub raft_term: i64,
}

/// One key with its value and revisions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct KeyValue {
    /// The key.
    #[serde(default, with = "b64")]
    pub key: Vec<u8>,
    /// The value.
    #[serde(default, with = "b64")]
    pub value: Vec<u8>,
    /// The revision that created it (unique and increasing over the store's life: an election's
    /// epoch).
    #[serde(default, with = "int64")]
    pub create_revision: i64,
    /// The revision of its last change.
    #[serde(default, with = "int64")]
    pub mod_revision: i64,
    /// The lease it is attached to (0: none).
    #[serde(default, with = "int64")]
    pub lease: i64,
}

/// `POST /v3/kv/range`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RangeRequest {
    /// The key, or the start of the range.
    #[serde(with = "b64")]
    pub key: Vec<u8>,
    /// The end of the range (exclusive); empty: the key alone.
    #[serde(with = "b64", skip_serializing_if = "is_empty")]
    pub range_end: Vec<u8>,
    /// At most this many keys (0: no limit).
    #[serde(with = "int64", skip_serializing_if = "is_zero")]
    pub limit: i64,
}

/// Answer to a range.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RangeResponse {
    /// The store's revision.
    #[serde(default)]
    pub header: ResponseHeader,
    /// The keys found.
    #[serde(default)]
    pub kvs: Vec<KeyValue>,
    /// Whether more keys were in range than returned.
    #[serde(default)]
    pub more: bool,
}

/// `POST /v3/kv/put`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PutRequest {
    /// The key.
    #[serde(with = "b64")]
    pub key: Vec<u8>,
    /// The value.
    #[serde(with = "b64")]
    pub value: Vec<u8>,
    /// The lease to attach it to (0: none).
    #[serde(with = "int64", skip_serializing_if = "is_zero")]
    pub lease: i64,
}

/// `POST /v3/auth/authenticate`. Its `Debug` hides the password.
#[derive(Clone, Default, Serialize)]
pub struct AuthenticateRequest {
    /// The user.
    pub name: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for AuthenticateRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthenticateRequest")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Its answer: the token every later call carries in `Authorization`. (Its `Debug` hides it.)
#[derive(Clone, Default, Deserialize)]
pub struct AuthenticateResponse {
    /// The token.
    #[serde(default)]
    pub token: String,
}

impl std::fmt::Debug for AuthenticateResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthenticateResponse").finish_non_exhaustive()
    }
}

/// `POST /v3/kv/compaction`: forget the key-value history before `revision` (the keys' current
/// values stay). Without it every overwritten and deleted value stays in etcd's store.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CompactionRequest {
    /// Keep history from this revision on.
    pub revision: i64,
}

/// `POST /v3/kv/deleterange`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeleteRequest {
    /// The key, or the start of the range.
    #[serde(with = "b64")]
    pub key: Vec<u8>,
    /// The end of the range (exclusive); empty: the key alone.
    #[serde(with = "b64", skip_serializing_if = "is_empty")]
    pub range_end: Vec<u8>,
}

/// What a transaction's compare looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CompareTarget {
    /// The key's version (0: absent).
    Version,
    /// The revision that created the key (0: absent).
    Create,
    /// The revision of the key's last change.
    Mod,
    /// The key's value.
    Value,
}

/// How a compare compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CompareResult {
    /// Equal.
    Equal,
    /// Greater.
    Greater,
    /// Less.
    Less,
    /// Not equal.
    NotEqual,
}

/// One condition of a transaction.
#[derive(Debug, Clone, Serialize)]
pub struct Compare {
    /// Comparison.
    pub result: CompareResult,
    /// What is compared.
    pub target: CompareTarget,
    /// The key.
    #[serde(with = "b64")]
    pub key: Vec<u8>,
    /// With [`CompareTarget::Version`].
    #[serde(with = "int64", skip_serializing_if = "is_zero")]
    pub version: i64,
    /// With [`CompareTarget::Create`].
    #[serde(with = "int64", skip_serializing_if = "is_zero")]
    pub create_revision: i64,
    /// With [`CompareTarget::Mod`].
    #[serde(with = "int64", skip_serializing_if = "is_zero")]
    pub mod_revision: i64,
    /// With [`CompareTarget::Value`].
    #[serde(with = "b64", skip_serializing_if = "is_empty")]
    pub value: Vec<u8>,
}

impl Compare {
    /// `key` was created at revision `revision` (0: `key` does not exist).
    #[must_use]
    pub fn created_at(key: impl Into<Vec<u8>>, revision: i64) -> Self {
        Self {
            result: CompareResult::Equal,
            target: CompareTarget::Create,
            key: key.into(),
            version: 0,
            create_revision: revision,
            mod_revision: 0,
            value: Vec::new(),
        }
    }

    /// `key` holds exactly `value`.
    #[must_use]
    pub fn value_is(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Self {
            result: CompareResult::Equal,
            target: CompareTarget::Value,
            key: key.into(),
            version: 0,
            create_revision: 0,
            mod_revision: 0,
            value: value.into(),
        }
    }
}

/// One operation of a transaction's branch.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestOp {
    /// Read.
    RequestRange(RangeRequest),
    /// Write.
    RequestPut(PutRequest),
    /// Delete.
    RequestDeleteRange(DeleteRequest),
}

/// `POST /v3/kv/txn`: if every compare holds, `success`, else `failure`, atomically.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TxnRequest {
    /// Conditions.
    pub compare: Vec<Compare>,
    /// Done when every condition holds.
    pub success: Vec<RequestOp>,
    /// Done otherwise.
    pub failure: Vec<RequestOp>,
}

/// The answer of one operation of the branch taken.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseOp {
    /// A read's answer.
    ResponseRange(RangeResponse),
    /// A write's answer.
    ResponsePut(serde_json::Value),
    /// A delete's answer.
    ResponseDeleteRange(serde_json::Value),
}

/// Answer to a transaction.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TxnResponse {
    /// The store's revision after it.
    #[serde(default)]
    pub header: ResponseHeader,
    /// Whether the `success` branch was taken.
    #[serde(default)]
    pub succeeded: bool,
    /// The answers of the branch taken, in order.
    #[serde(default)]
    pub responses: Vec<ResponseOp>,
}

impl TxnResponse {
    /// The keys the branch's reads found, in order.
    #[must_use]
    pub fn ranges(&self) -> Vec<&RangeResponse> {
        self.responses
            .iter()
            .filter_map(|r| match r {
                ResponseOp::ResponseRange(range) => Some(range),
                _ => None,
            })
            .collect()
    }
}

/// `POST /v3/lease/grant`.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseGrantRequest {
    /// Time to live, seconds.
    #[serde(rename = "TTL", with = "int64")]
    pub ttl: i64,
}

/// Answer to a grant, and to a keep-alive (inside `result`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LeaseAnswer {
    /// The store's revision.
    #[serde(default)]
    pub header: ResponseHeader,
    /// The lease.
    #[serde(rename = "ID", default, with = "int64")]
    pub id: i64,
    /// Seconds left (0 after a keep-alive: the lease has expired).
    #[serde(rename = "TTL", default, with = "int64")]
    pub ttl: i64,
    /// Why a grant failed.
    #[serde(default)]
    pub error: String,
}

/// `POST /v3/lease/keepalive` and `/v3/lease/revoke`.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseIdRequest {
    /// The lease.
    #[serde(rename = "ID", with = "int64")]
    pub id: i64,
}

/// The gateway's wrapper around a streamed answer (`{"result": …}` or `{"error": …}`).
#[derive(Debug, Clone, Deserialize)]
pub struct Streamed<T> {
    /// The message.
    pub result: Option<T>,
    /// Why the stream failed.
    pub error: Option<GatewayError>,
}

/// An error answer of the gateway.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GatewayError {
    /// gRPC status code.
    #[serde(default)]
    pub code: i32,
    /// Message.
    #[serde(default, alias = "error")]
    pub message: String,
}

/// `POST /v3/watch`: create a watch.
#[derive(Debug, Clone, Serialize)]
pub struct WatchRequest {
    /// The watch to create.
    pub create_request: WatchCreate,
}

/// The watch to create.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WatchCreate {
    /// The key, or the start of the range.
    #[serde(with = "b64")]
    pub key: Vec<u8>,
    /// The end of the range (exclusive); empty: the key alone.
    #[serde(with = "b64", skip_serializing_if = "is_empty")]
    pub range_end: Vec<u8>,
    /// Report changes from this revision on (0: from now).
    #[serde(with = "int64", skip_serializing_if = "is_zero")]
    pub start_revision: i64,
}

/// A change a watch reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum EventType {
    /// A key was written.
    #[default]
    #[serde(rename = "PUT")]
    Put,
    /// A key was deleted (or its lease expired).
    #[serde(rename = "DELETE")]
    Delete,
}

/// One change.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WatchEvent {
    /// Put or delete (the gateway leaves out the default, put).
    #[serde(rename = "type", default)]
    pub kind: EventType,
    /// The key as it is after the change.
    #[serde(default)]
    pub kv: KeyValue,
}

/// One message of a watch stream.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WatchResponse {
    /// The store's revision.
    #[serde(default)]
    pub header: ResponseHeader,
    /// The watch was created.
    #[serde(default)]
    pub created: bool,
    /// The watch was cancelled by the server.
    #[serde(default)]
    pub canceled: bool,
    /// The revision asked for has been compacted away: this is the oldest left.
    #[serde(default, with = "int64")]
    pub compact_revision: i64,
    /// Changes, in revision order.
    #[serde(default)]
    pub events: Vec<WatchEvent>,
}

/// The end of a prefix range: `prefix` with its last byte incremented (etcd's convention).
#[must_use]
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): every key from `prefix` on.
    vec![0]
}

/// Base64 of `bytes`, as the gateway writes keys.
#[must_use]
pub fn encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_answer_of_the_gateway_decodes_with_its_strings_and_base64() {
        let text = r#"{"header":{"cluster_id":"3","member_id":"4","revision":"3","raft_term":"2"},
            "kvs":[{"key":"bGVhZGVy","create_revision":"3","mod_revision":"3","version":"1","value":"YmFy","lease":"7"}],"count":"1"}"#;
        let r: RangeResponse = serde_json::from_str(text).expect("decodes");
        assert_eq!(r.header.revision, 3);
        assert_eq!(r.kvs[0].key, b"leader");
        assert_eq!(r.kvs[0].value, b"bar");
        assert_eq!((r.kvs[0].create_revision, r.kvs[0].lease), (3, 7));
    }

    #[test]
    fn a_transaction_is_written_as_the_gateway_reads_it() {
        let txn = TxnRequest {
            compare: vec![Compare::created_at(b"k".to_vec(), 0)],
            success: vec![RequestOp::RequestPut(PutRequest {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                lease: 12,
            })],
            failure: vec![RequestOp::RequestRange(RangeRequest {
                key: b"k".to_vec(),
                ..RangeRequest::default()
            })],
        };
        let json = serde_json::to_value(&txn).expect("encodes");
        assert_eq!(json["compare"][0]["target"], "CREATE");
        assert_eq!(json["compare"][0]["result"], "EQUAL");
        assert!(json["compare"][0].get("create_revision").is_none(), "0 is the default");
        assert_eq!(json["success"][0]["request_put"]["lease"], "12");
        assert_eq!(json["success"][0]["request_put"]["key"], "aw==");
        assert_eq!(json["failure"][0]["request_range"]["key"], "aw==");
    }

    #[test]
    fn a_watch_message_with_a_delete_and_a_default_put_decodes() {
        let text = r#"{"result":{"header":{"revision":"9"},"events":[
            {"kv":{"key":"YQ==","create_revision":"8","mod_revision":"9","value":"Yg=="}},
            {"type":"DELETE","kv":{"key":"YQ==","mod_revision":"10"}}]}}"#;
        let m: Streamed<WatchResponse> = serde_json::from_str(text).expect("decodes");
        let w = m.result.expect("a result");
        assert_eq!(w.events[0].kind, EventType::Put);
        assert_eq!(w.events[1].kind, EventType::Delete);
        assert_eq!(w.events[1].kv.mod_revision, 10);
    }

    #[test]
    fn a_prefix_ends_after_its_last_byte() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b");
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }

    #[test]
    fn garbage_in_an_int64_or_base64_field_is_an_error_not_a_zero() {
        assert!(serde_json::from_str::<KeyValue>(r#"{"create_revision":"x"}"#).is_err());
        assert!(serde_json::from_str::<KeyValue>(r#"{"key":"!!"}"#).is_err());
    }
}
