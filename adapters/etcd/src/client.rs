//! The HTTP side: one call to etcd's JSON gateway per method, every call under a deadline, and
//! failover between the cluster's members.
//!
//! Failover is safe only where a request cannot have been applied: a member that refuses the
//! connection is skipped at once and the next one tried. Any other failure (a timeout, a member
//! that answers "unavailable") is returned to the caller, because the request may have been
//! applied; the next call starts at the next member. Callers make their writes safe to repeat
//! (a transaction guarded by a compare), so that they can read and retry.

use crate::wire::{
    DeleteRequest, GatewayError, KeyValue, LeaseAnswer, LeaseGrantRequest, LeaseIdRequest, PutRequest, RangeRequest,
    RangeResponse, ResponseHeader, Streamed, TxnRequest, TxnResponse, WatchCreate, WatchRequest, WatchResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Longest answer read from etcd (a range of ledger records is the largest): 64 MiB.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Why a call to etcd failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    /// An endpoint that is not `http://host:port` or `https://host:port`.
    #[error("etcd endpoint {endpoint:?} is not a URL of the form http(s)://host:port: {reason}")]
    BadEndpoint {
        /// As given.
        endpoint: String,
        /// What is wrong.
        reason: String,
    },
    /// No endpoint at all.
    #[error("no etcd endpoint is configured")]
    NoEndpoints,
    /// No member could be reached.
    #[error("no etcd member answered ({tried} tried): {last}")]
    Unreachable {
        /// Members tried.
        tried: usize,
        /// The last failure.
        last: String,
    },
    /// A member answered with an error (no quorum, a request too large, …).
    #[error("etcd at {endpoint} refused {path}: {status} {message}")]
    Refused {
        /// The member.
        endpoint: String,
        /// The call.
        path: String,
        /// HTTP status.
        status: u16,
        /// etcd's message.
        message: String,
    },
    /// The request may or may not have been applied (a timeout after it was sent).
    #[error("etcd at {endpoint} did not answer {path} in time ({reason}); it may or may not have been applied")]
    Uncertain {
        /// The member.
        endpoint: String,
        /// The call.
        path: String,
        /// What happened.
        reason: String,
    },
    /// An answer that is not what etcd sends.
    #[error("etcd at {endpoint} answered {path} with something unreadable: {reason}")]
    Malformed {
        /// The member.
        endpoint: String,
        /// The call.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl EtcdError {
    /// Whether the cluster may simply lack a quorum or a member for now (worth retrying later),
    /// rather than refusing the request itself.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } | Self::Uncertain { .. } => true,
            Self::Refused { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// An etcd user's name and password (etcd's role-based access control). Its `Debug` hides the
/// password, so that it never reaches a log.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user.
    pub user: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"(hidden)")
            .finish()
    }
}

/// A client of one etcd cluster. (Its `Debug` shows no password and no token.)
pub struct Client {
    http: reqwest::Client,
    endpoints: Vec<String>,
    /// The member the next call starts at.
    next: AtomicUsize,
    timeout: Duration,
    credentials: Option<Credentials>,
    /// The auth token per member (etcd's simple tokens are each member's own), taken by
    /// [`Client::authenticate`] when first needed and again when a member no longer knows it.
    tokens: std::sync::Mutex<Vec<Option<String>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.endpoints)
            .field("timeout", &self.timeout)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

