//! The topic tree of one site, under `{prefix}/{site}/` (the table in this crate's README):
//!
//! | Topic | Direction | QoS / retain |
//! |---|---|---|
//! | `{prefix}/{site}/events/{event_id}` | utility → gateway | QoS 1, retained |
//! | `{prefix}/{site}/acks/{event_id}` | gateway → utility | QoS 1 |
//! | `{prefix}/{site}/status` | gateway → utility | QoS 1, retained, also the Last Will |
//! | `{prefix}/{site}/telemetry` | gateway → utility | QoS 1 |
//! | `{prefix}/{site}/reports/{event_id}` | gateway → utility | QoS 1 |
//!
//! Rules, checked once when [`Topics`] is built so that every topic it renders is valid:
//!
//! - `site` is one topic level: 1–128 characters, no `/`, `+`, `#`, no control characters, and
//!   it does not start with `$` (brokers reserve `$` topics).
//! - `prefix` may span several levels (`utility-x/dr` is fine) so that a deployment can nest the
//!   tree under its own namespace; each level follows the `site` rules except the 128-character
//!   limit, which applies to the whole prefix (at most 256 characters).
//! - An event id used in a topic follows the `dr.event/1` rule (1–128 printable characters, no
//!   leading or trailing whitespace) and also may not contain `/`, `+` or `#`.

use std::fmt;

/// The default first level of the topic tree.
pub const DEFAULT_PREFIX: &str = "dr";
/// Longest site name, characters.
pub const MAX_SITE_CHARS: usize = 128;
/// Longest prefix, characters.
pub const MAX_PREFIX_CHARS: usize = 256;
/// Longest event id, characters (the `dr.event/1` limit).
pub const MAX_EVENT_ID_CHARS: usize = 128;

/// Why a topic, site, prefix or event id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// A configured name (site or prefix) breaks the rules in the module docs.
    #[error("{what} {shown:?} is not usable in an MQTT topic: {why}")]
    BadName {
        /// `"site"`, `"prefix"` or `"event_id"`.
        what: &'static str,
        /// The offending value, truncated and without control characters.
        shown: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// A received topic is not `{prefix}/{site}/events/{event_id}` of this site.
    #[error("topic {shown:?} is not an event topic of this site (expected {expected}/<event_id>)")]
    NotOurs {
        /// The received topic, truncated and without control characters.
        shown: String,
        /// The expected topic stem.
        expected: String,
    },
}

/// The topic tree of one site. Build it with [`Topics::new`]; every accessor then returns a
/// valid topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    prefix: String,
    site: String,
    /// `{prefix}/{site}/events/`, kept to match received topics without allocating.
    events_stem: String,
}

impl Topics {
    /// Validates `prefix` and `site` (rules in the module docs).
    pub fn new(prefix: impl Into<String>, site: impl Into<String>) -> Result<Self, TopicError> {
        let prefix = prefix.into();
        let site = site.into();
        check_prefix(&prefix)?;
        check_level("site", &site, MAX_SITE_CHARS)?;
        let events_stem = format!("{prefix}/{site}/events/");
        Ok(Self {
            prefix,
            site,
            events_stem,
        })
    }

    /// [`Topics::new`] with the default prefix `dr`.
    pub fn for_site(site: impl Into<String>) -> Result<Self, TopicError> {
        Self::new(DEFAULT_PREFIX, site)
    }

    /// The configured prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The configured site.
    #[must_use]
    pub fn site(&self) -> &str {
        &self.site
    }

    /// The subscription filter for events: `{prefix}/{site}/events/+`.
    #[must_use]
    pub fn events_filter(&self) -> String {
        format!("{}+", self.events_stem)
    }

    /// The topic an event is published on (for publishers and tests).
    pub fn event(&self, event_id: &str) -> Result<String, TopicError> {
        check_event_id(event_id)?;
        Ok(format!("{}{event_id}", self.events_stem))
    }

    /// `{prefix}/{site}/acks/{event_id}`.
    pub fn ack(&self, event_id: &str) -> Result<String, TopicError> {
        check_event_id(event_id)?;
        Ok(format!("{}/{}/acks/{event_id}", self.prefix, self.site))
    }

    /// `{prefix}/{site}/reports/{event_id}`.
    pub fn report(&self, event_id: &str) -> Result<String, TopicError> {
        check_event_id(event_id)?;
        Ok(format!("{}/{}/reports/{event_id}", self.prefix, self.site))
    }

    /// `{prefix}/{site}/status` (retained; also the Last Will topic).
    #[must_use]
    pub fn status(&self) -> String {
        format!("{}/{}/status", self.prefix, self.site)
    }

    /// `{prefix}/{site}/telemetry`.
    #[must_use]
    pub fn telemetry(&self) -> String {
        format!("{}/{}/telemetry", self.prefix, self.site)
    }

    /// The event id of a received event topic. Refuses topics of other sites or prefixes,
    /// wildcards, extra levels and ids that break the event-id rules, so that an id taken from
    /// a topic can be used to build the matching ack topic.
    pub fn event_id_from_topic<'t>(&self, topic: &'t str) -> Result<&'t str, TopicError> {
        let not_ours = || TopicError::NotOurs {
            shown: shown(topic),
            expected: self.events_stem.trim_end_matches('/').to_owned(),
        };
        // A cheap bound first: a hostile topic can be 64 KiB long.
        if topic.len() > self.events_stem.len() + 4 * MAX_EVENT_ID_CHARS {
            return Err(not_ours());
        }
        let id = topic.strip_prefix(self.events_stem.as_str()).ok_or_else(not_ours)?;
        check_event_id(id)?;
        Ok(id)
    }
}

impl fmt::Display for Topics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.prefix, self.site)
    }
}

