//! The methods by name, with the few parameters that differ between sites.
//!
//! A method's rules (day counts, look-backs, adjustment windows, caps) are the program's and
//! are fixed by its version: a change of rule is a new version, so an old report still says
//! which rules made it. What differs between enrolled sites (a firm service level, the meter
//! windows, NYISO's weather-sensitive election, how far back a matching pair may be sought) is
//! a parameter, configured per program.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A method's stable id, as configuration, the CLI and reports write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MethodId {
    /// PJM Economic Load Response CBL.
    #[serde(rename = "pjm_economic")]
    PjmEconomic,
    /// CAISO 10-in-10 with the day-of adjustment.
    #[serde(rename = "caiso_10in10")]
    Caiso10In10,
    /// ERCOT middle 8 of 10 like days.
    #[serde(rename = "ercot_middle_8of10")]
    ErcotMiddle8Of10,
    /// ERCOT matching day pair.
    #[serde(rename = "ercot_matching_day_pair")]
    ErcotMatchingDayPair,
    /// NYISO average-day CBL.
    #[serde(rename = "nyiso_cbl")]
    NyisoCbl,
    /// A firm service level (drop-to): no baseline.
    #[serde(rename = "firm_service_level")]
    FirmServiceLevel,
    /// The meter before (and after) the event.
    #[serde(rename = "meter_before_after")]
    MeterBeforeAfter,
}

impl MethodId {
    /// Every method.
    pub const ALL: [MethodId; 7] = [
        MethodId::PjmEconomic,
        MethodId::Caiso10In10,
        MethodId::ErcotMiddle8Of10,
        MethodId::ErcotMatchingDayPair,
        MethodId::NyisoCbl,
        MethodId::FirmServiceLevel,
        MethodId::MeterBeforeAfter,
    ];

    /// Its id.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            MethodId::PjmEconomic => "pjm_economic",
            MethodId::Caiso10In10 => "caiso_10in10",
            MethodId::ErcotMiddle8Of10 => "ercot_middle_8of10",
            MethodId::ErcotMatchingDayPair => "ercot_matching_day_pair",
            MethodId::NyisoCbl => "nyiso_cbl",
            MethodId::FirmServiceLevel => "firm_service_level",
            MethodId::MeterBeforeAfter => "meter_before_after",
        }
    }

    /// The version of its rules implemented here. Raised whenever a rule changes, so that a
    /// report names the rules that made it.
    #[must_use]
    pub fn version(self) -> u32 {
        1
    }
}

impl fmt::Display for MethodId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An id no method has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown baseline method {:?}; the methods are {}", .0, MethodId::ALL.map(MethodId::as_str).join(", "))]
pub struct UnknownMethod(pub String);

impl FromStr for MethodId {
    type Err = UnknownMethod;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MethodId::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownMethod(s.to_string()))
    }
}

/// How far back `ercot_matching_day_pair` looks by default: the 60 days the gateway's own
/// interval store keeps at least.
pub const MATCHING_PAIR_LOOKBACK_DAYS: u32 = 60;

/// `meter_before_after`'s default windows, s: the audit's 15 minutes either side.
pub const BEFORE_AFTER_WINDOW_S: u32 = 900;

/// A method with its site's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", deny_unknown_fields)]
pub enum Method {
    /// PJM Economic CBL (see [`super::pjm`]).
    #[serde(rename = "pjm_economic")]
    PjmEconomic,
    /// CAISO 10-in-10 (see [`super::caiso`]).
    #[serde(rename = "caiso_10in10")]
    Caiso10In10,
    /// ERCOT middle 8 of 10 (see [`super::ercot`]).
    #[serde(rename = "ercot_middle_8of10")]
    ErcotMiddle8Of10,
    /// ERCOT matching day pair (see [`super::matching_pair`]).
    #[serde(rename = "ercot_matching_day_pair")]
    ErcotMatchingDayPair {
        /// Calendar days searched back for a pair.
        #[serde(default = "matching_pair_lookback")]
        lookback_days: u32,
    },
    /// NYISO CBL (see [`super::nyiso`]).
    #[serde(rename = "nyiso_cbl")]
    NyisoCbl {
        /// The weather-sensitive adjustment (the default); `false` for a resource enrolled
        /// without it.
        #[serde(default = "yes")]
        weather_sensitive: bool,
    },
    /// A firm service level (see [`super::fsl`]).
    #[serde(rename = "firm_service_level")]
    FirmServiceLevel {
        /// The level, kW.
        level_kw: f64,
    },
    /// Meter before/after (see [`super::before_after`]).
    #[serde(rename = "meter_before_after")]
    MeterBeforeAfter {
        /// The window before the event, s.
        #[serde(default = "before_after_window")]
        before_s: u32,
        /// The window after it, s (0: before only).
        #[serde(default = "before_after_window")]
        after_s: u32,
    },
}

fn matching_pair_lookback() -> u32 {
    MATCHING_PAIR_LOOKBACK_DAYS
}

fn before_after_window() -> u32 {
    BEFORE_AFTER_WINDOW_S
}

fn yes() -> bool {
    true
}

