//! The operator dashboard, served by the gateway on its own port: HTML, CSS and JavaScript
//! embedded in the binary (no CDN, nothing fetched from elsewhere), read-only without a token;
//! the one action it offers (an operator opt-out) posts to the token-protected API with the
//! token the operator types in, which stays in the browser tab's session storage.
//!
//! The pages read the same API everyone reads: `GET /v1/stream` (server-sent events: the
//! status, events, plan and the jobs cut deepest, pushed when the published snapshot changes
//! and at least every 5 s), `GET /v1/meter/history` for the chart's first hours, and
//! `GET /v1/events/{id}/audit` (and `.svg`) for an event's audit, rebuilt from the live ledger.

use super::Api;
use super::problem::Problem;
use crate::runtime::views::{EventView, JobView, MeterHistoryView, PlanView, StatusView};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::time::Duration;

const INDEX_HTML: &str = include_str!("dashboard/index.html");
const AUDIT_HTML: &str = include_str!("dashboard/audit.html");
const APP_JS: &str = include_str!("dashboard/app.js");
const AUDIT_JS: &str = include_str!("dashboard/audit.js");
const STYLE_CSS: &str = include_str!("dashboard/style.css");

/// Jobs listed in a stream message: the deepest-capped first. A site of thousands of jobs is
/// summarised by the counts in the status, not sent whole every second.
pub const STREAM_JOBS: usize = 40;

/// How often the stream looks for a new snapshot, and the longest it stays silent.
const STREAM_POLL: Duration = Duration::from_millis(250);
const STREAM_HEARTBEAT: Duration = Duration::from_secs(5);

/// The dashboard is at `/dashboard/`.
#[utoipa::path(get, path = "/", tag = "dashboard",
    responses((status = 303, description = "To the dashboard, `/dashboard/`")))]
pub(super) async fn root() -> Redirect {
    Redirect::to("/dashboard/")
}

/// `/dashboard` is `/dashboard/` (the pages' relative links need the slash).
#[utoipa::path(get, path = "/dashboard", tag = "dashboard",
    responses((status = 308, description = "To the dashboard, `/dashboard/`")))]
pub(super) async fn without_slash() -> Redirect {
    Redirect::permanent("/dashboard/")
}

/// The operator dashboard: meter against the ceiling, events, plan, jobs, the ledger (HTML).
#[utoipa::path(get, path = "/dashboard/", tag = "dashboard",
    responses((status = 200, description = "The overview page", body = String, content_type = "text/html")))]
pub(super) async fn overview() -> Response {
    page(INDEX_HTML)
}

/// One event's audit page (HTML): what was asked, decided, done and measured, with its chart.
#[utoipa::path(get, path = "/dashboard/events/{id}", tag = "dashboard",
    params(("id" = String, Path, description = "The event id")),
    responses((status = 200, description = "The audit page (it loads the audit itself)", body = String, content_type = "text/html")))]
pub(super) async fn audit_page(Path(_id): Path<String>) -> Response {
    page(AUDIT_HTML)
}

/// The dashboard's embedded assets: `app.js`, `audit.js`, `style.css`.
#[utoipa::path(get, path = "/dashboard/assets/{file}", tag = "dashboard",
    params(("file" = String, Path, description = "`app.js`, `audit.js` or `style.css`")),
    responses(
        (status = 200, description = "The asset", body = String, content_type = "text/javascript"),
        (status = 404, description = "No such asset", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "audit.js" => (AUDIT_JS, "text/javascript; charset=utf-8"),
        "style.css" => (STYLE_CSS, "text/css; charset=utf-8"),
        _ => {
            return Problem::new(StatusCode::NOT_FOUND, format!("no dashboard asset {file:?}")).into_response();
        }
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// An embedded page, with a policy that lets it load nothing from anywhere but this gateway.
fn page(html: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; \
                 frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
            ),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        html,
    )
        .into_response()
}

/// One message of `GET /v1/stream`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StreamState {
    /// Counts up from 1 on each connection.
    pub seq: u64,
    /// The gateway's status.
    pub status: StatusView,
    /// Every event the book holds.
    pub events: Vec<EventView>,
    /// The plan in force, or an empty plan.
    pub plan: PlanView,
    /// The jobs whose cap is not confirmed (or unreliable), then those capped deepest (lowest
    /// cap per GPU first), at most 40; `status.jobs` counts all.
    pub jobs: Vec<JobView>,
}

/// Query of `GET /v1/stream`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(super) struct StreamQuery {
    /// End the stream after this many messages (a bounded sample for scripts, snapshots and
    /// tests; without it the stream runs until the client leaves).
    max: Option<u64>,
}

/// The gateway's state as server-sent events (`event: state`, data: a JSON `StreamState`):
/// one message at once, then one whenever the published state changes (at most four a
/// second), and at least every 5 s.
#[utoipa::path(get, path = "/v1/stream", tag = "state",
    params(StreamQuery),
    responses((status = 200, description = "`text/event-stream` of `state` events, each a `StreamState`", body = StreamState, content_type = "text/event-stream")))]
