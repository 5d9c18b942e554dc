//! The instant query over HTTP: `GET {base}/api/v1/query?query=…`, under a deadline, its
//! answer read by [`crate::answer::parse`].

use crate::answer::{AnswerError, Sample};
use std::time::Duration;

/// Largest answer read: one sample is a few hundred bytes; far more is a query that returns a
/// whole fleet of series, or not Prometheus at all.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Why no sample was had.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The configured base URL or query cannot work.
    #[error("Prometheus source: {0}")]
    Config(String),
    /// No answer within the deadline.
    #[error("Prometheus at {url} did not answer within {} ms", .after.as_millis())]
    Timeout {
        /// The server.
        url: String,
        /// The deadline.
        after: Duration,
    },
    /// Connection refused, reset, DNS, TLS.
    #[error("Prometheus at {url} is unreachable: {detail}")]
    Unreachable {
        /// The server.
        url: String,
        /// What happened.
        detail: String,
    },
    /// An HTTP status other than 200 with no query error inside (a proxy, a wrong path).
    #[error("Prometheus at {url} answered HTTP {status}")]
    Status {
        /// The server.
        url: String,
        /// The status.
        status: u16,
    },
    /// The answer is over [`MAX_ANSWER_BYTES`].
    #[error("Prometheus at {url} sent an answer over {MAX_ANSWER_BYTES} bytes")]
    TooLarge {
        /// The server.
        url: String,
    },
    /// The answer is not one finite value.
    #[error("Prometheus at {url}: {source}")]
    Answer {
        /// The server.
        url: String,
        /// Why.
        source: AnswerError,
    },
}

/// One instant query against one Prometheus server.
#[derive(Debug, Clone)]
pub struct InstantQuery {
    http: reqwest::Client,
    base: String,
    endpoint: reqwest::Url,
    query: String,
    timeout: Duration,
}

impl InstantQuery {
    /// `query` (PromQL returning one value) against the server at `base_url`
    /// (`http://127.0.0.1:9090`, or with a path prefix behind a proxy), each request bounded by
    /// `timeout`. `http` carries the TLS settings for an `https://` server.
    ///
    /// # Errors
    /// [`QueryError::Config`] for a URL that is not http(s), or an empty query.
    pub fn new(http: reqwest::Client, base_url: &str, query: &str, timeout: Duration) -> Result<Self, QueryError> {
        let base = base_url.trim_end_matches('/');
        let endpoint = reqwest::Url::parse(&format!("{base}/api/v1/query"))
            .map_err(|e| QueryError::Config(format!("url {base_url:?}: {e}")))?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(QueryError::Config(format!(
                "url {base_url:?}: only http:// and https:// are supported"
            )));
        }
        if query.trim().is_empty() {
            return Err(QueryError::Config("the query is empty".into()));
        }
        if timeout.is_zero() {
            return Err(QueryError::Config("the timeout must be above 0".into()));
        }
        Ok(Self {
            http,
            base: base.to_string(),
            endpoint,
            query: query.to_string(),
            timeout,
        })
    }

    /// The query text.
    #[must_use]
    pub fn query(&self) -> &str {
        &self.query
    }

    /// Evaluates the query now. Prometheus is also told the deadline (its `timeout` parameter)
    /// so that it gives up on its side too.
    ///
    /// # Errors
    /// See [`QueryError`].
    pub async fn read(&self) -> Result<Sample, QueryError> {
        let url = self.base.clone();
        // Prometheus durations take whole units ("1500ms"), not "1.500s".
        let deadline_s = format!("{}ms", self.timeout.as_millis().max(1));
        let request = self
            .http
            .get(self.endpoint.clone())
            .query(&[("query", self.query.as_str()), ("timeout", deadline_s.as_str())])
            .timeout(self.timeout);
        let mut response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                        return Err(QueryError::TooLarge { url });
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return Err(self.transport(e)),
            }
        }
        // Prometheus answers a refused query with 400/422/503 and an error envelope: report
        // its own words when there are some.
        match crate::answer::parse(&body) {
            Ok(sample) if status == 200 => Ok(sample),
            Ok(_) => Err(QueryError::Status { url, status }),
            Err(e @ AnswerError::Refused { .. }) => Err(QueryError::Answer { url, source: e }),
            Err(_) if status != 200 => Err(QueryError::Status { url, status }),
            Err(source) => Err(QueryError::Answer { url, source }),
        }
    }

    fn transport(&self, e: reqwest::Error) -> QueryError {
        if e.is_timeout() {
            QueryError::Timeout {
                url: self.base.clone(),
                after: self.timeout,
            }
        } else {
            QueryError::Unreachable {
                url: self.base.clone(),
                detail: error_chain(&e),
            }
        }
    }
}

/// The error and its causes, "connection refused" included (reqwest's own message stops at
/// "error sending request").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_settings_are_refused_before_any_request() {
        // In the workspace reqwest's `rustls-no-provider` is on: a provider first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let t = Duration::from_secs(1);
        assert!(InstantQuery::new(http.clone(), "ftp://x", "up", t).is_err());
        assert!(InstantQuery::new(http.clone(), "not a url", "up", t).is_err());
        assert!(InstantQuery::new(http.clone(), "http://127.0.0.1:9090", "  ", t).is_err());
        assert!(InstantQuery::new(http.clone(), "http://127.0.0.1:9090", "up", Duration::ZERO).is_err());
        let q = InstantQuery::new(http, "http://127.0.0.1:9090/prom/", "sum(x)", t).expect("valid");
        assert_eq!(q.endpoint.as_str(), "http://127.0.0.1:9090/prom/api/v1/query");
    }
}