impl Method {
    /// Its id.
    #[must_use]
    pub fn id(&self) -> MethodId {
        match self {
            Method::PjmEconomic => MethodId::PjmEconomic,
            Method::Caiso10In10 => MethodId::Caiso10In10,
            Method::ErcotMiddle8Of10 => MethodId::ErcotMiddle8Of10,
            Method::ErcotMatchingDayPair { .. } => MethodId::ErcotMatchingDayPair,
            Method::NyisoCbl { .. } => MethodId::NyisoCbl,
            Method::FirmServiceLevel { .. } => MethodId::FirmServiceLevel,
            Method::MeterBeforeAfter { .. } => MethodId::MeterBeforeAfter,
        }
    }

    /// Its rules' version.
    #[must_use]
    pub fn version(&self) -> u32 {
        self.id().version()
    }

    /// The window before an event starting at `start` whose metered load the method reads on
    /// the event day, UTC: its day-of adjustment window, or the meter-before window. Load
    /// lowered in it lowers the baseline and so the payment (pre-curtailment), so the gateway's
    /// probes and plans keep out of it. `None` for methods that read no event-day load before
    /// the event (`firm_service_level`). For `ercot_matching_day_pair` this is the adjustment
    /// window only: its match also reads the day before and the morning, which are too long to
    /// keep free and matter through the whole day's shape rather than its level.
    #[must_use]
    pub fn event_day_window(&self, start: DateTime<Utc>) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let rule = match self {
            Method::PjmEconomic => super::pjm::ADJUSTMENT,
            Method::Caiso10In10 => super::caiso::ADJUSTMENT,
            Method::ErcotMiddle8Of10 | Method::ErcotMatchingDayPair { .. } => super::ercot::ADJUSTMENT,
            Method::NyisoCbl {
                weather_sensitive: true,
            } => super::nyiso::WEATHER_SENSITIVE,
            Method::NyisoCbl {
                weather_sensitive: false,
            }
            | Method::FirmServiceLevel { .. } => return None,
            Method::MeterBeforeAfter { before_s, .. } => {
                return (*before_s > 0).then(|| (start - Duration::seconds(i64::from(*before_s)), start));
            }
        };
        Some((
            start - Duration::minutes(rule.from_min),
            start - Duration::minutes(rule.to_min),
        ))
    }

    /// The method `id` with its default parameters; `None` for `firm_service_level`, whose
    /// level has no default.
    #[must_use]
    pub fn with_defaults(id: MethodId) -> Option<Method> {
        Some(match id {
            MethodId::PjmEconomic => Method::PjmEconomic,
            MethodId::Caiso10In10 => Method::Caiso10In10,
            MethodId::ErcotMiddle8Of10 => Method::ErcotMiddle8Of10,
            MethodId::ErcotMatchingDayPair => Method::ErcotMatchingDayPair {
                lookback_days: MATCHING_PAIR_LOOKBACK_DAYS,
            },
            MethodId::NyisoCbl => Method::NyisoCbl {
                weather_sensitive: true,
            },
            MethodId::FirmServiceLevel => return None,
            MethodId::MeterBeforeAfter => Method::MeterBeforeAfter {
                before_s: BEFORE_AFTER_WINDOW_S,
                after_s: BEFORE_AFTER_WINDOW_S,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_configuration_reads_parameters() {
        for id in MethodId::ALL {
            assert_eq!(id.as_str().parse::<MethodId>(), Ok(id));
            assert_eq!(serde_json::to_value(id).expect("json"), serde_json::json!(id.as_str()));
        }
        assert!("pjm".parse::<MethodId>().is_err());
        let nyiso: Method = serde_json::from_str(r#"{"method":"nyiso_cbl"}"#).expect("defaults");
        assert_eq!(
            nyiso,
            Method::NyisoCbl {
                weather_sensitive: true
            }
        );
        let fsl: Method = serde_json::from_str(r#"{"method":"firm_service_level","level_kw":500}"#).expect("fsl");
        assert_eq!(fsl.id(), MethodId::FirmServiceLevel);
        assert!(serde_json::from_str::<Method>(r#"{"method":"firm_service_level"}"#).is_err());
        assert!(serde_json::from_str::<Method>(r#"{"method":"nyiso_cbl","weather_sensitve":false}"#).is_err());
        assert!(Method::with_defaults(MethodId::FirmServiceLevel).is_none());
    }

    #[test]
    fn each_method_names_the_event_day_window_it_reads() {
        let start = DateTime::from_timestamp(1_800_000_000, 0).expect("t");
        let h = |n| start - Duration::hours(n);
        assert_eq!(Method::PjmEconomic.event_day_window(start), Some((h(4), h(1))));
        assert_eq!(Method::Caiso10In10.event_day_window(start), Some((h(4), h(1))));
        assert_eq!(Method::ErcotMiddle8Of10.event_day_window(start), Some((h(3), h(1))));
        let nyiso = |weather_sensitive| Method::NyisoCbl { weather_sensitive }.event_day_window(start);
        assert_eq!(nyiso(true), Some((h(4), h(2))));
        assert_eq!(nyiso(false), None);
        assert_eq!(Method::FirmServiceLevel { level_kw: 1.0 }.event_day_window(start), None);
        let mba = Method::MeterBeforeAfter {
            before_s: 900,
            after_s: 900,
        };
        assert_eq!(
            mba.event_day_window(start),
            Some((start - Duration::minutes(15), start))
        );
    }
}
