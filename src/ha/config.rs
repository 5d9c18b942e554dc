//! `[ha]`: this gateway is one of a site's replicas, elected on etcd.

use serde::{Deserialize, Serialize};

/// Seconds the takeover itself may take after a term lapses (campaign, catch-up, re-leasing every
/// cap), which the agents' leases must outlast beside the term.
pub const TAKEOVER_BUDGET_S: u64 = 6;

/// The replicas' settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaConfig {
    /// This replica's name, unique among the site's replicas (letters, digits, `.`, `_`, `-`;
    /// at most 64): it names the leader in a standby's refusals and in `flexgate ha status`.
    pub replica: String,
    /// The etcd cluster's client URLs (`http(s)://host:port`), all of them: a replica talks
    /// to whichever answers.
    pub endpoints: Vec<String>,
    /// This replica's API as the others (and clients sent to the leader) reach it, e.g.
    /// `https://gw-a.example:8080`.
    #[serde(default)]
    pub advertise_url: Option<String>,
    /// How long a term lasts without renewal: a leader that stops renewing (dead, paused, cut
    /// off) is replaced this long after its last renewal, and stops acting itself a second
    /// before. It must be shorter than the agents' lease margin (see the check).
    #[serde(default = "default_term_ttl_s")]
    pub term_ttl_s: u64,
    /// The keys' prefix in etcd (the site's name follows).
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Deadline of one call to etcd, ms.
    #[serde(default = "default_etcd_timeout_ms")]
    pub etcd_timeout_ms: u64,
    /// The newest records the leader keeps in etcd in any case; older batches are deleted from
    /// etcd once every registered replica holds them (`src/ha/retention.rs`), to stay within etcd's
    /// space quota. A replica away for longer than that comes back from a copy of another
    /// replica's data directory. At least 1000.
    #[serde(default = "default_retain_records")]
    pub retain_records: u64,
    /// TLS to etcd (with `https://` endpoints): the CA that signs the members' certificates
    /// and, for etcd's `--client-cert-auth`, this replica's certificate and key. Absent with
    /// `https://` endpoints: the system's roots.
    #[serde(default)]
    pub tls: Option<EtcdTls>,
    /// The etcd user this replica authenticates as, where etcd's auth is enabled; its password
    /// is read from `password_file` (never from this file, never logged).
    #[serde(default)]
    pub user: Option<String>,
    /// The file holding `user`'s password (mode 0600; the first line, trimmed).
    #[serde(default)]
    pub password_file: Option<std::path::PathBuf>,
}

/// `[ha.tls]`: PEM files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdTls {
    /// The CA certificates that sign the etcd members' certificates.
    pub ca_file: std::path::PathBuf,
    /// This replica's client certificate chain, for etcd's `--client-cert-auth`.
    #[serde(default)]
    pub cert_file: Option<std::path::PathBuf>,
    /// Its private key.
    #[serde(default)]
    pub key_file: Option<std::path::PathBuf>,
}

fn default_term_ttl_s() -> u64 {
    10
}
fn default_prefix() -> String {
    "/flexgate".to_string()
}
fn default_etcd_timeout_ms() -> u64 {
    2_000
}
fn default_retain_records() -> u64 {
    100_000
}