/// Checks an event id for use as one topic level (rules in the module docs).
pub fn check_event_id(id: &str) -> Result<(), TopicError> {
    let bad = |why| TopicError::BadName {
        what: "event_id",
        shown: shown(id),
        why,
    };
    check_level("event_id", id, MAX_EVENT_ID_CHARS)?;
    if id.starts_with(char::is_whitespace) || id.ends_with(char::is_whitespace) {
        return Err(bad("it starts or ends with whitespace"));
    }
    Ok(())
}

fn check_prefix(prefix: &str) -> Result<(), TopicError> {
    if prefix.chars().count() > MAX_PREFIX_CHARS {
        return Err(TopicError::BadName {
            what: "prefix",
            shown: shown(prefix),
            why: "it is longer than 256 characters",
        });
    }
    if prefix.is_empty() {
        return Err(TopicError::BadName {
            what: "prefix",
            shown: String::new(),
            why: "it is empty (the default is \"dr\")",
        });
    }
    for level in prefix.split('/') {
        if level.is_empty() {
            return Err(TopicError::BadName {
                what: "prefix",
                shown: shown(prefix),
                why: "it has an empty level (a leading, trailing or doubled '/')",
            });
        }
        check_level("prefix", level, MAX_PREFIX_CHARS).map_err(|e| match e {
            TopicError::BadName { why, .. } => TopicError::BadName {
                what: "prefix",
                shown: shown(prefix),
                why,
            },
            other => other,
        })?;
    }
    Ok(())
}

fn check_level(what: &'static str, level: &str, max_chars: usize) -> Result<(), TopicError> {
    let bad = |why| TopicError::BadName {
        what,
        shown: shown(level),
        why,
    };
    if level.is_empty() {
        return Err(bad("it is empty"));
    }
    if level.len() > 4 * max_chars || level.chars().count() > max_chars {
        return Err(bad("it is too long"));
    }
    if level.starts_with('$') {
        return Err(bad("it starts with '$', which brokers reserve for their own topics"));
    }
    if level.contains(['/', '+', '#']) {
        return Err(bad("it contains '/', '+' or '#'"));
    }
    if level.chars().any(char::is_control) {
        return Err(bad("it contains a control character"));
    }
    Ok(())
}

/// A value as it may appear in an error: no control characters, at most 80 characters.
fn shown(raw: &str) -> String {
    let mut s: String = raw.chars().filter(|c| !c.is_control()).take(80).collect();
    if raw.chars().nth(80).is_some() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_tree() {
        let t = Topics::for_site("dc-east").unwrap();
        assert_eq!(t.events_filter(), "dr/dc-east/events/+");
        assert_eq!(t.event("ev-1").unwrap(), "dr/dc-east/events/ev-1");
        assert_eq!(t.ack("ev-1").unwrap(), "dr/dc-east/acks/ev-1");
        assert_eq!(t.report("ev-1").unwrap(), "dr/dc-east/reports/ev-1");
        assert_eq!(t.status(), "dr/dc-east/status");
        assert_eq!(t.telemetry(), "dr/dc-east/telemetry");
        assert_eq!(t.to_string(), "dr/dc-east");
        let nested = Topics::new("utility-x/dr", "dc-east").unwrap();
        assert_eq!(nested.events_filter(), "utility-x/dr/dc-east/events/+");
    }

    #[test]
    fn event_ids_from_topics() {
        let t = Topics::for_site("dc-east").unwrap();
        assert_eq!(
            t.event_id_from_topic("dr/dc-east/events/ev-2026-0142").unwrap(),
            "ev-2026-0142"
        );
        for bad in [
            "dr/dc-east/events/",
            "dr/dc-east/events/+",
            "dr/dc-east/events/#",
            "dr/dc-east/events/a/b",
            "dr/dc-west/events/ev-1",
            "dr/dc-east/acks/ev-1",
            "xx/dc-east/events/ev-1",
            "dr/dc-east/events",
            "dr/dc-east/events/ ev",
            "dr/dc-east/events/ev\u{7}",
            "",
        ] {
            assert!(t.event_id_from_topic(bad).is_err(), "{bad:?}");
        }
        let huge = format!("dr/dc-east/events/{}", "x".repeat(70_000));
        let e = t.event_id_from_topic(&huge).unwrap_err();
        assert!(e.to_string().len() < 300, "{e}");
        let long_id = format!("dr/dc-east/events/{}", "x".repeat(129));
        assert!(t.event_id_from_topic(&long_id).is_err());
        let max_id = format!("dr/dc-east/events/{}", "é".repeat(128));
        assert!(t.event_id_from_topic(&max_id).is_ok());
    }

    #[test]
    fn names_are_validated() {
        for site in ["", "a/b", "a+", "#", "$SYS", "a\nb", &"s".repeat(129)] {
            assert!(Topics::for_site(site).is_err(), "{site:?}");
        }
        for prefix in ["", "/dr", "dr/", "a//b", "dr/+", "$share/x", "a/#"] {
            let e = Topics::new(prefix, "site").unwrap_err();
            assert!(
                matches!(e, TopicError::BadName { what: "prefix", .. }),
                "{prefix:?}: {e}"
            );
        }
        let e = Topics::for_site("a/b").unwrap_err();
        assert!(e.to_string().contains("'/'"), "{e}");
        assert!(Topics::new("a/b/c", "s").is_ok());
        assert!(Topics::for_site("dc east ü").is_ok());
    }

    #[test]
    fn output_topics_refuse_bad_ids() {
        let t = Topics::for_site("s").unwrap();
        for id in ["", "a/b", "+", "a#", " a", "a "] {
            assert!(t.ack(id).is_err(), "{id:?}");
            assert!(t.report(id).is_err(), "{id:?}");
        }
    }
}
