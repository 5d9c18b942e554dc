//! `[meter]`: the sources summed into the site meter.
//!
//! ```toml
//! [meter]
//! max_age_s = 15                  # a feed's reading older than this is stale
//!
//! [[meter.sources]]
//! kind = "modbus"
//! id = "incomer-a"
//! address = "10.0.0.5:502"
//! register = { unit_id = 1, table = "holding", address = 3059, type = "float32", scale_to_kw = 1.0 }
//!
//! [[meter.sources]]
//! kind = "prometheus"
//! id = "solar"
//! sign = -1.0                     # generation behind the meter subtracts
//! url = "http://127.0.0.1:9090"
//! query = "sum(inverter_ac_power_watts) / 1000"
//! ```

use serde::{Deserialize, Serialize};

/// The site meter's sources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeterConfig {
    /// A feed whose latest accepted reading is older than this, s, is stale: the facility
    /// model's upper estimate stands in for the site meter until it is fresh again.
    #[serde(default = "default_max_age_s")]
    pub max_age_s: f64,
    /// The feeds, summed with their signs.
    pub sources: Vec<MeterSourceConfig>,
}

fn default_max_age_s() -> f64 {
    15.0
}

/// What every source has (read from either kind's own fields: serde's `flatten` would switch
/// off the refusal of unknown keys).
#[derive(Debug, Clone, PartialEq)]
pub struct Common {
    /// Recorded with every sample and named in logs.
    pub id: String,
    /// `1.0`: power drawn through the feed; `-1.0`: power sent back (generation, export).
    pub sign: f64,
    /// Seconds between reads.
    pub poll_s: f64,
    /// Deadline of each read (connect and request), ms.
    pub timeout_ms: u64,
}

fn default_sign() -> f64 {
    1.0
}
fn default_poll_s() -> f64 {
    2.0
}
fn default_timeout_ms() -> u64 {
    1_000
}

/// One source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum MeterSourceConfig {
    /// A meter on Modbus TCP.
    Modbus(ModbusSource),
    /// An instant PromQL query.
    Prometheus(PrometheusSource),
}

/// A meter on Modbus TCP (`adapters/modbus/README.md` has example register maps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModbusSource {
    /// Recorded with every sample and named in logs.
    pub id: String,
    /// `1.0`: power drawn through the feed; `-1.0`: power sent back (generation, export).
    #[serde(default = "default_sign")]
    pub sign: f64,
    /// Seconds between reads.
    #[serde(default = "default_poll_s")]
    pub poll_s: f64,
    /// Deadline of each read (connect and request), ms.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// `HOST:PORT` as an IP address and port (`10.0.0.5:502`).
    pub address: String,
    /// Where the site power is.
    pub register: flexgate_modbus::Register,
}

/// An instant PromQL query returning one value in kW.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusSource {
    /// Recorded with every sample and named in logs.
    pub id: String,
    /// `1.0`: power drawn through the feed; `-1.0`: power sent back (generation, export).
    #[serde(default = "default_sign")]
    pub sign: f64,
    /// Seconds between reads.
    #[serde(default = "default_poll_s")]
    pub poll_s: f64,
    /// Deadline of each read (connect and request), ms.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The server (`http://127.0.0.1:9090`).
    pub url: String,
    /// PromQL returning one value, in kW (`sum(pdu_power_watts) / 1000`).
    pub query: String,
}

impl MeterSourceConfig {
    /// Id, sign, period and deadline.
    #[must_use]
    pub fn common(&self) -> Common {
        let (id, sign, poll_s, timeout_ms) = match self {
            MeterSourceConfig::Modbus(m) => (&m.id, m.sign, m.poll_s, m.timeout_ms),
            MeterSourceConfig::Prometheus(p) => (&p.id, p.sign, p.poll_s, p.timeout_ms),
        };
        Common {
            id: id.clone(),
            sign,
            poll_s,
            timeout_ms,
        }
    }
}