impl HaConfig {
    /// Check it; `agent_renew_every_s` is the agents backend's renewal period when the
    /// backend is agents (their leases last three periods): a term must lapse and the next
    /// leader re-lease every cap before a lease renewed just before the old leader died runs
    /// out, or GPUs are restored in the middle of the commitment.
    pub fn validate(&self, agent_renew_every_s: Option<u64>) -> Result<(), (&'static str, String)> {
        let name_ok = !self.replica.is_empty()
            && self.replica.len() <= 64
            && self
                .replica
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !name_ok {
            return Err((
                "ha.replica",
                format!(
                    "{:?} is not a replica name: 1–64 letters, digits, '.', '_' or '-'",
                    self.replica
                ),
            ));
        }
        if self.endpoints.is_empty() {
            return Err((
                "ha.endpoints",
                "list the etcd cluster's client URLs (http(s)://host:port)".into(),
            ));
        }
        for endpoint in &self.endpoints {
            flexgate_etcd::check_endpoint(endpoint).map_err(|e| ("ha.endpoints", e.to_string()))?;
        }
        if let Some(url) = &self.advertise_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err((
                "ha.advertise_url",
                format!("{url:?} must be this replica's API URL, http(s)://host:port"),
            ));
        }
        if !(2..=120).contains(&self.term_ttl_s) {
            return Err(("ha.term_ttl_s", "must be 2–120 seconds".into()));
        }
        if let Some(renew) = agent_renew_every_s {
            // A lease renewed at t lasts to t + 3·renew; the old leader may have renewed just
            // before it died, or just before its previous renewal failed: count one period lost.
            let margin = 2 * renew;
            if self.term_ttl_s + TAKEOVER_BUDGET_S > margin {
                return Err((
                    "ha.term_ttl_s",
                    format!(
                        "{} s plus the takeover ({TAKEOVER_BUDGET_S} s) is longer than the agents' lease margin ({margin} s: \
                         leases last 3 × backend.renew_every_s = {} s, one renewal may be lost), so caps could lapse during \
                         a takeover; lower ha.term_ttl_s to at most {} or raise backend.renew_every_s",
                        self.term_ttl_s,
                        3 * renew,
                        margin.saturating_sub(TAKEOVER_BUDGET_S)
                    ),
                ));
            }
        }
        if !self.prefix.starts_with('/') || self.prefix.len() > 128 {
            return Err(("ha.prefix", "must start with '/' and be at most 128 bytes".into()));
        }
        if !(100..=60_000).contains(&self.etcd_timeout_ms) {
            return Err(("ha.etcd_timeout_ms", "must be 100–60000".into()));
        }
        if self.etcd_timeout_ms >= self.term_ttl_s * 1000 / 2 {
            return Err((
                "ha.etcd_timeout_ms",
                "must be under half of ha.term_ttl_s, so that a renewal can fail and be retried within a term".into(),
            ));
        }
        if self.user.is_some() != self.password_file.is_some() {
            return Err((
                "ha.user",
                "ha.user and ha.password_file go together (etcd's auth needs both)".into(),
            ));
        }
        if self.tls.is_some() && self.endpoints.iter().any(|e| e.starts_with("http://")) {
            return Err((
                "ha.tls",
                "is set but an endpoint is http://: use https:// endpoints with TLS".into(),
            ));
        }
        if let Some(tls) = &self.tls
            && tls.cert_file.is_some() != tls.key_file.is_some()
        {
            return Err(("ha.tls", "cert_file and key_file go together".into()));
        }
        if self.retain_records < 1_000 {
            return Err((
                "ha.retain_records",
                "must be at least 1000 (etcd keeps at least that many of the newest records)".into(),
            ));
        }
        Ok(())
    }
}

impl HaConfig {
    /// A client of the site's etcd: its endpoints, TLS and credentials (the password read from
    /// its file now; a file that others may read is refused, since it holds a secret).
    pub fn client(&self) -> Result<flexgate_etcd::Client, String> {
        let timeout = std::time::Duration::from_millis(self.etcd_timeout_ms);
        let tls = self.tls.as_ref().map(|t| flexgate_openadr::http::tls::TlsSettings {
            ca_file: Some(t.ca_file.clone()),
            cert_file: t.cert_file.clone(),
            key_file: t.key_file.clone(),
            vtn_fingerprint: None,
        });
        let http = flexgate_openadr::http::client(tls.as_ref(), timeout)
            .map_err(|e| format!("ha.tls: an HTTP client for etcd: {e}"))?;
        let mut client = flexgate_etcd::Client::new(http, &self.endpoints, timeout).map_err(|e| e.to_string())?;
        if let (Some(user), Some(path)) = (&self.user, &self.password_file) {
            client = client.with_credentials(flexgate_etcd::Credentials {
                user: user.clone(),
                password: read_password(path)?,
            });
        }
        Ok(client)
    }
}

