//! An async OpenADR 3 VEN client over HTTP (feature `http`).
//!
//! What it does for you, beyond a `reqwest` call:
//!
//! - `GET /events` with pagination (`limit=50`, `skip`), and `If-None-Match` with the last ETag
//!   so an unchanged poll costs a 304 ([`Polled::NotModified`]). The ETag is reused only when
//!   the previous answer fitted in one page: a 304 for page one says nothing about page two.
//! - Bearer tokens, or OAuth2 client credentials with caching and one retry on 401
//!   ([`Auth`]).
//! - Errors an operator can act on ([`ClientError`]), with `problem+json` bodies rendered.
//! - Response bodies bounded by [`crate::oadr3::Limits::max_bytes`] and decoded with
//!   [`crate::oadr3::decode_events`].
//!
//! It does not log; nothing it returns contains a secret.

mod auth;
mod error;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use reqwest::{Method, StatusCode, header};

pub use auth::Auth;
pub use error::{ClientError, Problem};

use super::decode::{Document, Limits, decode_any_with_limits, decode_events};
use super::model::{Event, Program, Report};
use auth::TokenState;

/// Page size for `GET /events` (the specification's maximum).
pub const PAGE_LIMIT: usize = 50;

/// Most events one poll may return across pages.
pub const MAX_EVENTS: usize = 10_000;

/// The result of a poll.
#[derive(Debug, Clone, PartialEq)]
pub enum Polled {
    /// The complete list of events visible for the query.
    Events(Vec<Event>),
    /// Same as last time (HTTP 304): nothing to do. Not an empty list: do not feed it to
    /// [`crate::oadr3::EventTracker::observe_poll`], which would read it as "all deleted".
    NotModified,
}

struct Inner {
    base: String,
    auth: Auth,
    http: reqwest::Client,
    limits: Limits,
    token: tokio::sync::Mutex<TokenState>,
    etags: Mutex<HashMap<String, String>>,
}

/// A VEN's connection to one VTN. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    /// Shows the base URL and the kind of credential, never the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base)
            .field("auth", &self.inner.auth)
            .finish()
    }
}

/// A `reqwest::Client` ready for OpenADR: the rustls `ring` provider installed (reqwest is built
/// without one here, and panics if none is installed), 30 s request and 10 s connect timeouts.
pub fn http_client() -> Result<reqwest::Client, ClientError> {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .connect_timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| ClientError::Encode(format!("cannot build the HTTP client: {e}")))
}

