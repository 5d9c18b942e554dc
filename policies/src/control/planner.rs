//! The allocation policy in force, with the curves it estimated kept between plans.
//!
//! Estimating a job's curve costs about 10 µs (BENCHMARKS.md); allocating on estimated curves is
//! linear and fast. Curves are therefore estimated only for the jobs that started or whose
//! knowledge changed since the last plan, and every plan in between only allocates.

use super::config::PolicyKind;
use crate::alloc::{
    AllocationPolicy, Budget, CapPlan, CurveAware, JobSpec, PlanError, Prepared, Proportional, Weighting,
};
use crate::estimate::CurveFamily;
use crate::units::Watts;
use std::sync::Arc;

/// A policy and, for the curve-aware one, its prepared curves.
pub(crate) enum Planner {
    Curve {
        policy: CurveAware,
        /// Estimated curves for the current job set (re-estimated only when jobs change); boxed
        /// because a preparation is several vectors wide and the proportional policies are one.
        cache: Option<Box<Prepared<'static>>>,
    },
    Proportional(Proportional),
}

impl Planner {
    pub(crate) fn new(kind: PolicyKind, family: Arc<CurveFamily>) -> Self {
        match kind {
            PolicyKind::Equal => Planner::Proportional(Proportional::new(Weighting::Equal, family)),
            PolicyKind::PfiPaper => Planner::Proportional(Proportional::new(Weighting::PfiPaper, family)),
            PolicyKind::Efficiency => Planner::Proportional(Proportional::new(Weighting::Efficiency, family)),
            PolicyKind::Flexgate => Planner::Curve {
                policy: CurveAware::flexgate(family),
                cache: None,
            },
        }
    }

    pub(crate) fn plan(&mut self, jobs: &[JobSpec], budget: Watts) -> Result<CapPlan, PlanError> {
        match self {
            Planner::Proportional(p) => p.plan(jobs, Budget::Absolute(budget)),
            Planner::Curve { policy, cache } => {
                let fresh = cache
                    .as_ref()
                    .is_none_or(|c| c.jobs().len() != jobs.len() || c.jobs().iter().zip(jobs).any(|(a, b)| a != b));
                if fresh {
                    let prepared = match cache.as_ref() {
                        // Only the jobs that changed are estimated again.
                        Some(previous) => policy.prepare_updating(jobs.to_vec(), previous)?,
                        None => policy.prepare_owned(jobs.to_vec())?,
                    };
                    *cache = Some(Box::new(prepared));
                }
                match cache {
                    Some(prepared) => Ok(prepared.allocate(Budget::Absolute(budget))),
                    None => policy.plan(jobs, Budget::Absolute(budget)),
                }
            }
        }
    }
}
