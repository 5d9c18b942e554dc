//! slurmrestd client: JWT headers, API version discovery, the job list.
//!
//! - **Auth.** Every request carries `X-SLURM-USER-NAME` and `X-SLURM-USER-TOKEN`. slurmrestd
//!   must run with `SLURM_JWT=daemon`, or it rejects every token. A missing header gives 401;
//!   on Slurm 22.05 a token that slurmctld rejects (bad signature, expired, wrong user) comes
//!   back as **HTTP 500 with `error_number: -1`, "Unspecified error"** from `slurm_load_*`,
//!   which this client also reports as [`SlurmError::AuthRefused`], as it does any error entry
//!   that mentions authentication. 22.05 gives the very same answer when slurmctld is down, so
//!   the message says so; [`crate::SlurmInventory`] settles it when the `squeue` fallback
//!   reaches slurmctld. Expired JWTs are caught before sending ([`crate::token`]).
//! - **Versions.** `GET /openapi/v3` lists the server's paths; the `/slurm/v0.0.N/` prefixes
//!   are the versions it serves (Debian's 22.05 with `-s openapi/v0.0.38`: only v0.0.38). The
//!   newest one in [`ApiVersion::KNOWN`] is used and remembered; a 404 later (slurmrestd
//!   upgraded) makes the next call discover again. A version can also be pinned in the config.
//! - **Transport.** `http://`, `https://` (rustls, ring, the platform's trust store) or
//!   `unix:/path` (slurmrestd's `unix:` listener); bodies are capped at `max_body_bytes`.

use std::sync::Mutex;
use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use crate::config::RestConfig;
use crate::error::SlurmError;
use crate::gres::truncate;
use crate::model::{ApiVersion, JobSnapshot, Source};
use crate::token::TokenSource;
use crate::wire::{SlurmMessage, parse_jobs};

/// A slurmrestd client. Cheap to share behind an `Arc`; requests may run concurrently.
#[derive(Debug)]
pub struct RestClient {
    http: reqwest::Client,
    /// URL prefix requests are built on (`http://localhost` for unix sockets).
    base: String,
    /// What error messages call the server (the configured URL).
    shown: String,
    user_name: String,
    token: TokenSource,
    pinned: Option<ApiVersion>,
    discovered: Mutex<Option<ApiVersion>>,
    timeout: Duration,
    max_body: usize,
}

impl RestClient {
    /// Builds the client; fails on a URL or version that cannot work.
    pub fn new(config: &RestConfig) -> Result<RestClient, SlurmError> {
        // reqwest is built without a default crypto provider (see Cargo.toml); install ring.
        // Err only means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let timeout = config.timeout();
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .no_proxy()
            .user_agent(concat!("flexgate-slurm/", env!("CARGO_PKG_VERSION")));
        let url = config.url.trim();
        let base = if let Some(path) = url.strip_prefix("unix:") {
            if !path.starts_with('/') {
                return Err(SlurmError::Config(format!(
                    "rest.url {url:?}: a unix socket needs an absolute path (unix:/run/slurmrestd.sock)"
                )));
            }
            builder = unix_socket(builder, path)?;
            "http://localhost".to_string()
        } else if url.starts_with("http://") || url.starts_with("https://") {
            url.trim_end_matches('/').to_string()
        } else {
            return Err(SlurmError::Config(format!(
                "rest.url {url:?} must start with http://, https:// or unix:/"
            )));
        };
        if config.user_name.trim().is_empty() {
            return Err(SlurmError::Config("rest.user_name is empty".into()));
        }
        let http = builder
            .build()
            .map_err(|e| SlurmError::Config(format!("cannot build the HTTP client: {}", chain(&e))))?;
        Ok(RestClient {
            http,
            base,
            shown: url.to_string(),
            user_name: config.user_name.trim().to_string(),
            token: config.token.clone(),
            pinned: config.pinned_version()?,
            discovered: Mutex::new(None),
            timeout,
            max_body: config.max_body_bytes,
        })
    }

    /// The API version to use: pinned, remembered, or discovered now.
    pub async fn version(&self) -> Result<ApiVersion, SlurmError> {
        if let Some(v) = self.pinned {
            return Ok(v);
        }
        if let Some(v) = *self.discovered.lock().unwrap_or_else(|p| p.into_inner()) {
            return Ok(v);
        }
        let v = self.discover_version().await?;
        *self.discovered.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
        Ok(v)
    }

    /// Asks the server which versions it serves and picks the newest known one.
    pub async fn discover_version(&self) -> Result<ApiVersion, SlurmError> {
        let offered = self.offered_versions().await?;
        newest_known(&offered).ok_or_else(|| SlurmError::NoKnownVersion {
            url: self.shown.clone(),
            offered: offered.iter().map(ToString::to_string).collect(),
        })
    }

