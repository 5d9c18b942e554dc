//! What a utility's signal asks of the site meter, in protocol-neutral form.
//!
//! Both OpenADR 2.0b signals and 3.x payloads map to [`LoadTarget`] (the tables are in
//! [`crate::oadr2b::signal`] and [`crate::oadr3::mapping`]), so a consumer handles one
//! vocabulary. Values are already scaled by the signal's itemBase / units (W → kW) and
//! range-checked: an out-of-range value is a [`SignalRefusal`], never a target.

use chrono::{DateTime, Utc};

/// A meter-level request, in the form the utility expressed it.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadTarget {
    /// Keep the meter at or below `kw` (2.0b LOAD_DISPATCH setpoint; 3.x IMPORT_CAPACITY_LIMIT,
    /// DISPATCH_SETPOINT).
    Ceiling { kw: f64 },
    /// Reduce the meter by `kw` from the operating point at event start (2.0b LOAD_DISPATCH
    /// delta; 3.x DISPATCH_SETPOINT_RELATIVE). Always positive.
    Reduction { kw: f64 },
    /// Reduce the meter by `percent` % of the operating point (2.0b
    /// x-loadControlPercentOffset; 3.x CONTROL_LEVEL_OFFSET_PERCENT). In (0, 100].
    PercentReduction { percent: f64 },
    /// Keep the meter at or below `fraction` of the facility maximum (x-loadControlCapacity).
    /// In [0, 1].
    CapacityFraction { fraction: f64 },
    /// An abstract level 0..=3 (SIMPLE), mapped by a site table.
    Level { level: u8 },
    /// Steps below normal (x-loadControlLevelOffset, CONTROL_LEVEL_OFFSET), mapped by a site
    /// table. Positive = less load: 2.0b's wire value (negative = less load) is negated; 3.1's
    /// CONTROL_LEVEL_OFFSET already counts positive = less load.
    LevelOffset { steps: u32 },
    /// A price; acted on only when the site has a price table.
    Price {
        value: f64,
        /// Currency/unit as given (e.g. `USD`, `USD/KWH`), when given.
        unit: Option<String>,
    },
    /// "Normal operation" for this interval (delta 0, offset 0, level 0, capacity 1.0): no
    /// constraint, but the event is still ours and acknowledged.
    Normal,
}

/// One span of a target over time.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetInterval {
    /// Start of the span (before any randomization the receiver applies).
    pub start: DateTime<Utc>,
    /// Length in seconds; `None` = until the event ends (open-ended).
    pub duration_s: Option<u64>,
    /// What is asked during the span.
    pub target: LoadTarget,
}

/// Why a signal cannot become a target. Carries the response code a VEN answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignalRefusal {
    /// The signal name/type (or 3.x payload type) is not a load signal this VEN acts on
    /// (2.0b response code 460).
    #[error("signal {name}/{kind} is not supported")]
    Unsupported { name: String, kind: String },
    /// A value outside the range the signal type allows (2.0b response code 454).
    #[error("{what}: value {value} is out of range: {expected}")]
    OutOfRange {
        what: String,
        value: String,
        expected: String,
    },
    /// Units that cannot be turned into kW (2.0b response code 454).
    #[error("{what}: units {units:?} cannot be converted to kW")]
    Units { what: String, units: String },
}

impl SignalRefusal {
    /// The OpenADR 2.0b `eventResponse` code for this refusal.
    pub fn response_code(&self) -> u16 {
        match self {
            SignalRefusal::Unsupported { .. } => 460,
            SignalRefusal::OutOfRange { .. } | SignalRefusal::Units { .. } => 454,
        }
    }
}
