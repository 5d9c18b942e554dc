//! The gateway's configuration: one TOML file, every field documented, every field defaulted.
//!
//! Precedence: command-line flags > `FLEXGATE_*` environment variables > the file > defaults.
//! (clap reads the environment variables for the flags that have them.) Unknown fields are an
//! error, so a typo never silently falls back to a default. `deploy/flexgate.toml` lists every
//! field with its default; a test loads it, so it cannot drift from this file.

use crate::cluster::sim::SimConfig;
use flexgate_policies::alloc::Objective;
pub use flexgate_policies::control::config::{ControlConfig, PolicyKind, PriceRow, SiteConfig};
pub use flexgate_policies::control::probe::ProbeConfig;
use flexgate_policies::facility::FacilityParams;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where and how the gateway runs.
    pub gateway: GatewayConfig,
    /// The site behind the utility meter: its limits and how abstract signals map to kW.
    pub site: SiteConfig,
    /// Facility model parameters (meter ⇄ GPU-board power); see `flexgate facility params`.
    pub facility: FacilityParams,
    /// Closed-loop control on measured meter power.
    pub control: ControlConfig,
    /// Probing: measuring opted-in jobs' curves outside events (off by default).
    pub probe: ProbeConfig,
    /// The cluster backend.
    pub backend: BackendConfig,
    /// An OpenADR 2.0b VTN to register with and poll (absent: no 2.0b).
    pub openadr2b: Option<OpenAdr2bConfig>,
    /// An OpenADR 3.x VTN to poll for events (absent: no 3.x).
    pub openadr3: Option<OpenAdr3Config>,
    /// An MQTT broker to take `dr.event/1` events from and publish acks, status, telemetry and
    /// reports to (absent: no MQTT).
    pub mqtt: Option<MqttConfig>,
    /// Meter sources summed into the site meter (absent: the backend's figure, the simulated
    /// site's meter or, with agents, the facility model's estimate).
    pub meter: Option<crate::meter::MeterConfig>,
    /// Run as one of the site's replicas, elected on etcd (absent: a single gateway).
    pub ha: Option<crate::ha::config::HaConfig>,
    /// The programs the site is settled in, with their baseline methods and prices (absent: no
    /// program; the audit's PJM CBL and meter before/after only).
    pub settlement: crate::settlement::SettlementConfig,
    /// The forecast of the site's flexibility: its cost ceiling, the declaration's confidence,
    /// and how the scheduler's queue is read.
    pub forecast: ForecastConfig,
}

/// `[forecast]`: what the site forecasts and declares, and how the queue is read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForecastConfig {
    /// The cost ceiling: the largest share of the objective's value the site accepts to lose
    /// for a shed, in (0, 1] (default 0.1: 10 % of GPU-weighted progress). `available_w` in the
    /// forecast is the most the site can shed within it.
    pub cost_ceiling: f64,
    /// The confidence a declaration is made at by default, percent: 90 declares each hour's
    /// 10th percentile (exceeded nine times in ten), 50 its median.
    pub confidence: u8,
    /// How often the scheduler's queue is read, s (default 60). Off the control path.
    pub queue_poll_s: u64,
    /// How long one read of the queue may take, s (default 10): past it, the read is given up,
    /// and the forecast says the queue is unknown.
    pub queue_deadline_s: u64,
    /// A change of the queue makes a new forecast at most this often, s (default 60; each
    /// forecast is a ledger record).
    pub min_refresh_s: u64,
}

impl Default for ForecastConfig {
    fn default() -> Self {
        Self {
            cost_ceiling: flexgate_policies::forecast::DEFAULT_COST_CEILING,
            confidence: 90,
            queue_poll_s: 60,
            queue_deadline_s: 10,
            min_refresh_s: 60,
        }
    }
}

