//! The crate's own interval type, shared by both formats and both directions.
//!
//! A [`Reading`] is what a utility's meter data says of one interval, in units that need no
//! further context: the start in UTC, the length in seconds, and the figure in watt-hours (the
//! interval's energy) or watts (its mean demand), after ESPI's power-of-ten multiplier. The
//! gateway converts these to its own `Interval` (interval-ending, mean kW); keeping this crate's
//! type separate is what lets the adapter be used alone (ARCHITECTURE.md: adapters import no
//! workspace crate).

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// What a reading's figure measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Energy over the interval, Wh (ESPI `uom` 72; CSV `kwh`).
    Wh,
    /// Mean demand over the interval, W (ESPI `uom` 38; CSV `kw`).
    W,
}

impl Unit {
    /// The unit's name in messages.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Wh => "Wh",
            Unit::W => "W",
        }
    }
}

/// How a reading's figure was obtained, in the three classes a settlement counts (the ESPI codes
/// behind each are in [`crate::quality`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quality {
    /// A meter's reading (validated or raw).
    Measured,
    /// Estimated, edited, derived, projected or questionable: usable, and said to be.
    Estimated,
    /// No figure: the interval is present only to say so. [`Reading::value`] is `None`.
    Missing,
}

impl Quality {
    /// The name used in the CSV and in messages.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Quality::Measured => "measured",
            Quality::Estimated => "estimated",
            Quality::Missing => "missing",
        }
    }

    /// Parses the CSV name (exact, lower case).
    #[must_use]
    pub fn from_name(s: &str) -> Option<Quality> {
        match s {
            "measured" => Some(Quality::Measured),
            "estimated" => Some(Quality::Estimated),
            "missing" => Some(Quality::Missing),
            _ => None,
        }
    }
}

/// One interval of meter data.
///
/// Invariants of every reading an import returns (and every reading an export accepts):
/// `value` is `None` exactly when `quality` is [`Quality::Missing`]; a value is finite and not
/// negative; `duration_s > 0`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// Start of the interval, UTC.
    pub start: DateTime<Utc>,
    /// Length, s.
    pub duration_s: u32,
    /// The figure in [`Reading::unit`], after the multiplier; `None` when missing.
    pub value: Option<f64>,
    /// What the figure measures.
    pub unit: Unit,
    /// How it was obtained.
    pub quality: Quality,
    /// The CSV row's `source` label, when it has one (shared between rows with the same label,
    /// so a year of rows costs one string). Green Button readings have none: the file is the
    /// source.
    pub source: Option<Arc<str>>,
}

impl Reading {
    /// End of the interval, UTC (the label a utility gives it: interval-ending).
    #[must_use]
    pub fn end(&self) -> DateTime<Utc> {
        self.start + Duration::seconds(i64::from(self.duration_s))
    }

    /// Mean demand over the interval, W, when known.
    #[must_use]
    pub fn mean_w(&self) -> Option<f64> {
        let v = self.value?;
        Some(match self.unit {
            Unit::W => v,
            Unit::Wh => v * 3600.0 / f64::from(self.duration_s),
        })
    }

    /// Energy over the interval, Wh, when known.
    #[must_use]
    pub fn energy_wh(&self) -> Option<f64> {
        let v = self.value?;
        Some(match self.unit {
            Unit::Wh => v,
            Unit::W => v * f64::from(self.duration_s) / 3600.0,
        })
    }
}
