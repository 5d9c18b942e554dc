//! `pjm_economic`: PJM's Economic Load Response customer baseline load (CBL), on interval data.
//!
//! Source: PJM Manual 11, *Energy & Ancillary Services Market Operations*, section 10 (demand
//! resources in the energy market: the Economic CBL and its same-day adjustment), which
//! implements the CBL of the PJM Operating Agreement, Schedule 1, section 3.3A; PJM Manual 19
//! (*Load Forecasting and Analysis*) for the load data conventions. The rules are the same as
//! [`super::pjm_economic_cbl`]'s on raw readings (the audit's since before interval data):
//!
//! - **Weekday event** (Monday to Friday, not a holiday): the five most recent eligible
//!   weekdays, the mean of the **highest four** by their mean load over the event window
//!   ("high 4 of 5").
//! - **Weekend or holiday event**: the three most recent eligible weekend days or holidays, the
//!   mean of the **highest two** ("high 2 of 3").
//! - **Eligible days** lie within the 45 calendar days before the event. Event days, days
//!   without complete data and **low-usage days** (mean load over the window under 25 % of the
//!   mean of the days selected with them) are passed over, each replaced by the next older
//!   eligible day. Too few within 45 days: refused (no fallback is implemented).
//! - **Symmetric additive adjustment**: the event day's mean load over the three hours ending
//!   one hour before the event, minus the baseline's mean over the same local clock hours,
//!   added to every interval, up or down, uncapped.
//! - **Holidays**: PJM names the NERC holidays; the calendar given is used, so a program list
//!   differing from NERC's is the operator's to configure.
//!
//! Choices where the manual leaves room, or where this version may differ from its current
//! text: the weekend rule pools Saturdays, Sundays and holidays as the audit always has (recent
//! revisions of Manual 11 may separate Saturday from Sunday/holiday CBLs; a change would be
//! version 2); each interval's baseline is the mean of the four (or two) counted days at that
//! interval's local clock time, while days are ranked by their mean over the whole window.
//!
//! Worked example: none published by PJM was found while writing this module (the manual's
//! text was not retrievable here); the tests reproduce hand-computed calendars instead.

use super::adjust::AdjustRule;
use super::event::Event;
use super::likedays::{LikeDayRule, Rank, Select, like_day_report, same_day_type};
use super::method::MethodId;
use super::report::{AdjustmentKind, BaselineError, BaselineReport};
use super::samples::{LOOKBACK_DAYS, LOW_USAGE_SHARE};

/// The same-day adjustment: three hours ending one hour before the event, additive.
pub(crate) const ADJUSTMENT: AdjustRule = AdjustRule {
    kind: AdjustmentKind::Additive,
    from_min: 240,
    to_min: 60,
    cap: None,
};

/// PJM's Economic CBL of `event`.
pub(crate) fn compute(event: &Event<'_>) -> Result<BaselineReport, BaselineError> {
    let holidays = event.input.holidays;
    let day_type = holidays.day_type(event.date);
    let (x, y) = day_type.x_of_y();
    let like = same_day_type(holidays, day_type);
    let rule = LikeDayRule {
        like: &like,
        like_name: day_type.as_str(),
        lookback_days: LOOKBACK_DAYS,
        wanted: y,
        minimum: y,
        low_usage_share: Some(LOW_USAGE_SHARE),
        fill_with_event_days: false,
        rank: Rank::WindowMean,
        select: Select::Highest(x),
    };
    let text = format!(
        "high {x} of {y} {} days within {LOOKBACK_DAYS} days, low-usage days (under {:.0} % of the \
         days' mean) replaced; {}",
        day_type.as_str(),
        LOW_USAGE_SHARE * 100.0,
        ADJUSTMENT.describe()
    );
    like_day_report(event, MethodId::PjmEconomic, text, day_type, &rule, Some(ADJUSTMENT))
}