pub(super) async fn stream(State(api): State<Api>, Query(query): Query<StreamQuery>) -> Response {
    let max = query.max.unwrap_or(u64::MAX).max(1);
    let start = (
        api,
        0u64,
        None::<std::sync::Arc<crate::runtime::Published>>,
        tokio::time::Instant::now(),
    );
    let events = futures_util::stream::unfold(start, move |(api, sent, last, mut last_sent)| async move {
        if sent >= max {
            return None;
        }
        // Wait for a new snapshot, or the heartbeat; end when the gateway stops.
        loop {
            if api.gateway.read().is_stopping() {
                return None;
            }
            let now = api.gateway.read().published();
            let changed = last.as_ref().is_none_or(|l| !std::sync::Arc::ptr_eq(l, &now));
            if changed || last_sent.elapsed() >= STREAM_HEARTBEAT {
                let state = state_message(&api, sent + 1).await;
                let event = Event::default()
                    .event("state")
                    .json_data(&state)
                    .unwrap_or_else(|_| Event::default().event("state").data("{}"));
                last_sent = tokio::time::Instant::now();
                return Some((Ok::<Event, Infallible>(event), (api, sent + 1, Some(now), last_sent)));
            }
            tokio::time::sleep(STREAM_POLL).await;
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

async fn state_message(api: &Api, seq: u64) -> StreamState {
    let mut jobs = api.gateway.read().jobs().await;
    // Caps that are not confirmed first (what the operator must act on: a driver that did not
    // apply a cap, a GPU lost, a cap that keeps being undone), then the deepest; 40 without
    // sorting every job (a site may run 100 k, and each open dashboard gets up to four messages
    // a second).
    let deepest = |a: &JobView, b: &JobView| {
        a.confirmed
            .cmp(&b.confirmed)
            .then_with(|| b.cap_unreliable.cmp(&a.cap_unreliable))
            .then_with(|| a.cap_w_per_gpu.total_cmp(&b.cap_w_per_gpu))
            .then_with(|| a.id.cmp(&b.id))
    };
    if jobs.len() > STREAM_JOBS {
        jobs.select_nth_unstable_by(STREAM_JOBS, deepest);
        jobs.truncate(STREAM_JOBS);
    }
    jobs.sort_by(deepest);
    StreamState {
        seq,
        status: api.gateway.read().status().await,
        events: api.gateway.read().events().await,
        plan: api.gateway.read().plan_view().await,
        jobs,
    }
}

/// Query of `GET /v1/meter/history`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(super) struct HistoryQuery {
    /// How far back, seconds (default 3600, at most 21600: what the gateway keeps).
    seconds: Option<u64>,
}

/// The meter's recent history as the gateway kept it (six hours), with the ceiling in force
/// at each reading and where each figure came from.
#[utoipa::path(get, path = "/v1/meter/history", tag = "state",
    params(HistoryQuery),
    responses((status = 200, description = "Meter history", body = MeterHistoryView)))]
pub(super) async fn meter_history(State(api): State<Api>, Query(query): Query<HistoryQuery>) -> Response {
    let seconds = query.seconds.unwrap_or(3600).clamp(60, 21_600);
    axum::Json(api.gateway.read().meter_history(seconds).await).into_response()
}

/// An event's audit, rebuilt from the live ledger (what `flexgate audit --format json` gives
/// on a stopped gateway's directory).
#[utoipa::path(get, path = "/v1/events/{id}/audit", tag = "events",
    params(("id" = String, Path, description = "The event id")),
    responses(
        (status = 200, description = "The audit report (as `flexgate audit --format json`)", body = Object),
        (status = 404, description = "No such event in the ledger", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The ledger could not be read", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn event_audit(State(api): State<Api>, Path(id): Path<String>) -> Response {
    match audit_of(&api, &id).await {
        Ok(report) => axum::Json(report).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// The live audit of `id`, or the problem to answer: 404 for an event the ledger does not
/// hold, 500 for a ledger that could not be read.
async fn audit_of(api: &Api, id: &str) -> Result<crate::reports::audit::AuditReport, Problem> {
    match api.gateway.read().audit(id).await {
        Ok(Some(report)) => Ok(report),
        Ok(None) => Err(Problem::new(StatusCode::NOT_FOUND, format!("no event {id:?} in the ledger")).field("id")),
        Err(e) => Err(Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e)),
    }
}

/// An event's audit chart: meter against the ceiling and the baselines, the event shaded
/// (SVG).
#[utoipa::path(get, path = "/v1/events/{id}/audit.svg", tag = "events",
    params(("id" = String, Path, description = "The event id")),
    responses(
        (status = 200, description = "The chart", body = String, content_type = "image/svg+xml"),
        (status = 404, description = "No such event in the ledger", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The ledger could not be read", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn event_audit_chart(State(api): State<Api>, Path(id): Path<String>) -> Response {
    match audit_of(&api, &id).await {
        Ok(report) => (
            [
                (header::CONTENT_TYPE, "image/svg+xml"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'none'; style-src 'unsafe-inline'",
                ),
            ],
            report.chart(),
        )
            .into_response(),
        Err(problem) => problem.into_response(),
    }
}
