//! The HTTP API (axum). Reads are open on the listening address; every write needs the bearer
//! token. Every error is an RFC 9457 problem (`application/problem+json`, [`problem`]).
//!
//! The OpenAPI document (`GET /openapi.json`) is generated from the handlers' `#[utoipa::path]`
//! attributes and the view types' schemas: a route is registered only through
//! [`utoipa_axum::routes!`], which documents it in the same step, so the document cannot miss
//! one. The grid's own documents (`dr.event/1` in, `dr.ack/1` out) are carried in it as their
//! shipped JSON Schemas.

use crate::grid::dr_event::ack_payload;
use crate::runtime::views::{EventDetailView, EventView, FlexibilityView, JobView, PlanView, StatusView};
use crate::runtime::{Gateway, OperatorError, SubmitError, Transport};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flexgate_policies::control::OperatorError as OperatorRefusal;
use problem::Problem;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::Arc;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Largest request body accepted (a `dr.event/1` document is a few hundred bytes).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

pub mod body;
pub mod dashboard;
pub mod declarations;
pub mod meter;
pub mod problem;
pub mod server;

use body::read_body;

/// Shared state of the handlers.
#[derive(Clone)]
pub(crate) struct Api {
    gateway: Arc<Gateway>,
    /// SHA-256 of the token: compared in constant time, and the token itself is not kept around
    /// in a form that a debug print could leak.
    token_digest: [u8; 32],
    /// Held while a `GET /v1/ledger/verify` walks the chain: one walk at a time, so readers
    /// cannot pile up full scans of the ledger.
    verifying: Arc<tokio::sync::Mutex<()>>,
}

/// The document's frame: what is not on a handler.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "flexgate gateway API",
        description = "Curtailment events in (`dr.event/1`), the gateway's state, plan, jobs and flexibility out. \
            Figures are in base units (W, s; shares 0-1) and say where they come from: `meter_quality` for the meter, \
            `source: planner_estimate` for what the planner expects. Reads are open; writes need `Authorization: Bearer <token>`. \
            Errors are RFC 9457 problems (`application/problem+json`).",
        license(name = "Apache-2.0")
    ),
    components(schemas(Problem, DrEventDocument, DrAckDocument)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

/// The bearer scheme every write requires.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Stands for `dr.event/1` in the handlers' attributes; [`openapi`] puts the shipped JSON
/// Schema (`deploy/schemas/dr.event.schema.json`) in its place.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // a name for the document, never built
struct DrEventDocument(serde_json::Value);

/// Stands for `dr.ack/1`; replaced by `flexgate_dr`'s schema in [`openapi`].
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // a name for the document, never built
struct DrAckDocument(serde_json::Value);

/// Every route, each documented where it is registered.
fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(list_events, post_event))
        .routes(routes!(get_event))
        .routes(routes!(operator_opt_out))
        .routes(routes!(status))
        .routes(routes!(jobs))
        .routes(routes!(plan))
        .routes(routes!(flexibility))
        .routes(routes!(forecast))
        .routes(routes!(declarations::declare, declarations::declared))
        .routes(routes!(verify_ledger))
        .routes(routes!(metrics))
        .routes(routes!(healthz))
        .routes(routes!(openapi_json))
        .routes(routes!(dashboard::stream))
        .routes(routes!(dashboard::meter_history))
        .routes(routes!(meter::import))
        .routes(routes!(meter::intervals))
        .routes(routes!(meter::baseline))
        .routes(routes!(meter::settlement))
        .routes(routes!(meter::settlement_page))
        .routes(routes!(dashboard::event_audit))
        .routes(routes!(dashboard::event_audit_chart))
        .routes(routes!(dashboard::root))
        .routes(routes!(dashboard::without_slash))
        .routes(routes!(dashboard::overview))
        .routes(routes!(dashboard::audit_page))
        .routes(routes!(dashboard::asset))
}

