//! The agent's TOML configuration file (`--config FILE`). Command-line flags override it.
//!
//! ```toml
//! listen = "127.0.0.1:9450"
//! token_file = "/etc/flexgate/agent.token"        # or: token = "…" (prefer a file, mode 0600)
//! read_token_file = "/etc/flexgate/agent.read-token"
//! state_dir = "/var/lib/flexgate-agent"
//! metrics_open = false                             # true: /metrics without a token
//! max_lease_ttl_s = 86400
//! readiness_check_s = 30                           # readiness and persistence mode, checked again
//! boot_id_file = "/proc/sys/kernel/random/boot_id" # a different one at start: the node rebooted
//!
//! [tls]                                            # HTTPS; without it the API is plain HTTP
//! cert_file = "/etc/flexgate/agent.crt"            # chain, leaf first
//! key_file = "/etc/flexgate/agent.key"
//! client_ca_file = "/etc/flexgate/gateway-ca.crt"  # optional: mutual TLS
//!
//! [simulate]                                       # only with --simulate (or enabled = true)
//! gpus = 8
//! oob_limit_w = { "0" = 450 }                      # out-of-band limit of GPU 0
//! initial_limit_w = { "1" = 650 }                  # GPU 1 starts at 650 W instead of default
//! dram_active = 0.5                                # memory activity when uncapped (a memory-bound job)
//! mem_copy_util_pct = 40
//! ```
//!
//! The full annotated example is `adapters/agent/agent.example.toml`; a test parses it.

use crate::gpu::sim::SimOptions;
use crate::tls::TlsFiles;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Default state directory of the binary.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/flexgate-agent";

/// Where Linux gives this boot's id: a random UUID made at each boot.
pub const DEFAULT_BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's id from `path`, trimmed; `None` (with a warning) when it cannot be read or is
/// empty: the agent then cannot tell a reboot from a restart, and keeps the saved pre-event
/// limits as it always did.
#[must_use]
pub fn read_boot_id(path: &Path) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Some(text.trim().to_owned()),
        Ok(_) => {
            tracing::warn!(file = %path.display(), "the boot id file is empty; a node reboot will not be detected");
            None
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the boot id; a node reboot will not be detected");
            None
        }
    }
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config or a token file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for this schema.
    #[error("invalid config {path}: {detail}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (never includes token values: they are not echoed by serde's
        /// messages for string fields).
        detail: String,
    },
    /// A value is out of range or contradicts another.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The whole file. Every field is optional; unknown fields are errors (a typo must not silently
/// fall back to a default).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Address to listen on (default `127.0.0.1:9450`).
    pub listen: Option<SocketAddr>,
    /// Control token, inline. Prefer `token_file`.
    pub token: Option<String>,
    /// File holding the control token (surrounding whitespace ignored).
    pub token_file: Option<PathBuf>,
    /// Read-only token, inline.
    pub read_token: Option<String>,
    /// File holding the read-only token.
    pub read_token_file: Option<PathBuf>,
    /// Where leases and pre-event limits are persisted (default `/var/lib/flexgate-agent`).
    pub state_dir: Option<PathBuf>,
    /// Serve `/metrics` without a token (for a Prometheus without credentials).
    #[serde(default)]
    pub metrics_open: bool,
    /// Host name for metrics labels and simulated UUIDs (default: the system's).
    pub hostname: Option<String>,
    /// Longest lease accepted, s (default 86400).
    pub max_lease_ttl_s: Option<u64>,
    /// Sliding window of each job's throughput figure, s (default 30, 1 to 600).
    pub throughput_window_s: Option<u64>,
    /// How often readiness and persistence mode are checked again, s (default 30, 1 to 3600).
    pub readiness_check_s: Option<u64>,
    /// The file holding this boot's id (default `/proc/sys/kernel/random/boot_id`): the agent
    /// records it with its state, and a different one at start means the node rebooted, so the
    /// saved pre-event limits are stale (the driver came up with its own) and are not restored.
    pub boot_id_file: Option<PathBuf>,
    /// `[tls]`: serve HTTPS (and, with `client_ca_file`, require client certificates) so that
    /// tokens are not readable on the network. `--tls-cert`/`--tls-key`/`--tls-client-ca`
    /// override it. Relative paths are relative to the agent's working directory.
    pub tls: Option<TlsFiles>,
    /// Simulated GPUs.
    #[serde(default)]
    pub simulate: SimulateSection,
}