impl ForecastConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if !(self.cost_ceiling.is_finite() && self.cost_ceiling > 0.0 && self.cost_ceiling <= 1.0) {
            return invalid(
                "forecast.cost_ceiling",
                format!(
                    "must be a share in (0, 1] (0.1: 10 % of the objective), got {}",
                    self.cost_ceiling
                ),
            );
        }
        if !matches!(self.confidence, 50 | 90) {
            return invalid(
                "forecast.confidence",
                format!(
                    "must be 90 (declare the 10th percentile) or 50 (the median), got {}",
                    self.confidence
                ),
            );
        }
        if !(1..=3600).contains(&self.queue_poll_s) {
            return invalid("forecast.queue_poll_s", "must be 1 to 3600 s".into());
        }
        if !(1..=120).contains(&self.queue_deadline_s) {
            return invalid("forecast.queue_deadline_s", "must be 1 to 120 s".into());
        }
        if !(1..=86_400).contains(&self.min_refresh_s) {
            return invalid("forecast.min_refresh_s", "must be 1 to 86400 s".into());
        }
        Ok(())
    }
}

impl Default for Config {
    /// Defaults describe the default simulated cluster (16 nodes × 8 GPUs) and a facility model
    /// sized to it, so `flexgate run` with no file is a coherent small site.
    fn default() -> Self {
        let backend = SimConfig::default();
        let facility = facility_for_nodes(backend.nodes);
        Self {
            gateway: GatewayConfig::default(),
            site: SiteConfig::default(),
            facility: facility.clone(),
            control: ControlConfig::default(),
            probe: ProbeConfig::default(),
            backend: BackendConfig::Sim(SimConfig { facility, ..backend }),
            openadr2b: None,
            openadr3: None,
            mqtt: None,
            ha: None,
            settlement: crate::settlement::SettlementConfig::default(),
            meter: None,
            forecast: ForecastConfig::default(),
        }
    }
}

/// Facility parameters for a site of `nodes` 8-GPU nodes ([`FacilityParams::for_nodes`]).
#[must_use]
pub fn facility_for_nodes(nodes: u32) -> FacilityParams {
    FacilityParams::for_nodes(nodes)
}

/// Where and how the gateway runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Directory of the ledger (sled) and the API token file.
    pub data_dir: PathBuf,
    /// HTTP API address. Keep it on loopback or behind TLS termination: the API is plain HTTP.
    pub listen: SocketAddr,
    /// Bearer token for writes. Empty: a random token is generated at first start and kept in
    /// `<data_dir>/api-token` (mode 0600); its path, never its value, is logged.
    pub api_token: String,
    /// Site name: events for another site are refused.
    pub site: String,
    /// Allocation policy: `flexgate` (curve-aware, default), `equal`, `pfi_paper`, `efficiency`.
    pub policy: PolicyKind,
    /// What the policy maximises: `progress` (the default: each job's share of its own uncapped
    /// throughput, weighted by its GPUs and its operator-set `priority=` tag) or `tokens` (Σ
    /// tokens/s, the paper's objective). `tokens` favours the models that make the most tokens
    /// per watt and can leave a 70B job with a quarter of its speed; `progress` is what sites
    /// usually mean (ARCHITECTURE.md, "Objectives").
    pub objective: Objective,
    /// Hedge every curve-aware plan against the equal cut (default on): where what is known of
    /// the jobs is consistent with curves on which the plan would lose more than
    /// `hedge_tolerance` against cutting every job alike, the plan moves toward the equal cut
    /// until it does not (ARCHITECTURE.md, "Hedging"). Off bets on the estimated curves alone.
    pub hedge: bool,
    /// How much the hedged plan may lose against the equal cut in its worst plausible case, as
    /// a share of the equal cut's value (0–0.5; 0.02 = 2 %). Smaller hedges more. Unset: the
    /// objective's default, 0.5 % under `progress` and 2.5 % under `tokens` (under `progress` the
    /// best plan gains a tenth of what it gains in tokens/s, so it may lose a fifth as much).
    pub hedge_tolerance: Option<f64>,
    /// Seconds between telemetry readings (and measurement records in the ledger).
    pub telemetry_interval_s: u64,
    /// Seconds a connection may take to send a request's headers, and may stay open idle
    /// between requests; then it is closed. A connection that connects and says nothing would
    /// otherwise hold a file handle forever.
    pub http_header_timeout_s: u64,
    /// Seconds a request may take to send its body (a `dr.event/1` is a few hundred bytes);
    /// then it is answered 408.
    pub http_body_timeout_s: u64,
    /// Most HTTP connections open at once; beyond it a new connection is answered 503 and
    /// closed at once (keep it well below the process's file-handle limit, `ulimit -n`).
    pub http_max_connections: usize,
    /// Most HTTP connections open at once from one peer address, so that one client cannot
    /// take every slot; beyond it the new connection is answered 503.
    pub http_max_connections_per_peer: usize,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./flexgate-data"),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            api_token: String::new(),
            site: "site-1".to_string(),
            policy: PolicyKind::Flexgate,
            objective: Objective::Progress,
            hedge: true,
            hedge_tolerance: None,
            telemetry_interval_s: 5,
            http_header_timeout_s: 10,
            http_body_timeout_s: 10,
            http_max_connections: 512,
            http_max_connections_per_peer: 64,
        }
    }
}

