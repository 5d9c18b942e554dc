//! Transport-level screening of received events: the checks that need only the event's
//! identity and timing, done before the application parses and acts on it.
//!
//! - the `event_id` in the document must equal the one in the topic (a publisher that is
//!   allowed to write one event topic must not be able to overwrite another event);
//! - de-duplication on `(event_id, revision)`: QoS 1 is at-least-once, and retained events come
//!   back on every subscription, so an equal revision is a [`Rejection::Duplicate`] and a lower
//!   one is [`Rejection::Superseded`];
//! - a stale `issued_at` (older than [`ScreenConfig::max_issued_age`], or further in the future
//!   than [`ScreenConfig::max_clock_skew`]) is refused;
//! - an expired event (its latest possible end, `window.start + randomize_s + duration_s`, is
//!   past) is refused. Open-ended events (`duration_s` absent or null) never expire here.
//!
//! The full `dr.event/1` validation is the application's (`flexgate_dr::parse_dr_event`, then the
//! gateway's event model); this
//! module reads only `event_id`, `revision`, `issued_at`, `window.start`, `window.duration_s`,
//! `window.randomize_s` and `cancel`, with the same strict JSON parser as the signature check
//! (duplicate keys refused).
//!
//! [`Screen::admit`] is everything a receiver does with a payload before its own strict parse:
//! the signature check for the topic it arrived on ([`crate::signature::verify`]), then
//! [`Screen::check`]. The flexgate gateway calls exactly that, and the fuzz target in
//! `adapters/mqtt/fuzz/` drives it with hostile payloads.
//!
//! **Remember only what is recorded.** [`Screen::check`] does not change the screen; call
//! [`Screen::remember`] after the application has flushed the event to its ledger. Otherwise
//! an event whose recording failed would come back (redelivery), be called a duplicate, be
//! acknowledged, and be lost. The screen is in memory and bounded: after a restart, or once
//! more than [`ScreenConfig::capacity`] events are held, the application's ledger remains the
//! authority on duplicates.

use chrono::{DateTime, Duration, Utc};
use std::collections::{HashMap, VecDeque};

use crate::json::{Node, parse_strict};
use crate::signature::{self, MAX_SIGNED_BYTES, SignatureError, SignaturePolicy, TrustedKeys, Verified};

/// The fields of an event the screen needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventHeader {
    /// `event_id`.
    pub event_id: String,
    /// `revision`.
    pub revision: u64,
    /// `issued_at`, when present.
    pub issued_at: Option<DateTime<Utc>>,
    /// The latest instant the event can still be in force (`window.start + randomize_s +
    /// duration_s`); `None` for an open-ended event.
    pub ends_at: Option<DateTime<Utc>>,
    /// `cancel`.
    pub cancel: bool,
}

/// Why a received event is not passed on (or, for the first two, is a harmless repeat).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The same revision was already recorded: a redelivery or a retained copy.
    #[error("event {event_id} revision {revision} is a duplicate")]
    Duplicate {
        /// The event.
        event_id: String,
        /// Its revision.
        revision: u64,
    },
    /// A newer revision was already recorded.
    #[error("event {event_id} revision {revision} is older than the recorded revision {held}")]
    Superseded {
        /// The event.
        event_id: String,
        /// The received revision.
        revision: u64,
        /// The recorded one.
        held: u64,
    },
    /// The document's `event_id` is not the topic's.
    #[error("the document's event_id {in_document:?} differs from the topic's {in_topic:?}")]
    TopicMismatch {
        /// From the topic.
        in_topic: String,
        /// From the document.
        in_document: String,
    },
    /// `issued_at` is too old.
    #[error("issued_at {issued_at} is older than the accepted {max_age_s} s")]
    Stale {
        /// The document's `issued_at`.
        issued_at: DateTime<Utc>,
        /// The configured limit, seconds.
        max_age_s: i64,
    },
    /// `issued_at` is in the future beyond the allowed clock skew.
    #[error("issued_at {issued_at} is in the future (more than {skew_s} s ahead of this clock)")]
    FromTheFuture {
        /// The document's `issued_at`.
        issued_at: DateTime<Utc>,
        /// The allowed skew, seconds.
        skew_s: i64,
    },
    /// The event's window is over.
    #[error("the event ended at {ended_at}")]
    Expired {
        /// The latest end of its window.
        ended_at: DateTime<Utc>,
    },
    /// A field the screen needs is missing or malformed, or the document is not strict JSON.
    #[error("{field}: {message}")]
    Malformed {
        /// Dotted path of the field, or `(document)`.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl Rejection {
    /// Whether this is a normal effect of at-least-once delivery (a duplicate or an older
    /// revision) rather than a refusal the sender should hear about.
    #[must_use]
    pub fn is_repeat(&self) -> bool {
        matches!(self, Rejection::Duplicate { .. } | Rejection::Superseded { .. })
    }
}

