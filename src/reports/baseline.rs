//! A program baseline for any window, on the interval store: what `flexgate baseline` and
//! `GET /v1/baseline` answer, so an auditor can check a settlement.
//!
//! The data is the store's settlement series (the utility's imported intervals first, the
//! gateway's own elsewhere) from far enough before the window for every method's look-back to
//! the day after it (for the meter after the event). The event days default to the days the
//! ledger shows the site curtailing on, in the site's zone; a caller (an auditor with imported
//! data alone) may state both instead. The computation is the pure
//! `flexgate_policies::baseline::compute`.

use crate::intervals::{IntervalStore, StoreError};
use chrono::{DateTime, Duration, NaiveDate, Utc};
use chrono_tz::Tz;
use flexgate_policies::baseline::{
    BaselineError, BaselineInput, BaselineReport, HolidayCalendar, HolidaySet, Method, MethodId, compute,
};
use std::collections::BTreeSet;

/// Data read before the window: every method's look-back (45 calendar days for PJM and CAISO,
/// 60 for the matching day pair) and a margin.
pub const LOOKBACK: Duration = Duration::days(70);

/// What to compute.
#[derive(Debug, Clone)]
pub struct BaselineRequest {
    /// The method with its parameters.
    pub method: Method,
    /// The window's start.
    pub start: DateTime<Utc>,
    /// Its end.
    pub end: DateTime<Utc>,
    /// The zone days and clock times are matched in.
    pub time_zone: Tz,
    /// The event days to pass over; `None`: the days the ledger shows the site curtailing on.
    pub event_days: Option<BTreeSet<NaiveDate>>,
    /// The holidays; `None`: the method's program's list ([`default_holidays`]).
    pub holidays: Option<HolidayCalendar>,
}

/// Why no baseline came back.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The method refused (too few days, no data...): its reason.
    #[error("{0}")]
    Baseline(#[from] BaselineError),
}

/// The holidays a method's program names by default: PJM's NERC holidays, California's
/// time-of-use holidays for CAISO, the US federal holidays for ERCOT and NYISO (their manuals
/// refer to the holidays of their own calendars, which add to NERC's; the federal list is the
/// closest rule-based list; a site adds or removes days in `[settlement]`).
#[must_use]
pub fn default_holidays(method: MethodId) -> HolidayCalendar {
    HolidayCalendar::of(&[match method {
        MethodId::Caiso10In10 => HolidaySet::CaliforniaTou,
        MethodId::ErcotMiddle8Of10 | MethodId::ErcotMatchingDayPair | MethodId::NyisoCbl => HolidaySet::UsFederal,
        MethodId::PjmEconomic | MethodId::FirmServiceLevel | MethodId::MeterBeforeAfter => HolidaySet::Nerc,
    }])
}

/// Compute `request` on `store` (already brought up to date with the ledger).
pub fn baseline(
    store: &IntervalStore,
    request: &BaselineRequest,
    now: DateTime<Utc>,
) -> Result<BaselineReport, RequestError> {
    let from = request.start - LOOKBACK;
    let to = request.end + Duration::days(1);
    let data = store.settlement_series(from, to)?;
    let event_days = match &request.event_days {
        Some(days) => days.clone(),
        None => {
            // The event's own day is not a baseline day either way; the methods know it.
            store.event_days(from, request.start, request.time_zone, now)?
        }
    };
    let holidays = request
        .holidays
        .clone()
        .unwrap_or_else(|| default_holidays(request.method.id()));
    let input = BaselineInput {
        data: &data,
        start: request.start,
        end: request.end,
        time_zone: request.time_zone,
        event_days: &event_days,
        holidays: &holidays,
    };
    Ok(compute(&request.method, &input)?)
}

/// The method `id` with the parameters a request gave (a firm service level needs its level).
#[allow(clippy::missing_errors_doc)]
pub fn method_of(id: MethodId, level_kw: Option<f64>, weather_sensitive: bool) -> Result<Method, String> {
    Ok(match id {
        MethodId::FirmServiceLevel => match level_kw {
            Some(kw) if kw.is_finite() && kw >= 0.0 => Method::FirmServiceLevel { level_kw: kw },
            Some(kw) => return Err(format!("level {kw} kW is not a level: give a number of kW, at least 0")),
            None => return Err("firm_service_level needs its level (level_kw, --level-kw)".into()),
        },
        MethodId::NyisoCbl => Method::NyisoCbl { weather_sensitive },
        other => match Method::with_defaults(other) {
            Some(m) => m,
            None => return Err(format!("{other} has no default parameters")),
        },
    })
}

/// A holiday set by its id.
pub fn holiday_set(id: &str) -> Result<HolidaySet, String> {
    match id {
        "nerc" => Ok(HolidaySet::Nerc),
        "us_federal" => Ok(HolidaySet::UsFederal),
        "california_tou" => Ok(HolidaySet::CaliforniaTou),
        other => Err(format!(
            "unknown holiday list {other:?}: nerc, us_federal or california_tou"
        )),
    }
}
