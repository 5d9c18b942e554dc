//! Estimates shared by the jobs of one preparation that know the same thing.
//!
//! Estimating a job from a PFI costs about a microsecond (the family member is found by a
//! binary search over PFIs computed on the job's grid, seven times for a prediction's
//! quadrature and its plausible shapes), and a measured curve's hull a sort. What comes out
//! depends only on what is known (the PFI or prediction and its grid, or the measured points)
//! and the job's per-GPU uncapped draw, not on which job it is: it is scaled to the job
//! afterwards. Fleets where many jobs know the same thing (the fleet experiment draws one
//! prediction per job group and workload, so its 100 jobs carry at most 25 distinct estimates,
//! and its oracle sees one true curve per group) pay for each distinct piece of knowledge once.
//! The key is the exact bit pattern of every input, so a hit returns exactly what a fresh
//! estimate would: a preparation is bit-identical with or without the memo.
//!
//! A fleet where every job knows something different (a gateway's, whose predictions come from
//! each job's own telemetry) gains nothing from it, and would keep one estimate per job (about
//! 1.4 KiB each, 140 MB at 100 k jobs) and build and hash a key per job, for nothing. So the
//! memo holds at most [`MEMO_CAPACITY`] estimates; when it is full it starts afresh if at least
//! half its look-ups were hits, and otherwise switches itself off for the rest of the
//! preparation.

use crate::curve::ConcaveHull;
use crate::estimate::{NormalisedCurve, PlausibleShape};
use crate::pfi::CapGrid;
use crate::units::WattsPerGpu;
use std::collections::HashMap;
use std::sync::Arc;

use super::super::types::Elasticity;

/// What a job's knowledge yields before it is scaled to the job.
#[derive(Debug, Clone, Default)]
pub(super) struct Estimate {
    /// A measured curve's concave hull, in the job's own units.
    pub measured_hull: Option<ConcaveHull>,
    /// The estimated curve in relative power and throughput.
    pub shape: Option<NormalisedCurve>,
    /// The shapes the hedge guards against (empty when it guards none).
    pub plausible: Vec<PlausibleShape>,
    /// A noisy measured curve's error, which the hedge guards (`None` for any other knowledge).
    pub noise: Option<Arc<MeasuredNoise>>,
}

/// The error left in a noisy measured curve's estimate: its posterior standard error at each of
/// its points, in relative power and throughput (the last point is the uncapped one, exact).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MeasuredNoise {
    /// Relative power of each point, increasing, ending at 1.
    pub xs: Vec<f64>,
    /// Standard error of the relative throughput there.
    pub sd: Vec<f64>,
}

/// The most estimates a memo holds before it starts afresh.
pub(super) const MEMO_CAPACITY: usize = 256;

/// One preparation's estimates, by the bits of what produced them.
#[derive(Debug, Default)]
pub(super) struct EstimateMemo {
    by_knowledge: HashMap<Vec<u64>, Estimate>,
    /// Look-ups and hits since the memo last started afresh.
    lookups: usize,
    hits: usize,
    /// Set once the fleet has shown that its jobs rarely share knowledge.
    off: bool,
    /// Where an estimate lives while the memo is off.
    unshared: Estimate,
}

impl EstimateMemo {
    /// A memo that never shares: every job estimated afresh (to check that sharing changes
    /// nothing).
    #[cfg(test)]
    pub fn unshared() -> Self {
        Self {
            off: true,
            ..Self::default()
        }
    }

    /// The estimate for `elasticity` on a job drawing `per_gpu` uncapped (its default PFI grid
    /// being `default_grid`), computed by `estimate` the first time this knowledge is seen.
    /// Unknown elasticity yields nothing to estimate and is not stored.
    pub fn get_or_estimate(
        &mut self,
        elasticity: &Elasticity,
        per_gpu: WattsPerGpu,
        default_grid: impl FnOnce() -> CapGrid,
        estimate: impl FnOnce() -> Estimate,
    ) -> &Estimate {
        if self.off {
            self.unshared = estimate();
            return &self.unshared;
        }
        let key = knowledge_key(elasticity, per_gpu, default_grid);
        self.lookups += 1;
        if self.by_knowledge.contains_key(&key) {
            self.hits += 1;
        } else if self.by_knowledge.len() >= MEMO_CAPACITY {
            self.by_knowledge.clear();
            if 2 * self.hits < self.lookups {
                self.off = true;
                self.unshared = estimate();
                return &self.unshared;
            }
            (self.lookups, self.hits) = (1, 0);
        }
        self.by_knowledge.entry(key).or_insert_with(estimate)
    }
}

/// Every input of an estimate, as bits: a tag, the per-GPU draw, then the knowledge.
fn knowledge_key(elasticity: &Elasticity, per_gpu: WattsPerGpu, default_grid: impl FnOnce() -> CapGrid) -> Vec<u64> {
    let grid_bits = |grid: &CapGrid, key: &mut Vec<u64>| {
        key.push(grid.caps().len() as u64);
        key.extend(grid.caps().iter().map(|c| c.value().to_bits()));
    };
    let mut key = Vec::with_capacity(12);
    match elasticity {
        Elasticity::Unknown => key.push(0),
        Elasticity::Measured { curve, tokens_sd } => {
            // The estimate depends on the points and their errors alone.
            key.push(1);
            key.push(u64::from(curve.gpus()));
            key.extend(measured_key(curve, tokens_sd));
        }
        Elasticity::Pfi { value, grid } => {
            key.extend([2, per_gpu.value().to_bits(), value.to_bits()]);
            grid_bits(grid, &mut key);
        }
        Elasticity::PredictedPfi { mean, sd, grid } => {
            key.extend([3, per_gpu.value().to_bits(), mean.to_bits(), sd.to_bits()]);
            match grid {
                Some(grid) => grid_bits(grid, &mut key),
                None => grid_bits(&default_grid(), &mut key),
            }
        }
    }
    key
}

