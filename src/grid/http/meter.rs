//! Interval meter data and program baselines over HTTP: import the utility's data into a
//! running gateway, read the intervals settlement uses, and compute a baseline for any window
//! (what `flexgate meter import` and `flexgate baseline` do on a stopped gateway's directory).
//!
//! Everything touching the store runs on the blocking pool (sled is synchronous), after the
//! store has caught up with the ledger, and no lock is held across it.

use super::body::read_body;
use super::problem::Problem;
use super::{Api, unauthorized};
use crate::intervals::import::{ImportMeta, interval_of, records};
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDate, Utc};
use flexgate_policies::baseline::MethodId;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

/// Largest file `POST /v1/meter/import` takes: a year of 5-minute Green Button data is about
/// 30 MB. Larger files go through `flexgate meter import` on the data directory.
pub const MAX_IMPORT_BYTES: usize = 64 * 1024 * 1024;

/// Most intervals one `GET /v1/meter/intervals` answers (62 days of 5-minute data).
pub const MAX_INTERVALS: usize = 62 * 288;

/// Query of `POST /v1/meter/import`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(super) struct ImportQuery {
    /// `green_button` (NAESB ESPI XML) or `csv`.
    format: Option<String>,
    /// The label the intervals carry (default: `api import`).
    source: Option<String>,
}

/// Import interval meter data (the utility's, which settlement uses first): Green Button XML or
/// the documented CSV as the request body, at most 64 MiB. Checked whole first (one length, in
/// order, none overlapping, plausible figures, a usable ReadingType); a bad file imports nothing
/// and the answer names the element or row and the line. Recorded in the ledger with the
/// file's SHA-256 and its intervals (`meter_imported`).
#[utoipa::path(post, path = "/v1/meter/import", tag = "meter",
    params(ImportQuery),
    request_body(content = String, description = "The file's bytes", content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "Imported: what was stored", body = Object),
        (status = 400, description = "A bad file: nothing imported", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over 64 MiB: use `flexgate meter import`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Could not be recorded (a standby, or the ledger): nothing imported", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn import(State(api): State<Api>, Query(query): Query<ImportQuery>, request: Request) -> Response {
    if !api.authorized(request.headers()) {
        // The body (up to 64 MiB) is not read for a caller without the token; the connection
        // then cannot carry another request, and the answer says so, so that a client does not
        // send its next request on it.
        let mut answer = unauthorized();
        answer.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return answer;
    }
    // The token first: an unauthenticated caller learns nothing of the parameters.
    let format = match query.format.as_deref().unwrap_or("") {
        "green_button" => "green_button",
        "csv" => "csv",
        other => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("format {other:?}: green_button or csv"),
            )
            .field("format")
            .into_response();
        }
    };
    let body = match read_body(request.into_body(), MAX_IMPORT_BYTES, api.body_timeout()).await {
        Ok(body) => body,
        Err(e) => return Problem::new(e.status(), e.to_string()).into_response(),
    };
    let label = query.source.unwrap_or_else(|| "api import".to_string());
    let store = api.gateway.intervals().clone();
    let reader = api.gateway.ledger().reader();
    let now = api.gateway.clock().now();
    // Parse and check on the blocking pool; nothing is stored yet.
    let checked = tokio::task::spawn_blocking(move || {
        let limits = flexgate_greenbutton::Limits::default();
        let (readings, skipped) = match format {
            "green_button" => flexgate_greenbutton::import_espi(&body[..], &limits).map(|i| {
                let skipped: Vec<String> = i
                    .skipped
                    .iter()
                    .map(|s| format!("the meter reading at line {}: {}", s.line, s.reason))
                    .collect();
                (i.readings, skipped)
            }),
            _ => flexgate_greenbutton::import_csv(&body[..], &limits).map(|i| (i.readings, Vec::new())),
        }
        .map_err(|e| e.to_string())?;
        let intervals: Vec<_> = readings.iter().map(|r| interval_of(r, &label)).collect();
        store.catch_up(&reader).map_err(|e| e.to_string())?;
        let summary = store.check_import(&intervals).map_err(|e| e.to_string())?;
        let meta = ImportMeta {
            source: label,
            format,
            sha256: hex::encode(Sha256::digest(&body)),
            bytes: body.len() as u64,
            at: now,
        };
        Ok::<_, String>((records(&intervals, &summary, &meta), summary, skipped))
    })
    .await;
    let (recorded, summary, skipped) = match checked {
        Ok(Ok(done)) => done,
        Ok(Err(why)) => {
            return Problem::new(StatusCode::BAD_REQUEST, format!("{why}; nothing was imported")).into_response();
        }
        Err(e) => return Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    if let Err(e) = api.gateway.driver().record_all(recorded).await {
        return Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the import could not be recorded ({e}); nothing was imported, retry"),
        )
        .into_response();
    }
    let store = api.gateway.intervals().clone();
    let reader = api.gateway.ledger().reader();
    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || store.catch_up(&reader)).await {
        tracing::warn!("imported meter data recorded; the store will fold it at its next pass: {e}");
    }
    // What was stored, and the meters of the file that were not (a net-metered site's
    // received channel, a gas meter): the operator must know the load is one channel.
    let mut answer = serde_json::to_value(&summary).unwrap_or_default();
    if let Some(map) = answer.as_object_mut() {
        map.insert("not_imported".into(), serde_json::json!(skipped));
    }
    axum::Json(answer).into_response()
}

