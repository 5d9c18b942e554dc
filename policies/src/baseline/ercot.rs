//! `ercot_middle_8of10`: ERCOT's "middle 8-of-10 preceding like days" baseline, with ERCOT's
//! event-day adjustment.
//!
//! Source: ERCOT *Emergency Response Service Technical Requirements & Scope of Work* (the
//! baselines an ERS Resource may be assigned) and ERCOT *Demand Response Baseline
//! Methodologies* (procedure, e.g. version 19.0, September 2019; first published as the EILS
//! *Default Baseline Methodologies*), which define the regression, middle 8-of-10 and
//! matching-day-pair baselines and one event-day adjustment applied to each. As read here:
//!
//! - **Like days**: weekdays that are not holidays for a weekday event; weekend days and
//!   holidays for a weekend or holiday event.
//! - **Days**: the **10 most recent** non-event like days with complete data, within **60**
//!   calendar days. The **highest and the lowest** of the ten are dropped and each interval's
//!   baseline is the mean of the **middle eight** at the same local clock time.
//! - **Ranking**: by each day's whole-day energy (kWh over the local day, 23 or 25 hours on DST
//!   days), as ERCOT's text speaks of the highest and lowest usage days; a day is therefore
//!   usable only with its whole day's intervals.
//! - **Event-day adjustment**: a scalar (multiplicative) factor, the event day's energy over
//!   the adjustment intervals divided by the baseline's over the same local clock times,
//!   applied to every interval. The adjustment intervals used here are the **two hours (eight
//!   15-minute intervals) ending one hour before the event**: ERS resources are deployed with
//!   10 or 30 minutes' notice, so the hour before may already be ramping. No cap: none is
//!   stated in the documents as read here; a zero baseline over the window leaves the
//!   baseline unadjusted.
//! - **Too few days**: fewer than ten → refused (ERCOT then assigns another baseline; no
//!   fallback inside this method).
//!
//! Choices where the documents leave room are the ones above (look-back, ranking, adjustment
//! window, no cap). The documents' text was not retrievable while writing this module beyond
//! their titles and ERCOT's analysis slides (scalar adjustment = actual kWh ÷ baseline kWh over
//! the adjustment intervals); check against the current procedure, a change being version 2.
//!
//! Worked example: none published by ERCOT was found here; the tests use hand-computed
//! calendars.

use super::adjust::AdjustRule;
use super::event::Event;
use super::likedays::{LikeDayRule, Rank, Select, like_day_report, same_day_type};
use super::method::MethodId;
use super::report::{AdjustmentKind, BaselineError, BaselineReport};

/// Calendar days searched for the ten like days.
pub const LOOKBACK_DAYS: i64 = 60;

/// ERCOT's event-day adjustment as implemented: 3 h to 1 h before the start, scalar, uncapped.
pub(crate) const ADJUSTMENT: AdjustRule = AdjustRule {
    kind: AdjustmentKind::Multiplicative,
    from_min: 180,
    to_min: 60,
    cap: None,
};

/// ERCOT's middle 8 of 10 of `event`.
pub(crate) fn compute(event: &Event<'_>) -> Result<BaselineReport, BaselineError> {
    let holidays = event.input.holidays;
    let day_type = holidays.day_type(event.date);
    let like = same_day_type(holidays, day_type);
    let rule = LikeDayRule {
        like: &like,
        like_name: day_type.as_str(),
        lookback_days: LOOKBACK_DAYS,
        wanted: 10,
        minimum: 10,
        low_usage_share: None,
        fill_with_event_days: false,
        rank: Rank::DailyEnergy,
        select: Select::Middle { high: 1, low: 1 },
    };
    let text = format!(
        "mean of the middle 8 of the 10 most recent non-event {} days within {LOOKBACK_DAYS} days \
         (the highest and lowest daily energy dropped); {}",
        day_type.as_str(),
        ADJUSTMENT.describe()
    );
    like_day_report(
        event,
        MethodId::ErcotMiddle8Of10,
        text,
        day_type,
        &rule,
        Some(ADJUSTMENT),
    )
}