/// The bits of a measured curve's points and their errors: jobs whose curves have the same key
/// were measured as one (a profile shared by jobs of one training configuration), so their
/// curves' errors are one error too.
pub(super) fn measured_key<'a>(
    curve: &'a crate::curve::PowerCurve,
    tokens_sd: &'a [f64],
) -> impl Iterator<Item = u64> + 'a {
    curve
        .points()
        .iter()
        .flat_map(|p| [p.cap.value(), p.power.value(), p.tokens.value()].map(f64::to_bits))
        .chain(std::iter::once(tokens_sd.len() as u64))
        .chain(tokens_sd.iter().map(|s| s.to_bits()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curve::{CurvePoint, PowerCurve};
    use crate::units::{TokensPerSec, Watts};

    fn predicted(mean: f64) -> Elasticity {
        Elasticity::PredictedPfi {
            mean,
            sd: 0.241,
            grid: None,
        }
    }

    #[test]
    fn the_same_knowledge_is_estimated_once_and_different_knowledge_apart() {
        let mut memo = EstimateMemo::default();
        let mut calls = 0;
        let per_gpu = WattsPerGpu(650.0);
        for elasticity in [predicted(1.5), predicted(1.5), predicted(1.6)] {
            memo.get_or_estimate(&elasticity, per_gpu, CapGrid::fine_h200, || {
                calls += 1;
                Estimate::default()
            });
        }
        assert_eq!(calls, 2, "1.5 twice, 1.6 once");
        // The same prediction on a job drawing differently is another estimate.
        memo.get_or_estimate(&predicted(1.5), WattsPerGpu(600.0), CapGrid::fine_h200, || {
            calls += 1;
            Estimate::default()
        });
        assert_eq!(calls, 3);
        // An explicit grid equal to the default one is the same knowledge.
        let explicit = Elasticity::PredictedPfi {
            mean: 1.5,
            sd: 0.241,
            grid: Some(CapGrid::fine_h200()),
        };
        memo.get_or_estimate(&explicit, per_gpu, CapGrid::fine_h200, || {
            calls += 1;
            Estimate::default()
        });
        assert_eq!(calls, 3);
    }

    /// Look up `pfis` in order; how many estimates were computed.
    fn estimates_computed(memo: &mut EstimateMemo, pfis: impl Iterator<Item = f64>) -> usize {
        let mut calls = 0;
        for pfi in pfis {
            let estimate = memo.get_or_estimate(&predicted(pfi), WattsPerGpu(650.0), CapGrid::fine_h200, || {
                calls += 1;
                Estimate {
                    plausible: vec![[pfi; crate::estimate::PLAUSIBLE_KNOTS]],
                    ..Estimate::default()
                }
            });
            // Whatever path it took, the estimate is the one for this knowledge.
            assert_eq!(estimate.plausible[0][0].to_bits(), pfi.to_bits());
            assert!(memo.by_knowledge.len() <= MEMO_CAPACITY);
        }
        calls
    }

    #[test]
    fn a_fleet_of_distinct_knowledge_switches_the_memo_off_once_it_is_full() {
        let mut memo = EstimateMemo::default();
        let n = MEMO_CAPACITY * 3;
        let distinct = (0..n).map(|i| 1.0 + i as f64 * 1e-3);
        assert_eq!(
            estimates_computed(&mut memo, distinct),
            n,
            "every distinct prediction is estimated"
        );
        assert!(memo.off && memo.by_knowledge.is_empty(), "nothing is held for nothing");
        // Off, it estimates every job, repeated knowledge too.
        assert_eq!(estimates_computed(&mut memo, [1.0, 1.0].into_iter()), 2);
    }

    #[test]
    fn a_fleet_of_shared_knowledge_keeps_the_memo_on_past_its_capacity() {
        let mut memo = EstimateMemo::default();
        // Each of 3 × capacity distinct predictions three times in a row: two hits in three.
        let repeated = (0..MEMO_CAPACITY * 3).flat_map(|i| [1.0 + i as f64 * 1e-3; 3]);
        assert_eq!(estimates_computed(&mut memo, repeated), MEMO_CAPACITY * 3);
        assert!(!memo.off);
    }

    #[test]
    fn measured_curves_differing_in_one_point_are_different_knowledge() {
        let point = |cap: f64, tokens: f64| CurvePoint {
            cap: WattsPerGpu(cap),
            power: Watts(cap * 8.0),
            tokens: TokensPerSec(tokens),
        };
        let curve = |t: f64| PowerCurve::new(8, vec![point(200.0, t), point(700.0, 1000.0)]).map(Elasticity::exact);
        let (Ok(a), Ok(b)) = (curve(500.0), curve(501.0)) else {
            panic!("valid test curves");
        };
        let mut memo = EstimateMemo::default();
        let mut calls = 0;
        for elasticity in [&a, &b, &a] {
            memo.get_or_estimate(elasticity, WattsPerGpu(700.0), CapGrid::fine_h200, || {
                calls += 1;
                Estimate::default()
            });
        }
        assert_eq!(calls, 2);
    }
}
