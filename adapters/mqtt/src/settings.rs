//! Connection settings: the broker URL, identity, credentials, TLS files and limits, checked
//! when built so that a configuration mistake is reported at start-up, not as a reconnect loop.

use std::fmt;
use std::time::Duration;

use crate::tls::TlsFiles;
use crate::topics::Topics;

/// Default largest event payload, bytes (64 KiB, the `dr.event/1` limit).
pub const DEFAULT_MAX_PAYLOAD: usize = 64 * 1024;

/// A password that never appears in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself, for handing to the MQTT client only.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where the broker is, from `mqtt://host[:port]` (plain, default port 1883) or
/// `mqtts://host[:port]` (TLS, default port 8883).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddr {
    /// Host name or IP address (an IPv6 address keeps its brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Whether the URL asked for TLS (`mqtts://`).
    pub tls: bool,
}

impl fmt::Display for BrokerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "mqtts" } else { "mqtt" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// The URL is not `mqtt://host[:port]` or `mqtts://host[:port]`.
    #[error("broker URL {url:?}: {why}")]
    BadUrl {
        /// The URL as given (credentials never reach this: a URL with them is refused first).
        url: String,
        /// What is wrong and what to write instead.
        why: String,
    },
    /// Another setting is unusable.
    #[error("{what}: {why}")]
    Bad {
        /// The setting.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
}

impl BrokerAddr {
    /// Parses a broker URL. Refuses credentials in the URL (URLs end up in logs; use
    /// `username`/`password`), paths, queries, and schemes other than `mqtt`/`mqtts`.
    pub fn parse(url: &str) -> Result<Self, SettingsError> {
        let url = url.trim();
        let shown: String = url.chars().filter(|c| !c.is_control()).take(200).collect();
        let bad = |why: String| SettingsError::BadUrl {
            url: shown.clone(),
            why,
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected mqtt://host[:port] or mqtts://host[:port]".into()))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "mqtt" | "tcp" => false,
            "mqtts" | "ssl" | "tls" => true,
            "ws" | "wss" => {
                return Err(bad(
                    "MQTT over WebSocket is not supported; use mqtt:// or mqtts://".into()
                ));
            }
            other => {
                let other: String = other.chars().take(20).collect();
                return Err(bad(format!(
                    "unknown scheme {other:?}; use mqtt:// (plain) or mqtts:// (TLS)"
                )));
            }
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains('@') {
            return Err(SettingsError::BadUrl {
                url: format!("{scheme}://<credentials removed>"),
                why: "credentials in the URL would end up in logs; set username and password instead".into(),
            });
        }
        if authority.contains(['/', '?', '#']) {
            return Err(bad(
                "a broker URL has no path, query or fragment: use scheme://host:port".into(),
            ));
        }
        let default_port = if tls { 8883 } else { 1883 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address needs a closing ']'".into()))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("expected ':port' after the IPv6 address".into()))?,
                ),
            };
            (format!("[{addr}]"), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (authority.to_owned(), None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(bad("the host is missing".into()));
        }
        if host.chars().any(|c| c.is_whitespace() || c.is_control()) || host.contains(':') && !host.starts_with('[') {
            return Err(bad(
                "the host contains spaces or ':' (an IPv6 address goes in brackets: [::1])".into(),
            ));
        }
        let port = match port {
            None => default_port,
            Some(p) => match p.parse::<u16>() {
                Ok(0) | Err(_) => {
                    let p: String = p.chars().take(20).collect();
                    return Err(bad(format!("port {p:?} is not a number between 1 and 65535")));
                }
                Ok(n) => n,
            },
        };
        Ok(Self { host, port, tls })
    }
}

/// Reconnection timing: capped exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before reconnection attempt `attempt` (0-based): `initial × 2^attempt`, capped
    /// at `max`, plus up to 10 % jitter from `jitter_seed` so that many gateways restarted
    /// together do not reconnect in lockstep.
    #[must_use]
    pub fn delay(&self, attempt: u32, jitter_seed: u32) -> Duration {
        let base = self
            .initial
            .checked_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX))
            .unwrap_or(self.max)
            .min(self.max);
        let jitter = base / 10 * (jitter_seed % 1000) / 1000;
        base + jitter
    }
}