    /// The `/slurm/v0.0.N/` versions listed by `GET /openapi/v3`, ascending.
    pub async fn offered_versions(&self) -> Result<Vec<ApiVersion>, SlurmError> {
        let path = "/openapi/v3";
        let body = self.get(path).await?;
        let doc: Value = serde_json::from_slice(&body).map_err(|e| SlurmError::NotJson {
            what: self.describe(path),
            reason: e.to_string(),
            excerpt: excerpt(&body),
        })?;
        Ok(versions_in_openapi(&doc))
    }

    /// Every job slurmctld knows (all states), from `GET /slurm/{v}/jobs`.
    pub async fn jobs(&self) -> Result<JobSnapshot, SlurmError> {
        let version = self.version().await?;
        let path = format!("/slurm/{version}/jobs");
        let body = match self.get(&path).await {
            Err(SlurmError::Http { status: 404, .. }) | Err(SlurmError::Slurm { status: 404, .. })
                if self.pinned.is_none() =>
            {
                *self.discovered.lock().unwrap_or_else(|p| p.into_inner()) = None;
                return Err(SlurmError::Http {
                    url: self.describe(&path),
                    status: 404,
                    body: format!("slurmrestd no longer serves {version}; the next call discovers the version again"),
                });
            }
            other => other?,
        };
        let parsed = parse_jobs(&body).map_err(|e| SlurmError::NotJson {
            what: self.describe(&path),
            reason: e.to_string(),
            excerpt: excerpt(&body),
        })?;
        if !parsed.had_jobs {
            if !parsed.errors.is_empty() {
                return Err(self.error_from_messages(&path, 200, parsed.errors));
            }
            return Err(SlurmError::NotJson {
                what: self.describe(&path),
                reason: "the object has no \"jobs\" list".into(),
                excerpt: excerpt(&body),
            });
        }
        Ok(parsed.into_snapshot(Source::Rest(version)))
    }

    fn describe(&self, path: &str) -> String {
        if self.base == "http://localhost" && self.shown.starts_with("unix:") {
            format!("{} {path}", self.shown)
        } else {
            format!("{}{path}", self.base)
        }
    }

    /// GET with auth headers; the body of a 2xx answer, or an error that says what went wrong.
    async fn get(&self, path: &str) -> Result<Vec<u8>, SlurmError> {
        let token = self.token.load()?;
        let shown = self.describe(path);
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header("X-SLURM-USER-NAME", &self.user_name)
            .header("X-SLURM-USER-TOKEN", token)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| self.transport_error(&shown, &e))?;
        let status = resp.status();
        let body = read_limited(resp, &shown, self.max_body, self).await?;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(SlurmError::AuthRefused {
                url: shown,
                status: status.as_u16(),
                detail: excerpt(&body),
            });
        }
        if !status.is_success() {
            #[derive(Deserialize)]
            struct ErrorDoc {
                errors: Option<Vec<Value>>,
            }
            if let Ok(ErrorDoc { errors: Some(errors) }) = serde_json::from_slice::<ErrorDoc>(&body)
                && !errors.is_empty()
            {
                let messages = errors.iter().map(SlurmMessage::from_value).collect();
                return Err(self.error_from_messages(path, status.as_u16(), messages));
            }
            return Err(SlurmError::Http {
                url: shown,
                status: status.as_u16(),
                body: excerpt(&body),
            });
        }
        Ok(body)
    }

    fn error_from_messages(&self, path: &str, status: u16, errors: Vec<SlurmMessage>) -> SlurmError {
        if looks_like_rejected_token(&errors) {
            let detail = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            return SlurmError::AuthRefused {
                url: self.describe(path),
                status,
                detail: if status == 500 {
                    format!(
                        "{detail} (Slurm 22.05 answers a token slurmctld rejects this way; it answers the same when slurmctld is down)"
                    )
                } else {
                    detail
                },
            };
        }
        SlurmError::Slurm {
            url: self.describe(path),
            status,
            errors,
        }
    }

    fn transport_error(&self, shown: &str, e: &reqwest::Error) -> SlurmError {
        if e.is_timeout() {
            SlurmError::Timeout {
                what: shown.to_string(),
                seconds: self.timeout.as_secs_f64(),
            }
        } else if e.is_connect() {
            SlurmError::Connect {
                url: shown.to_string(),
                reason: chain(e),
            }
        } else {
            SlurmError::Transport {
                url: shown.to_string(),
                reason: chain(e),
            }
        }
    }
}

#[cfg(unix)]
fn unix_socket(builder: reqwest::ClientBuilder, path: &str) -> Result<reqwest::ClientBuilder, SlurmError> {
    Ok(builder.unix_socket(std::path::PathBuf::from(path)))
}

