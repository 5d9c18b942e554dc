//! The HTTP API (axum). Reads are open on the listening address; every write needs the bearer
//! token. Errors are JSON `{"error": {"field": ..., "message": ...}}` with the right 4xx/5xx.

use crate::grid::dr_event::ack_payload;
use crate::runtime::{Gateway, OperatorError, SubmitError, Transport};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flexgate_policies::control::OperatorError as OperatorRefusal;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::Arc;

/// Largest request body accepted (a `dr.event/1` document is a few hundred bytes).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

const OPENAPI: &str = include_str!("openapi.json");

pub mod body;
pub mod server;

use body::read_body;

/// Shared state of the handlers.
#[derive(Clone)]
struct Api {
    gateway: Arc<Gateway>,
    /// SHA-256 of the token: compared in constant time, and the token itself is not kept around
    /// in a form that a debug print could leak.
    token_digest: [u8; 32],
    /// Held while a `GET /v1/ledger/verify` walks the chain: one walk at a time, so readers
    /// cannot pile up full scans of the ledger.
    verifying: Arc<tokio::sync::Mutex<()>>,
}

/// The router, ready to serve.
pub fn router(gateway: Arc<Gateway>, token: &str) -> Router {
    let api = Api {
        gateway,
        token_digest: Sha256::digest(token.as_bytes()).into(),
        verifying: Arc::default(),
    };
    Router::new()
        .route("/v1/events", get(list_events).post(post_event))
        .route("/v1/events/{id}", get(get_event))
        .route("/v1/operator/opt-out", axum::routing::post(operator_opt_out))
        .route("/v1/status", get(status))
        .route("/v1/jobs", get(jobs))
        .route("/v1/plan", get(plan))
        .route("/v1/flexibility", get(flexibility))
        .route("/v1/ledger/verify", get(verify_ledger))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(api)
}

fn error(status: StatusCode, field: Option<&str>, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"error": {"field": field, "message": message.into()}})),
    )
        .into_response()
}

/// The credentials of an `Authorization: Bearer …` header. The scheme name is matched without
/// regard to case (RFC 9110 §11.1: `bearer`, `BEARER` and `Bearer` are the same scheme).
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

impl Api {
    /// How long a request body may take (`gateway.http_body_timeout_s`).
    fn body_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.gateway.config.gateway.http_body_timeout_s)
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(given) = bearer_token(headers) else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
        // Constant-time comparison of the digests.
        digest
            .iter()
            .zip(self.token_digest)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

async fn post_event(State(api): State<Api>, request: Request) -> Response {
    if !api.authorized(request.headers()) {
        return error(
            StatusCode::UNAUTHORIZED,
            None,
            "missing or wrong bearer token (Authorization: Bearer <token>)",
        );
    }
    let transport = Transport::Http {
        peer: request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.to_string()),
    };
    let body: Bytes = match read_body(request.into_body(), MAX_BODY_BYTES, api.body_timeout()).await {
        Ok(body) => body,
        Err(e) => return error(e.status(), None, e.to_string()),
    };
    match api.gateway.submit_event(&body, transport).await {
        // Same revision, different body: the first answer stands and the new body was ignored;
        // say so with a conflict rather than a plain 200.
        Ok(outcome) if outcome.differs => (
            StatusCode::CONFLICT,
            axum::Json(json!({
                "error": {"field": "revision", "message": outcome.ack.reason.clone().unwrap_or_default()},
                "ack": ack_payload(&outcome.ack),
            })),
        )
            .into_response(),
        Ok(outcome) => (StatusCode::OK, axum::Json(ack_payload(&outcome.ack))).into_response(),
        Err(SubmitError::Invalid(e)) => error(StatusCode::BAD_REQUEST, Some(&e.field), e.message),
        Err(SubmitError::Refused { reason, ack }) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            axum::Json(json!({"error": {"field": null, "message": reason}, "ack": ack_payload(&ack)})),
        )
            .into_response(),
        Err(e @ SubmitError::Stale { .. }) => error(StatusCode::CONFLICT, Some("revision"), e.to_string()),
        Err(SubmitError::Ledger(e)) => {
            tracing::error!("ledger failure on submit: {e}");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "the event could not be recorded; it was not acknowledged, retry",
            )
        }
    }
}