/// The generated document as JSON, with the grid documents' JSON Schemas in place of their
/// stand-ins (each keeps its `$id`, so its internal `$ref`s resolve inside it).
fn openapi(doc: &utoipa::openapi::OpenApi) -> serde_json::Value {
    let mut value = serde_json::to_value(doc).unwrap_or_else(|_| json!({}));
    let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap_or_else(|_| json!({}));
    if let Some(schemas) = value.pointer_mut("/components/schemas").and_then(|s| s.as_object_mut()) {
        schemas.insert(
            "DrEventDocument".into(),
            parse(include_str!("../../../deploy/schemas/dr.event.schema.json")),
        );
        schemas.insert("DrAckDocument".into(), parse(flexgate_dr::payloads::DR_ACK_JSON_SCHEMA));
    }
    value
}

/// The document served at `/openapi.json`, built once per process (it depends on the code only).
static OPENAPI_TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The OpenAPI document of [`router`], for tests and tools.
#[must_use]
pub fn openapi_document() -> serde_json::Value {
    let (_, doc) = routes().split_for_parts();
    openapi(&doc)
}

/// The router, ready to serve.
pub fn router(gateway: Arc<Gateway>, token: &str) -> Router {
    let api = Api {
        gateway,
        token_digest: Sha256::digest(token.as_bytes()).into(),
        verifying: Arc::default(),
    };
    let (router, doc) = routes().split_for_parts();
    let _ = OPENAPI_TEXT.set(serde_json::to_string_pretty(&openapi(&doc)).unwrap_or_default());
    router
        .with_state(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

async fn not_found(request: Request) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        format!("no endpoint {}; GET /openapi.json lists them", request.uri().path()),
    )
}

async fn method_not_allowed(request: Request) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} is not allowed on {}; GET /openapi.json lists what is",
            request.method(),
            request.uri().path()
        ),
    )
}