/// The cluster backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "type", rename_all = "snake_case")]
pub enum BackendConfig {
    /// The in-process simulated cluster (the default: works with no hardware).
    Sim(SimConfig),
    /// Real node agents (`flexgate-agent`), jobs mapped to GPUs by Slurm or one job per node.
    Agents(crate::cluster::agents::AgentsConfig),
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig::Sim(SimConfig::default())
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read the configuration {path}: {source}")]
    Read {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("invalid configuration {path}: {message}")]
    Parse {
        /// File path.
        path: PathBuf,
        /// What toml said (it names the line and the field).
        message: String,
    },
    /// A value out of its range.
    #[error("invalid configuration: {field}: {message}")]
    Invalid {
        /// Dotted field path.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl Config {
    /// Load a file (or the defaults when `path` is `None`) and check it.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let config = match path {
            None => Config::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                Self::parse(&text).map_err(|message| ConfigError::Parse {
                    path: path.to_path_buf(),
                    message,
                })?
            }
        };
        config.validate()?;
        Ok(config)
    }

    /// Parse TOML text.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Range checks the types cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if self.gateway.hedge_tolerance.is_some_and(|t| !(0.0..=0.5).contains(&t)) {
            return invalid("gateway.hedge_tolerance", "must be a share in [0, 0.5]".into());
        }
        if self.gateway.telemetry_interval_s == 0 || self.gateway.telemetry_interval_s > 3600 {
            return invalid("gateway.telemetry_interval_s", "must be 1–3600".into());
        }
        for (field, seconds) in [
            ("gateway.http_header_timeout_s", self.gateway.http_header_timeout_s),
            ("gateway.http_body_timeout_s", self.gateway.http_body_timeout_s),
        ] {
            if seconds == 0 || seconds > 300 {
                return invalid(field, "must be 1–300 seconds".into());
            }
        }
        if self.gateway.http_max_connections == 0 || self.gateway.http_max_connections > 65_536 {
            return invalid("gateway.http_max_connections", "must be 1–65536".into());
        }
        if self.gateway.http_max_connections_per_peer == 0
            || self.gateway.http_max_connections_per_peer > self.gateway.http_max_connections
        {
            return invalid(
                "gateway.http_max_connections_per_peer",
                "must be at least 1 and at most gateway.http_max_connections".into(),
            );
        }
        if self.gateway.site.trim().is_empty() {
            return invalid("gateway.site", "must not be empty".into());
        }
        if self.site.time_zone.parse::<chrono_tz::Tz>().is_err() {
            return invalid(
                "site.time_zone",
                format!(
                    "{:?} is not an IANA time zone name (e.g. \"America/New_York\", \"Europe/Berlin\", \"UTC\")",
                    self.site.time_zone
                ),
            );
        }
        if !(self.site.facility_max_kw.is_finite() && self.site.facility_max_kw >= 0.0) {
            return invalid("site.facility_max_kw", "must be a number ≥ 0".into());
        }
        if self.site.level_shed_fraction.iter().any(|f| !(0.0..=1.0).contains(f)) {
            return invalid("site.level_shed_fraction", "each must be in [0, 1]".into());
        }
        if !(self.site.level_offset_percent_per_step > 0.0 && self.site.level_offset_percent_per_step <= 100.0) {
            return invalid("site.level_offset_percent_per_step", "must be in (0, 100]".into());
        }
        if self
            .site
            .price_table
            .iter()
            .any(|r| !r.min_per_mwh.is_finite() || !(0.0..=1.0).contains(&r.shed_fraction))
        {
            return invalid(
                "site.price_table",
                "each row needs a finite min_per_mwh and a shed_fraction in [0, 1]".into(),
            );
        }
        if let Some(o) = &self.openadr2b {
            o.validate()?;
        }
        if let Some(o) = &self.openadr3 {
            o.validate()?;
        }
        if let Some(m) = &self.mqtt {
            m.validate()?;
        }
        if let Some(m) = &self.meter {
            m.validate().map_err(|message| ConfigError::Invalid {
                field: "meter",
                message,
            })?;
        }
        if let Err((field, message)) = self.settlement.validate() {
            return Err(ConfigError::Invalid {
                field: "settlement",
                message: format!("{field}: {message}"),
            });
        }
        if let Some(ha) = &self.ha {
            let renew = match &self.backend {
                BackendConfig::Agents(a) => Some(a.renew_every_s),
                BackendConfig::Sim(_) => None,
            };
            ha.validate(renew)
                .map_err(|(field, message)| ConfigError::Invalid { field, message })?;
        }
        let c = &self.control;
        if !(c.gain > 0.0 && c.gain <= 1.0) {
            return invalid("control.gain", "must be in (0, 1]".into());
        }
        if !(0.0..=0.9).contains(&c.max_trim_fraction) {
            return invalid("control.max_trim_fraction", "must be in [0, 0.9]".into());
        }
        if !(c.deadband_kw.is_finite() && c.deadband_kw >= 0.0) {
            return invalid("control.deadband_kw", "must be a number ≥ 0".into());
        }
        self.probe
            .validate()
            .map_err(|(field, message)| ConfigError::Invalid { field, message })?;
        self.forecast.validate()?;
        self.facility.validate().map_err(|e| ConfigError::Invalid {
            field: "facility",
            message: e.to_string(),
        })?;
        Ok(())
    }
}