/// Check one endpoint: `http(s)://host:port`, nothing after the port.
pub fn check_endpoint(endpoint: &str) -> Result<String, EtcdError> {
    let bad = |reason: &str| EtcdError::BadEndpoint {
        endpoint: endpoint.to_string(),
        reason: reason.to_string(),
    };
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .ok_or_else(|| bad("it must start with http:// or https://"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad("only a host and a port may follow the scheme"));
    }
    let (host, port) = authority.rsplit_once(':').ok_or_else(|| bad("it needs a port"))?;
    if host.is_empty() {
        return Err(bad("it needs a host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(bad("the port must be a number from 1 to 65535")),
    }
    Ok(endpoint.trim_end_matches('/').to_string())
}

impl Client {
    /// A client of the members at `endpoints` (`http(s)://host:port`), each call answered within
    /// `timeout`. `http` carries the TLS settings; the caller builds it.
    pub fn new(http: reqwest::Client, endpoints: &[String], timeout: Duration) -> Result<Self, EtcdError> {
        if endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        let endpoints = endpoints
            .iter()
            .map(|e| check_endpoint(e))
            .collect::<Result<Vec<_>, _>>()?;
        let members = endpoints.len();
        Ok(Self {
            http,
            endpoints,
            next: AtomicUsize::new(0),
            timeout,
            credentials: None,
            tokens: std::sync::Mutex::new(vec![None; members]),
        })
    }

    /// Authenticate as `credentials` (a cluster with auth enabled): every call carries the
    /// member's token.
    #[must_use]
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    fn token(&self, index: usize) -> Option<String> {
        self.tokens.lock().ok().and_then(|t| t.get(index).cloned().flatten())
    }

    fn set_token(&self, index: usize, token: Option<String>) {
        if let Ok(mut tokens) = self.tokens.lock()
            && let Some(slot) = tokens.get_mut(index)
        {
            *slot = token;
        }
    }

    /// The token for member `index` (`None` without credentials), authenticating when it has
    /// none. A member that does not answer gives the connection error as is, for failover.
    async fn authorize(&self, index: usize) -> Result<Option<String>, Result<reqwest::Error, EtcdError>> {
        let Some(credentials) = &self.credentials else {
            return Ok(None);
        };
        if let Some(token) = self.token(index) {
            return Ok(Some(token));
        }
        let endpoint = &self.endpoints[index];
        let path = "/v3/auth/authenticate";
        let response = self
            .http
            .post(format!("{endpoint}{path}"))
            .timeout(self.timeout)
            .json(&crate::wire::AuthenticateRequest {
                name: credentials.user.clone(),
                password: credentials.password.clone(),
            })
            .send()
            .await
            .map_err(Ok)?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            let message = serde_json::from_str::<GatewayError>(&text)
                .map(|e| e.message)
                .unwrap_or(text);
            return Err(Err(EtcdError::Refused {
                endpoint: endpoint.clone(),
                path: path.to_string(),
                status: status.as_u16(),
                message: format!("as etcd user {:?}: {message}", credentials.user),
            }));
        }
        let answer: crate::wire::AuthenticateResponse = serde_json::from_str(&text).map_err(|e| {
            Err(EtcdError::Malformed {
                endpoint: endpoint.clone(),
                path: path.to_string(),
                reason: e.to_string(),
            })
        })?;
        self.set_token(index, Some(answer.token.clone()));
        Ok(Some(answer.token))
    }

    /// The members, as configured.
    #[must_use]
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Send `body` to `path`, starting at the member after the last one that failed; the
    /// answer's body.
    async fn send<Req: Serialize>(&self, path: &str, body: &Req) -> Result<(String, reqwest::Response), EtcdError> {
        let start = self.next.load(Ordering::Relaxed);
        let count = self.endpoints.len();
        let mut last = String::new();
        let mut reauthenticated = false;
        let mut i = 0;
        while i < count {
            let index = (start + i) % count;
            let endpoint = &self.endpoints[index];
            let token = match self.authorize(index).await {
                Ok(token) => token,
                Err(Ok(e)) if e.is_connect() => {
                    last = format!("{endpoint}: {e}");
                    i += 1;
                    continue;
                }
                Err(Ok(e)) => {
                    self.next.store((index + 1) % count, Ordering::Relaxed);
                    return Err(EtcdError::Unreachable {
                        tried: i + 1,
                        last: format!("{endpoint}: authenticating: {e}"),
                    });
                }
                Err(Err(e)) => return Err(e),
            };
            let mut request = self
                .http
                .post(format!("{endpoint}{path}"))
                .timeout(self.timeout)
                .json(body);
            if let Some(token) = &token {
                request = request.header(reqwest::header::AUTHORIZATION, token);
            }
            let sent = request.send().await;
            match sent {
                Ok(response) => {
                    let status = response.status();
                    if status.is_success() {
                        self.next.store(index, Ordering::Relaxed);
                        return Ok((endpoint.clone(), response));
                    }
                    let text = response.text().await.unwrap_or_default();
                    let message = serde_json::from_str::<GatewayError>(&text)
                        .map(|e| e.message)
                        .unwrap_or(text);
                    // A token the member no longer knows (it restarted, or the token expired):
                    // authenticate again and resend, once. Nothing was applied.
                    if token.is_some() && !reauthenticated && message.contains("invalid auth token") {
                        self.set_token(index, None);
                        reauthenticated = true;
                        continue;
                    }
                    // The next call starts elsewhere: this member may have lost the quorum.
                    self.next.store((index + 1) % count, Ordering::Relaxed);
                    return Err(EtcdError::Refused {
                        endpoint: endpoint.clone(),
                        path: path.to_string(),
                        status: status.as_u16(),
                        message,
                    });
                }
                Err(e) if e.is_connect() => {
                    last = format!("{endpoint}: {e}");
                    // A member that comes back has forgotten its tokens.
                    self.set_token(index, None);
                }
                Err(e) => {
                    self.next.store((index + 1) % count, Ordering::Relaxed);
                    return Err(EtcdError::Uncertain {
                        endpoint: endpoint.clone(),
                        path: path.to_string(),
                        reason: e.to_string(),
                    });
                }
            }
            i += 1;
        }
        Err(EtcdError::Unreachable { tried: count, last })
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(&self, path: &str, body: &Req) -> Result<Resp, EtcdError> {
        let (endpoint, response) = self.send(path, body).await?;
        let malformed = |reason: String| EtcdError::Malformed {
            endpoint: endpoint.clone(),
            path: path.to_string(),
            reason,
        };
        let bytes = read_limited(response, MAX_ANSWER_BYTES)
            .await
            .map_err(|e| EtcdError::Uncertain {
                endpoint: endpoint.clone(),
                path: path.to_string(),
                reason: e,
            })?;
        serde_json::from_slice(&bytes).map_err(|e| malformed(e.to_string()))
    }

    /// The value of `key`, if it exists.
    pub async fn get(&self, key: &[u8]) -> Result<(ResponseHeader, Option<KeyValue>), EtcdError> {
        let answer: RangeResponse = self
            .call(
                "/v3/kv/range",
                &RangeRequest {
                    key: key.to_vec(),
                    ..RangeRequest::default()
                },
            )
            .await?;
        Ok((answer.header, answer.kvs.into_iter().next()))
    }

    /// The keys in `[start, end)`, at most `limit` (0: all), in key order.
    pub async fn range(&self, start: &[u8], end: &[u8], limit: i64) -> Result<RangeResponse, EtcdError> {
        self.call(
            "/v3/kv/range",
            &RangeRequest {
                key: start.to_vec(),
                range_end: end.to_vec(),
                limit,
            },
        )
        .await
    }

    /// Write `key`, attached to `lease` (0: none).
    pub async fn put(&self, key: &[u8], value: &[u8], lease: i64) -> Result<ResponseHeader, EtcdError> {
        #[derive(serde::Deserialize)]
        struct Answer {
            #[serde(default)]
            header: ResponseHeader,
        }
        let answer: Answer = self
            .call(
                "/v3/kv/put",
                &PutRequest {
                    key: key.to_vec(),
                    value: value.to_vec(),
                    lease,
                },
            )
            .await?;
        Ok(answer.header)
    }

    /// Delete the keys in `[start, end)` (`end` empty: `start` alone).
    pub async fn delete(&self, start: &[u8], end: &[u8]) -> Result<(), EtcdError> {
        let _: serde_json::Value = self
            .call(
                "/v3/kv/deleterange",
                &DeleteRequest {
                    key: start.to_vec(),
                    range_end: end.to_vec(),
                },
            )
            .await?;
        Ok(())
    }

    /// Forget the history before `revision` (see [`crate::wire::CompactionRequest`]). A
    /// revision already compacted is not an error: someone else compacted further.
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let answer: Result<serde_json::Value, EtcdError> = self
            .call("/v3/kv/compaction", &crate::wire::CompactionRequest { revision })
            .await;
        match answer {
            Err(e) if e.to_string().contains("has been compacted") => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// An atomic transaction.
    pub async fn txn(&self, txn: &TxnRequest) -> Result<TxnResponse, EtcdError> {
        self.call("/v3/kv/txn", txn).await
    }

    /// A new lease of `ttl_s` seconds.
    pub async fn grant(&self, ttl_s: i64) -> Result<LeaseAnswer, EtcdError> {
        let answer: LeaseAnswer = self.call("/v3/lease/grant", &LeaseGrantRequest { ttl: ttl_s }).await?;
        if !answer.error.is_empty() || answer.id == 0 {
            return Err(EtcdError::Refused {
                endpoint: String::new(),
                path: "/v3/lease/grant".into(),
                status: 200,
                message: if answer.error.is_empty() {
                    "no lease id in the answer".into()
                } else {
                    answer.error
                },
            });
        }
        Ok(answer)
    }

    /// Keep lease `id` alive once: the seconds it has left now (0: it has expired).
    pub async fn keep_alive(&self, id: i64) -> Result<i64, EtcdError> {
        let answer: Streamed<LeaseAnswer> = self.call("/v3/lease/keepalive", &LeaseIdRequest { id }).await?;
        match (answer.result, answer.error) {
            (Some(lease), _) => Ok(lease.ttl),
            (None, Some(e)) => Err(EtcdError::Refused {
                endpoint: String::new(),
                path: "/v3/lease/keepalive".into(),
                status: 200,
                message: e.message,
            }),
            (None, None) => Ok(0),
        }
    }

    /// End lease `id` now (its keys are deleted).
    pub async fn revoke(&self, id: i64) -> Result<(), EtcdError> {
        let _: serde_json::Value = self.call("/v3/lease/revoke", &LeaseIdRequest { id }).await?;
        Ok(())
    }

    /// Watch `[start, end)` (`end` empty: the key alone) from revision `from` (0: now).
    pub async fn watch(&self, start: &[u8], end: &[u8], from: i64) -> Result<Watch, EtcdError> {
        // A watch is a long-lived answer: no overall deadline, only the connect's.
        let body = WatchRequest {
            create_request: WatchCreate {
                key: start.to_vec(),
                range_end: end.to_vec(),
                start_revision: from,
            },
        };
        let start_at = self.next.load(Ordering::Relaxed);
        let count = self.endpoints.len();
        let mut last = String::new();
        for i in 0..count {
            let index = (start_at + i) % count;
            let endpoint = &self.endpoints[index];
            let token = match self.authorize(index).await {
                Ok(token) => token,
                Err(Ok(e)) => {
                    last = format!("{endpoint}: authenticating: {e}");
                    continue;
                }
                Err(Err(e)) => return Err(e),
            };
            let mut request = self.http.post(format!("{endpoint}/v3/watch")).json(&body);
            if let Some(token) = &token {
                request = request.header(reqwest::header::AUTHORIZATION, token);
            }
            let sent = tokio::time::timeout(self.timeout, request.send()).await;
            match sent {
                Ok(Ok(response)) if response.status().is_success() => {
                    return Ok(Watch {
                        endpoint: endpoint.clone(),
                        response,
                        buffer: Vec::new(),
                    });
                }
                Ok(Ok(response)) => last = format!("{endpoint}: {}", response.status()),
                Ok(Err(e)) => last = format!("{endpoint}: {e}"),
                Err(_) => last = format!("{endpoint}: no answer in {:?}", self.timeout),
            }
        }
        Err(EtcdError::Unreachable { tried: count, last })
    }
}

/// Read a whole answer, refusing one larger than `limit`.
async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if out.len() + chunk.len() > limit {
            return Err(format!("the answer is larger than {limit} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A watch's stream of changes: one [`WatchResponse`] per message, in revision order.
#[derive(Debug)]
pub struct Watch {
    endpoint: String,
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Watch {
    /// The next message; `Ok(None)` when the member ended the stream (the caller watches again
    /// from the revision after the last one it saw).
    pub async fn next(&mut self) -> Result<Option<WatchResponse>, EtcdError> {
        loop {
            if let Some(message) = self.take_message()? {
                return Ok(Some(message));
            }
            let chunk = self.response.chunk().await.map_err(|e| EtcdError::Uncertain {
                endpoint: self.endpoint.clone(),
                path: "/v3/watch".into(),
                reason: e.to_string(),
            })?;
            let Some(chunk) = chunk else {
                return Ok(None);
            };
            if self.buffer.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(self.malformed("a watch message larger than the limit".into()));
            }
            self.buffer.extend_from_slice(&chunk);
        }
    }

    fn malformed(&self, reason: String) -> EtcdError {
        EtcdError::Malformed {
            endpoint: self.endpoint.clone(),
            path: "/v3/watch".into(),
            reason,
        }
    }

    /// One complete JSON message from the front of the buffer, if one is there (the gateway
    /// writes one object per line).
    fn take_message(&mut self) -> Result<Option<WatchResponse>, EtcdError> {
        let Some(end) = self.buffer.iter().position(|b| *b == b'\n') else {
            return Ok(None);
        };
        let line: Vec<u8> = self.buffer.drain(..=end).collect();
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let message: Streamed<WatchResponse> =
            serde_json::from_slice(&line).map_err(|e| self.malformed(e.to_string()))?;
        match (message.result, message.error) {
            (Some(r), _) => Ok(Some(r)),
            (None, Some(e)) => Err(EtcdError::Refused {
                endpoint: self.endpoint.clone(),
                path: "/v3/watch".into(),
                status: 200,
                message: e.message,
            }),
            (None, None) => Err(self.malformed("a message with neither result nor error".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked_before_anything_is_sent() {
        assert_eq!(
            check_endpoint("http://127.0.0.1:2379/").expect("ok"),
            "http://127.0.0.1:2379"
        );
        assert!(check_endpoint("https://etcd-1.example:2379").is_ok());
        for bad in [
            "127.0.0.1:2379",
            "http://127.0.0.1",
            "http://:2379",
            "http://h:0",
            "http://h:99999",
            "http://h:2379/v3",
            "ftp://h:1",
            "http://user@h:1",
            "",
        ] {
            let e = check_endpoint(bad).expect_err(bad);
            assert!(e.to_string().contains("http(s)://host:port"), "{e}");
        }
    }
}
