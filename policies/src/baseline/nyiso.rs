//! `nyiso_cbl`: NYISO's average-day customer baseline load, with the weather-sensitive
//! adjustment or without it.
//!
//! Source: NYISO Manual 7, *Emergency Demand Response Program Manual* (EDRP), and the
//! *Installed Capacity Manual* (ICAP Manual 4, Special Case Resources), whose CBL section
//! defines the average-day CBL used for EDRP and SCR energy payments. As read here:
//!
//! - **Weekday event**: the CBL window is the **10 most recent** weekdays that are not
//!   holidays, not event days and have complete data, within **30** calendar days before the
//!   event. **Low-usage days** (mean load over the event window under 25 % of the window's
//!   mean) are replaced by the next older day. Of the days found, the **five highest** by mean
//!   load over the event window are averaged, interval by interval ("highest 5 of 10"). Fewer
//!   than 10 but at least 5 → the highest 5 of those found; fewer than 5 → refused.
//! - **Weekend event**: the **three most recent like weekend days** (Saturdays for a Saturday
//!   event; Sundays and holidays for a Sunday or holiday event) within the 30 days, the
//!   **highest two** averaged. Fewer than three → refused.
//! - **Weather-sensitive adjustment** (the default, `weather_sensitive = true`):
//!   multiplicative, the event day's mean load over the **two hours beginning four hours before
//!   the event** (4 h to 2 h before the start) divided by the CBL's over the same local clock
//!   hours, **bounded to 0.8–1.2** (±20 %), applied to every interval.
//! - **Without it** (`weather_sensitive = false`): the unadjusted average-day CBL, for a
//!   resource enrolled as not weather-sensitive. Which of the two a resource has is a term of
//!   its enrollment; the operator configures it.
//!
//! Choices where the manuals leave room: the holidays are the calendar given; a holiday on a
//! weekday takes the Sunday rule; the 30-day window, the minimum of five weekdays and the
//! low-usage rule are applied to weekends as to weekdays. The manuals' text was not
//! retrievable while writing this module (only their title pages), so these figures are to be
//! checked against the current revision; a change is version 2.
//!
//! Worked example: none published by NYISO was found here; the tests use hand-computed
//! calendars.

use super::adjust::AdjustRule;
use super::calendar::{DayType, HolidayCalendar};
use super::event::Event;
use super::likedays::{LikeDayRule, Rank, Select, like_day_report, same_day_type};
use super::method::MethodId;
use super::report::{AdjustmentKind, BaselineError, BaselineReport, Exclusion};
use chrono::{Datelike, NaiveDate, Weekday};

/// Calendar days searched.
pub const LOOKBACK_DAYS: i64 = 30;

/// Share of the window's mean under which a day is a low-usage day.
pub const LOW_USAGE_SHARE: f64 = 0.25;

/// The weather-sensitive adjustment: 4 h to 2 h before the start, multiplicative, ±20 %.
pub(crate) const WEATHER_SENSITIVE: AdjustRule = AdjustRule {
    kind: AdjustmentKind::Multiplicative,
    from_min: 240,
    to_min: 120,
    cap: Some(0.2),
};

/// The weekend classes NYISO compares: a Saturday with Saturdays, a Sunday or holiday with
/// Sundays and holidays.
fn weekend_like(holidays: &HolidayCalendar, event: NaiveDate) -> impl Fn(NaiveDate) -> Option<Exclusion> + '_ {
    let saturday = |d: NaiveDate| d.weekday() == Weekday::Sat && !holidays.is_holiday(d);
    let event_is_saturday = saturday(event);
    move |day| {
        if holidays.day_type(day) == DayType::Weekday {
            Some(Exclusion::Weekday)
        } else if saturday(day) == event_is_saturday {
            None
        } else {
            Some(Exclusion::UnlikeDay)
        }
    }
}

/// NYISO's CBL of `event`.
pub(crate) fn compute(event: &Event<'_>, weather_sensitive: bool) -> Result<BaselineReport, BaselineError> {
    let holidays = event.input.holidays;
    let day_type = holidays.day_type(event.date);
    let adjust = weather_sensitive.then_some(WEATHER_SENSITIVE);
    let adjust_text = adjust.map_or_else(|| "no adjustment (not weather-sensitive)".to_string(), |a| a.describe());
    match day_type {
        DayType::Weekday => {
            let like = same_day_type(holidays, day_type);
            let rule = LikeDayRule {
                like: &like,
                like_name: day_type.as_str(),
                lookback_days: LOOKBACK_DAYS,
                wanted: 10,
                minimum: 5,
                low_usage_share: Some(LOW_USAGE_SHARE),
                fill_with_event_days: false,
                rank: Rank::WindowMean,
                select: Select::Highest(5),
            };
            let text = format!(
                "mean of the highest 5 of the 10 most recent weekdays within {LOOKBACK_DAYS} days \
                 (at least 5; low-usage days under {:.0} % replaced); {adjust_text}",
                LOW_USAGE_SHARE * 100.0
            );
            like_day_report(event, MethodId::NyisoCbl, text, day_type, &rule, adjust)
        }
        DayType::WeekendOrHoliday => {
            let like = weekend_like(holidays, event.date);
            let saturday = event.date.weekday() == Weekday::Sat && !holidays.is_holiday(event.date);
            let like_name = if saturday { "Saturday" } else { "Sunday or holiday" };
            let rule = LikeDayRule {
                like: &like,
                like_name,
                lookback_days: LOOKBACK_DAYS,
                wanted: 3,
                minimum: 3,
                low_usage_share: Some(LOW_USAGE_SHARE),
                fill_with_event_days: false,
                rank: Rank::WindowMean,
                select: Select::Highest(2),
            };
            let text = format!(
                "mean of the highest 2 of the 3 most recent {like_name} days within {LOOKBACK_DAYS} \
                 days (low-usage days under {:.0} % replaced); {adjust_text}",
                LOW_USAGE_SHARE * 100.0
            );
            like_day_report(event, MethodId::NyisoCbl, text, day_type, &rule, adjust)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::calendar::is_weekend;

    #[test]
    fn saturdays_match_saturdays_and_sundays_match_sundays_and_holidays() {
        let cal = HolidayCalendar::default();
        let d = |m, day| NaiveDate::from_ymd_opt(2026, m, day).expect("date");
        let sat = weekend_like(&cal, d(7, 11));
        assert!(is_weekend(d(7, 4)));
        // 4 July 2026 is a Saturday and a holiday: like a Sunday, not a Saturday.
        assert_eq!(sat(d(7, 4)), Some(Exclusion::UnlikeDay));
        assert_eq!(sat(d(7, 5)), Some(Exclusion::UnlikeDay));
        assert_eq!(sat(d(6, 27)), None);
        assert_eq!(sat(d(7, 10)), Some(Exclusion::Weekday));
        let sun = weekend_like(&cal, d(7, 12));
        assert_eq!(sun(d(7, 4)), None);
        assert_eq!(sun(d(5, 25)), None, "Memorial Day");
        assert_eq!(sun(d(7, 11)), Some(Exclusion::UnlikeDay));
    }
}