/// Everything [`crate::MqttLink::connect`] needs.
#[derive(Debug, Clone)]
pub struct MqttSettings {
    /// The broker.
    pub broker: BrokerAddr,
    /// MQTT client id. It names the persistent session, so it must be stable across restarts
    /// and unique among the broker's clients (a second client with the same id takes the
    /// session over).
    pub client_id: String,
    /// User name, if the broker wants one.
    pub username: Option<String>,
    /// Password (never logged).
    pub password: Option<Secret>,
    /// Keep-alive interval, 1–65535 s. Default 30 s.
    pub keep_alive: Duration,
    /// Certificates for `mqtts://`; `None` with `mqtts://` uses the system CA bundle.
    pub tls: Option<TlsFiles>,
    /// The topic tree.
    pub topics: Topics,
    /// Largest event payload passed on, bytes. Default 64 KiB, the `dr.event/1` limit. A
    /// larger one is still read (whatever its size: see the link's docs on why no message may
    /// stop the link) but passed on without its bytes and marked refused, for the application
    /// to answer and acknowledge (redelivering it would not make it smaller).
    pub max_payload: usize,
    /// QoS 0 events waiting for the application beyond which further QoS 0 events are dropped
    /// (at-most-once allows it). QoS 1 events are never dropped: the broker's in-flight window
    /// bounds them (see the link's docs on back-pressure). Default 32.
    pub channel_capacity: usize,
    /// Reconnection timing.
    pub backoff: Backoff,
    /// How long a TCP + TLS + CONNECT attempt may take, seconds. Default 10.
    pub connect_timeout_s: u64,
}

impl MqttSettings {
    /// Settings with defaults, from a broker URL, a client id and the topic tree.
    pub fn new(url: &str, client_id: impl Into<String>, topics: Topics) -> Result<Self, SettingsError> {
        let settings = Self {
            broker: BrokerAddr::parse(url)?,
            client_id: client_id.into(),
            username: None,
            password: None,
            keep_alive: Duration::from_secs(30),
            tls: None,
            topics,
            max_payload: DEFAULT_MAX_PAYLOAD,
            channel_capacity: 32,
            backoff: Backoff::default(),
            connect_timeout_s: 10,
        };
        settings.check()?;
        Ok(settings)
    }