fn unauthorized() -> Response {
    let mut response = Problem::new(
        StatusCode::UNAUTHORIZED,
        "missing or wrong bearer token (Authorization: Bearer <token>)",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
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
        std::time::Duration::from_secs(self.gateway.read().config.gateway.http_body_timeout_s)
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

/// A refused request's problem with the ack it was recorded with.
fn refused(status: StatusCode, field: Option<&str>, detail: String, ack: &flexgate_policies::event::Ack) -> Response {
    let problem = Problem::new(status, detail).ack(serde_json::to_value(ack_payload(ack)).unwrap_or_default());
    match field {
        Some(field) => problem.field(field),
        None => problem,
    }
    .into_response()
}

/// Submit a curtailment event.
///
/// The answer, a `dr.ack/1`, is given only after the records of the decision are durably in
/// the ledger; its `log_checkpoint` and `log_seq` name the record that holds it.
#[utoipa::path(
    post,
    path = "/v1/events",
    tag = "events",
    security(("bearer" = [])),
    request_body(content = DrEventDocument, content_type = "application/json", description = "A `dr.event/1` document"),
    responses(
        (status = 200, description = "Acknowledged (opt in, or opt out with the reason)", body = DrAckDocument),
        (status = 400, description = "Invalid: names the field; nothing changed", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A lower revision than held, or the same revision with another body (the first answer stands; `ack` carries it)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Refused with an opt-out ack (another site, a window already over): `ack` carries it", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Could not be recorded: not acknowledged, retry", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn post_event(State(api): State<Api>, request: Request) -> Response {
    if !api.authorized(request.headers()) {
        return unauthorized();
    }
    let transport = Transport::Http {
        peer: request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.to_string()),
    };
    let body: Bytes = match read_body(request.into_body(), MAX_BODY_BYTES, api.body_timeout()).await {
        Ok(body) => body,
        Err(e) => return Problem::new(e.status(), e.to_string()).into_response(),
    };
    let submission = crate::grid::dr_event::submission(&body, transport.source());
    match api.gateway.driver().submit(submission, transport).await {
        // Same revision, different body: the first answer stands and the new body was ignored;
        // say so with a conflict rather than a plain 200.
        Ok(outcome) if outcome.differs => refused(
            StatusCode::CONFLICT,
            Some("revision"),
            outcome.ack.reason.clone().unwrap_or_default(),
            &outcome.ack,
        ),
        Ok(outcome) => (StatusCode::OK, axum::Json(ack_payload(&outcome.ack))).into_response(),
        Err(SubmitError::Invalid(e)) => Problem::new(StatusCode::BAD_REQUEST, e.message)
            .field(e.field)
            .into_response(),
        Err(SubmitError::Refused { reason, ack }) => refused(StatusCode::UNPROCESSABLE_ENTITY, None, reason, &ack),
        Err(e @ SubmitError::Stale { .. }) => Problem::new(StatusCode::CONFLICT, e.to_string())
            .field("revision")
            .into_response(),
        Err(SubmitError::Ledger(e)) => unrecorded(&api, &e, "the event"),
    }
}

/// The answer when a write could not be recorded: on a standby, a refusal that names the
/// leader; without a quorum, a retryable refusal that says so; otherwise the ledger's failure.
/// Nothing was acknowledged in any case.
fn unrecorded(api: &Api, e: &crate::ledger::LedgerError, what: &str) -> Response {
    use crate::ledger::LedgerError;
    match e {
        LedgerError::NotLeader => {
            let role = api.gateway.read().role();
            let (me, leader) = match &role {
                crate::runtime::Role::Standby { replica, leader, .. } => (replica.clone(), leader.clone()),
                _ => (String::new(), None),
            };
            let detail = match &leader {
                Some(l) => format!(
                    "this replica ({me}) does not lead, so it records nothing: send {what} to the leader, {} (epoch {}){}; it was not acknowledged",
                    l.replica,
                    l.epoch,
                    l.url.as_deref().map(|u| format!(" at {u}")).unwrap_or_default()
                ),
                None => format!(
                    "this replica ({me}) does not lead and no replica leads now (an election is under way, or etcd has no quorum): {what} was not acknowledged, retry"
                ),
            };
            let mut problem = Problem::new(StatusCode::SERVICE_UNAVAILABLE, detail);
            if let Some(l) = leader {
                problem = problem.leader(serde_json::to_value(l).unwrap_or_default());
            }
            problem.into_response()
        }
        LedgerError::NotDurable { reason } => {
            tracing::warn!("not durable on a majority: {reason}");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{what} could not be made durable on a majority of the replicas' store ({reason}); it was not acknowledged, retry"
                ),
            )
            .retry_after(2)
            .into_response()
        }
        e => {
            tracing::error!("ledger failure: {e}");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{what} could not be recorded; it was not acknowledged, retry"),
            )
            .into_response()
        }
    }
}

/// Every event the book holds, with its state now.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    responses((status = 200, description = "Events", body = Vec<EventView>)))]
async fn list_events(State(api): State<Api>) -> Response {
    axum::Json(api.gateway.read().events().await).into_response()
}

/// One event: its summary and the book's record of it.
#[utoipa::path(get, path = "/v1/events/{id}", tag = "events",
    params(("id" = String, Path, description = "The event id")),
    responses(
        (status = 200, description = "The event", body = EventDetailView),
        (status = 404, description = "No such event", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_event(State(api): State<Api>, Path(id): Path<String>) -> Response {
    match api.gateway.read().event_view(&id).await {
        Some(event) => axum::Json(event).into_response(),
        None => Problem::new(StatusCode::NOT_FOUND, format!("no event {id:?}"))
            .field("id")
            .into_response(),
    }
}

/// The gateway now: site, ceiling and phase, budget, the meter and where its figure comes
/// from, jobs and caps, the ledger head.
#[utoipa::path(get, path = "/v1/status", tag = "state",
    responses((status = 200, description = "Status", body = StatusView)))]