impl MeterConfig {
    /// What a configuration can get wrong before any read.
    ///
    /// # Errors
    /// The first problem, naming the source.
    pub fn validate(&self) -> Result<(), String> {
        if self.sources.is_empty() {
            return Err("meter: [meter] needs at least one [[meter.sources]]".into());
        }
        if !(self.max_age_s.is_finite() && self.max_age_s > 0.0) {
            return Err(format!("meter.max_age_s must be above 0, not {}", self.max_age_s));
        }
        let mut ids = std::collections::HashSet::new();
        for source in &self.sources {
            let c = source.common();
            let name = &c.id;
            if c.id.trim().is_empty() {
                return Err("meter source: id must not be empty".into());
            }
            if !ids.insert(c.id.clone()) {
                return Err(format!("meter source {name:?}: the id is used twice"));
            }
            if c.sign != 1.0 && c.sign != -1.0 {
                return Err(format!(
                    "meter source {name:?}: sign must be 1.0 or -1.0, not {}",
                    c.sign
                ));
            }
            if !(c.poll_s.is_finite() && c.poll_s >= 0.1 && c.poll_s <= 3_600.0) {
                return Err(format!(
                    "meter source {name:?}: poll_s must be 0.1-3600, not {}",
                    c.poll_s
                ));
            }
            if c.timeout_ms == 0 || c.timeout_ms > 60_000 {
                return Err(format!(
                    "meter source {name:?}: timeout_ms must be 1-60000, not {}",
                    c.timeout_ms
                ));
            }
            if c.poll_s >= self.max_age_s {
                return Err(format!(
                    "meter source {name:?}: poll_s {} must be under max_age_s {}: every reading would be stale before the next",
                    c.poll_s, self.max_age_s
                ));
            }
            match source {
                MeterSourceConfig::Modbus(m) => {
                    m.address
                        .parse::<std::net::SocketAddr>()
                        .map_err(|e| format!("meter source {name:?}: address {:?} is not IP:PORT: {e}", m.address))?;
                    m.register
                        .validate()
                        .map_err(|e| format!("meter source {name:?}: register: {e}"))?;
                }
                MeterSourceConfig::Prometheus(p) => {
                    if !(p.url.starts_with("http://") || p.url.starts_with("https://")) {
                        return Err(format!(
                            "meter source {name:?}: url must be http:// or https://, not {:?}",
                            p.url
                        ));
                    }
                    if p.query.trim().is_empty() {
                        return Err(format!("meter source {name:?}: query must not be empty"));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<MeterConfig, String> {
        let config: MeterConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.validate().map(|()| config)
    }

    #[test]
    fn both_kinds_parse_with_defaults() {
        let c = parse(
            r#"
            [[sources]]
            kind = "modbus"
            id = "incomer"
            address = "127.0.0.1:502"
            register = { unit_id = 1, table = "holding", address = 3059, type = "float32", scale_to_kw = 1.0 }
            [[sources]]
            kind = "prometheus"
            id = "solar"
            sign = -1.0
            url = "http://127.0.0.1:9090"
            query = "sum(x) / 1000"
            "#,
        )
        .expect("valid");
        assert_eq!(c.max_age_s, 15.0);
        assert_eq!(c.sources[0].common().poll_s, 2.0);
        assert_eq!(c.sources[1].common().sign, -1.0);
    }

    /// The commented example in deploy/flexgate.toml is a valid configuration.
    #[test]
    fn the_shipped_example_loads() {
        let shipped = include_str!("../../deploy/flexgate.toml");
        let start = shipped
            .find("# [meter]")
            .expect("the example is in deploy/flexgate.toml");
        // The example runs to the next section's rule (`# ----`).
        let example: String = shipped[start..]
            .lines()
            .take_while(|l| !l.starts_with("# ---"))
            .map(|l| l.strip_prefix("# ").or_else(|| l.strip_prefix('#')).unwrap_or(l))
            .map(|l| format!("{l}\n"))
            .collect();
        let config: crate::config::Config = toml::from_str(&example).expect("the example parses");
        let meter = config.meter.expect("a [meter] table");
        meter.validate().expect("the example is valid");
        assert_eq!(meter.sources.len(), 2);
        assert_eq!(meter.sources[1].common().sign, -1.0);
    }

    #[test]
    fn mistakes_are_named() {
        let base = |extra: &str| {
            format!(
                "max_age_s = 15\n[[sources]]\nkind = \"modbus\"\nid = \"m\"\naddress = \"127.0.0.1:502\"\nregister = {{ unit_id = 1, table = \"input\", address = 52, type = \"float32\", scale_to_kw = 0.001 }}\n{extra}"
            )
        };
        assert!(parse(&base("")).is_ok());
        for (extra, expect) in [
            ("sign = 0.5", "sign"),
            ("poll_s = 20", "max_age_s"),
            ("timeout_ms = 0", "timeout_ms"),
            ("adress = \"x\"", "adress"),
        ] {
            let e = parse(&base(extra)).expect_err(extra);
            assert!(e.contains(expect), "{extra}: {e}");
        }
        let e = parse("[[sources]]\nkind = \"modbus\"\nid = \"m\"\naddress = \"meter.local\"\nregister = { unit_id = 1, table = \"input\", address = 52, type = \"float32\", scale_to_kw = 1 }\n").expect_err("hostname");
        assert!(e.contains("IP:PORT"), "{e}");
        let e = parse("sources = []").expect_err("none");
        assert!(e.contains("at least one"), "{e}");
        let e = parse("[[sources]]\nkind = \"snmp\"\nid = \"x\"\n").expect_err("unknown kind");
        assert!(e.contains("snmp") || e.contains("variant"), "{e}");
    }
}