/// Connection to an OpenADR 2.0b VTN (this gateway is the VEN).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAdr2bConfig {
    /// VTN base URL; messages go to `{url}/OpenADR2/Simple/2.0b/{service}`.
    pub url: String,
    /// `oadrVenName` sent at registration.
    pub ven_name: String,
    /// venID when the utility assigned one out of band; otherwise learned at registration.
    #[serde(default)]
    pub ven_id: Option<String>,
    /// The vtnID to expect; a distribute from any other VTN is answered 452.
    #[serde(default)]
    pub vtn_id: Option<String>,
    /// Programs (market contexts) this site is enrolled in; events for others are opted out.
    /// Empty: every program is accepted.
    #[serde(default)]
    pub market_contexts: Vec<String>,
    /// This site's identities for eiTarget matching (venID always matches).
    #[serde(default)]
    pub group_ids: Vec<String>,
    /// See `group_ids`.
    #[serde(default)]
    pub resource_ids: Vec<String>,
    /// See `group_ids`.
    #[serde(default)]
    pub party_ids: Vec<String>,
    /// Poll period in seconds, overriding the VTN's `oadrRequestedOadrPollFreq`.
    #[serde(default)]
    pub poll_s: Option<u64>,
    /// Seconds before an HTTP exchange with the VTN is abandoned (and retried).
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u64,
    /// TLS: CA, client certificate and key, optional VTN fingerprint pin.
    #[serde(default)]
    pub tls: Option<flexgate_openadr::http::tls::TlsSettings>,
    /// Push mode: the URL the VTN pushes to (this gateway's
    /// `/OpenADR2/Simple/2.0b/{service}` route, usually behind a TLS-terminating proxy that
    /// checks the VTN's client certificate). Absent: pull mode (the VEN polls).
    #[serde(default)]
    pub push_url: Option<String>,
    /// Token the pushing side must present (`Authorization: Bearer …`); required with
    /// `push_url`, so nothing unauthenticated reaches the event book.
    #[serde(default)]
    pub push_token: Option<String>,
}