/// Reads a response body, refusing more than `limit` bytes.
pub(crate) async fn read_limited(mut resp: reqwest::Response, url: &str, limit: usize) -> Result<Vec<u8>, ClientError> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(ClientError::BodyTooLarge {
            url: url.to_string(),
            limit,
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| ClientError::transport(url, e))? {
        if body.len() + chunk.len() > limit {
            return Err(ClientError::BodyTooLarge {
                url: url.to_string(),
                limit,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl Client {
    /// A client for the VTN at `base_url` (e.g. `http://127.0.0.1:3000/openadr3/3.1.0`; a
    /// trailing `/` is ignored). `http` is yours to configure (TLS roots, client certificates,
    /// proxies, timeouts); [`http_client`] gives a sensible default.
    pub fn new(base_url: impl Into<String>, auth: Auth, http: reqwest::Client) -> Client {
        let base = base_url.into().trim_end_matches('/').to_string();
        Client {
            inner: Arc::new(Inner {
                base,
                auth,
                http,
                limits: Limits::default(),
                token: tokio::sync::Mutex::new(TokenState::default()),
                etags: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The same client with other decode limits (and body size limit).
    pub fn with_limits(self, limits: Limits) -> Client {
        let inner = Inner {
            base: self.inner.base.clone(),
            auth: self.inner.auth.clone(),
            http: self.inner.http.clone(),
            limits,
            token: tokio::sync::Mutex::new(TokenState::default()),
            etags: Mutex::new(HashMap::new()),
        };
        Client { inner: Arc::new(inner) }
    }

    /// The base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.inner.base, path)
    }

    /// The bearer token to send; `refresh` forces a new one (after a 401).
    async fn bearer(&self, refresh: bool) -> Result<Option<String>, ClientError> {
        let (token_url, client_id, client_secret, scopes) = match &self.inner.auth {
            Auth::Anonymous => return Ok(None),
            Auth::Bearer(t) => return Ok(Some(t.clone())),
            Auth::ClientCredentials {
                token_url,
                client_id,
                client_secret,
                scopes,
            } => (token_url, client_id, client_secret, scopes),
        };
        let mut state = self.inner.token.lock().await;
        if !refresh && let Some(t) = state.token.as_ref().filter(|t| t.fresh()) {
            return Ok(Some(t.value.clone()));
        }
        let url = match (token_url, &state.token_url) {
            (Some(u), _) => u.clone(),
            (None, Some(u)) => u.clone(),
            (None, None) => {
                let u = auth::discover_token_url(&self.inner.http, &self.inner.base).await?;
                state.token_url = Some(u.clone());
                u
            }
        };
        let token = auth::fetch_token(&self.inner.http, &url, client_id, client_secret, scopes).await?;
        let value = token.value.clone();
        state.token = Some(token);
        Ok(Some(value))
    }

    /// Sends a request with the credential; on 401 with client credentials, fetches a fresh
    /// token and tries once more.
    async fn send(
        &self,
        method: Method,
        url: &str,
        query: &[(&str, String)],
        body: Option<&[u8]>,
        if_none_match: Option<&str>,
    ) -> Result<reqwest::Response, ClientError> {
        let renewable = matches!(self.inner.auth, Auth::ClientCredentials { .. });
        let mut refresh = false;
        let mut resent_on_fresh_connection = false;
        loop {
            let token = self.bearer(refresh).await?;
            let mut rb = self
                .inner
                .http
                .request(method.clone(), url)
                .header(header::ACCEPT, "application/json");
            if !query.is_empty() {
                rb = rb.query(query);
            }
            if let Some(t) = token {
                rb = rb.bearer_auth(t);
            }
            if let Some(b) = body {
                rb = rb.header(header::CONTENT_TYPE, "application/json").body(b.to_vec());
            }
            if let Some(etag) = if_none_match {
                rb = rb.header(header::IF_NONE_MATCH, etag);
            }
            let resp = match rb.send().await {
                Ok(resp) => resp,
                // A keep-alive connection the VTN closed (or that died with it) fails the request
                // without saying whether the server is still there. An idempotent request is sent
                // once more, which opens a fresh connection: a live VTN answers, a dead one
                // refuses the connection, and the error then says so (Connect), instead of a
                // poll failing on a stale socket.
                Err(e)
                    if !resent_on_fresh_connection
                        && e.is_request()
                        && !e.is_connect()
                        && !e.is_timeout()
                        && matches!(method, Method::GET | Method::PUT | Method::DELETE) =>
                {
                    resent_on_fresh_connection = true;
                    continue;
                }
                Err(e) => return Err(ClientError::transport(url, e)),
            };
            if resp.status() == StatusCode::UNAUTHORIZED && renewable && !refresh {
                refresh = true;
                continue;
            }
            return Ok(resp);
        }
    }

    /// Turns a non-success response into an error (reading at most 64 KiB of its body).
    async fn fail(resp: reqwest::Response, url: &str) -> ClientError {
        let status = resp.status().as_u16();
        match read_limited(resp, url, 64 * 1024).await {
            Ok(body) => ClientError::status(url, status, &body),
            Err(ClientError::BodyTooLarge { .. }) => ClientError::status(url, status, b""),
            Err(e) => e,
        }
    }

    /// Polls `GET /events`, following pages, and returns every event visible for
    /// `program_id` (when given) and `targets` (repeated `targets=` parameters; the VTN shows
    /// only events whose targets it granted this VEN — hupe1980's VTN shows none at all when
    /// `targets` is omitted). Returns [`Polled::NotModified`] when the VTN answers 304 to the
    /// ETag of the previous identical query.
    pub async fn get_events(&self, program_id: Option<&str>, targets: &[&str]) -> Result<Polled, ClientError> {
        let url = self.url("events");
        let key = format!("{}\u{0}{}", program_id.unwrap_or(""), targets.join("\u{0}"));
        let etag = self
            .inner
            .etags
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        let mut events: Vec<Event> = Vec::new();
        let mut first_etag = None;
        let mut pages = 0usize;
        loop {
            let mut query: Vec<(&str, String)> = Vec::new();
            if let Some(p) = program_id {
                query.push(("programID", p.to_string()));
            }
            for t in targets {
                query.push(("targets", (*t).to_string()));
            }
            query.push(("skip", events.len().to_string()));
            query.push(("limit", PAGE_LIMIT.to_string()));
            let conditional = if pages == 0 { etag.as_deref() } else { None };
            let resp = self.send(Method::GET, &url, &query, None, conditional).await?;
            if resp.status() == StatusCode::NOT_MODIFIED && pages == 0 {
                return Ok(Polled::NotModified);
            }
            if !resp.status().is_success() {
                return Err(Self::fail(resp, &url).await);
            }
            if pages == 0 {
                first_etag = resp
                    .headers()
                    .get(header::ETAG)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
            }
            let body = read_limited(resp, &url, self.inner.limits.max_bytes).await?;
            let page = decode_events(&body, &self.inner.limits).map_err(|source| ClientError::Decode {
                url: url.clone(),
                source,
            })?;
            let n = page.len();
            events.extend(page);
            pages += 1;
            if events.len() > MAX_EVENTS {
                return Err(ClientError::TooManyEvents { url, limit: MAX_EVENTS });
            }
            // A short page ends the list; so does a VTN that ignored `limit` and sent more.
            if n != PAGE_LIMIT {
                break;
            }
        }
        let mut etags = self.inner.etags.lock().unwrap_or_else(|e| e.into_inner());
        match first_etag {
            Some(tag) if pages == 1 => {
                etags.insert(key, tag);
            }
            _ => {
                etags.remove(&key);
            }
        }
        Ok(Polled::Events(events))
    }

    /// `GET /programs` (all pages): what the VEN may enrol in, and the program ids events
    /// refer to.
    pub async fn get_programs(&self) -> Result<Vec<Program>, ClientError> {
        let url = self.url("programs");
        let mut programs = Vec::new();
        loop {
            let query = [("skip", programs.len().to_string()), ("limit", PAGE_LIMIT.to_string())];
            let resp = self.send(Method::GET, &url, &query, None, None).await?;
            if !resp.status().is_success() {
                return Err(Self::fail(resp, &url).await);
            }
            let body = read_limited(resp, &url, self.inner.limits.max_bytes).await?;
            let page = match decode_any_with_limits(&body, &self.inner.limits) {
                Ok(Document::Programs(p)) => p,
                Ok(Document::Program(p)) => vec![*p],
                Ok(Document::Events(e)) if e.is_empty() => Vec::new(),
                Ok(other) => {
                    return Err(ClientError::Decode {
                        url,
                        source: crate::oadr3::DecodeError::UnknownDocument(format!(
                            "expected programs, got {}",
                            other.name()
                        )),
                    });
                }
                Err(source) => return Err(ClientError::Decode { url, source }),
            };
            let n = page.len();
            programs.extend(page);
            if n != PAGE_LIMIT || programs.len() > MAX_EVENTS {
                break;
            }
        }
        Ok(programs)
    }

    /// `POST /reports`; returns the report as the VTN stored it (with its id).
    pub async fn post_report(&self, report: &Report) -> Result<Report, ClientError> {
        let url = self.url("reports");
        let mut report = report.clone();
        if report.object_type.is_none() {
            report.object_type = Some("REPORT".into());
        }
        let body = serde_json::to_vec(&report).map_err(|e| ClientError::Encode(e.to_string()))?;
        let resp = self.send(Method::POST, &url, &[], Some(&body), None).await?;
        if !resp.status().is_success() {
            return Err(Self::fail(resp, &url).await);
        }
        let body = read_limited(resp, &url, self.inner.limits.max_bytes).await?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(report);
        }
        match decode_any_with_limits(&body, &self.inner.limits) {
            Ok(Document::Report(r)) => Ok(*r),
            Ok(_) => Ok(report),
            Err(source) => Err(ClientError::Decode { url, source }),
        }
    }
}
