//! The like-day engine every "x of y" method shares: walk back from the day before the event,
//! keep the days like it, pass over the others with a reason, take the most recent `y`,
//! replace low-usage days, fall back where the program says so, rank, and average the chosen
//! days interval by interval at the same local clock times.
//!
//! Choices common to every method here, where the documents leave room:
//!
//! - A day is usable only with every interval it needs: the event window's intervals and the
//!   adjustment window's at the same local clock times (and its whole local day where days are
//!   ranked by their energy). Estimated intervals are used and counted in the report; a
//!   missing one makes the day `missing_data`. Utilities settle on complete, validated data,
//!   estimating what their meters lost, so a gap here means the data given is not the
//!   settlement's.
//! - Days equal in rank keep their recency order: the more recent counts first.
//! - The walk starts the day before the event: the event day itself is never a baseline day.

use super::adjust::{AdjustRule, apply};
use super::calendar::{DayType, HolidayCalendar, is_weekend};
use super::event::Event;
use super::local::{Slot, Unusable, day_start, local_date, mean, read_at, read_shifted};
use super::method::MethodId;
use super::report::{BaselineError, BaselineReport, DayExcluded, DayUsed, Detail, Exclusion};
use chrono::{Duration, NaiveDate};

/// What days are ranked by, to choose the counted ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rank {
    /// Their mean over the event window.
    WindowMean,
    /// Their whole local day's energy.
    DailyEnergy,
}

impl Rank {
    fn as_str(self) -> &'static str {
        match self {
            Rank::WindowMean => "window_mean",
            Rank::DailyEnergy => "daily_energy",
        }
    }
}

/// Which of the days found count in the mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Select {
    /// The `x` highest.
    Highest(usize),
    /// All of them.
    All,
    /// All but the `high` highest and the `low` lowest.
    Middle {
        /// Dropped from the top.
        high: usize,
        /// Dropped from the bottom.
        low: usize,
    },
}

/// One method's rule for one kind of event day.
pub(crate) struct LikeDayRule<'r> {
    /// `None` for a like day, else why not.
    pub like: &'r dyn Fn(NaiveDate) -> Option<Exclusion>,
    /// The like days' name in words.
    pub like_name: &'static str,
    /// Calendar days searched, back from the day before the event.
    pub lookback_days: i64,
    /// Days wanted (`y`).
    pub wanted: usize,
    /// Fewest days the method proceeds with.
    pub minimum: usize,
    /// Days under this share of the mean of the days chosen with them are low-usage days,
    /// replaced by the next.
    pub low_usage_share: Option<f64>,
    /// Short of `minimum` days, take in event days, highest load first (CAISO's fallback).
    pub fill_with_event_days: bool,
    /// What to rank by.
    pub rank: Rank,
    /// Which days count.
    pub select: Select,
}

impl LikeDayRule<'_> {
    /// The ranking's name in reports (`none` when every day counts).
    pub fn ranked_by(&self) -> &'static str {
        match self.select {
            Select::All => "none",
            _ => self.rank.as_str(),
        }
    }
}

/// A day read for the event.
#[derive(Debug, Clone)]
pub(crate) struct Day {
    /// The local day.
    pub date: NaiveDate,
    /// Its figures at the event's intervals' local clock times.
    pub window: Vec<f64>,
    /// Its figures at the adjustment window's.
    pub adjust: Vec<f64>,
    /// Estimated intervals among them.
    pub estimated: usize,
    /// Mean of `window`.
    pub mean_kw: f64,
    /// Its whole day's energy, where ranked by it.
    pub daily_kwh: Option<f64>,
    /// An event day taken in by the fallback.
    pub event_day: bool,
    /// Whether it counts.
    pub counted: bool,
}

impl Day {
    fn rank_key(&self, rank: Rank) -> f64 {
        match rank {
            Rank::WindowMean => self.mean_kw,
            Rank::DailyEnergy => self.daily_kwh.unwrap_or(self.mean_kw),
        }
    }

    /// The report's line for it.
    pub fn used(&self) -> DayUsed {
        DayUsed {
            date: self.date,
            mean_kw: self.mean_kw,
            counted: self.counted,
            estimated_intervals: self.estimated,
            daily_kwh: self.daily_kwh,
            match_distance: None,
            event_day: self.event_day,
        }
    }
}

/// The days chosen, what was passed over, and what the reader must be told.
pub(crate) struct Selection {
    /// The days used, most recent first.
    pub days: Vec<Day>,
    /// The days passed over, most recent first.
    pub excluded: Vec<DayExcluded>,
    /// Fallbacks taken.
    pub notes: Vec<String>,
}

impl Selection {
    /// The counted days' mean at each event interval.
    pub fn baseline(&self, slots: usize) -> Vec<f64> {
        let counted: Vec<&Day> = self.days.iter().filter(|d| d.counted).collect();
        (0..slots)
            .map(|k| mean(&counted.iter().map(|d| d.window[k]).collect::<Vec<_>>()).unwrap_or(0.0))
            .collect()
    }