fn default_timeout_s() -> u64 {
    10
}

impl OpenAdr2bConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return invalid(
                "openadr2b.url",
                format!("{:?} must start with http:// or https://", self.url),
            );
        }
        if self.url.starts_with("https://") && self.tls.is_none() {
            return invalid(
                "openadr2b.tls",
                "an https:// VTN needs [openadr2b.tls] with ca_file and/or vtn_fingerprint (and cert_file/key_file \
                 for the VEN certificate)"
                    .into(),
            );
        }
        if self.ven_name.trim().is_empty() {
            return invalid("openadr2b.ven_name", "must not be empty".into());
        }
        if self.poll_s == Some(0) || self.timeout_s == 0 {
            return invalid("openadr2b.poll_s", "poll_s and timeout_s must be ≥ 1".into());
        }
        if self.push_url.is_some() && self.push_token.as_deref().is_none_or(|t| t.len() < 16) {
            return invalid(
                "openadr2b.push_token",
                "push mode (push_url) needs a push_token of at least 16 characters".into(),
            );
        }
        Ok(())
    }
}

/// Connection to an OpenADR 3.x VTN (this gateway is a VEN client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAdr3Config {
    /// Base URL of the API, e.g. `https://vtn.example.com/openadr3/3.1.0`.
    pub url: String,
    /// Only events of this program (programID), when set.
    #[serde(default)]
    pub program_id: Option<String>,
    /// Target values this site answers to (3.1 strings, e.g. the VEN name or a group).
    #[serde(default)]
    pub targets: Vec<String>,
    /// The VEN's name, used as the report's clientName.
    pub ven_name: String,
    /// A static bearer token (or use client_id/client_secret_file).
    #[serde(default)]
    pub token: Option<String>,
    /// OAuth2 client-credentials id.
    #[serde(default)]
    pub client_id: Option<String>,
    /// File holding the OAuth2 client secret (kept out of the config and the logs).
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// Token endpoint; discovered from `{url}/auth/server` when absent.
    #[serde(default)]
    pub token_url: Option<String>,
    /// Seconds between polls of `GET /events`.
    #[serde(default = "default_poll3_s")]
    pub poll_s: u64,
    /// Seconds before an HTTP exchange is abandoned.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u64,
    /// POST a USAGE/DEMAND report to the VTN at the end of each event.
    #[serde(default = "default_true")]
    pub reports: bool,
    /// TLS settings for an https:// VTN (CA and/or pin, optional client certificate).
    #[serde(default)]
    pub tls: Option<flexgate_openadr::http::tls::TlsSettings>,
}

fn default_poll3_s() -> u64 {
    10
}

fn default_true() -> bool {
    true
}

impl OpenAdr3Config {
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return invalid(
                "openadr3.url",
                format!("{:?} must start with http:// or https://", self.url),
            );
        }
        match (&self.token, &self.client_id, &self.client_secret_file) {
            (Some(_), None, None) | (None, Some(_), Some(_)) => {}
            _ => {
                return invalid(
                    "openadr3",
                    "set either token, or client_id together with client_secret_file".into(),
                );
            }
        }
        if self.poll_s == 0 || self.timeout_s == 0 {
            return invalid("openadr3.poll_s", "poll_s and timeout_s must be ≥ 1".into());
        }
        if self.ven_name.trim().is_empty() {
            return invalid("openadr3.ven_name", "must not be empty".into());
        }
        Ok(())
    }
}