/// Why [`Screen::admit`] refused a payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The signature check refused it. Only a problem with the signature itself is worded as
    /// one ("signature: …"): a document the strict parse refuses (not JSON, a repeated key,
    /// too large, not an object) is named as such, with or without keys configured.
    #[error("{}", signature_reason(.0))]
    Signature(SignatureError),
    /// The screen refused it.
    #[error(transparent)]
    Screen(Rejection),
}

fn signature_reason(e: &SignatureError) -> String {
    match e {
        SignatureError::TooLarge(_) | SignatureError::Json(_) | SignatureError::NotAnObject(_) => e.to_string(),
        other => format!("signature: {other}"),
    }
}

impl Refusal {
    /// Whether the document itself is unreadable (too large, not strict JSON, not an object, a
    /// header field missing or malformed), as opposed to readable but not acceptable.
    #[must_use]
    pub fn is_malformed(&self) -> bool {
        matches!(
            self,
            Refusal::Signature(
                SignatureError::TooLarge(_)
                    | SignatureError::Json(_)
                    | SignatureError::NotAnObject(_)
                    | SignatureError::UnsafeInteger(_)
                    | SignatureError::NonFinite
            ) | Refusal::Screen(Rejection::Malformed { .. })
        )
    }
}

/// Limits of the screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenConfig {
    /// Oldest accepted `issued_at`; `None` disables the check. Default 7 days: day-ahead events
    /// are retained and re-read on every subscription, so this only bounds replays of ancient
    /// documents.
    pub max_issued_age: Option<Duration>,
    /// How far `issued_at` may lie ahead of this clock. Default 5 minutes.
    pub max_clock_skew: Duration,
    /// Most events remembered for de-duplication. Default 4096.
    pub capacity: usize,
}

impl Default for ScreenConfig {
    fn default() -> Self {
        Self {
            max_issued_age: Some(Duration::days(7)),
            max_clock_skew: Duration::minutes(5),
            capacity: 4096,
        }
    }
}

/// De-duplication and freshness checks (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Screen {
    config: ScreenConfig,
    /// event_id → (highest recorded revision, its end).
    held: HashMap<String, (u64, Option<DateTime<Utc>>)>,
    /// Insertion order, for eviction.
    order: VecDeque<String>,
}

