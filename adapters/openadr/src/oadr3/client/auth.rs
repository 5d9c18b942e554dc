//! Credentials and the OAuth2 client-credentials grant (OpenADR 3 §Security).
//!
//! A token is cached until shortly before it expires (`expires_in` minus 30 s, or half the
//! lifetime for short-lived tokens) and replaced at once when the VTN answers 401. The token
//! endpoint is configured, or discovered from `GET {base}/auth/server` (`tokenURL`). Credentials
//! go in the form body (RFC 6749 §2.3.1, what hupe1980's VTN reads); if the endpoint refuses
//! that with `invalid_client` or 401, the request is repeated once with HTTP Basic (what
//! openleadr-rs reads). Secrets never appear in `Debug` output or error messages.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::error::{ClientError, excerpt};

/// How the VEN authenticates to the VTN.
#[derive(Clone)]
pub enum Auth {
    /// No credential (a public tariff VTN).
    Anonymous,
    /// A pre-shared bearer token (development VTNs, gateways that authenticate elsewhere).
    Bearer(String),
    /// OAuth2 client credentials: the client obtains and refreshes its own bearer token.
    ClientCredentials {
        /// The token endpoint; `None` = discover it via `GET {base}/auth/server`.
        token_url: Option<String>,
        /// The client id the VTN operator issued.
        client_id: String,
        /// Its secret.
        client_secret: String,
        /// Scopes to ask for; empty = whatever the server grants by default.
        scopes: Vec<String>,
    },
}

impl fmt::Debug for Auth {
    /// Redacts every secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Anonymous => f.write_str("Anonymous"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::ClientCredentials {
                token_url,
                client_id,
                scopes,
                ..
            } => f
                .debug_struct("ClientCredentials")
                .field("token_url", token_url)
                .field("client_id", client_id)
                .field("client_secret", &"<redacted>")
                .field("scopes", scopes)
                .finish(),
        }
    }
}

/// A token obtained from the token endpoint.
#[derive(Clone)]
pub(crate) struct CachedToken {
    pub(crate) value: String,
    refresh_at: Option<Instant>,
}

impl CachedToken {
    pub(crate) fn fresh(&self) -> bool {
        self.refresh_at.is_none_or(|t| Instant::now() < t)
    }
}

/// The token cache behind the client's mutex.
#[derive(Default)]
pub(crate) struct TokenState {
    pub(crate) token: Option<CachedToken>,
    pub(crate) token_url: Option<String>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct OAuthError {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_description: Option<String>,
}

#[derive(Deserialize)]
struct AuthServer {
    #[serde(rename = "tokenURL")]
    token_url: String,
}

/// `GET {base}/auth/server` → the token URL.
pub(crate) async fn discover_token_url(http: &reqwest::Client, base: &str) -> Result<String, ClientError> {
    let url = format!("{base}/auth/server");
    let resp = http
        .get(&url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| ClientError::transport(&url, e))?;
    let status = resp.status().as_u16();
    let body = super::read_limited(resp, &url, 64 * 1024).await?;
    if !(200..300).contains(&status) {
        return Err(ClientError::status(&url, status, &body));
    }
    let info: AuthServer = serde_json::from_slice(&body).map_err(|e| ClientError::Token {
        url: url.clone(),
        status: Some(status),
        detail: format!("no tokenURL in the /auth/server answer ({e})"),
    })?;
    Ok(info.token_url)
}

/// One client-credentials grant. `basic` puts the credentials in an Authorization header
/// instead of the form body.
async fn request_token(
    http: &reqwest::Client,
    token_url: &str,
    client_id: &str,
    client_secret: &str,
    scopes: &[String],
    basic: bool,
) -> Result<Result<CachedToken, (u16, OAuthError)>, ClientError> {
    let scope = scopes.join(" ");
    let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
    if !basic {
        form.push(("client_id", client_id));
        form.push(("client_secret", client_secret));
    }
    if !scope.is_empty() {
        form.push(("scope", &scope));
    }
    let mut rb = http
        .post(token_url)
        .header(reqwest::header::ACCEPT, "application/json")
        .form(&form);
    if basic {
        rb = rb.basic_auth(client_id, Some(client_secret));
    }
    let resp = rb.send().await.map_err(|e| ClientError::transport(token_url, e))?;
    let status = resp.status().as_u16();
    let body = super::read_limited(resp, token_url, 64 * 1024).await?;
    if (200..300).contains(&status) {
        let t: TokenResponse = serde_json::from_slice(&body).map_err(|e| ClientError::Token {
            url: token_url.to_string(),
            status: Some(status),
            detail: format!("the token response has no access_token ({e})"),
        })?;
        let refresh_at = t.expires_in.map(|secs| {
            let margin = (secs / 2).min(30);
            Instant::now() + Duration::from_secs(secs.saturating_sub(margin))
        });
        return Ok(Ok(CachedToken {
            value: t.access_token,
            refresh_at,
        }));
    }
    let err = serde_json::from_slice::<OAuthError>(&body).unwrap_or(OAuthError {
        error: None,
        error_description: Some(excerpt(&body)),
    });
    Ok(Err((status, err)))
}

/// Obtains a token: form credentials first, then HTTP Basic if the endpoint says the client
/// was not authenticated that way. When both fail, the first refusal is reported (it is the
/// informative one: a server that wants Basic answers the form attempt with `invalid_client`).
pub(crate) async fn fetch_token(
    http: &reqwest::Client,
    token_url: &str,
    client_id: &str,
    client_secret: &str,
    scopes: &[String],
) -> Result<CachedToken, ClientError> {
    let describe = |status: u16, err: OAuthError| {
        let text = match (err.error, err.error_description) {
            (Some(e), Some(d)) => format!("{e}: {d}"),
            (Some(e), None) => e,
            (None, Some(d)) => d,
            (None, None) => "refused".into(),
        };
        (status, text)
    };
    let (status, mut detail) = match request_token(http, token_url, client_id, client_secret, scopes, false).await? {
        Ok(token) => return Ok(token),
        Err((status, err)) => {
            let retry = status == 401 || err.error.as_deref() == Some("invalid_client");
            let first = describe(status, err);
            if !retry {
                return Err(token_error(token_url, first.0, &first.1, client_id));
            }
            first
        }
    };
    match request_token(http, token_url, client_id, client_secret, scopes, true).await? {
        Ok(token) => Ok(token),
        Err((basic_status, err)) => {
            let (_, basic) = describe(basic_status, err);
            detail.push_str(&format!("; with HTTP Basic instead: {basic}"));
            Err(token_error(token_url, status, &detail, client_id))
        }
    }
}

fn token_error(url: &str, status: u16, detail: &str, client_id: &str) -> ClientError {
    ClientError::Token {
        url: url.to_string(),
        status: Some(status),
        detail: format!("{detail} (client_id {client_id})"),
    }
}