#[cfg(not(unix))]
fn unix_socket(_: reqwest::ClientBuilder, path: &str) -> Result<reqwest::ClientBuilder, SlurmError> {
    Err(SlurmError::Config(format!(
        "unix socket {path}: not supported on this platform"
    )))
}

/// True for the error entries a rejected token produces: anything mentioning authentication,
/// or Slurm 22.05's bare "Unspecified error" (-1) from a `slurm_load_*` call.
fn looks_like_rejected_token(errors: &[SlurmMessage]) -> bool {
    let mentions_auth = |m: &SlurmMessage| {
        let text = format!("{} {}", m.error, m.description).to_ascii_lowercase();
        text.contains("authentication") || text.contains("invalid token") || text.contains("jwt")
    };
    let unspecified = |m: &SlurmMessage| {
        m.error_number == Some(-1)
            && m.error.eq_ignore_ascii_case("Unspecified error")
            && m.source.starts_with("slurm_load_")
    };
    !errors.is_empty() && (errors.iter().any(mentions_auth) || errors.iter().all(unspecified))
}

/// The `/slurm/v0.0.N/` versions among an OpenAPI document's paths, ascending, unique.
pub(crate) fn versions_in_openapi(doc: &Value) -> Vec<ApiVersion> {
    let mut out: Vec<ApiVersion> = doc
        .get("paths")
        .and_then(Value::as_object)
        .map(|paths| {
            paths
                .keys()
                .filter_map(|p| {
                    let rest = p.strip_prefix("/slurm/")?;
                    ApiVersion::parse(rest.split('/').next()?)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

/// The newest of `offered` that this crate reads.
pub(crate) fn newest_known(offered: &[ApiVersion]) -> Option<ApiVersion> {
    offered.iter().copied().filter(|v| v.is_known()).max()
}

async fn read_limited(
    mut resp: reqwest::Response,
    shown: &str,
    limit: usize,
    client: &RestClient,
) -> Result<Vec<u8>, SlurmError> {
    let too_large = || SlurmError::TooLarge {
        what: shown.to_string(),
        limit,
    };
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| client.transport_error(shown, &e))? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of a body, for messages.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(400)]);
    truncate(text.trim(), 300)
}

/// An error and its sources, joined: reqwest's own message is often just "error sending
/// request", and the useful part ("Connection refused") is further down the chain.
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_from_paths() {
        let doc = json!({"paths": {
            "/slurm/v0.0.38/jobs": {}, "/slurm/v0.0.38/ping": {}, "/slurm/v0.0.41/jobs": {},
            "/slurmdb/v0.0.42/jobs": {}, "/slurm/v0.0.43/jobs": {}, "/openapi/v3": {}, "/slurm/vx/jobs": {}
        }});
        let v = versions_in_openapi(&doc);
        assert_eq!(v, vec![ApiVersion(38), ApiVersion(41), ApiVersion(43)]);
        assert_eq!(newest_known(&v), Some(ApiVersion(41)));
        assert_eq!(newest_known(&[ApiVersion(36), ApiVersion(37)]), None);
        assert!(versions_in_openapi(&json!({"paths": []})).is_empty());
        assert!(versions_in_openapi(&json!(5)).is_empty());
    }

    #[test]
    fn rejected_token_patterns() {
        let m = |n: i64, e: &str, d: &str, s: &str| SlurmMessage {
            error_number: Some(n),
            error: e.into(),
            description: d.into(),
            source: s.into(),
        };
        let unspecified = m(
            -1,
            "Unspecified error",
            "Failed while looking for jobs",
            "slurm_load_jobs",
        );
        assert!(looks_like_rejected_token(std::slice::from_ref(&unspecified)));
        assert!(looks_like_rejected_token(&[m(
            1007,
            "Protocol authentication error",
            "",
            "x"
        )]));
        assert!(!looks_like_rejected_token(&[m(
            1001,
            "Unable to contact slurm controller (connect failure)",
            "",
            "slurm_load_jobs"
        )]));
        assert!(!looks_like_rejected_token(&[]));
        assert!(!looks_like_rejected_token(&[
            unspecified,
            m(2, "Other", "", "slurm_load_jobs")
        ]));
    }

    #[test]
    fn bad_urls() {
        let t = TokenSource::Value("t".into());
        for url in ["localhost:6820", "unix:relative.sock", "ftp://x"] {
            let e = RestClient::new(&RestConfig::new(url, "u", t.clone())).expect_err(url);
            assert!(e.to_string().contains("rest.url"), "{e}");
        }
        assert!(RestClient::new(&RestConfig::new("http://127.0.0.1:1/", " ", t.clone())).is_err());
        let c = RestClient::new(&RestConfig::new("unix:/run/x.sock", "u", t)).expect("ok");
        assert_eq!(c.describe("/p"), "unix:/run/x.sock /p");
    }
}
