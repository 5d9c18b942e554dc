//! `caiso_10in10`: CAISO's 10-in-10 customer load baseline with the day-of adjustment.
//!
//! Source: CAISO *Business Practice Manual for Demand Response*, the customer load baseline
//! methodology for Proxy Demand Resources and Reliability Demand Response Resources (CAISO
//! tariff section 4.13.4), and the CAISO baseline accuracy work that compared it with its
//! alternatives (Nexant, J. Bode and A. Ciccone, *California ISO Baseline Accuracy
//! Assessment*). As read here:
//!
//! - **Weekday event**: the **10 most recent** non-event weekdays that are not holidays,
//!   within the **45** calendar days before the event; each interval's baseline is the plain
//!   mean of those days at the same local clock time ("same-interval mean"; no ranking, no
//!   low-usage rule).
//! - **Weekend or holiday event**: the **4 most recent** non-event weekend days or holidays
//!   within the 45 days ("4-in-4"), averaged the same way.
//! - **Too few days**: fewer than 10 (weekday) usable days but at least 5 → the days found are
//!   averaged. Fewer than 5 (weekday) or 4 (weekend/holiday) → event days within the 45 days
//!   are taken in, the highest load first, until the minimum is reached; each such day is
//!   listed as `event_day` among the days used and the report's notes say so. Still short →
//!   refused.
//! - **Day-of adjustment**: multiplicative, the event day's mean load over the three hours
//!   before the event **excluding the hour immediately prior** (from 4 h to 1 h before the
//!   start, so a response notified an hour ahead does not lower it), divided by the
//!   baseline's mean over the same local clock hours, **capped at ±20 %** (a factor within
//!   0.8–1.2), applied to every interval, on weekdays and weekends alike.
//!
//! Choices where the documents leave room: the holiday list is the calendar given (CAISO
//! names holidays without this module knowing its list; configure it, e.g. with the
//! `california_tou` set); the weekend minimum of 4 and the event-day fallback for weekends
//! mirror the weekday rule. The BPM's text was not retrievable while writing this module, so
//! these figures are to be checked against its current revision; a change is version 2.
//!
//! Worked example: none published by CAISO was found here; the tests use hand-computed
//! calendars.

use super::adjust::AdjustRule;
use super::calendar::DayType;
use super::event::Event;
use super::likedays::{LikeDayRule, Rank, Select, like_day_report, same_day_type};
use super::method::MethodId;
use super::report::{AdjustmentKind, BaselineError, BaselineReport};

/// Calendar days searched.
pub const LOOKBACK_DAYS: i64 = 45;

/// The day-of adjustment: 4 h to 1 h before the start, multiplicative, ±20 %.
pub(crate) const ADJUSTMENT: AdjustRule = AdjustRule {
    kind: AdjustmentKind::Multiplicative,
    from_min: 240,
    to_min: 60,
    cap: Some(0.2),
};

/// CAISO's 10-in-10 of `event`.
pub(crate) fn compute(event: &Event<'_>) -> Result<BaselineReport, BaselineError> {
    let holidays = event.input.holidays;
    let day_type = holidays.day_type(event.date);
    let (wanted, minimum) = match day_type {
        DayType::Weekday => (10, 5),
        DayType::WeekendOrHoliday => (4, 4),
    };
    let like = same_day_type(holidays, day_type);
    let rule = LikeDayRule {
        like: &like,
        like_name: day_type.as_str(),
        lookback_days: LOOKBACK_DAYS,
        wanted,
        minimum,
        low_usage_share: None,
        fill_with_event_days: true,
        rank: Rank::WindowMean,
        select: Select::All,
    };
    let text = format!(
        "mean of the {wanted} most recent non-event {} days within {LOOKBACK_DAYS} days (at least \
         {minimum}, event days with the highest load taken in to reach it); {}",
        day_type.as_str(),
        ADJUSTMENT.describe()
    );
    like_day_report(event, MethodId::Caiso10In10, text, day_type, &rule, Some(ADJUSTMENT))
}
