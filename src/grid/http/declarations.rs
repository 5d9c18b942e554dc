//! Declaring the site's availability (day-ahead): `POST /v1/declarations` records what the site
//! declares it can shed each hour of the forecast, from the forecast at a confidence or an
//! operator's own figure with a reason; `GET /v1/declarations` reads the hours in force. The
//! decision (which hours, which figure, what is refused) is the core's
//! (`flexgate_policies::forecast::declare`); here, only the wire.

use super::body::read_body;
use super::problem::Problem;
use super::{Api, MAX_BODY_BYTES, unauthorized, unrecorded};
use crate::runtime::DeclareFailure;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use flexgate_policies::forecast::declare::{Declaration, DeclareError, DeclaredFrom, Override};

/// Body of `POST /v1/declarations`.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DeclareRequest {
    /// Who declares (recorded).
    operator: String,
    /// The confidence, percent: 90 declares each hour's P10 (exceeded nine times in ten, the
    /// trade's "P90"), 50 its median. Default: `[forecast] confidence` (90).
    #[serde(default)]
    confidence: Option<u8>,
    /// Hours the operator declares a figure of their own for, each with a reason.
    #[serde(default)]
    overrides: Vec<OverrideRequest>,
}

/// One operator override.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct OverrideRequest {
    /// The clock hour's start (on the hour, UTC, within the forecast's 48 hours; as `GET
    /// /v1/declarations` and `flexgate forecast --declare` list them): RFC 3339.
    start: DateTime<Utc>,
    /// The watts to declare at the meter (0 to the site's facility maximum).
    available_w: f64,
    /// Why (required; recorded and shown to auditors).
    reason: String,
}

/// One declared hour with the declaration it comes from.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct DeclaredHourView {
    /// Its start.
    pub start: DateTime<Utc>,
    /// Its end.
    pub end: DateTime<Utc>,
    /// The watts declared available at the meter.
    pub available_w: f64,
    /// What the forecast said for it at the declaration's confidence, W.
    pub forecast_w: f64,
    /// `forecast` or `operator`.
    #[schema(value_type = String, example = "forecast")]
    pub from: &'static str,
    /// The operator's reason, for an overridden hour.
    pub reason: Option<String>,
    /// The confidence, percent (90: the hour's P10; 50: its median).
    pub confidence: u8,
    /// The cost ceiling the forecast was made within (a share of the objective's value).
    pub cost_ceiling: f64,
    /// When it was declared.
    pub declared_at: DateTime<Utc>,
    /// Who declared it.
    pub operator: String,
}

/// `GET /v1/declarations` and the answer of `POST`.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct DeclarationsView {
    /// The hours, by start.
    pub hours: Vec<DeclaredHourView>,
}

fn from_str(from: DeclaredFrom) -> &'static str {
    match from {
        DeclaredFrom::Forecast => "forecast",
        DeclaredFrom::Operator => "operator",
    }
}

fn view(
    d: &Declaration,
    hours: impl IntoIterator<Item = flexgate_policies::forecast::declare::DeclaredHour>,
) -> Vec<DeclaredHourView> {
    hours
        .into_iter()
        .map(|h| DeclaredHourView {
            start: h.start,
            end: h.end,
            available_w: h.available_kw * 1000.0,
            forecast_w: h.forecast_kw * 1000.0,
            from: from_str(h.from),
            reason: h.reason,
            confidence: d.confidence,
            cost_ceiling: d.cost_ceiling,
            declared_at: d.at,
            operator: d.operator.clone(),
        })
        .collect()
}

/// Declare the site's availability for the forecast's 48 hours, in clock hours (UTC, on the hour,
/// as day-ahead offers are made): each hour's figure at the confidence (its least quarter-hour's
/// P10 at 90 %, median at 50 %, within the forecast's cost ceiling), or the operator's own for the
/// hours they override, each with a reason. Recorded in
/// the ledger (`declared`); the audit and the settlement report set each event against the
/// declaration in force before it began. `flexgate forecast --declare` exports the same hours.
#[utoipa::path(post, path = "/v1/declarations", tag = "state",
    security(("bearer" = [])),
    request_body(content = DeclareRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Recorded: the declared hours", body = DeclarationsView),
        (status = 400, description = "Invalid body or override (nothing recorded)", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "No forecast to declare from yet", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Could not be recorded: nothing changed, retry", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn declare(State(api): State<Api>, request: Request) -> Response {
    if !api.authorized(request.headers()) {
        return unauthorized();
    }
    let body = match read_body(request.into_body(), MAX_BODY_BYTES, api.body_timeout()).await {
        Ok(body) => body,
        Err(e) => return Problem::new(e.status(), e.to_string()).into_response(),
    };
    let req: DeclareRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("expected {{\"operator\", \"confidence\"?, \"overrides\"?: [{{\"start\", \"available_w\", \"reason\"}}]}}: {e}"),
            )
            .into_response();
        }
    };
    let confidence = req.confidence.unwrap_or(api.gateway.read().config.forecast.confidence);
    let overrides: Vec<Override> = req
        .overrides
        .into_iter()
        .map(|o| Override {
            start: o.start,
            available_kw: o.available_w / 1000.0,
            reason: o.reason,
        })
        .collect();
    match api
        .gateway
        .driver()
        .declare(&req.operator, confidence, &overrides)
        .await
    {
        Ok(d) => (
            StatusCode::CREATED,
            axum::Json(DeclarationsView {
                hours: view(&d, d.hours.clone()),
            }),
        )
            .into_response(),
        Err(DeclareFailure::Refused(e @ DeclareError::NoForecast)) => {
            Problem::new(StatusCode::CONFLICT, e.to_string()).into_response()
        }
        Err(DeclareFailure::Refused(e)) => Problem::new(StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        Err(DeclareFailure::Ledger(e)) => unrecorded(&api, &e, "the declaration"),
    }
}

/// The declared hours in force: for each hour, the latest declaration's figure (hours ended
/// more than two days ago are dropped; the ledger keeps every declaration).
#[utoipa::path(get, path = "/v1/declarations", tag = "state",
    responses((status = 200, description = "The declared hours", body = DeclarationsView)))]
pub(super) async fn declared(State(api): State<Api>) -> Response {
    let hours = api.gateway.read().declared().await;
    axum::Json(DeclarationsView {
        hours: hours.iter().flat_map(|(d, h)| view(d, [h.clone()])).collect(),
    })
    .into_response()
}
