//! Which days are holidays, and so which days a baseline may compare with which.
//!
//! Every program in this module splits days into weekdays and "weekend or holiday" days, but
//! the programs do not agree on the holidays: PJM names the NERC holidays, California's
//! utilities their own time-of-use list, a site may close for a local holiday no list names.
//! So a [`HolidayCalendar`] is data: one or more named sets ([`HolidaySet`]) plus days the
//! operator adds or takes away, and each method is given one. Nothing here reads a file or a
//! clock; the sets are rules computed for any year.

use chrono::{Datelike, NaiveDate, Weekday};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A named list of holidays, computed for any year by its own observance rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HolidaySet {
    /// The NERC holidays (the off-peak days of the NERC peak/off-peak definition, which PJM's
    /// Manual 11 names for its CBL): New Year's Day, Memorial Day, Independence Day, Labor
    /// Day, Thanksgiving and Christmas. One on a Sunday is observed on the Monday after; one
    /// on a Saturday is not moved.
    Nerc,
    /// The United States federal holidays (5 U.S.C. 6103(a)): the NERC six plus Martin Luther
    /// King Jr. Day, Washington's Birthday, Juneteenth (from 2021), Columbus Day and Veterans
    /// Day. One on a Saturday is observed on the Friday before (so New Year's Day can be
    /// observed on 31 December), one on a Sunday on the Monday after (Executive Order 11582).
    UsFederal,
    /// The time-of-use holidays of California's investor-owned utilities as PG&E publishes
    /// them (<https://www.pge.com/tariffs/en/rate-information/tou-holidays.html>): New Year's
    /// Day, Presidents' Day, Memorial Day, Independence Day, Labor Day, Veterans Day,
    /// Thanksgiving and Christmas. One on a Sunday is observed on the Monday after; one on a
    /// Saturday designates no weekday.
    CaliforniaTou,
}

/// Which holidays a set names and how it moves one falling on a weekend.
struct Rules {
    names: &'static [Holiday],
    saturday_to_friday: bool,
}

/// The holidays the sets are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holiday {
    NewYear,
    MlkDay,
    PresidentsDay,
    MemorialDay,
    Juneteenth,
    IndependenceDay,
    LaborDay,
    ColumbusDay,
    VeteransDay,
    Thanksgiving,
    Christmas,
}

impl Holiday {
    /// Its name, as a report writes it.
    fn name(self) -> &'static str {
        match self {
            Holiday::NewYear => "New Year's Day",
            Holiday::MlkDay => "Martin Luther King Jr. Day",
            Holiday::PresidentsDay => "Washington's Birthday",
            Holiday::MemorialDay => "Memorial Day",
            Holiday::Juneteenth => "Juneteenth",
            Holiday::IndependenceDay => "Independence Day",
            Holiday::LaborDay => "Labor Day",
            Holiday::ColumbusDay => "Columbus Day",
            Holiday::VeteransDay => "Veterans Day",
            Holiday::Thanksgiving => "Thanksgiving Day",
            Holiday::Christmas => "Christmas Day",
        }
    }

    /// Its calendar date in `year` before any weekend observance (`None` where the holiday did
    /// not exist that year).
    fn date(self, year: i32) -> Option<NaiveDate> {
        let fixed = |month, day| NaiveDate::from_ymd_opt(year, month, day);
        let nth = |month, weekday, n| NaiveDate::from_weekday_of_month_opt(year, month, weekday, n);
        match self {
            Holiday::NewYear => fixed(1, 1),
            Holiday::MlkDay => nth(1, Weekday::Mon, 3),
            Holiday::PresidentsDay => nth(2, Weekday::Mon, 3),
            Holiday::MemorialDay => (1..=5)
                .rev()
                .find_map(|n| NaiveDate::from_weekday_of_month_opt(year, 5, Weekday::Mon, n)),
            Holiday::Juneteenth => (year >= 2021).then(|| fixed(6, 19)).flatten(),
            Holiday::IndependenceDay => fixed(7, 4),
            Holiday::LaborDay => nth(9, Weekday::Mon, 1),
            Holiday::ColumbusDay => nth(10, Weekday::Mon, 2),
            Holiday::VeteransDay => fixed(11, 11),
            Holiday::Thanksgiving => nth(11, Weekday::Thu, 4),
            Holiday::Christmas => fixed(12, 25),
        }
    }
}

