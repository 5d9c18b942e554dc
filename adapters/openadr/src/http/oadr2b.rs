//! OpenADR 2.0b simple-HTTP client: POSTs each VEN message to
//! `{base}/OpenADR2/Simple/2.0b/{service}` and returns what the VTN answered, raw and decoded.
//!
//! The raw bytes are returned even when they do not decode, so a caller can keep an audit copy
//! of exactly what the VTN said.

use super::tls::{TlsError, TlsSettings, explain_connect_error};
use crate::oadr2b::outgoing::Outgoing;
use crate::oadr2b::{DecodeError, Limits, Message, decode_with_limits, encode};
use std::time::Duration;

/// Why an exchange with the VTN failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The TLS settings are unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The base URL is not http(s).
    #[error("VTN URL {0:?} must start with http:// or https://")]
    BadUrl(String),
    /// The client could not be built.
    #[error("HTTP client: {0}")]
    Client(String),
    /// The request did not complete (connection, TLS handshake, timeout).
    #[error("POST {url}: {detail}")]
    Send { url: String, detail: String },
    /// The VTN answered with an HTTP error.
    #[error("POST {url}: HTTP {status}: {body}")]
    Status { url: String, status: u16, body: String },
    /// The answer is bigger than the decoder accepts.
    #[error("POST {url}: the answer is larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
}

/// One request/answer pair.
#[derive(Debug)]
pub struct Exchange {
    /// The document sent.
    pub sent: String,
    /// The bytes the VTN answered with.
    pub raw: Vec<u8>,
    /// The answer, decoded (an empty body decodes as `Ok(None)`).
    pub reply: Result<Option<Message>, DecodeError>,
}

/// A VEN's HTTP connection to one VTN.
#[derive(Debug, Clone)]
pub struct Oadr2bHttp {
    client: reqwest::Client,
    base: String,
    limits: Limits,
}

impl Oadr2bHttp {
    /// A client for the VTN at `base_url` (e.g. `https://vtn.example.com` or a URL with a path
    /// prefix). TLS settings are required for `https://` unless the platform trust store is
    /// wanted, in which case pass `None`.
    pub fn new(base_url: &str, tls: Option<&TlsSettings>, timeout: Duration) -> Result<Self, TransportError> {
        let base = base_url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(TransportError::BadUrl(base_url.to_string()));
        }
        let client = super::client(tls, timeout)?;
        Ok(Oadr2bHttp {
            client,
            base,
            limits: Limits::default(),
        })
    }

    /// The VTN base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The URL a message is POSTed to.
    pub fn url_for(&self, msg: &Outgoing) -> String {
        format!("{}/OpenADR2/Simple/2.0b/{}", self.base, msg.service())
    }

    /// POSTs `msg` and returns the VTN's answer.
    pub async fn send(&self, msg: &Outgoing) -> Result<Exchange, TransportError> {
        let url = self.url_for(msg);
        let sent = encode::encode(msg);
        let response = self
            .client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/xml")
            .body(sent.clone())
            .send()
            .await
            .map_err(|e| TransportError::Send {
                url: url.clone(),
                detail: explain_connect_error(&e),
            })?;
        let status = response.status();
        if let Some(len) = response.content_length()
            && len as usize > self.limits.max_bytes
        {
            return Err(TransportError::TooLarge {
                url,
                limit: self.limits.max_bytes,
            });
        }
        let raw = response.bytes().await.map_err(|e| TransportError::Send {
            url: url.clone(),
            detail: explain_connect_error(&e),
        })?;
        if !status.is_success() {
            let body: String = String::from_utf8_lossy(&raw).chars().take(500).collect();
            return Err(TransportError::Status {
                url,
                status: status.as_u16(),
                body,
            });
        }
        let reply = if raw.iter().all(u8::is_ascii_whitespace) {
            Ok(None)
        } else {
            decode_with_limits(&raw, &self.limits).map(Some)
        };
        Ok(Exchange {
            sent,
            raw: raw.to_vec(),
            reply,
        })
    }
}
