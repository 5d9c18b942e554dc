//! The closed-loop trim law: how far the GPU budget moves when the meter disagrees with the
//! facility model.
//!
//! The open-loop budget is conservative by design (with the default parameters it over-delivers
//! by about a third, BENCHMARKS.md), and the facility model can also be wrong the other way. Once a dispatch
//! has settled, the loop compares the meter with the ceiling:
//!
//! - meter above the ceiling at all: lower the budget by `gain` × the excess, 1 W of GPU per W
//!   of meter (overheads only make the real drop larger, so this never undershoots the fix);
//! - meter below the ceiling by more than the margin (meter error + noise + deadband): give
//!   back `gain` × the headroom beyond the margin, converted to GPU watts with the largest
//!   plausible overhead multiplier, so that a credit never overshoots the ceiling.
//!
//! The trim is bounded: at most `max_trim_fraction` of the open-loop budget down, and never more
//! credit than would lift the budget above the jobs' uncapped draw.

use super::config::ControlConfig;
use crate::facility::FacilityParams;
use serde::{Deserialize, Serialize};

/// What the law is applied to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrimInput {
    /// The meter reading, kW.
    pub meter_kw: f64,
    /// The ceiling the plan in force serves, kW.
    pub ceiling_kw: f64,
    /// The plan's open-loop budget (before trim and fixed load), W.
    pub base_budget_w: f64,
    /// The jobs' uncapped draw in that plan, W.
    pub uncapped_w: f64,
    /// The trim in force, W (positive: budget lowered).
    pub trim_w: f64,
}

/// Which way the trim moved, and why, for the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrimDirection {
    /// The meter stayed above the ceiling: the budget was lowered.
    Lower,
    /// The meter was under the ceiling by more than the margin: the budget was raised.
    Raise,
}

/// A change of the trim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrimChange {
    /// The new trim, W.
    pub trim_w: f64,
    /// Which way it moved.
    pub direction: TrimDirection,
    /// Meter minus ceiling, kW (negative: headroom).
    pub excess_kw: f64,
    /// The margin under the ceiling inside which nothing is given back, kW.
    pub margin_kw: f64,
    /// The lowest the trim may go (most credit), W (negative or zero).
    pub max_credit_w: f64,
    /// The highest it may go, W.
    pub max_trim_w: f64,
}

/// Steps smaller than this are not worth a record or a dispatch, W.
const MIN_STEP_W: f64 = 1.0;

/// The next trim, or `None` when it should stay where it is.
#[must_use]
pub fn next_trim(input: &TrimInput, control: &ControlConfig, facility: &FacilityParams) -> Option<TrimChange> {
    let margin_kw = control.deadband_kw + facility.meter_err_kw + facility.noise_kw;
    let worst_multiplier = (1.0 + facility.k_cool.hi) / (facility.eta_psu.average.lo * facility.eta_dist.average.lo);
    let excess_kw = input.meter_kw - input.ceiling_kw;
    let max_trim_w = control.max_trim_fraction * input.base_budget_w;
    let max_credit_w = (input.uncapped_w - input.base_budget_w).max(0.0);
    let old = input.trim_w;
    let (new, direction) = if excess_kw > 0.0 {
        (
            (old + control.gain * excess_kw * 1000.0).min(max_trim_w),
            TrimDirection::Lower,
        )
    } else if -excess_kw > margin_kw {
        (
            (old - control.gain * (-excess_kw - margin_kw) * 1000.0 / worst_multiplier).max(-max_credit_w),
            TrimDirection::Raise,
        )
    } else {
        return None;
    };
    if !new.is_finite() || (new - old).abs() < MIN_STEP_W {
        return None;
    }
    Some(TrimChange {
        trim_w: new,
        direction,
        excess_kw,
        margin_kw,
        max_credit_w: -max_credit_w,
        max_trim_w,
    })
}

/// Anti-windup when the plan is recomputed: under the same ceiling and binding event, the
/// closed loop owns the budget, so the trim absorbs a move of the open-loop budget (the cooling
/// lag passing) instead of letting it add to what the loop already learned. Under a new
/// ceiling, a learned credit could overshoot (a rising recovery step would exceed it), so it is
/// dropped and relearned; a learned cut is kept (it only over-delivers).
#[must_use]
pub fn carry_trim(trim_w: f64, same_ceiling: bool, previous_base_w: f64, new_base_w: f64) -> f64 {
    if same_ceiling {
        trim_w + (new_base_w - previous_base_w)
    } else if trim_w < 0.0 {
        0.0
    } else {
        trim_w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(meter_kw: f64, trim_w: f64) -> TrimInput {
        TrimInput {
            meter_kw,
            ceiling_kw: 100.0,
            base_budget_w: 50_000.0,
            uncapped_w: 80_000.0,
            trim_w,
        }
    }

    /// A small site: the default parameters describe 1,000 nodes, whose meter error and
    /// noise alone exceed these test readings.
    fn params() -> (ControlConfig, FacilityParams) {
        let f = FacilityParams {
            meter_err_kw: 0.5,
            noise_kw: 0.5,
            ..FacilityParams::default()
        };
        (ControlConfig::default(), f)
    }

    #[test]
    fn over_the_ceiling_lowers_the_budget_by_gain_times_excess() {
        let (c, f) = params();
        let change = next_trim(&input(102.0, 0.0), &c, &f).expect("a change");
        assert_eq!(change.direction, TrimDirection::Lower);
        assert!((change.trim_w - c.gain * 2_000.0).abs() < 1e-9);
    }

    #[test]
    fn the_cut_is_bounded_by_max_trim_fraction() {
        let (c, f) = params();
        let change = next_trim(&input(1_000.0, 0.0), &c, &f).expect("a change");
        assert!((change.trim_w - c.max_trim_fraction * 50_000.0).abs() < 1e-9);
    }

    #[test]
    fn inside_the_margin_nothing_moves() {
        let (c, f) = params();
        let margin = c.deadband_kw + f.meter_err_kw + f.noise_kw;
        assert!(next_trim(&input(100.0 - margin * 0.9, 0.0), &c, &f).is_none());
        assert!(next_trim(&input(100.0, 0.0), &c, &f).is_none());
    }

    #[test]
    fn headroom_gives_back_no_more_than_the_uncapped_draw() {
        let (c, f) = params();
        let change = next_trim(&input(0.0, -29_990.0), &c, &f).expect("a change");
        assert_eq!(change.direction, TrimDirection::Raise);
        assert!(change.trim_w >= -30_000.0 - 1e-9, "{}", change.trim_w);
    }

    #[test]
    fn a_credit_is_smaller_than_the_headroom_in_gpu_watts() {
        let (c, f) = params();
        let change = next_trim(&input(80.0, 0.0), &c, &f).expect("a change");
        // 20 kW under the ceiling: the credit, in GPU watts, is below gain × the headroom.
        assert!(-change.trim_w < c.gain * 20_000.0);
    }

    #[test]
    fn anti_windup_absorbs_open_loop_moves_under_the_same_ceiling() {
        assert_eq!(carry_trim(500.0, true, 10_000.0, 10_300.0), 800.0);
        assert_eq!(carry_trim(-500.0, false, 10_000.0, 10_300.0), 0.0);
        assert_eq!(carry_trim(500.0, false, 10_000.0, 10_300.0), 500.0);
    }
}