async fn list_events(State(api): State<Api>) -> Response {
    axum::Json(api.gateway.events().await).into_response()
}

async fn get_event(State(api): State<Api>, Path(id): Path<String>) -> Response {
    match api.gateway.event(&id).await {
        Some(event) => axum::Json(event).into_response(),
        None => error(StatusCode::NOT_FOUND, Some("id"), format!("no event {id:?}")),
    }
}

async fn status(State(api): State<Api>) -> Response {
    axum::Json(api.gateway.status().await).into_response()
}

async fn jobs(State(api): State<Api>) -> Response {
    axum::Json(api.gateway.jobs().await).into_response()
}

async fn plan(State(api): State<Api>) -> Response {
    match api.gateway.plan().await {
        Some(plan) => axum::Json(plan).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            None,
            "no plan in force: no event constrains the site",
        ),
    }
}

async fn flexibility(State(api): State<Api>) -> Response {
    match api.gateway.flexibility().await {
        Some(curve) => axum::Json(&*curve).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            None,
            "no flexibility curve: no telemetry yet, or the policy is a proportional rule (only `flexgate` costs a curve)",
        ),
    }
}

/// Walk the live ledger's hash chain (what `flexgate log verify --data` does on a stopped
/// gateway's directory, which a running gateway holds locked). A broken chain is an answer, not
/// an HTTP error: `intact: false` with the first bad record.
async fn verify_ledger(State(api): State<Api>) -> Response {
    let Ok(_one_at_a_time) = api.verifying.clone().try_lock_owned() else {
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            None,
            "a verification of the ledger is already running; retry when it has answered",
        );
    };
    let ledger = api.gateway.ledger().clone();
    match tokio::task::spawn_blocking(move || ledger.verify()).await {
        Ok(Ok(report)) => axum::Json(json!({
            "intact": true,
            "records": report.records,
            "head_hash": report.head_hash,
        }))
        .into_response(),
        Ok(Err(failure)) => axum::Json(json!({
            "intact": false,
            "failed_at_record": failure.seq,
            "reason": failure.reason,
        }))
        .into_response(),
        Err(join) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            format!("the verification did not complete: {join}"),
        ),
    }
}

async fn metrics(State(api): State<Api>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::runtime::metrics::CONTENT_TYPE)],
        api.gateway.metrics().await,
    )
        .into_response()
}

/// Body of `POST /v1/operator/opt-out`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OptOutRequest {
    event_id: String,
    operator: String,
    reason: String,
}

async fn operator_opt_out(State(api): State<Api>, request: Request) -> Response {
    if !api.authorized(request.headers()) {
        return error(
            StatusCode::UNAUTHORIZED,
            None,
            "missing or wrong bearer token (Authorization: Bearer <token>)",
        );
    }
    let body = match read_body(request.into_body(), MAX_BODY_BYTES, api.body_timeout()).await {
        Ok(body) => body,
        Err(e) => return error(e.status(), None, e.to_string()),
    };
    let req: OptOutRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                None,
                format!("expected {{\"event_id\", \"operator\", \"reason\"}}: {e}"),
            );
        }
    };
    match api
        .gateway
        .operator_opt_out(&req.event_id, &req.operator, &req.reason)
        .await
    {
        Ok(ack) => (StatusCode::OK, axum::Json(ack_payload(&ack))).into_response(),
        Err(OperatorError::Refused(OperatorRefusal::UnknownEvent(id))) => {
            error(StatusCode::NOT_FOUND, Some("event_id"), format!("no event {id:?}"))
        }
        Err(OperatorError::Refused(OperatorRefusal::Invalid { field, message })) => {
            error(StatusCode::BAD_REQUEST, Some(field), message)
        }
        Err(OperatorError::Ledger(e)) => {
            tracing::error!("ledger failure on operator action: {e}");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "the action could not be recorded; nothing changed, retry",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_required() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().expect("header value"));
            bearer_token(&headers).map(str::to_owned)
        };
        for value in ["Bearer t0ken", "bearer t0ken", "BEARER t0ken"] {
            assert_eq!(with(value).as_deref(), Some("t0ken"), "{value}");
        }
        assert_eq!(with("Basic dXNlcjpwYXNz"), None);
        assert_eq!(with("Bearert0ken"), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