async fn status(State(api): State<Api>) -> Response {
    axum::Json(api.gateway.read().status().await).into_response()
}

/// The running jobs with their caps, confirmation, measured power and throughput.
#[utoipa::path(get, path = "/v1/jobs", tag = "state",
    responses((status = 200, description = "Jobs", body = Vec<JobView>)))]
async fn jobs(State(api): State<Api>) -> Response {
    axum::Json(api.gateway.read().jobs().await).into_response()
}

/// The plan in force, or an empty plan (`in_force: false`) when no event constrains the site.
#[utoipa::path(get, path = "/v1/plan", tag = "state",
    responses((status = 200, description = "The plan", body = PlanView)))]
async fn plan(State(api): State<Api>) -> Response {
    axum::Json(api.gateway.read().plan_view().await).into_response()
}

/// The site's flexibility curve now: for shed levels from none to every plannable job at its
/// floor, the meter reduction they give at least and what each is expected to cost (the
/// planner's estimate).
#[utoipa::path(get, path = "/v1/flexibility", tag = "state",
    responses(
        (status = 200, description = "The curve", body = FlexibilityView),
        (status = 404, description = "No curve yet (no telemetry), or a proportional policy, which costs none", body = Problem, content_type = "application/problem+json"),
    ))]
async fn flexibility(State(api): State<Api>) -> Response {
    match api.gateway.read().flexibility().await {
        Some(curve) => axum::Json(FlexibilityView::build(&curve)).into_response(),
        None => Problem::new(
            StatusCode::NOT_FOUND,
            "no flexibility curve: no telemetry yet, or the policy is a proportional rule (only `flexgate` costs a curve)",
        )
        .into_response(),
    }
}

/// What the site expects it can shed at the meter in the next 48 hours, quarter-hour by
/// quarter-hour, within a cost ceiling (a share of the objective's value), as the 10th, 50th and
/// 90th percentiles of its distribution: `p10` is what the trade calls "P90" (shed nine times in
/// ten); declare at `p10` for 90 % confidence. Each step also carries its expected curve. The
/// first step is the flexibility curve now; `basis` says what the forecast stands on and why it
/// is as wide as it is. Recorded in the ledger (`forecast` entries) at each refresh (when the
/// curve changes, and every 15 minutes).
#[utoipa::path(get, path = "/v1/forecast", tag = "state",
    responses(
        (status = 200, description = "The forecast", body = crate::runtime::views::ForecastView),
        (status = 404, description = "No forecast yet (no flexibility curve: no telemetry, or a proportional policy)", body = Problem, content_type = "application/problem+json"),
    ))]
async fn forecast(State(api): State<Api>) -> Response {
    let objective = api.gateway.read().config.gateway.objective.as_str().to_string();
    match api.gateway.read().forecast().await {
        Some(f) => axum::Json(crate::runtime::views::ForecastView::build(&f, &objective)).into_response(),
        None => Problem::new(
            StatusCode::NOT_FOUND,
            "no forecast yet: it is made with the flexibility curve (no telemetry yet, or a proportional policy)",
        )
        .into_response(),
    }
}

/// The answer of `GET /v1/ledger/verify`.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct VerifyAnswer {
    /// Whether the whole chain checks out.
    intact: bool,
    /// Records walked (when intact).
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<u64>,
    /// The last record's hash (when intact): compare it with anchored checkpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    head_hash: Option<String>,
    /// The first record that was altered, removed or reordered (when not intact).
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_at_record: Option<u64>,
    /// What is wrong with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// Walk the live ledger's hash chain (what `flexgate log verify --data` does on a stopped