    /// Checks the settings as a whole (also done by `MqttLink::connect`, since fields are
    /// public and may have been changed after [`MqttSettings::new`]).
    pub fn check(&self) -> Result<(), SettingsError> {
        let bad = |what, why: &str| {
            Err(SettingsError::Bad {
                what,
                why: why.to_owned(),
            })
        };
        if self.client_id.is_empty() {
            return bad(
                "client_id",
                "is empty; a persistent session needs a stable client id (e.g. flexgate-<site>)",
            );
        }
        if self.client_id.len() > 256 || self.client_id.chars().any(char::is_control) {
            return bad("client_id", "must be at most 256 bytes without control characters");
        }
        if self.keep_alive < Duration::from_secs(1) || self.keep_alive > Duration::from_secs(65_535) {
            return bad("keep_alive", "must be between 1 and 65535 seconds");
        }
        if self.password.is_some() && self.username.is_none() {
            return bad(
                "password",
                "is set without a username; MQTT 3.1.1 sends a password only with a username",
            );
        }
        if self.tls.is_some() && !self.broker.tls {
            return bad(
                "tls",
                "certificate files are configured but the broker URL is mqtt:// (plain); use mqtts://",
            );
        }
        if self.max_payload == 0 || self.max_payload > 16 * 1024 * 1024 {
            return bad("max_payload", "must be between 1 byte and 16 MiB");
        }
        if self.channel_capacity == 0 || self.channel_capacity > 65_536 {
            return bad("channel_capacity", "must be between 1 and 65536");
        }
        if self.backoff.initial.is_zero() || self.backoff.max < self.backoff.initial {
            return bad("backoff", "initial must be positive and at most max");
        }
        if self.connect_timeout_s == 0 {
            return bad("connect_timeout_s", "must be positive");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let a = BrokerAddr::parse("mqtt://broker.example:1884").unwrap();
        assert_eq!(
            a,
            BrokerAddr {
                host: "broker.example".into(),
                port: 1884,
                tls: false
            }
        );
        assert_eq!(BrokerAddr::parse("mqtts://b").unwrap().port, 8883);
        assert_eq!(BrokerAddr::parse("mqtt://b/").unwrap().port, 1883);
        assert_eq!(BrokerAddr::parse("MQTTS://b:1").unwrap().to_string(), "mqtts://b:1");
        let v6 = BrokerAddr::parse("mqtt://[::1]:1883").unwrap();
        assert_eq!(v6.host, "[::1]");
        assert_eq!(BrokerAddr::parse("mqtts://[fe80::1]").unwrap().port, 8883);
    }

    #[test]
    fn url_errors_are_clear() {
        for (url, needle) in [
            ("broker:1883", "expected mqtt://"),
            ("http://b", "unknown scheme"),
            ("wss://b", "WebSocket"),
            ("mqtt://", "host is missing"),
            ("mqtt://:1883", "host is missing"),
            ("mqtt://b:0", "between 1 and 65535"),
            ("mqtt://b:99999", "between 1 and 65535"),
            ("mqtt://b:x", "between 1 and 65535"),
            ("mqtt://b/path", "no path"),
            ("mqtt://b?x=1", "no path"),
            ("mqtt://[::1", "closing"),
            ("mqtt://[::1]x", "':port'"),
            ("mqtt://a b", "spaces"),
            ("mqtt://::1", "brackets"),
        ] {
            let e = BrokerAddr::parse(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
        let e = BrokerAddr::parse("mqtt://user:hunter2@b").unwrap_err().to_string();
        assert!(e.contains("username and password") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn settings_are_checked() {
        let topics = Topics::for_site("s").unwrap();
        let ok = MqttSettings::new("mqtt://b", "flexgate-s", topics.clone()).unwrap();
        assert_eq!(ok.max_payload, DEFAULT_MAX_PAYLOAD);
        assert!(MqttSettings::new("mqtt://b", "", topics.clone()).is_err());
        let mut s = ok.clone();
        s.keep_alive = Duration::from_millis(500);
        assert!(s.check().is_err());
        let mut s = ok.clone();
        s.password = Some(Secret::new("pw"));
        assert!(s.check().unwrap_err().to_string().contains("username"));
        let mut s = ok.clone();
        s.tls = Some(TlsFiles::default());
        assert!(s.check().unwrap_err().to_string().contains("mqtts://"));
        let mut s = ok;
        s.channel_capacity = 0;
        assert!(s.check().is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        let topics = Topics::for_site("s").unwrap();
        let mut s = MqttSettings::new("mqtt://b", "id", topics).unwrap();
        s.username = Some("gw".into());
        s.password = Some(Secret::new("hunter2"));
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2") && shown.contains("redacted"), "{shown}");
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Backoff::default();
        assert_eq!(b.delay(0, 0), Duration::from_millis(500));
        assert_eq!(b.delay(1, 0), Duration::from_secs(1));
        assert_eq!(b.delay(3, 0), Duration::from_secs(4));
        assert_eq!(b.delay(10, 0), Duration::from_secs(30));
        assert_eq!(b.delay(u32::MAX, 0), Duration::from_secs(30));
        assert!(b.delay(10, 999) <= Duration::from_secs(33));
        assert!(b.delay(0, 500) > Duration::from_millis(500));
    }
}