impl Screen {
    /// An empty screen.
    #[must_use]
    pub fn new(config: ScreenConfig) -> Self {
        Self {
            config,
            held: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Everything a payload received on `topic` (whose event id is `topic_event_id`) goes
    /// through before the application's strict parse: the signature for that topic under
    /// `policy`, then [`Screen::check`]. Changes nothing.
    pub fn admit(
        &self,
        topic: &str,
        topic_event_id: &str,
        payload: &[u8],
        keys: &TrustedKeys,
        policy: SignaturePolicy,
        now: DateTime<Utc>,
    ) -> Result<(Verified, EventHeader), Refusal> {
        let verified = signature::verify(topic, payload, keys, policy).map_err(Refusal::Signature)?;
        let header = self.check(topic_event_id, payload, now).map_err(Refusal::Screen)?;
        Ok((verified, header))
    }

    /// Reads the header of `bytes` and checks it against the topic's event id, the recorded
    /// revisions and the clock. Changes nothing; see [`Screen::remember`].
    pub fn check(&self, topic_event_id: &str, bytes: &[u8], now: DateTime<Utc>) -> Result<EventHeader, Rejection> {
        let header = read_header(bytes)?;
        self.check_header(topic_event_id, &header, now)?;
        Ok(header)
    }

    /// [`Screen::check`] for a header already read.
    pub fn check_header(&self, topic_event_id: &str, h: &EventHeader, now: DateTime<Utc>) -> Result<(), Rejection> {
        if h.event_id != topic_event_id {
            return Err(Rejection::TopicMismatch {
                in_topic: topic_event_id.to_owned(),
                in_document: h.event_id.chars().take(128).collect(),
            });
        }
        if let Some((held, _)) = self.held.get(&h.event_id) {
            if h.revision == *held {
                return Err(Rejection::Duplicate {
                    event_id: h.event_id.clone(),
                    revision: h.revision,
                });
            }
            if h.revision < *held {
                return Err(Rejection::Superseded {
                    event_id: h.event_id.clone(),
                    revision: h.revision,
                    held: *held,
                });
            }
        }
        if let Some(issued_at) = h.issued_at {
            // A configured skew too large to add means "no limit".
            if now
                .checked_add_signed(self.config.max_clock_skew)
                .is_some_and(|latest| issued_at > latest)
            {
                return Err(Rejection::FromTheFuture {
                    issued_at,
                    skew_s: self.config.max_clock_skew.num_seconds(),
                });
            }
            if let Some(max) = self.config.max_issued_age
                && now - issued_at > max
            {
                return Err(Rejection::Stale {
                    issued_at,
                    max_age_s: max.num_seconds(),
                });
            }
        }
        if let Some(ended_at) = h.ends_at
            && ended_at <= now
        {
            return Err(Rejection::Expired { ended_at });
        }
        Ok(())
    }

    /// Records that `header`'s revision is in the application's ledger. Call it only after the
    /// ledger write is flushed. When full, forgets ended events first, then the oldest.
    pub fn remember(&mut self, header: &EventHeader, now: DateTime<Utc>) {
        let fresh = match self.held.get_mut(&header.event_id) {
            Some(entry) => {
                if header.revision > entry.0 {
                    *entry = (header.revision, header.ends_at);
                }
                false
            }
            None => true,
        };
        if !fresh {
            return;
        }
        if self.held.len() >= self.config.capacity.max(1) {
            self.held.retain(|_, (_, end)| end.is_none_or(|e| e > now));
            self.order.retain(|id| self.held.contains_key(id));
            while self.held.len() >= self.config.capacity.max(1) {
                match self.order.pop_front() {
                    Some(oldest) => {
                        self.held.remove(&oldest);
                    }
                    None => break,
                }
            }
        }
        self.held
            .insert(header.event_id.clone(), (header.revision, header.ends_at));
        self.order.push_back(header.event_id.clone());
    }

    /// The highest recorded revision of an event.
    #[must_use]
    pub fn held_revision(&self, event_id: &str) -> Option<u64> {
        self.held.get(event_id).map(|(r, _)| *r)
    }

    /// How many events are remembered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no event is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

fn malformed(field: &'static str, message: impl Into<String>) -> Rejection {
    Rejection::Malformed {
        field,
        message: message.into(),
    }
}

/// Reads the screen's fields from an event document (strict JSON, at most 64 KiB).
pub fn read_header(bytes: &[u8]) -> Result<EventHeader, Rejection> {
    if bytes.len() > MAX_SIGNED_BYTES {
        return Err(malformed(
            "(document)",
            format!("{} bytes is more than the {MAX_SIGNED_BYTES}-byte limit", bytes.len()),
        ));
    }
    let root = parse_strict(bytes).map_err(|e| malformed("(document)", format!("not acceptable JSON: {e}")))?;
    if !matches!(root, Node::Obj(_)) {
        return Err(malformed("(document)", format!("{} is not a JSON object", root.kind())));
    }
    let event_id = match root.get("event_id") {
        Some(Node::Str(s)) if !s.is_empty() => s.clone(),
        Some(other) => {
            return Err(malformed(
                "event_id",
                format!("must be a non-empty string, not {}", other.kind()),
            ));
        }
        None => return Err(malformed("event_id", "missing")),
    };
    let revision = match root.get("revision") {
        Some(Node::U(u)) => *u,
        Some(Node::F(f)) if f.fract() == 0.0 && *f >= 0.0 && *f < 9.007_199_254_740_992e15 => *f as u64,
        Some(_) => return Err(malformed("revision", "must be a non-negative integer")),
        None => return Err(malformed("revision", "missing")),
    };
    let issued_at = match root.get("issued_at") {
        None | Some(Node::Null) => None,
        Some(node) => Some(time("issued_at", node)?),
    };
    let cancel = matches!(root.get("cancel"), Some(Node::Bool(true)));
    let window = match root.get("window") {
        Some(w @ Node::Obj(_)) => w,
        Some(other) => return Err(malformed("window", format!("must be an object, not {}", other.kind()))),
        None => return Err(malformed("window", "missing")),
    };
    let start = match window.get("start") {
        Some(node) => time("window.start", node)?,
        None => return Err(malformed("window.start", "missing")),
    };
    let duration_s = seconds("window.duration_s", window.get("duration_s"))?;
    let randomize_s = seconds("window.randomize_s", window.get("randomize_s"))?.unwrap_or(0);
    // Checked: a hostile start near the end of the calendar must not overflow.
    let ends_at = match duration_s {
        None => None,
        Some(d) => Some(
            start
                .checked_add_signed(Duration::seconds(d.saturating_add(randomize_s)))
                .ok_or_else(|| malformed("window.start", "is too far in the future"))?,
        ),
    };
    Ok(EventHeader {
        event_id,
        revision,
        issued_at,
        ends_at,
        cancel,
    })
}

fn time(field: &'static str, node: &Node) -> Result<DateTime<Utc>, Rejection> {
    match node {
        Node::Str(s) => DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| malformed(field, format!("not an RFC 3339 time with an offset: {e}"))),
        other => Err(malformed(
            field,
            format!("must be an RFC 3339 string, not {}", other.kind()),
        )),
    }
}

/// A bounded count of seconds: at most the `dr.event/1` limit (7 days), which every valid
/// window, ramp, recovery and randomization respects.
fn seconds(field: &'static str, node: Option<&Node>) -> Result<Option<i64>, Rejection> {
    const LIMIT: u64 = flexgate_dr::MAX_DURATION_S;
    match node {
        None | Some(Node::Null) => Ok(None),
        Some(Node::U(u)) if *u <= LIMIT => Ok(i64::try_from(*u).ok()),
        Some(Node::F(f)) if f.fract() == 0.0 && *f >= 0.0 && *f <= LIMIT as f64 => Ok(Some(*f as i64)),
        Some(_) => Err(malformed(
            field,
            format!("must be a whole number of seconds between 0 and {LIMIT}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn doc(rev: u64) -> String {
        format!(
            r#"{{"schema":"dr.event/1","event_id":"ev-1","revision":{rev},"issued_at":"2026-07-14T18:59:40Z",
            "target":{{"form":"ceiling","point":"meter","kw":8000}},
            "window":{{"start":"2026-07-14T19:00:00Z","ramp_s":600,"duration_s":7200,"randomize_s":60}}}}"#
        )
    }

    const NOW: &str = "2026-07-14T19:00:05Z";

    #[test]
    fn header_fields() {
        let h = read_header(doc(3).as_bytes()).unwrap();
        assert_eq!(h.event_id, "ev-1");
        assert_eq!(h.revision, 3);
        assert_eq!(h.issued_at, Some(t("2026-07-14T18:59:40Z")));
        assert_eq!(h.ends_at, Some(t("2026-07-14T21:01:00Z")));
        assert!(!h.cancel);
        let open = doc(1).replace("\"duration_s\":7200", "\"duration_s\":null");
        assert_eq!(read_header(open.as_bytes()).unwrap().ends_at, None);
    }

    #[test]
    fn duplicates_and_older_revisions() {
        let mut s = Screen::default();
        let now = t(NOW);
        let h = s.check("ev-1", doc(3).as_bytes(), now).unwrap();
        // Checking alone remembers nothing: a failed ledger write must not turn the
        // redelivery into a "duplicate".
        assert!(s.check("ev-1", doc(3).as_bytes(), now).is_ok());
        s.remember(&h, now);
        let e = s.check("ev-1", doc(3).as_bytes(), now).unwrap_err();
        assert!(matches!(e, Rejection::Duplicate { revision: 3, .. }) && e.is_repeat());
        let e = s.check("ev-1", doc(2).as_bytes(), now).unwrap_err();
        assert_eq!(
            e,
            Rejection::Superseded {
                event_id: "ev-1".into(),
                revision: 2,
                held: 3
            }
        );
        let h4 = s.check("ev-1", doc(4).as_bytes(), now).unwrap();
        s.remember(&h4, now);
        assert_eq!(s.held_revision("ev-1"), Some(4));
        // Remembering an older revision later does not lower the mark.
        s.remember(&h, now);
        assert_eq!(s.held_revision("ev-1"), Some(4));
    }

    #[test]
    fn stale_future_and_expired() {
        let s = Screen::default();
        let e = s
            .check("ev-1", doc(1).as_bytes(), t("2026-07-22T19:00:00Z"))
            .unwrap_err();
        assert!(matches!(e, Rejection::Stale { .. }) && !e.is_repeat(), "{e}");
        let e = s
            .check("ev-1", doc(1).as_bytes(), t("2026-07-14T18:50:00Z"))
            .unwrap_err();
        assert!(matches!(e, Rejection::FromTheFuture { .. }), "{e}");
        let e = s
            .check("ev-1", doc(1).as_bytes(), t("2026-07-14T21:01:00Z"))
            .unwrap_err();
        assert_eq!(
            e,
            Rejection::Expired {
                ended_at: t("2026-07-14T21:01:00Z")
            }
        );
        assert!(s.check("ev-1", doc(1).as_bytes(), t("2026-07-14T21:00:59Z")).is_ok());
        let lenient = Screen::new(ScreenConfig {
            max_issued_age: None,
            ..ScreenConfig::default()
        });
        let open = doc(1).replace("\"duration_s\":7200", "\"duration_s\":null");
        assert!(
            lenient
                .check("ev-1", open.as_bytes(), t("2027-01-01T00:00:00Z"))
                .is_ok()
        );
    }

    #[test]
    fn topic_and_document_must_agree() {
        let e = Screen::default().check("ev-2", doc(1).as_bytes(), t(NOW)).unwrap_err();
        assert!(matches!(e, Rejection::TopicMismatch { .. }), "{e}");
    }

    #[test]
    fn durations_beyond_the_document_limit_are_refused_with_that_limit() {
        let doc = |d: u64| {
            format!(
                r#"{{"schema":"dr.event/1","event_id":"e","revision":1,"window":{{"start":"2026-07-14T19:00:00Z","duration_s":{d}}}}}"#
            )
        };
        assert!(read_header(doc(604_800).as_bytes()).is_ok());
        match read_header(doc(604_801).as_bytes()).unwrap_err() {
            Rejection::Malformed { field, message } => {
                assert_eq!(field, "window.duration_s");
                assert!(message.contains("604800"), "{message}");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn malformed_headers_name_their_field() {
        let field = |d: &str| match read_header(d.as_bytes()).unwrap_err() {
            Rejection::Malformed { field, .. } => field,
            other => panic!("{other}"),
        };
        assert_eq!(field(&doc(1).replace("\"revision\":1", "\"revision\":-1")), "revision");
        assert_eq!(field(&doc(1).replace("\"revision\":1,", "")), "revision");
        assert_eq!(
            field(&doc(1).replace("\"event_id\":\"ev-1\"", "\"event_id\":7")),
            "event_id"
        );
        assert_eq!(field(&doc(1).replace("18:59:40Z", "18:59:40")), "issued_at");
        assert_eq!(
            field(&doc(1).replace("\"duration_s\":7200", "\"duration_s\":1e300")),
            "window.duration_s"
        );
        assert_eq!(field(&doc(1).replace("\"start\":", "\"begin\":")), "window.start");
        assert_eq!(
            field(&doc(1).replace("\"revision\":1", "\"revision\":1,\"revision\":2")),
            "(document)"
        );
        assert_eq!(field("[]"), "(document)");
        // Years beyond 9999 are not RFC 3339; the end arithmetic is checked all the same.
        let end_of_time = doc(1).replace("2026-07-14T19:00:00Z", "+262142-12-31T23:59:59Z");
        assert_eq!(field(&end_of_time), "window.start");
        assert_eq!(field(&" ".repeat(70_000)), "(document)");
    }

    #[test]
    fn admit_checks_the_signature_for_the_topic_then_the_screen() {
        use crate::signature::attach_signature;
        let key = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
        let keys = TrustedKeys::from_keys(vec![key.verifying_key()]).unwrap();
        let topic = "dr/s/events/ev-1";
        let mut v: serde_json::Value = serde_json::from_str(&doc(1)).unwrap();
        attach_signature(topic, &mut v, &key).unwrap();
        let bytes = v.to_string();
        let s = Screen::default();
        let now = t(NOW);
        let (verified, header) = s
            .admit(topic, "ev-1", bytes.as_bytes(), &keys, SignaturePolicy::Required, now)
            .unwrap();
        assert_eq!(verified, Verified::Signed { key_index: 0 });
        assert_eq!(header.revision, 1);
        // Signed for this topic only.
        let e = s
            .admit(
                "dr/t/events/ev-1",
                "ev-1",
                bytes.as_bytes(),
                &keys,
                SignaturePolicy::Optional,
                now,
            )
            .unwrap_err();
        assert!(
            matches!(e, Refusal::Signature(SignatureError::BadSignature { .. })),
            "{e}"
        );
        assert!(e.to_string().starts_with("signature: "), "{e}");
        assert!(!e.is_malformed());
        // The signature holds, the screen refuses.
        let e = s
            .admit(
                topic,
                "ev-1",
                bytes.as_bytes(),
                &keys,
                SignaturePolicy::Required,
                t("2026-07-30T00:00:00Z"),
            )
            .unwrap_err();
        assert!(matches!(e, Refusal::Screen(Rejection::Stale { .. })), "{e}");
        // Unsigned documents pass only where signatures are optional.
        let unsigned = doc(1);
        let e = s
            .admit(
                topic,
                "ev-1",
                unsigned.as_bytes(),
                &keys,
                SignaturePolicy::Required,
                now,
            )
            .unwrap_err();
        assert_eq!(e, Refusal::Signature(SignatureError::Missing));
        assert!(
            s.admit(
                topic,
                "ev-1",
                unsigned.as_bytes(),
                &keys,
                SignaturePolicy::Optional,
                now
            )
            .is_ok()
        );
    }

    #[test]
    fn only_signature_problems_are_called_signature_problems() {
        let e = Refusal::Signature(SignatureError::Json("duplicate key \"a\"".into()));
        assert_eq!(
            e.to_string(),
            "the document is not acceptable JSON: duplicate key \"a\""
        );
        assert!(e.is_malformed());
        assert!(
            Refusal::Signature(SignatureError::Missing)
                .to_string()
                .starts_with("signature: ")
        );
        let keys = TrustedKeys::default();
        let e = Screen::default()
            .admit("dr/s/events/e", "e", b"{", &keys, SignaturePolicy::Optional, t(NOW))
            .unwrap_err();
        assert!(e.to_string().starts_with("the document is not acceptable JSON"), "{e}");
        let e = Screen::default()
            .admit("dr/s/events/e", "e", b"{", &keys, SignaturePolicy::Off, t(NOW))
            .unwrap_err();
        assert!(
            matches!(e, Refusal::Screen(Rejection::Malformed { .. })) && e.is_malformed(),
            "{e}"
        );
    }

    #[test]
    fn memory_is_bounded_and_ended_events_go_first() {
        let mut s = Screen::new(ScreenConfig {
            capacity: 3,
            ..ScreenConfig::default()
        });
        let now = t(NOW);
        let header = |id: &str, ends: Option<&str>| EventHeader {
            event_id: id.into(),
            revision: 1,
            issued_at: None,
            ends_at: ends.map(t),
            cancel: false,
        };
        s.remember(&header("open", None), now);
        s.remember(&header("ended", Some("2026-07-14T19:00:01Z")), now);
        s.remember(&header("later", Some("2026-07-15T00:00:00Z")), now);
        s.remember(&header("new", None), now);
        assert_eq!(s.len(), 3);
        assert_eq!(s.held_revision("ended"), None);
        s.remember(&header("newer", None), now);
        assert_eq!(s.len(), 3);
        assert_eq!(s.held_revision("open"), None, "the oldest goes when nothing has ended");
        assert!(s.held_revision("newer").is_some());
    }
}