const NERC: &[Holiday] = &[
    Holiday::NewYear,
    Holiday::MemorialDay,
    Holiday::IndependenceDay,
    Holiday::LaborDay,
    Holiday::Thanksgiving,
    Holiday::Christmas,
];

const US_FEDERAL: &[Holiday] = &[
    Holiday::NewYear,
    Holiday::MlkDay,
    Holiday::PresidentsDay,
    Holiday::MemorialDay,
    Holiday::Juneteenth,
    Holiday::IndependenceDay,
    Holiday::LaborDay,
    Holiday::ColumbusDay,
    Holiday::VeteransDay,
    Holiday::Thanksgiving,
    Holiday::Christmas,
];

const CALIFORNIA_TOU: &[Holiday] = &[
    Holiday::NewYear,
    Holiday::PresidentsDay,
    Holiday::MemorialDay,
    Holiday::IndependenceDay,
    Holiday::LaborDay,
    Holiday::VeteransDay,
    Holiday::Thanksgiving,
    Holiday::Christmas,
];

impl HolidaySet {
    /// Its name in configuration and reports.
    #[must_use]
    pub fn id(self) -> &'static str {
        match self {
            HolidaySet::Nerc => "nerc",
            HolidaySet::UsFederal => "us_federal",
            HolidaySet::CaliforniaTou => "california_tou",
        }
    }

    fn rules(self) -> Rules {
        match self {
            HolidaySet::Nerc => Rules {
                names: NERC,
                saturday_to_friday: false,
            },
            HolidaySet::UsFederal => Rules {
                names: US_FEDERAL,
                saturday_to_friday: true,
            },
            HolidaySet::CaliforniaTou => Rules {
                names: CALIFORNIA_TOU,
                saturday_to_friday: false,
            },
        }
    }

    /// The holiday observed on `day`, by name, if any.
    #[must_use]
    pub fn holiday(self, day: NaiveDate) -> Option<&'static str> {
        let rules = self.rules();
        // A holiday of next year can be observed this year (New Year's Day on a Saturday,
        // observed on 31 December under the federal rule).
        [day.year(), day.year() + 1].into_iter().find_map(|year| {
            rules.names.iter().find_map(|h| {
                let date = h.date(year)?;
                let observed = match date.weekday() {
                    Weekday::Sun => date.succ_opt()?,
                    Weekday::Sat if rules.saturday_to_friday => date.pred_opt()?,
                    _ => date,
                };
                (observed == day).then(|| h.name())
            })
        })
    }
}

/// The holidays a program's baseline treats as holidays: named sets, plus the operator's own
/// days, less the days the operator takes out (a set's holiday the program does not observe).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HolidayCalendar {
    /// The named sets, all of whose holidays count.
    #[serde(default)]
    pub sets: Vec<HolidaySet>,
    /// Further holidays (a local holiday, a site shutdown the program accepts as one).
    #[serde(default)]
    pub extra_days: BTreeSet<NaiveDate>,
    /// Days a set names that are not holidays for this program.
    #[serde(default)]
    pub removed_days: BTreeSet<NaiveDate>,
}

impl Default for HolidayCalendar {
    /// The NERC holidays, as PJM's CBL (and the audit before this calendar existed) uses.
    fn default() -> Self {
        Self::of(&[HolidaySet::Nerc])
    }
}

impl HolidayCalendar {
    /// A calendar of the given sets, without additions or removals.
    #[must_use]
    pub fn of(sets: &[HolidaySet]) -> Self {
        Self {
            sets: sets.to_vec(),
            extra_days: BTreeSet::new(),
            removed_days: BTreeSet::new(),
        }
    }

    /// A calendar with no holidays at all (only weekends differ from weekdays).
    #[must_use]
    pub fn none() -> Self {
        Self::of(&[])
    }

    /// This calendar with `day` added as a holiday.
    #[must_use]
    pub fn with_day(mut self, day: NaiveDate) -> Self {
        self.removed_days.remove(&day);
        self.extra_days.insert(day);
        self
    }