/// The first line of a password file, which only its owner may read.
fn read_password(path: &std::path::Path) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("ha.password_file {shown}: {e}"))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "ha.password_file {shown} can be read by others (mode {:o}): it holds etcd's password; chmod 600 it",
            meta.permissions().mode() & 0o777
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("ha.password_file {shown}: {e}"))?;
    let password = text.lines().next().unwrap_or("").trim().to_string();
    if password.is_empty() {
        return Err(format!("ha.password_file {shown} is empty"));
    }
    Ok(password)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ha() -> HaConfig {
        HaConfig {
            replica: "gw-a".into(),
            endpoints: vec!["http://127.0.0.1:2379".into()],
            advertise_url: Some("http://127.0.0.1:8080".into()),
            term_ttl_s: default_term_ttl_s(),
            prefix: default_prefix(),
            etcd_timeout_ms: default_etcd_timeout_ms(),
            retain_records: default_retain_records(),
            tls: None,
            user: None,
            password_file: None,
        }
    }

    #[test]
    fn a_password_file_others_can_read_is_refused_and_one_they_cannot_is_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("etcd-password");
        std::fs::write(&path, "s3cret-pass\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let mut c = ha();
        c.user = Some("flexgate".into());
        c.password_file = Some(path.clone());
        let refused = c.client().expect_err("world-readable");
        assert!(
            refused.contains("chmod 600") && !refused.contains("s3cret"),
            "{refused}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let client = c.client().expect("read");
        assert!(
            !format!("{client:?}").contains("s3cret"),
            "the password stays out of Debug"
        );
    }

    /// The commented example in deploy/flexgate.toml is a valid `[ha]`.
    #[test]
    fn the_shipped_example_loads() {
        let shipped = include_str!("../../deploy/flexgate.toml");
        let start = shipped.find("# [ha]").expect("the example is in deploy/flexgate.toml");
        let example: String = shipped[start..]
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .map(|l| l.strip_prefix("# ").or_else(|| l.strip_prefix('#')).unwrap_or(l))
            .map(|l| format!("{l}\n"))
            .collect();
        let config: crate::config::Config = toml::from_str(&example).expect("the example parses");
        config
            .ha
            .expect("an [ha] table")
            .validate(Some(10))
            .expect("valid with the default agents");
    }

    #[test]
    fn the_defaults_fit_the_agents_default_lease_margin() {
        ha().validate(Some(10)).expect("valid");
        ha().validate(None).expect("valid");
    }

    #[test]
    fn a_term_too_long_for_the_agents_leases_is_refused_with_the_numbers() {
        let mut c = ha();
        c.term_ttl_s = 20;
        let (field, message) = c.validate(Some(10)).expect_err("too long");
        assert_eq!(field, "ha.term_ttl_s");
        assert!(message.contains("at most 14") && message.contains("30 s"), "{message}");
        c.validate(Some(15)).expect("longer leases fit it");
    }

    #[test]
    fn malformed_endpoints_names_and_urls_are_refused_by_field() {
        for (tweak, field) in [
            (
                Box::new(|c: &mut HaConfig| c.endpoints = vec!["127.0.0.1:2379".into()]) as Box<dyn Fn(&mut HaConfig)>,
                "ha.endpoints",
            ),
            (Box::new(|c: &mut HaConfig| c.endpoints.clear()), "ha.endpoints"),
            (Box::new(|c: &mut HaConfig| c.replica = "gw a".into()), "ha.replica"),
            (Box::new(|c: &mut HaConfig| c.replica = String::new()), "ha.replica"),
            (
                Box::new(|c: &mut HaConfig| c.advertise_url = Some("gw-a:8080".into())),
                "ha.advertise_url",
            ),
            (Box::new(|c: &mut HaConfig| c.term_ttl_s = 1), "ha.term_ttl_s"),
            (Box::new(|c: &mut HaConfig| c.prefix = "flexgate".into()), "ha.prefix"),
            (
                Box::new(|c: &mut HaConfig| c.etcd_timeout_ms = 5_000),
                "ha.etcd_timeout_ms",
            ),
            (Box::new(|c: &mut HaConfig| c.retain_records = 10), "ha.retain_records"),
            (Box::new(|c: &mut HaConfig| c.user = Some("flexgate".into())), "ha.user"),
            (
                Box::new(|c: &mut HaConfig| {
                    c.tls = Some(EtcdTls {
                        ca_file: "/etc/flexgate/etcd-ca.pem".into(),
                        cert_file: None,
                        key_file: None,
                    });
                }),
                "ha.tls",
            ),
        ] {
            let mut c = ha();
            tweak(&mut c);
            assert_eq!(c.validate(Some(10)).expect_err("refused").0, field);
        }
    }
}