/// Query of `GET /v1/meter/intervals`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(super) struct IntervalsQuery {
    /// From (RFC 3339).
    from: DateTime<Utc>,
    /// To (RFC 3339, exclusive).
    to: DateTime<Utc>,
    /// `settlement` (the default: imported where there is, the gateway's own elsewhere),
    /// `imported` or `gateway`.
    which: Option<String>,
}

/// The site meter as interval data over `[from, to)`: each interval's end, mean kW, quality
/// (`measured`, `estimated`, `missing`), readings held and source (`gateway`, or the import's
/// label). At most 17,856 intervals (62 days of 5 minutes) per request.
#[utoipa::path(get, path = "/v1/meter/intervals", tag = "meter",
    params(IntervalsQuery),
    responses(
        (status = 200, description = "The intervals", body = Object),
        (status = 400, description = "A bad window or `which`, or too many intervals", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn intervals(State(api): State<Api>, Query(query): Query<IntervalsQuery>) -> Response {
    if query.to <= query.from {
        return Problem::new(StatusCode::BAD_REQUEST, "`to` must be after `from`")
            .field("to")
            .into_response();
    }
    let which = query.which.unwrap_or_else(|| "settlement".into());
    if !matches!(which.as_str(), "settlement" | "imported" | "gateway") {
        return Problem::new(
            StatusCode::BAD_REQUEST,
            format!("which {which:?}: settlement, imported or gateway"),
        )
        .field("which")
        .into_response();
    }
    let store = api.gateway.intervals().clone();
    let reader = api.gateway.ledger().reader();
    let (from, to) = (query.from, query.to);
    let read = tokio::task::spawn_blocking(move || {
        store.catch_up(&reader)?;
        match which.as_str() {
            "imported" => store.imported(from, to),
            "gateway" => store.gateway(from, to),
            _ => store.settlement_series(from, to).map(|s| s.into_inner()),
        }
    })
    .await;
    match read {
        Ok(Ok(list)) if list.len() > MAX_INTERVALS => Problem::new(
            StatusCode::BAD_REQUEST,
            format!(
                "{} intervals: at most {MAX_INTERVALS} per request; ask for a shorter window",
                list.len()
            ),
        )
        .into_response(),
        Ok(Ok(list)) => axum::Json(serde_json::json!({"count": list.len(), "intervals": list})).into_response(),
        Ok(Err(e)) => Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        Err(e) => Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Query of `GET /v1/baseline`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(super) struct BaselineQuery {
    /// The method: `pjm_economic`, `caiso_10in10`, `ercot_middle_8of10`,
    /// `ercot_matching_day_pair`, `nyiso_cbl`, `firm_service_level`, `meter_before_after`.
    method: String,
    /// The window's start (RFC 3339).
    start: DateTime<Utc>,
    /// Its end (RFC 3339).
    end: DateTime<Utc>,
    /// The zone days are matched in (default: the site's `[site] time_zone`).
    time_zone: Option<String>,
    /// Event days to pass over, comma-separated `YYYY-MM-DD` (default: the days the ledger
    /// shows the site curtailing on).
    event_days: Option<String>,
    /// `firm_service_level`: its level, kW.
    level_kw: Option<f64>,
    /// `nyiso_cbl`: `false` for a resource without the weather-sensitive adjustment.
    weather_sensitive: Option<bool>,
}

/// A program's customer baseline for a window, interval by interval, on the gateway's interval
/// data (imported first): the same report as `flexgate baseline --json` (method, version, days
/// used and excluded with the reason, the adjustment, one baseline per interval).
#[utoipa::path(get, path = "/v1/baseline", tag = "meter",
    params(BaselineQuery),
    responses(
        (status = 200, description = "The baseline report", body = Object),
        (status = 400, description = "A bad request, or the method's refusal (too few eligible days, no data)", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn baseline(State(api): State<Api>, Query(query): Query<BaselineQuery>) -> Response {
    let bad =
        |field: &'static str, why: String| Problem::new(StatusCode::BAD_REQUEST, why).field(field).into_response();
    let id: MethodId = match query.method.parse() {
        Ok(id) => id,
        Err(e) => return bad("method", format!("{e}")),
    };
    let method = match crate::reports::baseline::method_of(id, query.level_kw, query.weather_sensitive.unwrap_or(true))
    {
        Ok(m) => m,
        Err(e) => return bad("level_kw", e),
    };
    if query.end <= query.start {
        return bad("end", "`end` must be after `start`".into());
    }
    let zone = query
        .time_zone
        .clone()
        .unwrap_or_else(|| api.gateway.read().config.site.time_zone.clone());
    let Ok(time_zone) = zone.parse::<chrono_tz::Tz>() else {
        return bad("time_zone", format!("unknown time zone {zone:?}"));
    };
    let event_days = match &query.event_days {
        None => None,
        Some(list) => {
            let mut days = BTreeSet::new();
            for d in list.split(',').filter(|d| !d.trim().is_empty()) {
                match d.trim().parse::<NaiveDate>() {
                    Ok(day) => {
                        days.insert(day);
                    }
                    Err(_) => return bad("event_days", format!("{d:?} is not a date (YYYY-MM-DD)")),
                }
            }
            Some(days)
        }
    };
    let request = crate::reports::baseline::BaselineRequest {
        method,
        start: query.start,
        end: query.end,
        time_zone,
        event_days,
        holidays: None,
    };
    let store = api.gateway.intervals().clone();
    let reader = api.gateway.ledger().reader();
    let now = api.gateway.clock().now();
    let report = tokio::task::spawn_blocking(move || {
        store.catch_up(&reader)?;
        crate::reports::baseline::baseline(&store, &request, now)
    })
    .await;
    match report {
        Ok(Ok(report)) => axum::Json(report).into_response(),
        Ok(Err(crate::reports::baseline::RequestError::Baseline(e))) => {
            Problem::new(StatusCode::BAD_REQUEST, e.to_string()).into_response()
        }
        Ok(Err(e)) => Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        Err(e) => Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Query of `GET /v1/settlement`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(super) struct SettlementQuery {
    /// First day (`YYYY-MM-DD`, UTC midnight) or time (RFC 3339).
    from: String,
    /// Day or time the period ends, exclusive (at most 400 days after `from`).
    to: String,
}

/// The season's settlement (what `flexgate settlement --format json` gives on a stopped
/// gateway's directory): every event starting in the period, settled by its `[settlement]`
/// program's baseline method on the interval data (imported first), with the committed and
/// delivered reduction, the performance factor, the estimated payment or penalty and the data
/// quality; then the totals, and the ledger head it was computed on.
#[utoipa::path(get, path = "/v1/settlement", tag = "meter",
    params(SettlementQuery),
    responses(
        (status = 200, description = "The settlement report", body = Object),
        (status = 400, description = "A bad period", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn settlement(State(api): State<Api>, Query(query): Query<SettlementQuery>) -> Response {
    match report_of(&api, &query.from, &query.to).await {
        Ok((report, _)) => axum::Json(report).into_response(),
        Err(answer) => answer,
    }
}

/// The settlement of `[from, to)` on the running gateway's store, with the site's zone; or the
/// problem to answer.
async fn report_of(
    api: &Api,
    from: &str,
    to: &str,
) -> Result<(crate::reports::settlement::SettlementReport, chrono_tz::Tz), Response> {
    let parse = crate::reports::settlement::parse_time;
    let (from, to) = match (parse(from), parse(to)) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(why), _) => return Err(Problem::new(StatusCode::BAD_REQUEST, why).field("from").into_response()),
        (_, Err(why)) => return Err(Problem::new(StatusCode::BAD_REQUEST, why).field("to").into_response()),
    };
    if to <= from || to - from > chrono::Duration::days(400) {
        return Err(
            Problem::new(StatusCode::BAD_REQUEST, "`to` must be after `from`, at most 400 days")
                .field("to")
                .into_response(),
        );
    }
    let config = api.gateway.read().config.clone();
    let Ok(time_zone) = config.site.time_zone.parse::<chrono_tz::Tz>() else {
        return Err(
            Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "the site's time zone does not parse").into_response(),
        );
    };
    let store = api.gateway.intervals().clone();
    let reader = api.gateway.ledger().reader();
    let head = reader.head();
    let now = api.gateway.clock().now();
    let key = api.gateway.site_key().clone();
    let report = tokio::task::spawn_blocking(move || {
        store.catch_up(&reader)?;
        crate::reports::settlement::build(&store, &config.settlement, from, to, time_zone, head, now)
            .map(|report| report.signed(&key))
    })
    .await;
    match report {
        Ok(Ok(report)) => Ok((report, time_zone)),
        Ok(Err(e)) => Err(Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()),
        Err(e) => Err(Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()),
    }
}

/// Query of `GET /v1/settlement.html`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(super) struct SettlementPageQuery {
    /// First day or time (default: 90 days before today).
    from: Option<String>,
    /// Day or time the period ends, exclusive (default: the day after today).
    to: Option<String>,
}

/// The season's settlement as a printable page (what `flexgate settlement --format html`
/// writes): the totals, a chart of delivered against committed reduction per event, and a row
/// per event naming its method and the data it stands on. Self-contained: no script, no
/// outside resource; the browser prints it to PDF as it shows. The dashboard links to it.
#[utoipa::path(get, path = "/v1/settlement.html", tag = "meter",
    params(SettlementPageQuery),
    responses(
        (status = 200, description = "The page", body = String, content_type = "text/html"),
        (status = 400, description = "A bad period", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn settlement_page(State(api): State<Api>, Query(query): Query<SettlementPageQuery>) -> Response {
    let today = api.gateway.clock().now().date_naive();
    let from = query
        .from
        .unwrap_or_else(|| (today - chrono::Duration::days(90)).to_string());
    let to = query
        .to
        .unwrap_or_else(|| (today + chrono::Duration::days(1)).to_string());
    match report_of(&api, &from, &to).await {
        Ok((report, tz)) => (
            [
                (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (
                    axum::http::header::CONTENT_SECURITY_POLICY,
                    "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
                ),
            ],
            report.to_html(tz),
        )
            .into_response(),
        Err(answer) => answer,
    }
}
