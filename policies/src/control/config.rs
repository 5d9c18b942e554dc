//! What the controller is configured with: the site's rules for turning targets into ceilings,
//! the closed loop's constants, and the allocation policy.
//!
//! Plain serde data, read by the gateway from its TOML file (`[site]`, `[control]`,
//! `[gateway] policy`), so that a configuration that parses is one the controller can act on:
//! an unknown policy name is a parse error naming the choices, not a string matched later.

use serde::{Deserialize, Serialize};

/// The allocation policy the gateway plans with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// Curve-aware water-filling on each job's estimated power–throughput curve (the default).
    #[default]
    Flexgate,
    /// Every job loses the same fraction of its uncapped draw (the naive cut).
    Equal,
    /// Curtailment in proportion to (P_max/T_max)·PFI (the paper's rule).
    PfiPaper,
    /// Curtailment in proportion to P_max/T_max (the paper's rule without PFI).
    Efficiency,
}

impl PolicyKind {
    /// The name used in the configuration and the ledger.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Flexgate => "flexgate",
            PolicyKind::Equal => "equal",
            PolicyKind::PfiPaper => "pfi_paper",
            PolicyKind::Efficiency => "efficiency",
        }
    }
}

/// The site behind the meter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SiteConfig {
    /// Facility maximum at the meter (kW), for capacity-fraction targets. 0: derived from the
    /// cluster's uncapped draw at start.
    pub facility_max_kw: f64,
    /// Shed fraction of the baseline per SIMPLE/level signal (levels 1, 2, 3).
    pub level_shed_fraction: [f64; 3],
    /// Seconds of meter history averaged for the meter-before baseline.
    pub baseline_window_s: u64,
    /// Percent of the baseline shed per step of an OpenADR level offset (2.0b
    /// x-loadControlLevelOffset, 3.x CONTROL_LEVEL_OFFSET): −2 steps at 5 % = a 10 % reduction.
    pub level_offset_percent_per_step: f64,
    /// Price policy: at or above `min_per_mwh`, shed `shed_fraction` of the baseline (the
    /// highest matching row applies). Empty (default): price signals are recorded and
    /// acknowledged, never acted on.
    pub price_table: Vec<PriceRow>,
    /// The site's IANA time zone (`America/New_York`): its local calendar days and clock, with
    /// DST, for the customer baseline (`baseline::pjm_economic_cbl`) and the charts.
    pub time_zone: String,
}

/// One row of the site's price policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceRow {
    /// Threshold, currency units per MWh (OpenADR prices per kWh are converted).
    pub min_per_mwh: f64,
    /// Share of the baseline to shed, in [0, 1].
    pub shed_fraction: f64,
}

impl Default for SiteConfig {
    fn default() -> Self {
        Self {
            facility_max_kw: 0.0,
            level_shed_fraction: [0.10, 0.20, 0.30],
            baseline_window_s: 900,
            level_offset_percent_per_step: 5.0,
            price_table: Vec::new(),
            time_zone: "UTC".to_string(),
        }
    }
}

/// Closed-loop trim: when the measured meter stays above the ceiling after `settle_s`, the GPU
/// budget is lowered by an integral term, bounded, and every change is logged with its reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// Seconds after a dispatch before measurements are trusted for trimming.
    pub settle_s: u64,
    /// Integral gain: fraction of the meter excess (converted to GPU watts) added per tick.
    pub gain: f64,
    /// Largest trim as a fraction of the GPU budget.
    pub max_trim_fraction: f64,
    /// Meter excess (kW) below which no trim happens (meter error + noise).
    pub deadband_kw: f64,
}

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            settle_s: 30,
            gain: 0.5,
            max_trim_fraction: 0.25,
            deadband_kw: 0.5,
        }
    }
}