/// `[simulate]`: simulated GPUs instead of NVML.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulateSection {
    /// Simulate even without `--simulate`.
    #[serde(default)]
    pub enabled: bool,
    /// Number of GPUs (default 8; `--gpus` overrides).
    pub gpus: Option<u32>,
    /// Product name (default `NVIDIA H200`).
    pub name: Option<String>,
    /// Lowest settable limit, W (default 200).
    pub min_w: Option<f64>,
    /// Default limit, W (default 700).
    pub default_w: Option<f64>,
    /// Highest settable limit, W (default 700).
    pub max_w: Option<f64>,
    /// Out-of-band limits by GPU index (`{ "0" = 450 }`), W.
    #[serde(default)]
    pub oob_limit_w: BTreeMap<String, f64>,
    /// Requested limit at start by GPU index, W.
    #[serde(default)]
    pub initial_limit_w: BTreeMap<String, f64>,
    /// Settling time constant, s (default 0.3).
    pub tau_s: Option<f64>,
    /// DRAM activity (0–1) of every GPU when uncapped (default: 0.35–0.55 per GPU, seeded).
    pub dram_active: Option<f64>,
    /// Memory-copy utilisation (%) of every GPU when uncapped (default: 25–40 %, seeded).
    pub mem_copy_util_pct: Option<f64>,
}

impl ConfigFile {
    /// Parse TOML text (`path` only names the source in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            detail: e.message().to_owned(),
        })
    }

    /// Read and parse a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// The control token from `token` or `token_file` (not both).
    pub fn control_token(&self) -> Result<Option<String>, ConfigError> {
        pick("token", self.token.as_deref(), self.token_file.as_deref())
    }

    /// The read-only token from `read_token` or `read_token_file` (not both).
    pub fn read_token(&self) -> Result<Option<String>, ConfigError> {
        pick(
            "read_token",
            self.read_token.as_deref(),
            self.read_token_file.as_deref(),
        )
    }
}

fn pick(what: &str, inline: Option<&str>, file: Option<&Path>) -> Result<Option<String>, ConfigError> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(ConfigError::Invalid(format!("set {what} or {what}_file, not both"))),
        (Some(t), None) => Ok(Some(t.trim().to_owned())),
        (None, Some(p)) => read_token_file(p).map(Some),
        (None, None) => Ok(None),
    }
}

/// Read a token file: its content, trimmed. An empty file is an error.
pub fn read_token_file(path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(ConfigError::Invalid(format!("token file {} is empty", path.display())));
    }
    Ok(token.to_owned())
}

