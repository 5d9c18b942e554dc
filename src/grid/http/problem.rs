//! The one error shape of the HTTP API: RFC 9457 problem details
//! (`application/problem+json`), with two extension members where they apply: `field`, the
//! path of the input that was refused (as the sender wrote it: `target.kw`, `revision`), and
//! `ack`, the `dr.ack/1` the refusal was recorded with (an event for another site, a stale
//! revision, a changed body under the same revision).
//!
//! A retryable refusal (503, 429) always carries `Retry-After`, so that a sender's client (an
//! OpenADR VTN, a utility's publisher, a load balancer) backs off by the header rather than by a
//! guess: [`DEFAULT_RETRY_AFTER_S`] unless the handler knows better ([`Problem::retry_after`]).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Seconds a retryable refusal asks the sender to wait when its handler says nothing else: the
/// causes (a ledger write that failed, a full queue, a verification running) clear in about
/// that long, and a sender that waits longer only delays its event.
pub const DEFAULT_RETRY_AFTER_S: u32 = 1;

/// An error answer. `type` is always `about:blank` (RFC 9457 §4.2.1): the status and its
/// title say what kind of problem it is, `detail` says what to do about this one.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// `about:blank`: the HTTP status is the problem type.
    #[serde(rename = "type")]
    #[schema(example = "about:blank")]
    pub kind: &'static str,
    /// The status's reason phrase (`Bad Request`, `Not Found`, …).
    pub title: String,
    /// The HTTP status code, repeated for clients that keep only the body.
    pub status: u16,
    /// What went wrong with this request and what to do next.
    pub detail: String,
    /// The input that was refused, as a path into the request body (`target.kw`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The acknowledgement recorded with the refusal (`dr.ack/1`), where one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub ack: Option<serde_json::Value>,
    /// On a replica that does not lead: who does (`replica`, `epoch`, `url`), where the
    /// request should go.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub leader: Option<serde_json::Value>,
    /// Seconds for `Retry-After` on a retryable refusal (503, 429); a header, not a member.
    #[serde(skip)]
    pub retry_after_s: Option<u32>,
}

impl Problem {
    /// A problem with `status` and `detail`.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            kind: "about:blank",
            title: status.canonical_reason().unwrap_or("Error").to_string(),
            status: status.as_u16(),
            detail: detail.into(),
            field: None,
            ack: None,
            leader: None,
            retry_after_s: None,
        }
    }

    /// Ask a retrying sender to wait `seconds` (only sent on a retryable status).
    #[must_use]
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    /// Whether the status says "try again later": 503 and 429.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        self.status == StatusCode::SERVICE_UNAVAILABLE.as_u16() || self.status == StatusCode::TOO_MANY_REQUESTS.as_u16()
    }

    /// Name the refused input.
    #[must_use]
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Name the leading replica (a standby's refusal).
    #[must_use]
    pub fn leader(mut self, leader: serde_json::Value) -> Self {
        self.leader = Some(leader);
        self
    }

    /// Carry the acknowledgement the refusal was recorded with.
    #[must_use]
    pub fn ack(mut self, ack: serde_json::Value) -> Self {
        self.ack = Some(ack);
        self
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_else(|_| b"{\"type\":\"about:blank\"}".to_vec());
        let mut response = (status, [(header::CONTENT_TYPE, PROBLEM_JSON)], body).into_response();
        if self.is_retryable() {
            let seconds = self.retry_after_s.unwrap_or(DEFAULT_RETRY_AFTER_S);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_has_the_rfc_9457_members_and_ours_only_when_set() {
        let plain = serde_json::to_value(Problem::new(StatusCode::NOT_FOUND, "no event \"x\"")).expect("json");
        assert_eq!(
            plain,
            serde_json::json!({"type": "about:blank", "title": "Not Found", "status": 404, "detail": "no event \"x\""})
        );
        let full = serde_json::to_value(
            Problem::new(StatusCode::CONFLICT, "stale")
                .field("revision")
                .ack(serde_json::json!({"schema": "dr.ack/1"})),
        )
        .expect("json");
        assert_eq!(full["field"], "revision");
        assert_eq!(full["ack"]["schema"], "dr.ack/1");
        let response = Problem::new(StatusCode::BAD_REQUEST, "x").into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        assert!(response.headers().get(header::RETRY_AFTER).is_none(), "not retryable");
    }

    #[test]
    fn every_retryable_refusal_says_when_to_retry() {
        let busy = Problem::new(StatusCode::SERVICE_UNAVAILABLE, "VEN busy; retry").into_response();
        assert_eq!(
            busy.headers()[header::RETRY_AFTER],
            DEFAULT_RETRY_AFTER_S.to_string().as_str()
        );
        let running = Problem::new(StatusCode::TOO_MANY_REQUESTS, "running")
            .retry_after(5)
            .into_response();
        assert_eq!(running.headers()[header::RETRY_AFTER], "5");
        let body =
            serde_json::to_value(Problem::new(StatusCode::SERVICE_UNAVAILABLE, "x").retry_after(5)).expect("json");
        assert!(body.get("retry_after_s").is_none(), "a header, not a member: {body}");
    }
}
