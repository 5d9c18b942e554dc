//! From a meter ceiling to the GPU-board budget the planner may split.
//!
//! Two bounds are computed and the larger is used:
//!
//! 1. the conservative ceiling inversion of the facility model ([`crate::facility`]):
//!    upper-bound overheads, the pre-event cooling held until its slowest plausible lag;
//! 2. a *measured* reduction from the pre-event operating point: shed = (pre-event meter −
//!    ceiling + meter error + noise) / μ with μ = 1, cooling credited only after its lag. With
//!    the rest of the site steady, the meter then lands at or under the ceiling whatever the
//!    true overheads, and this is usually far less conservative than (1) alone.
//!
//! From that open-loop budget the closed-loop trim is subtracted, and so is the draw of every
//! job the planner cannot count on (its cap unconfirmed, or suspended): those are fixed load at
//! their measured power.

use crate::facility::{CeilingBudget, CoolingState, FacilityModel, PreEvent, ReductionRequirement, Timing};
use crate::units::{Kilowatts, Watts};
use serde::{Deserialize, Serialize};

/// Where the curtailment started from: the operating point the measured bound sheds from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OperatingPoint {
    /// When the curtailment started.
    pub at: chrono::DateTime<chrono::Utc>,
    /// GPU-board power of the jobs then, W.
    pub gpu_w: f64,
    /// The meter then, kW (`None`: no meter reading yet).
    pub meter_kw: Option<f64>,
}

/// The measured bound of a budget: what it sheds from, and the requirement it met.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredReduction {
    /// The meter before the curtailment, kW.
    pub pre_event_meter_kw: f64,
    /// The jobs' GPU-board power before the curtailment, W.
    pub pre_event_gpu_w: f64,
    /// The budget this bound allows, W.
    pub gpu_budget_w: f64,
    /// The facility model's reduction requirement behind it.
    pub requirement: ReductionRequirement,
}

/// The open-loop budget and both bounds behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenLoopBudget {
    /// The ceiling inversion.
    pub facility: CeilingBudget,
    /// The measured bound, when a pre-event meter reading exists.
    pub measured_reduction: Option<MeasuredReduction>,
    /// The larger of the two, W.
    pub base_budget_w: f64,
}

/// Seconds from `from` to `to`, never negative.
fn seconds_since(from: chrono::DateTime<chrono::Utc>, to: chrono::DateTime<chrono::Utc>) -> f64 {
    (to - from).num_milliseconds().max(0) as f64 / 1000.0
}

/// The open-loop budget for `ceiling_kw` at `now`, `nodes` behind the meter, shedding from
/// `start`. Fails only when the facility model refuses the ceiling.
pub fn open_loop_budget(
    facility: &FacilityModel,
    ceiling_kw: f64,
    nodes: u32,
    start: &OperatingPoint,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<OpenLoopBudget, crate::facility::FacilityError> {
    let elapsed = seconds_since(start.at, now);
    let cooling = CoolingState::AfterStep {
        seconds: elapsed,
        pre_event: PreEvent::GpuPower {
            gpu: Watts(start.gpu_w),
        },
    };
    let inversion = facility.ceiling_budget(Kilowatts(ceiling_kw), nodes.max(1), &cooling)?;
    let measured = start.meter_kw.and_then(|pre_meter| {
        let excess = (pre_meter - ceiling_kw).max(0.0);
        let requirement = facility
            .reduction_requirement(Kilowatts(excess), Timing::After { seconds: elapsed })
            .ok()?;
        Some(MeasuredReduction {
            pre_event_meter_kw: pre_meter,
            pre_event_gpu_w: start.gpu_w,
            gpu_budget_w: (start.gpu_w - requirement.gpu_shed.value()).max(0.0),
            requirement,
        })
    });
    let base_budget_w = inversion
        .gpu_budget
        .value()
        .max(measured.as_ref().map_or(0.0, |m| m.gpu_budget_w));
    Ok(OpenLoopBudget {
        facility: inversion,
        measured_reduction: measured,
        base_budget_w,
    })
}

/// The budget the planner splits: the open-loop budget less the trim and the fixed load,
/// never negative.
#[must_use]
pub fn plannable_budget(base_budget_w: f64, trim_w: f64, fixed_load_w: f64) -> f64 {
    let w = base_budget_w - trim_w - fixed_load_w;
    if w.is_finite() { w.max(0.0) } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facility::FacilityParams;

    fn model() -> FacilityModel {
        FacilityModel::new(FacilityParams::default()).expect("default parameters are valid")
    }

    fn at(s: i64) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    #[test]
    fn the_larger_bound_is_used() {
        let facility = model();
        // The default parameters describe 1,000 nodes (`FacilityParams::default`).
        let start = OperatingPoint {
            at: at(0),
            gpu_w: 5_600_000.0,
            meter_kw: Some(9_000.0),
        };
        let b = open_loop_budget(&facility, 8_000.0, 1_000, &start, at(600)).expect("budget");
        let measured = b.measured_reduction.as_ref().map_or(0.0, |m| m.gpu_budget_w);
        assert_eq!(b.base_budget_w, b.facility.gpu_budget.value().max(measured));
        assert!(measured > 0.0 && measured < 5_600_000.0, "{measured}");
    }

    #[test]
    fn without_a_meter_reading_only_the_inversion_counts() {
        let facility = model();
        let start = OperatingPoint {
            at: at(0),
            gpu_w: 5_600_000.0,
            meter_kw: None,
        };
        let b = open_loop_budget(&facility, 8_000.0, 1_000, &start, at(0)).expect("budget");
        assert!(b.measured_reduction.is_none());
        assert_eq!(b.base_budget_w, b.facility.gpu_budget.value());
    }

    #[test]
    fn plannable_budget_is_never_negative_or_nan() {
        assert_eq!(plannable_budget(1_000.0, 200.0, 300.0), 500.0);
        assert_eq!(plannable_budget(1_000.0, 2_000.0, 0.0), 0.0);
        assert_eq!(plannable_budget(f64::NAN, 0.0, 0.0), 0.0);
    }
}