/// Connection to an MQTT broker (the `dr.*` topics under `{prefix}/{gateway.site}/`, see `flexgate-mqtt`'s topic tree).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttConfig {
    /// `mqtt://host:port` or `mqtts://host:port` (TLS).
    pub url: String,
    /// Client id; the broker keeps the persistent session under it. Default `flexgate-{site}`.
    #[serde(default)]
    pub client_id: Option<String>,
    /// Topic prefix (may span levels, e.g. `utility-x/dr`).
    #[serde(default = "default_mqtt_prefix")]
    pub prefix: String,
    /// Username for the broker.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the password (kept out of the configuration and the logs).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// CA certificates for `mqtts://` (default: the system bundle).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate for `mqtts://`, when the broker wants one.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// Key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Event signatures: `off`, `optional` (a present `sig` must verify) or `required`.
    #[serde(default)]
    pub signatures: flexgate_mqtt::signature::SignaturePolicy,
    /// Ed25519 public keys (hex or base64, 32 bytes) whose signatures are trusted.
    #[serde(default)]
    pub trusted_keys: Vec<String>,
    /// Seconds between telemetry publications.
    #[serde(default = "default_mqtt_telemetry_s")]
    pub telemetry_interval_s: u64,
}

fn default_mqtt_prefix() -> String {
    "dr".to_string()
}

fn default_mqtt_telemetry_s() -> u64 {
    10
}

impl MqttConfig {
    /// The configuration `flexgate run --mqtt URL` implies: defaults for everything else.
    pub fn for_url(url: &str) -> Self {
        MqttConfig {
            url: url.to_string(),
            client_id: None,
            prefix: default_mqtt_prefix(),
            username: None,
            password_file: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            signatures: flexgate_mqtt::signature::SignaturePolicy::default(),
            trusted_keys: Vec::new(),
            telemetry_interval_s: default_mqtt_telemetry_s(),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if !(self.url.starts_with("mqtt://") || self.url.starts_with("mqtts://")) {
            return invalid(
                "mqtt.url",
                format!("{:?} must start with mqtt:// or mqtts://", self.url),
            );
        }
        if self.signatures == flexgate_mqtt::signature::SignaturePolicy::Required && self.trusted_keys.is_empty() {
            return invalid(
                "mqtt.trusted_keys",
                "signatures = \"required\" needs at least one trusted Ed25519 public key".into(),
            );
        }
        if self.telemetry_interval_s == 0 || self.telemetry_interval_s > 3600 {
            return invalid("mqtt.telemetry_interval_s", "must be 1–3600".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_objective_is_progress_unless_the_site_asks_for_tokens_and_a_typo_is_refused() {
        assert_eq!(Config::default().gateway.objective, Objective::Progress);
        let tokens = Config::parse("[gateway]\nobjective = \"tokens\"\n").expect("parses");
        assert_eq!(tokens.gateway.objective, Objective::Tokens);
        let typo = Config::parse("[gateway]\nobjective = \"speed\"\n").expect_err("refused");
        assert!(typo.contains("progress") && typo.contains("tokens"), "{typo}");
    }

    #[test]
    fn the_hedge_is_on_by_default_and_its_tolerance_must_be_a_sane_share() {
        let defaults = Config::default();
        assert!(defaults.gateway.hedge);
        assert_eq!(defaults.gateway.hedge_tolerance, None, "the objective's default");
        let off = Config::parse("[gateway]\nhedge = false\n").expect("parses");
        assert!(!off.gateway.hedge);
        for bad in ["-0.1", "0.9", "nan", "inf"] {
            let parsed = Config::parse(&format!("[gateway]\nhedge_tolerance = {bad}\n")).expect("parses");
            let err = parsed.validate().expect_err(bad).to_string();
            assert!(err.contains("hedge_tolerance"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_site_time_zone_is_an_iana_name() {
        assert_eq!(Config::default().site.time_zone, "UTC");
        let ny = Config::parse("[site]\ntime_zone = \"America/New_York\"\n").expect("parses");
        assert!(ny.validate().is_ok());
        for bad in ["EST5", "America/Gotham", "", "+02:00"] {
            let parsed = Config::parse(&format!("[site]\ntime_zone = \"{bad}\"\n")).expect("parses");
            let err = parsed.validate().expect_err(bad).to_string();
            assert!(err.contains("site.time_zone") && err.contains("IANA"), "{bad}: {err}");
        }
    }
}