    /// The counted days' mean over the adjustment window (`None` without one).
    pub fn adjust_baseline(&self) -> Option<f64> {
        let means: Vec<f64> = self
            .days
            .iter()
            .filter(|d| d.counted)
            .filter_map(|d| mean(&d.adjust))
            .collect();
        mean(&means)
    }

    /// How many count.
    pub fn counted(&self) -> usize {
        self.days.iter().filter(|d| d.counted).count()
    }
}

impl From<Unusable> for Exclusion {
    fn from(u: Unusable) -> Self {
        match u {
            Unusable::MissingData => Exclusion::MissingData,
            Unusable::DstGap => Exclusion::DstGap,
        }
    }
}

/// Read `day` for the event: its window, its adjustment window and (ranked by energy) its
/// whole day.
pub(crate) fn read_day(event: &Event<'_>, adjust: &[Slot], day: NaiveDate, rank: Rank) -> Result<Day, Unusable> {
    let data = event.input.data;
    let tz = event.tz();
    let shift = event.shift(day);
    let (window, est_w) = read_shifted(data, tz, &event.slots, shift)?;
    let (adjust, est_a) = read_shifted(data, tz, adjust, shift)?;
    let daily_kwh = match rank {
        Rank::DailyEnergy => {
            let from = day_start(tz, day).ok_or(Unusable::DstGap)?;
            let to = day.succ_opt().and_then(|d| day_start(tz, d)).ok_or(Unusable::DstGap)?;
            let starts: Vec<_> = event.grid.inside(from, to, tz).iter().map(|s| s.start).collect();
            let (kw, _) = read_at(data, &starts)?;
            Some(kw.iter().sum::<f64>() * event.grid.length_s() as f64 / 3600.0)
        }
        Rank::WindowMean => None,
    };
    let mean_kw = mean(&window).unwrap_or(0.0);
    Ok(Day {
        date: day,
        window,
        adjust,
        estimated: est_w + est_a,
        mean_kw,
        daily_kwh,
        event_day: false,
        counted: false,
    })
}

/// Choose the days of `rule` for `event` (see the module docs).
pub(crate) fn select(event: &Event<'_>, adjust: &[Slot], rule: &LikeDayRule<'_>) -> Result<Selection, BaselineError> {
    let mut candidates = Vec::new();
    let mut excluded = Vec::new();
    let mut event_candidates = Vec::new();
    for back in 1..=rule.lookback_days {
        let day = event.date - Duration::days(back);
        if let Some(reason) = (rule.like)(day) {
            excluded.push(DayExcluded { date: day, reason });
            continue;
        }
        if event.is_event_day(day) {
            excluded.push(DayExcluded {
                date: day,
                reason: Exclusion::EventDay,
            });
            if rule.fill_with_event_days
                && let Ok(d) = read_day(event, adjust, day, rule.rank)
            {
                event_candidates.push(d);
            }
            continue;
        }
        match read_day(event, adjust, day, rule.rank) {
            Ok(d) => candidates.push(d),
            Err(u) => excluded.push(DayExcluded {
                date: day,
                reason: u.into(),
            }),
        }
    }
    let total = candidates.len();
    let mut pool = candidates.into_iter();
    let mut taken = 0;
    let mut days: Vec<Day> = Vec::new();
    let mut low = Vec::new();
    loop {
        while days.len() < rule.wanted {
            let Some(d) = pool.next() else { break };
            taken += 1;
            days.push(d);
        }
        let Some(share) = rule.low_usage_share else { break };
        let Some(m) = mean(&days.iter().map(|d| d.mean_kw).collect::<Vec<_>>()) else {
            break;
        };
        let before = days.len();
        days.retain(|d| {
            let is_low = d.mean_kw < share * m;
            if is_low {
                low.push(DayExcluded {
                    date: d.date,
                    reason: Exclusion::LowUsage,
                });
            }
            !is_low
        });
        if days.len() == before {
            break;
        }
    }
    let mut notes = Vec::new();
    if days.len() < rule.minimum && rule.fill_with_event_days && !event_candidates.is_empty() {
        let short = rule.minimum - days.len();
        event_candidates.sort_by(|a, b| b.mean_kw.total_cmp(&a.mean_kw));
        let fill: Vec<Day> = event_candidates.into_iter().take(short).collect();
        notes.push(format!(
            "only {} non-event {} days in the {} days before the event: {} event day(s) taken in, \
             highest load first, to reach {}",
            days.len(),
            rule.like_name,
            rule.lookback_days,
            fill.len(),
            rule.minimum
        ));
        for mut d in fill {
            excluded.retain(|e| e.date != d.date);
            d.event_day = true;
            days.push(d);
        }
        days.sort_by_key(|d| std::cmp::Reverse(d.date));
    }
    excluded.extend(low);
    if days.len() < rule.minimum {
        excluded.extend(too_old(event, adjust, rule, rule.minimum - days.len()));
        excluded.sort_by_key(|e| std::cmp::Reverse(e.date));
        return Err(BaselineError::TooFewDays {
            like: rule.like_name,
            found: days.len(),
            needed: rule.minimum,
            lookback_days: rule.lookback_days,
            days_excluded: excluded,
        });
    }
    // Only the days walked to reach the ones used are reported, unless every one was needed.
    if taken < total
        && let Some(oldest) = days.iter().map(|d| d.date).min()
    {
        excluded.retain(|e| e.date >= oldest || e.reason == Exclusion::LowUsage);
    }
    excluded.sort_by_key(|e| std::cmp::Reverse(e.date));
    count(&mut days, rule);
    Ok(Selection { days, excluded, notes })
}