/// gateway's directory, which a running gateway holds locked). A broken chain is an answer,
/// not an HTTP error: `intact: false` with the first bad record.
#[utoipa::path(get, path = "/v1/ledger/verify", tag = "ledger",
    responses(
        (status = 200, description = "The verification", body = VerifyAnswer),
        (status = 429, description = "A verification is already running", body = Problem, content_type = "application/problem+json"),
    ))]
async fn verify_ledger(State(api): State<Api>) -> Response {
    let Ok(_one_at_a_time) = api.verifying.clone().try_lock_owned() else {
        return Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "a verification of the ledger is already running; retry when it has answered",
        )
        .retry_after(5)
        .into_response();
    };
    let ledger = api.gateway.ledger().clone();
    match tokio::task::spawn_blocking(move || ledger.verify()).await {
        Ok(Ok(report)) => axum::Json(VerifyAnswer {
            intact: true,
            records: Some(report.records),
            head_hash: Some(report.head_hash),
            failed_at_record: None,
            reason: None,
        })
        .into_response(),
        Ok(Err(failure)) => axum::Json(VerifyAnswer {
            intact: false,
            records: None,
            head_hash: None,
            failed_at_record: Some(failure.seq),
            reason: Some(failure.reason),
        })
        .into_response(),
        Err(join) => Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the verification did not complete: {join}"),
        )
        .into_response(),
    }
}

/// Prometheus metrics (OpenMetrics text): base units, no NaN; README lists the series.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "OpenMetrics text", body = String,
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")))]
async fn metrics(State(api): State<Api>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::runtime::metrics::CONTENT_TYPE)],
        api.gateway.read().metrics().await,
    )
        .into_response()
}

/// Liveness: the gateway answers.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "`ok`", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok\n"
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
async fn openapi_json() -> Response {
    let text = OPENAPI_TEXT
        .get_or_init(|| serde_json::to_string_pretty(&openapi_document()).unwrap_or_default())
        .clone();
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// Body of `POST /v1/operator/opt-out`.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct OptOutRequest {
    /// The event to opt the site out of.
    event_id: String,
    /// Who decided it (recorded).
    operator: String,
    /// Why (recorded, and told to the event's sender where the protocol allows).
    reason: String,
}

/// An operator opts the site out of an event: its ceiling stops counting at once, the event
/// ends as `opted_out` (for every later revision too), recorded with the name and reason.
#[utoipa::path(post, path = "/v1/operator/opt-out", tag = "events",
    security(("bearer" = [])),
    request_body(content = OptOutRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The opt-out ack", body = DrAckDocument),
        (status = 400, description = "Invalid body", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such event", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Could not be recorded: nothing changed, retry", body = Problem, content_type = "application/problem+json"),
    ))]
async fn operator_opt_out(State(api): State<Api>, request: Request) -> Response {
    if !api.authorized(request.headers()) {
        return unauthorized();
    }
    let body = match read_body(request.into_body(), MAX_BODY_BYTES, api.body_timeout()).await {
        Ok(body) => body,
        Err(e) => return Problem::new(e.status(), e.to_string()).into_response(),
    };
    let req: OptOutRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("expected {{\"event_id\", \"operator\", \"reason\"}}: {e}"),
            )
            .into_response();
        }
    };
    match api
        .gateway
        .driver()
        .operator_opt_out(&req.event_id, &req.operator, &req.reason)
        .await
    {
        Ok(ack) => (StatusCode::OK, axum::Json(ack_payload(&ack))).into_response(),
        Err(OperatorError::Refused(OperatorRefusal::UnknownEvent(id))) => {
            Problem::new(StatusCode::NOT_FOUND, format!("no event {id:?}"))
                .field("event_id")
                .into_response()
        }
        Err(OperatorError::Refused(OperatorRefusal::Invalid { field, message })) => {
            Problem::new(StatusCode::BAD_REQUEST, message)
                .field(field)
                .into_response()
        }
        Err(OperatorError::Ledger(e)) => unrecorded(&api, &e, "the action"),
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