    /// This calendar with `day` no longer a holiday.
    #[must_use]
    pub fn without_day(mut self, day: NaiveDate) -> Self {
        self.extra_days.remove(&day);
        self.removed_days.insert(day);
        self
    }

    /// Whether `day` is a holiday here.
    #[must_use]
    pub fn is_holiday(&self, day: NaiveDate) -> bool {
        if self.removed_days.contains(&day) {
            return false;
        }
        self.extra_days.contains(&day) || self.sets.iter().any(|s| s.holiday(day).is_some())
    }

    /// The type of a local calendar day under this calendar.
    #[must_use]
    pub fn day_type(&self, day: NaiveDate) -> DayType {
        if is_weekend(day) || self.is_holiday(day) {
            DayType::WeekendOrHoliday
        } else {
            DayType::Weekday
        }
    }
}

/// Saturday or Sunday.
#[must_use]
pub fn is_weekend(day: NaiveDate) -> bool {
    matches!(day.weekday(), Weekday::Sat | Weekday::Sun)
}

/// Whether `day` is a NERC holiday (observed date).
#[must_use]
pub fn is_nerc_holiday(day: NaiveDate) -> bool {
    HolidaySet::Nerc.holiday(day).is_some()
}

/// Which rule the event's day takes: the like days of a weekday are weekdays, those of a
/// weekend day or holiday are weekend days and holidays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DayType {
    /// Monday to Friday, not a holiday.
    Weekday,
    /// Saturday, Sunday or a holiday.
    WeekendOrHoliday,
}

impl DayType {
    /// `(x, y)` of PJM's Economic CBL: the mean of the `x` highest of `y` days.
    #[must_use]
    pub fn x_of_y(self) -> (usize, usize) {
        match self {
            DayType::Weekday => (4, 5),
            DayType::WeekendOrHoliday => (2, 3),
        }
    }

    /// The type of a local calendar day with the NERC holidays (PJM's).
    #[must_use]
    pub fn of(day: NaiveDate) -> DayType {
        HolidayCalendar::default().day_type(day)
    }

    /// Its name in reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DayType::Weekday => "weekday",
            DayType::WeekendOrHoliday => "weekend or holiday",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(y: i32, m: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, day).expect("date")
    }

    #[test]
    fn the_sets_move_weekend_holidays_by_their_own_rules() {
        // New Year's Day 2022 was a Saturday: federal observance on Friday 31 Dec 2021, NERC
        // and California's list not moved.
        assert_eq!(HolidaySet::UsFederal.holiday(d(2021, 12, 31)), Some("New Year's Day"));
        assert!(HolidaySet::Nerc.holiday(d(2021, 12, 31)).is_none());
        assert!(HolidaySet::CaliforniaTou.holiday(d(2021, 12, 31)).is_none());
        // Juneteenth 2022 was a Sunday: observed Monday 20 June; not before 2021.
        assert_eq!(HolidaySet::UsFederal.holiday(d(2022, 6, 20)), Some("Juneteenth"));
        assert!(HolidaySet::UsFederal.holiday(d(2020, 6, 19)).is_none());
        // Veterans Day: federal and California, not NERC.
        assert!(HolidaySet::CaliforniaTou.holiday(d(2026, 11, 11)).is_some());
        assert!(HolidaySet::Nerc.holiday(d(2026, 11, 11)).is_none());
        assert_eq!(
            HolidaySet::CaliforniaTou.holiday(d(2026, 2, 16)),
            Some("Washington's Birthday")
        );
    }

    #[test]
    fn the_operator_adds_and_removes_days() {
        let cal = HolidayCalendar::default()
            .with_day(d(2026, 11, 27))
            .without_day(d(2026, 11, 26));
        assert!(cal.is_holiday(d(2026, 11, 27)));
        assert!(!cal.is_holiday(d(2026, 11, 26)));
        assert_eq!(cal.day_type(d(2026, 11, 26)), DayType::Weekday);
        assert_eq!(cal.day_type(d(2026, 11, 28)), DayType::WeekendOrHoliday);
        assert!(!HolidayCalendar::none().is_holiday(d(2026, 12, 25)));
    }
}
