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
        if self.retain_records < 1_000 {
            return Err((
                "ha.retain_records",
                "must be at least 1000 (etcd keeps at least that many of the newest records)".into(),
            ));
        }
        Ok(())
    }
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
        }
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
        ] {
            let mut c = ha();
            tweak(&mut c);
            assert_eq!(c.validate(Some(10)).expect_err("refused").0, field);
        }
    }
}
