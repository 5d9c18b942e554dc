//! Customer baselines: what the site would have drawn during an event had it not curtailed,
//! computed as each program's own document says, from interval meter data.
//!
//! A site is paid, or penalised, on the program's baseline minus its metered load, computed
//! from the utility's interval data. So every method here is a pure function of the same
//! things a settlement uses, and nothing else ([`compute`]): the interval data
//! ([`IntervalSeries`](crate::intervals::IntervalSeries), kW per interval, interval-ending),
//! the event window, the site's time zone, the days to exclude as event days and a holiday
//! calendar. Each gives one [`BaselineReport`] with every day it used or passed over and why,
//! the adjustment with its window and cap, and a baseline for every interval of the data's own
//! length over the window, matched by local clock time across DST; or a typed refusal
//! ([`BaselineError`]) saying why there is none.
//!
//! | id | module | rule |
//! |---|---|---|
//! | `pjm_economic` | [`pjm`] | high 4 of 5 weekdays (2 of 3 weekend/holiday days) in 45 days, symmetric additive adjustment |
//! | `caiso_10in10` | [`caiso`] | mean of 10 weekdays (4 weekend/holiday days) in 45 days, multiplicative adjustment ±20 % |
//! | `ercot_middle_8of10` | [`ercot`] | middle 8 of 10 like days by daily energy, scalar event-day adjustment |
//! | `ercot_matching_day_pair` | [`matching_pair`] | the past day pair closest to the event's, then the same adjustment |
//! | `nyiso_cbl` | [`nyiso`] | high 5 of 10 weekdays (2 of 3 like weekend days), weather-sensitive adjustment ±20 % or none |
//! | `firm_service_level` | [`fsl`] | no baseline: a level the meter must stay at or under |
//! | `meter_before_after` | [`before_after`] | the meter before (and after) the event |
//!
//! Each method's module cites the document its rules come from and states every choice the
//! document leaves open. The shared parts: [`calendar`] (holidays and day types), `local`
//! (intervals matched by local clock time, DST), `likedays` (the x-of-y engine), `adjust`
//! (the day-of adjustment), [`report`] (the report and the refusal), [`performance`](mod@performance)
//! (delivered against committed).
//!
//! [`pjm_economic_cbl`] is PJM's Economic CBL on the gateway's raw meter readings, one figure
//! for the window: the audit's (`src/reports/audit.rs`), kept as it was.

mod adjust;
pub mod before_after;
pub mod caiso;
pub mod calendar;
pub mod ercot;
mod event;
pub mod fsl;
mod likedays;
mod local;
pub mod matching_pair;
pub mod method;
pub mod nyiso;
pub mod performance;
pub mod pjm;
pub mod report;
mod samples;

pub use calendar::{DayType, HolidayCalendar, HolidaySet, is_nerc_holiday};
pub use event::BaselineInput;
pub use method::{Method, MethodId, UnknownMethod};
pub use performance::{EventPerformance, IntervalPerformance, performance};
pub use report::{
    Adjustment, AdjustmentKind, BaselineError, BaselineReport, DayExcluded, DayUsed, Detail, Exclusion,
    IntervalBaseline,
};
pub use samples::{
    BaselineDay, Cbl, CblUnavailable, LOOKBACK_DAYS, LOW_USAGE_SHARE, PassedOver, SameDayAdjustment, pjm_economic_cbl,
};

/// The baseline of `method` for the event `input` describes (see the module docs).
pub fn compute(method: &Method, input: &BaselineInput<'_>) -> Result<BaselineReport, BaselineError> {
    let event = event::Event::new(input)?;
    match method {
        Method::PjmEconomic => pjm::compute(&event),
        Method::Caiso10In10 => caiso::compute(&event),
        Method::ErcotMiddle8Of10 => ercot::compute(&event),
        Method::ErcotMatchingDayPair { lookback_days } => matching_pair::compute(&event, *lookback_days),
        Method::NyisoCbl { weather_sensitive } => nyiso::compute(&event, *weather_sensitive),
        Method::FirmServiceLevel { level_kw } => fsl::compute(&event, *level_kw),
        Method::MeterBeforeAfter { before_s, after_s } => before_after::compute(&event, *before_s, *after_s),
    }
}