/// True when a token file can be read by group or others (it should be mode 0600).
#[must_use]
pub fn token_file_too_open(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

fn index_map(what: &str, map: &BTreeMap<String, f64>) -> Result<BTreeMap<u32, f64>, ConfigError> {
    map.iter()
        .map(|(k, &v)| {
            k.trim()
                .parse::<u32>()
                .map(|i| (i, v))
                .map_err(|_| ConfigError::Invalid(format!("simulate.{what}: key {k:?} is not a GPU index")))
        })
        .collect()
}

impl SimulateSection {
    /// Simulation options for `host`, with `gpus` overriding the section's count.
    pub fn to_options(&self, host: &str, gpus: Option<u32>) -> Result<SimOptions, ConfigError> {
        let mut o = SimOptions::h200(host, gpus.or(self.gpus).unwrap_or(8));
        if let Some(n) = &self.name {
            o.name.clone_from(n);
        }
        o.min_w = self.min_w.unwrap_or(o.min_w);
        o.default_w = self.default_w.unwrap_or(o.default_w);
        o.max_w = self.max_w.unwrap_or(o.max_w);
        o.tau_s = self.tau_s.unwrap_or(o.tau_s);
        o.dram_active = self.dram_active;
        o.mem_copy_util_pct = self.mem_copy_util_pct;
        o.oob_limit_w = index_map("oob_limit_w", &self.oob_limit_w)?;
        o.initial_limit_w = index_map("initial_limit_w", &self.initial_limit_w)?;
        Ok(o)
    }
}

/// The system's host name (`/proc/sys/kernel/hostname`), or `localhost`.
#[must_use]
pub fn system_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_file_parses() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/agent.example.toml"));
        let cfg = ConfigFile::load(path).expect("example parses");
        assert_eq!(cfg.listen, Some("127.0.0.1:9450".parse().expect("addr")));
        assert_eq!(cfg.token_file.as_deref(), Some(Path::new("/etc/flexgate/agent.token")));
        let sim = cfg.simulate.to_options("h", None).expect("valid");
        assert_eq!(sim.gpus, 8);
        assert_eq!(sim.oob_limit_w.get(&0), Some(&450.0));
        assert_eq!(cfg.tls, None, "the example leaves TLS commented out");
    }

    #[test]
    fn the_tls_section_parses_and_refuses_typos() {
        let p = Path::new("x.toml");
        let cfg = ConfigFile::parse(
            "[tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"\nclient_ca_file = \"/ca.pem\"",
            p,
        )
        .expect("parses");
        let tls = cfg.tls.expect("tls section");
        assert_eq!(tls.cert_file, Path::new("/c.pem"));
        assert_eq!(tls.key_file, Path::new("/k.pem"));
        assert_eq!(tls.client_ca_file.as_deref(), Some(Path::new("/ca.pem")));
        let cfg = ConfigFile::parse("[tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"", p).expect("parses");
        assert_eq!(cfg.tls.and_then(|t| t.client_ca_file), None);
        assert!(ConfigFile::parse("[tls]\ncert = \"/c.pem\"\nkey_file = \"/k.pem\"", p).is_err());
        assert!(
            ConfigFile::parse("[tls]\ncert_file = \"/c.pem\"", p).is_err(),
            "key_file missing"
        );
    }

    #[test]
    fn unknown_fields_and_double_tokens_are_errors() {
        let p = Path::new("x.toml");
        assert!(ConfigFile::parse("listen_addr = \"127.0.0.1:1\"", p).is_err());
        assert!(ConfigFile::parse("[simulate]\ngpu = 3", p).is_err());
        let both = ConfigFile::parse("token = \"abcdefghijklmnopq\"\ntoken_file = \"/x\"", p).expect("parses");
        assert!(both.control_token().is_err());
        let bad_key = ConfigFile::parse("[simulate]\noob_limit_w = { \"a\" = 300 }", p).expect("parses");
        assert!(bad_key.simulate.to_options("h", None).is_err());
    }

    #[test]
    fn the_boot_id_is_read_trimmed_and_optional() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("boot_id");
        std::fs::write(&f, "0f5c1a2e-aaaa-bbbb-cccc-000000000001\n").expect("write");
        assert_eq!(
            read_boot_id(&f).as_deref(),
            Some("0f5c1a2e-aaaa-bbbb-cccc-000000000001")
        );
        std::fs::write(&f, " \n").expect("write");
        assert_eq!(read_boot_id(&f), None);
        assert_eq!(read_boot_id(&dir.path().join("missing")), None);
        let cfg = ConfigFile::parse("boot_id_file = \"/run/x\"", Path::new("x.toml")).expect("parses");
        assert_eq!(cfg.boot_id_file.as_deref(), Some(Path::new("/run/x")));
    }

    #[test]
    fn token_files_are_trimmed_and_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("t");
        std::fs::write(&f, "  secret-token-value-123\n").expect("write");
        let cfg = ConfigFile {
            token_file: Some(f.clone()),
            ..ConfigFile::default()
        };
        assert_eq!(
            cfg.control_token().expect("reads").as_deref(),
            Some("secret-token-value-123")
        );
        std::fs::write(&f, "\n").expect("write");
        assert!(read_token_file(&f).is_err());
        assert!(read_token_file(&dir.path().join("missing")).is_err());
    }
}