/// Mark the days that count under the rule's selection.
fn count(days: &mut [Day], rule: &LikeDayRule<'_>) {
    let mut order: Vec<usize> = (0..days.len()).collect();
    order.sort_by(|&a, &b| days[b].rank_key(rule.rank).total_cmp(&days[a].rank_key(rule.rank)));
    let n = days.len();
    let counted: Vec<usize> = match rule.select {
        Select::All => order,
        Select::Highest(x) => order.into_iter().take(x).collect(),
        Select::Middle { high, low } if n > high + low => order.into_iter().skip(high).take(n - high - low).collect(),
        Select::Middle { .. } => order,
    };
    for i in counted {
        days[i].counted = true;
    }
}

/// Like days with data beyond the look-back, up to `wanted` of them: shown when too few were
/// found within it, so a reader sees the data was there but too old for the rule.
fn too_old(event: &Event<'_>, adjust: &[Slot], rule: &LikeDayRule<'_>, wanted: usize) -> Vec<DayExcluded> {
    let Some(first) = event.input.data.intervals().first() else {
        return Vec::new();
    };
    let oldest = local_date(first.start, event.tz());
    let mut out = Vec::new();
    let mut back = rule.lookback_days + 1;
    while out.len() < wanted && back <= rule.lookback_days + 400 {
        let day = event.date - Duration::days(back);
        if day < oldest {
            break;
        }
        if (rule.like)(day).is_none() && !event.is_event_day(day) && read_day(event, adjust, day, rule.rank).is_ok() {
            out.push(DayExcluded {
                date: day,
                reason: Exclusion::TooOld,
            });
        }
        back += 1;
    }
    out
}

/// The `Detail` of a selection.
pub(crate) fn detail(selection: &Selection, rule: &LikeDayRule<'_>) -> Detail {
    Detail::LikeDays {
        counted: selection.counted(),
        wanted: rule.wanted,
        lookback_days: rule.lookback_days,
        ranked_by: rule.ranked_by(),
    }
}

/// The report of a like-day method: `rule`'s days, averaged interval by interval, with
/// `adjust` applied.
pub(crate) fn like_day_report(
    event: &Event<'_>,
    method: MethodId,
    text: String,
    day_type: DayType,
    rule: &LikeDayRule<'_>,
    adjust: Option<AdjustRule>,
) -> Result<BaselineReport, BaselineError> {
    let adjust_slots = adjust.map(|a| a.slots(event)).unwrap_or_default();
    let selection = select(event, &adjust_slots, rule)?;
    let base = selection.baseline(event.slots.len());
    let adjustment = adjust.map(|a| a.adjust(event, &adjust_slots, selection.adjust_baseline()));
    let mut report = event.report(
        method,
        text,
        detail(&selection, rule),
        |k| base.get(k).copied(),
        |k| base.get(k).map(|b| apply(adjustment.as_ref(), *b)),
    );
    report.day_type = Some(day_type);
    report.days_used = selection.days.iter().map(Day::used).collect();
    report.days_excluded = selection.excluded;
    report.adjustment = adjustment;
    report.notes = selection.notes;
    Ok(report)
}

/// Like days by day type: a weekday event's like days are weekdays that are not holidays; a
/// weekend or holiday event's are weekend days and holidays.
pub(crate) fn same_day_type(
    holidays: &HolidayCalendar,
    event: DayType,
) -> impl Fn(NaiveDate) -> Option<Exclusion> + '_ {
    move |day| match (event, holidays.day_type(day)) {
        (DayType::Weekday, DayType::WeekendOrHoliday) if is_weekend(day) => Some(Exclusion::Weekend),
        (DayType::Weekday, DayType::WeekendOrHoliday) => Some(Exclusion::Holiday),
        (DayType::WeekendOrHoliday, DayType::Weekday) => Some(Exclusion::Weekday),
        _ => None,
    }
}
