//! What can go wrong talking to a VTN, worded for the operator who has to fix it.
//!
//! Messages name the URL (never a token or secret) and, for the statuses people hit while
//! setting up a VEN, the likely cause: 401 = the token was rejected, 403 = a missing scope,
//! 404 = a wrong base path. RFC 7807 `problem+json` bodies, which OpenADR 3 VTNs send, are
//! rendered.

use std::fmt;

use serde::Deserialize;

use crate::oadr3::decode::DecodeError;

/// An RFC 7807 problem document (`application/problem+json`), the OpenADR 3 error body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Problem {
    /// A URI naming the problem type.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// Short summary.
    #[serde(default)]
    pub title: Option<String>,
    /// The HTTP status, repeated.
    #[serde(default)]
    pub status: Option<u16>,
    /// What went wrong this time.
    #[serde(default)]
    pub detail: Option<String>,
    /// Identifies this occurrence (often a request id, useful in a support ticket).
    #[serde(default)]
    pub instance: Option<String>,
}

impl Problem {
    /// Reads a problem from an error body; `None` when it is not one.
    pub fn parse(body: &[u8]) -> Option<Problem> {
        let p: Problem = serde_json::from_slice(body).ok()?;
        (p.title.is_some() || p.detail.is_some()).then_some(p)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.title, &self.detail) {
            (Some(t), Some(d)) => write!(f, "{t}: {d}")?,
            (Some(t), None) => write!(f, "{t}")?,
            (None, Some(d)) => write!(f, "{d}")?,
            (None, None) => write!(f, "problem")?,
        }
        if let Some(i) = &self.instance {
            write!(f, " (instance {i})")?;
        }
        Ok(())
    }
}

/// `: <problem>` when there is one, else nothing.
fn suffix(p: &Option<Box<Problem>>) -> String {
    p.as_ref().map(|p| format!(" — {p}")).unwrap_or_default()
}

/// Why a VTN request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answered at the address (connection refused, DNS, TLS handshake).
    #[error("cannot connect to {url}: {cause} — is the VTN running and the URL right?")]
    Connect {
        /// The URL tried.
        url: String,
        /// The innermost cause, e.g. `Connection refused (os error 111)`.
        cause: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The request timed out.
    #[error("request to {url} timed out ({source})")]
    Timeout {
        /// The URL tried.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// Any other transport failure (connection reset mid-body, ...).
    #[error("request to {url} failed: {source}")]
    Transport {
        /// The URL tried.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// 401: the VTN rejected the credential (already retried once with a fresh token when the
    /// client obtains its own).
    #[error("401 Unauthorized from {url}: the VTN rejected the token{}", suffix(.problem))]
    Unauthorized {
        /// The URL.
        url: String,
        /// The VTN's explanation.
        problem: Option<Box<Problem>>,
    },
    /// 403: the credential is valid but lacks the scope (a VEN needs `read_targets` to read
    /// events and `write_reports` to post reports).
    #[error("403 Forbidden from {url}: the token lacks the scope for this request{}", suffix(.problem))]
    Forbidden {
        /// The URL.
        url: String,
        /// The VTN's explanation.
        problem: Option<Box<Problem>>,
    },
    /// 404 on a collection: almost always a wrong base path.
    #[error(
        "404 Not Found from {url}: is the base URL right? OpenADR 3.1 VTNs usually serve under \
         /openadr3/3.1.0 (e.g. http://host:port/openadr3/3.1.0){}",
        suffix(.problem)
    )]
    NotFound {
        /// The URL.
        url: String,
        /// The VTN's explanation.
        problem: Option<Box<Problem>>,
    },
    /// Any other non-success status.
    #[error("HTTP {status} from {url}{}", match .problem { Some(p) => format!(" — {p}"), None if .body.is_empty() => String::new(), None => format!(" — {}", .body) })]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
        /// The VTN's explanation, when it sent a problem document.
        problem: Option<Box<Problem>>,
        /// The start of the body otherwise.
        body: String,
    },
    /// The response body exceeded the limit ([`crate::oadr3::Limits::max_bytes`]).
    #[error("response from {url} is larger than the limit of {limit} bytes")]
    BodyTooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// The body is not a valid OpenADR 3 document.
    #[error("response from {url} is not valid OpenADR 3 JSON: {source}")]
    Decode {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: DecodeError,
    },
    /// Pagination did not end within the event limit.
    #[error("{url}: more than {limit} events across pages; giving up")]
    TooManyEvents {
        /// The URL.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// The OAuth2 token endpoint (or `/auth/server` discovery) refused or failed.
    #[error("token request to {url} failed{}: {detail}", .status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Token {
        /// The token (or discovery) URL.
        url: String,
        /// The HTTP status, when there was one.
        status: Option<u16>,
        /// The OAuth2 `error` / `error_description`, or what else went wrong (never the secret).
        detail: String,
    },
    /// A request body could not be encoded.
    #[error("cannot encode the request: {0}")]
    Encode(String),
}

impl ClientError {
    /// Classifies a transport error.
    pub(crate) fn transport(url: &str, source: reqwest::Error) -> ClientError {
        let url = url.to_string();
        if source.is_connect() {
            ClientError::Connect {
                url,
                cause: root_cause(&source),
                source,
            }
        } else if source.is_timeout() {
            ClientError::Timeout { url, source }
        } else {
            ClientError::Transport { url, source }
        }
    }

    /// Maps a non-success status and its (bounded) body.
    pub(crate) fn status(url: &str, status: u16, body: &[u8]) -> ClientError {
        let url = url.to_string();
        let problem = Problem::parse(body).map(Box::new);
        match status {
            401 => ClientError::Unauthorized { url, problem },
            403 => ClientError::Forbidden { url, problem },
            404 => ClientError::NotFound { url, problem },
            _ => ClientError::Status {
                url,
                status,
                body: if problem.is_some() {
                    String::new()
                } else {
                    excerpt(body)
                },
                problem,
            },
        }
    }

    /// The HTTP status, when the VTN answered with one.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            ClientError::Unauthorized { .. } => Some(401),
            ClientError::Forbidden { .. } => Some(403),
            ClientError::NotFound { .. } => Some(404),
            ClientError::Status { status, .. } => Some(*status),
            ClientError::Token { status, .. } => *status,
            _ => None,
        }
    }
}

/// The innermost error in a source chain: the OS or TLS reason behind a transport error.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// The first 200 characters of a body, for error messages.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let mut out: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}
