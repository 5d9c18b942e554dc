//! The allocation policy in force, with the curves it estimated kept between plans.
//!
//! Estimating a job's curve costs a microsecond or two (BENCHMARKS.md: 16 ms for 10 k jobs,
//! estimation and plan), many times what allocating on estimated curves costs a job. Curves are therefore estimated only for the jobs that started or whose
//! knowledge changed since the last plan, and every plan in between only allocates.

use super::config::PolicyKind;
use crate::alloc::curve_aware::{FlexibilityCurve, Hedge};
use crate::alloc::{
    AllocationPolicy, Budget, CapPlan, CurveAware, JobSpec, Objective, PlanError, Prepared, Proportional, Weighting,
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
        /// The site's flexibility curve for the cached preparation (cleared when it is
        /// re-estimated), so that a telemetry tick with no change in jobs or knowledge costs
        /// one comparison, not a curve.
        flexibility: Option<Arc<FlexibilityCurve>>,
    },
    Proportional(Proportional),
}

impl Planner {
    /// `hedge_tolerance`: hedge the curve-aware plan against the equal cut with this tolerance
    /// (`None`: no hedge; the proportional rules have nothing to hedge).
    pub(crate) fn new(
        kind: PolicyKind,
        objective: Objective,
        hedge_tolerance: Option<f64>,
        family: Arc<CurveFamily>,
    ) -> Self {
        let proportional = |w| Planner::Proportional(Proportional::new(w, family.clone()).with_objective(objective));
        match kind {
            PolicyKind::Equal => proportional(Weighting::Equal),
            PolicyKind::PfiPaper => proportional(Weighting::PfiPaper),
            PolicyKind::Efficiency => proportional(Weighting::Efficiency),
            PolicyKind::Flexgate => Planner::Curve {
                policy: CurveAware::flexgate(family)
                    .with_objective(objective)
                    .with_hedging(hedge_tolerance.is_some())
                    .with_hedge_tolerance(hedge_tolerance.unwrap_or(0.0)),
                cache: None,
                flexibility: None,
            },
        }
    }

    /// What the policy maximises.
    pub(crate) fn objective(&self) -> Objective {
        match self {
            Planner::Curve { policy, .. } => policy.objective(),
            Planner::Proportional(p) => p.objective(),
        }
    }

    /// The plan for `jobs` under `budget`, and what it guarantees against the equal cut (the
    /// hedge's finding; `None` where no hedge judged it).
    pub(crate) fn plan(&mut self, jobs: &[JobSpec], budget: Watts) -> Result<(CapPlan, Option<Hedge>), PlanError> {
        match self {
            Planner::Proportional(p) => Ok((p.plan(jobs, Budget::Absolute(budget))?, None)),
            Planner::Curve {
                policy,
                cache,
                flexibility,
            } => {
                let (plan, hedge) =
                    refreshed(policy, cache, flexibility, jobs)?.allocate_explained(Budget::Absolute(budget));
                Ok((plan, hedge.computed.then_some(hedge)))
            }
        }
    }

    /// The hedge's tolerance in force (`None`: no hedge).
    pub(crate) fn hedge_tolerance(&self) -> Option<f64> {
        match self {
            Planner::Curve { policy, .. } if policy.hedging() => Some(policy.hedge_tolerance()),
            _ => None,
        }
    }

    /// Whether the policy is the equal cut itself (whose guarantee is trivial).
    pub(crate) fn is_equal_cut(&self) -> bool {
        matches!(self, Planner::Proportional(p) if p.weighting() == Weighting::Equal)
    }

    /// The site's flexibility curve for `jobs` at `levels` shed levels, by the policy that
    /// would carry it out; `None` for the proportional rules (they have no curves to cost it
    /// on). Computed again only when the jobs or what is known of them changed.
    pub(crate) fn flexibility(
        &mut self,
        jobs: &[JobSpec],
        levels: usize,
    ) -> Result<Option<Arc<FlexibilityCurve>>, PlanError> {
        let Planner::Curve {
            policy,
            cache,
            flexibility,
        } = self
        else {
            return Ok(None);
        };
        let prepared = refreshed(policy, cache, flexibility, jobs)?;
        if flexibility.as_ref().is_none_or(|c| c.points.len() != levels) {
            *flexibility = Some(Arc::new(prepared.flexibility_curve(levels)));
        }
        Ok(flexibility.clone())
    }
}

impl Planner {
    /// Each of `jobs`' [`ShedProfile`](crate::alloc::ShedProfile), from the same preparation
    /// the plans and the flexibility curve use; `None` for the proportional rules.
    pub(crate) fn shed_profiles(
        &mut self,
        jobs: &[JobSpec],
    ) -> Result<Option<Vec<crate::alloc::ShedProfile>>, PlanError> {
        let Planner::Curve {
            policy,
            cache,
            flexibility,
        } = self
        else {
            return Ok(None);
        };
        Ok(Some(refreshed(policy, cache, flexibility, jobs)?.shed_profiles()))
    }

    /// Each of `jobs`' profile from a preparation of their own, leaving the plans' cache as it
    /// is: for jobs that do not run yet (the queue), so that forecasting them never makes the
    /// next plan estimate the running jobs again. `None` for the proportional rules.
    pub(crate) fn shed_profiles_apart(
        &self,
        jobs: &[JobSpec],
    ) -> Result<Option<Vec<crate::alloc::ShedProfile>>, PlanError> {
        let Planner::Curve { policy, .. } = self else {
            return Ok(None);
        };
        if jobs.is_empty() {
            return Ok(Some(Vec::new()));
        }
        Ok(Some(policy.prepare_owned(jobs.to_vec())?.shed_profiles()))
    }
}

/// The preparation for `jobs`, re-estimating only the jobs that changed since the cached one
/// (and dropping the flexibility curve computed on it).
fn refreshed<'c>(
    policy: &CurveAware,
    cache: &'c mut Option<Box<Prepared<'static>>>,
    flexibility: &mut Option<Arc<FlexibilityCurve>>,
    jobs: &[JobSpec],
) -> Result<&'c Prepared<'static>, PlanError> {
    let stale = cache
        .as_ref()
        .is_none_or(|c| c.jobs().len() != jobs.len() || c.jobs().iter().zip(jobs).any(|(a, b)| a != b));
    let prepared = match cache.take() {
        Some(current) if !stale => current,
        previous => {
            *flexibility = None;
            Box::new(match previous {
                // Only the jobs that changed are estimated again.
                Some(previous) => policy.prepare_updating(jobs.to_vec(), &previous)?,
                None => policy.prepare_owned(jobs.to_vec())?,
            })
        }
    };
    Ok(cache.insert(prepared))
}
