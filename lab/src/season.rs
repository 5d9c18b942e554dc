//! A season of demand-response events over one fleet, with the gateway learning each job's curve
//! from what it measured in the events before (`flexgate simulate --season N`).
//!
//! The fleet is drawn once (production mix); its jobs run the whole season (a re-run of a known
//! training configuration keeps its profile). A share of them starts with nothing known
//! ([`SeasonConfig::unknown_share`]), the rest with a telemetry-predicted PFI carrying the
//! paper's error. Event `e` cuts the fleet's uncapped draw by the `e`-th cut of a cycle
//! ([`SeasonConfig::cuts`]: different depths, so that jobs are measured at different caps).
//!
//! For every event, three plans of the same budget: **equal** (every job cut by the same share
//! of its draw), **flexgate** with what the gateway knows now, and the **oracle** on the true
//! curves. Each is applied to the true curves; the gap closure is
//! `(flexgate − equal) / (oracle − equal)`.
//!
//! **Learning**, with the production code ([`JobEvidence`], [`JobEvidence::learned`]): before
//! the first event every job is measured uncapped; after each event, every job is measured at the
//! cap flexgate gave it, with the job's reported throughput off by a relative error drawn from
//! N(0, `noise_sd`²) (the top-decile figure of a real job is within a percent or two). With
//! `learning` off, the knowledge never changes (the control run).

use super::experiment::{Mix, PAPER_PREDICTOR_RMSE, mix_weights};
use super::rng::SplitMix64;
use super::truth::JobTemplate;
use chrono::{DateTime, TimeDelta, Utc};
use flexgate_policies::alloc::bounds::FloorModel;
use flexgate_policies::alloc::{
    AllocationPolicy, Budget, CapPlan, CurveAware, Elasticity, JobSpec, Objective, Proportional, Weighting,
};
use flexgate_policies::control::entry::ThroughputPoint;
use flexgate_policies::control::evidence::{JobEvidence, Level, fleet_prior};
use flexgate_policies::control::probe::{ProbeConfig, floor_cap, step_cost, steps_left, sweep_caps};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::units::{Fraction, WattsPerGpu};
use serde::Serialize;
use std::sync::Arc;

/// What defines a season.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeasonConfig {
    /// Events in the season.
    pub events: usize,
    /// Jobs in the fleet.
    pub jobs: usize,
    /// Seed of every draw.
    pub seed: u64,
    /// Cuts of the fleet's uncapped draw, cycled over the events.
    pub cuts: Vec<Fraction>,
    /// Share of jobs that start with nothing known (the rest: a predicted PFI).
    pub unknown_share: f64,
    /// Standard deviation of the PFI prediction error.
    pub predictor_sd: f64,
    /// Relative error of a measured throughput figure (sd).
    pub noise_sd: f64,
    /// Learn from each event's measurements.
    pub learning: bool,
    /// Share of jobs in a probed flex tier (0: no probing). With learning on, they are probed
    /// before the first event, with the gateway's probe code ([`flexgate_policies::control::probe`]).
    pub probe_share: f64,
    /// The probes' site budget: most the steps in flight may cost together, as a share of the
    /// fleet's uncapped throughput (`[probe] max_fleet_share`).
    pub probe_budget: f64,
    /// What the plans maximise, and what each event's kept share and gap closure are computed
    /// on: tokens/s, or GPU-weighted progress (the gateway's default).
    pub objective: Objective,
    /// Whether `flexgate` hedges against the equal cut, as the gateway does by default.
    pub hedging: bool,
    /// The hedge's tolerance (`None`: the objective's default).
    pub hedge_tolerance: Option<f64>,
}

impl Default for SeasonConfig {
    fn default() -> Self {
        Self {
            events: 20,
            jobs: 100,
            seed: 7,
            cuts: [0.2, 0.3, 0.4, 0.25, 0.35]
                .iter()
                .filter_map(|&c| Fraction::new(c).ok())
                .collect(),
            unknown_share: 0.5,
            predictor_sd: PAPER_PREDICTOR_RMSE,
            noise_sd: 0.02,
            learning: true,
            probe_share: 0.0,
            probe_budget: ProbeConfig::default().max_fleet_share,
            objective: Objective::Tokens,
            hedging: true,
            hedge_tolerance: None,
        }
    }
}

/// How much each job is known at an event's plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KnowledgeCounts {
    /// Nothing beyond the uncapped point.
    pub unknown: usize,
    /// A telemetry-predicted PFI.
    pub predicted: usize,
    /// Nothing of its own; the PFIs measured of the fleet's other jobs as its prior
    /// ([`fleet_prior`]).
    pub fleet_prior: usize,
    /// A PFI from measured points (a partial curve).
    pub partial: usize,
    /// The measured curve.
    pub full: usize,
}

/// One event of the season.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeasonEvent {
    /// 1-based.
    pub event: usize,
    /// Its cut of the fleet's uncapped draw.
    pub cut: f64,
    /// What each plan keeps of the objective's uncapped value (fleet tokens/s, or GPU-weighted
    /// progress), as a share.
    pub equal_kept: f64,
    /// See `equal_kept`.
    pub flexgate_kept: f64,
    /// See `equal_kept`.
    pub oracle_kept: f64,
    /// `(flexgate − equal) / (oracle − equal)`.
    pub gap_closure: Option<f64>,
    /// What was known when flexgate planned.
    pub knowledge: KnowledgeCounts,
}

/// What probing did before the first event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProbeSummary {
    /// Jobs in the probed tier.
    pub eligible: usize,
    /// Of them, with a fully measured curve at the first event.
    pub measured: usize,
    /// Steps taken.
    pub steps: usize,
    /// Rounds of steps (one step's time each: the cap settles, then one throughput window).
    pub rounds: usize,
    /// Most steps in flight at once.
    pub most_in_flight: usize,
}

/// The whole season.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeasonReport {
    /// The configuration.
    pub config: SeasonConfig,
    /// Probing before the first event (`None` without it).
    pub probing: Option<ProbeSummary>,
    /// Per event.
    pub events: Vec<SeasonEvent>,
}

/// Why a season could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SeasonError {
    /// A configuration value out of range.
    #[error("invalid season: {0}")]
    Invalid(String),
    /// A job the planner refused.
    #[error(transparent)]
    Plan(#[from] flexgate_policies::alloc::PlanError),
}

fn at(event: usize) -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(i64::try_from(event).unwrap_or(i64::MAX / 86_400_000))
}

/// Measure `job` at `cap` on its true curve, with relative error `noise`.
fn measure(
    job: &JobSpec,
    truth: &flexgate_policies::curve::PowerCurve,
    cap: WattsPerGpu,
    noise: f64,
    event: usize,
) -> ThroughputPoint {
    ThroughputPoint {
        at: at(event),
        job: job.id.to_string(),
        cap_w_per_gpu: cap.value(),
        power_w: truth.power_at_cap(cap).value(),
        tokens_per_s: (truth.tokens_at_cap(cap).value() * (1.0 + noise)).max(0.0),
        uncapped: cap.value() >= job.cap_range.max.value() - 0.5,
        max_slowdown: None,
        profile: None,
        gpus: None,
    }
}

/// The share of the objective's uncapped value `plan` keeps on the true curves: of the fleet's
/// tokens/s, or of its GPU-weighted progress.
fn kept(
    plan: &CapPlan,
    jobs: &[JobSpec],
    truths: &[&flexgate_policies::curve::PowerCurve],
    objective: Objective,
) -> f64 {
    let (kept, full) = plan
        .entries
        .iter()
        .zip(jobs)
        .zip(truths)
        .map(|((e, job), t)| {
            let tokens = t.tokens_at_cap(e.cap).value();
            let value = objective.value_per_token(job);
            (value * tokens, objective.uncapped_value(job))
        })
        .fold((0.0, 0.0), |(k, f), (a, b)| (k + a, f + b));
    if full > 0.0 { kept / full } else { 0.0 }
}

/// Run a season over `templates`, calling `progress(done)` after every event.
pub fn run_season(
    config: &SeasonConfig,
    templates: &[JobTemplate],
    progress: &mut dyn FnMut(usize),
) -> Result<SeasonReport, SeasonError> {
    let invalid = |m: &str| Err(SeasonError::Invalid(m.to_string()));
    if config.events == 0 || config.jobs == 0 || config.jobs > 100_000 || config.events > 10_000 {
        return invalid("events must be 1 to 10000 and jobs 1 to 100000");
    }
    if config.cuts.is_empty() || templates.is_empty() {
        return invalid("at least one cut and one job template are needed");
    }
    let sane = (0.0..=1.0).contains(&config.unknown_share)
        && (0.0..=1.0).contains(&config.probe_share)
        && config.probe_budget > 0.0
        && config.probe_budget <= 0.5
        && config.noise_sd.is_finite()
        && config.noise_sd >= 0.0
        && config.predictor_sd.is_finite()
        && config.predictor_sd >= 0.0;
    if !sane {
        return invalid(
            "unknown_share and probe_share must be in [0, 1], probe_budget in (0, 0.5], the sds non-negative numbers",
        );
    }
    let family = Arc::new(CurveFamily::h200_generic());
    let equal = Proportional::new(Weighting::Equal, family.clone());
    let flexgate = CurveAware::flexgate(family.clone())
        .with_objective(config.objective)
        .with_hedging(config.hedging)
        .with_hedge_tolerance_or_default(config.hedge_tolerance);
    let oracle = CurveAware::oracle(family).with_objective(config.objective);
    let weights = mix_weights(Mix::Production, templates);
    let mut rng = SplitMix64::derive(config.seed, 0x5345_4153); // "SEAS"
    let errors: Vec<f64> = templates.iter().map(|_| rng.normal() * config.predictor_sd).collect();
    let mut told: Vec<JobSpec> = Vec::with_capacity(config.jobs);
    let mut truths: Vec<&flexgate_policies::curve::PowerCurve> = Vec::with_capacity(config.jobs);
    for index in 0..config.jobs {
        let template = rng.weighted_index(&weights);
        let t = &templates[template];
        let unknown = rng.next_f64() < config.unknown_share;
        let elasticity = match t.true_pfi {
            Some(pfi) if !unknown => Elasticity::PredictedPfi {
                mean: (pfi + errors[template]).clamp(0.5, 5.0),
                sd: config.predictor_sd,
                grid: None,
            },
            _ => Elasticity::Unknown,
        };
        let uncapped = t.truth.uncapped();
        told.push(JobSpec {
            id: format!("s-{index}-{}", t.name).into(),
            gpus: t.gpus,
            cap_range: t.cap_range,
            uncapped_power: uncapped.power,
            uncapped_tokens: uncapped.tokens,
            elasticity,
            max_slowdown: None,
            priority: 1.0,
        });
        truths.push(&t.truth);
    }
    let oracle_jobs: Vec<JobSpec> = told
        .iter()
        .zip(&truths)
        .map(|(j, t)| JobSpec {
            elasticity: Elasticity::exact((*t).clone()),
            ..j.clone()
        })
        .collect();
    let mut evidence: Vec<JobEvidence> = vec![JobEvidence::default(); config.jobs];
    let mut noise = SplitMix64::derive(config.seed, 0x4E4F_4953); // "NOIS"
    // Before the season: every job measured uncapped.
    for (i, job) in told.iter().enumerate() {
        let point = measure(job, truths[i], job.cap_range.max, config.noise_sd * noise.normal(), 0);
        evidence[i].add(&point);
    }
    let probing = (config.learning && config.probe_share > 0.0).then(|| {
        let mut draw = SplitMix64::derive(config.seed, 0x5052_4F42); // "PROB"
        let eligible: Vec<bool> = told.iter().map(|_| draw.next_f64() < config.probe_share).collect();
        probe_before_season(&told, &truths, &mut evidence, &eligible, config, &mut noise)
    });
    let mut events = Vec::with_capacity(config.events);
    for e in 0..config.events {
        let cut = config.cuts[e % config.cuts.len()];
        let mut counts = KnowledgeCounts::default();
        let learned_now: Vec<Option<flexgate_policies::control::evidence::Learned>> = told
            .iter()
            .zip(&evidence)
            .map(|(job, ev)| if config.learning { ev.learned(job) } else { None })
            .collect();
        let measured_pfis: Vec<f64> = learned_now.iter().flatten().filter_map(|l| l.pfi).collect();
        let prior = if config.learning {
            fleet_prior(&measured_pfis)
        } else {
            None
        };
        let known: Vec<JobSpec> = told
            .iter()
            .zip(learned_now)
            .map(|(job, learned)| {
                let elasticity = match learned {
                    Some(learned) => {
                        match learned.level {
                            Level::Full => counts.full += 1,
                            Level::Partial => counts.partial += 1,
                        }
                        learned.elasticity
                    }
                    None => match (&job.elasticity, &prior) {
                        (Elasticity::Unknown, Some((prior, _))) => {
                            counts.fleet_prior += 1;
                            prior.clone()
                        }
                        (Elasticity::Unknown, None) => {
                            counts.unknown += 1;
                            Elasticity::Unknown
                        }
                        (e, _) => {
                            counts.predicted += 1;
                            e.clone()
                        }
                    },
                };
                JobSpec {
                    elasticity,
                    ..job.clone()
                }
            })
            .collect();
        let budget = Budget::Cut(cut);
        let ours = flexgate.plan(&known, budget)?;
        let theirs = equal.plan(&told, budget)?;
        let best = oracle.plan(&oracle_jobs, budget)?;
        let (equal_kept, flexgate_kept, oracle_kept) = (
            kept(&theirs, &told, &truths, config.objective),
            kept(&ours, &told, &truths, config.objective),
            kept(&best, &told, &truths, config.objective),
        );
        let gap = oracle_kept - equal_kept;
        events.push(SeasonEvent {
            event: e + 1,
            cut: cut.value(),
            equal_kept,
            flexgate_kept,
            oracle_kept,
            gap_closure: (gap.abs() > 1e-9).then(|| (flexgate_kept - equal_kept) / gap),
            knowledge: counts,
        });
        if config.learning {
            for (i, entry) in ours.entries.iter().enumerate() {
                let point = measure(&told[i], truths[i], entry.cap, config.noise_sd * noise.normal(), e + 1);
                evidence[i].add(&point);
            }
        }
        progress(e + 1);
    }
    Ok(SeasonReport {
        config: config.clone(),
        probing,
        events,
    })
}

/// Probe the `eligible` jobs before the first event, as the gateway would between events: in
/// rounds, each job with a step left taking its next one while the steps of the round fit the
/// site budget, its throughput measured there with the season's noise.
fn probe_before_season(
    told: &[JobSpec],
    truths: &[&flexgate_policies::curve::PowerCurve],
    evidence: &mut [JobEvidence],
    eligible: &[bool],
    config: &SeasonConfig,
    noise: &mut SplitMix64,
) -> ProbeSummary {
    let probe = ProbeConfig {
        enabled: true,
        max_fleet_share: config.probe_budget,
        ..ProbeConfig::default()
    };
    let floors = FloorModel::new(Arc::new(CurveFamily::h200_generic()));
    let budget = probe.max_fleet_share * told.iter().map(|j| j.uncapped_tokens.value()).sum::<f64>();
    let sweeps: Vec<Vec<f64>> = told
        .iter()
        .map(|j| sweep_caps(j, floor_cap(j, floors.floor(j).0.value()), &probe.depths))
        .collect();
    let mut summary = ProbeSummary {
        eligible: eligible.iter().filter(|e| **e).count(),
        ..ProbeSummary::default()
    };
    // Every round measures at least one step, and no sweep has more steps than depths.
    for _ in 0..=told.len() * probe.depths.len() {
        let (mut in_flight, mut taken) = (0.0, 0);
        for (i, job) in told.iter().enumerate().filter(|(i, _)| eligible[*i]) {
            let allowance = job.max_slowdown.map(|f| f.value());
            let Some(&cap) = steps_left(&sweeps[i], Some(&evidence[i]), allowance).first() else {
                continue;
            };
            let cost = step_cost(job, cap, Some(&evidence[i])) * job.uncapped_tokens.value();
            if in_flight + cost > budget {
                continue;
            }
            in_flight += cost;
            taken += 1;
            let point = measure(job, truths[i], WattsPerGpu(cap), config.noise_sd * noise.normal(), 0);
            evidence[i].add(&point);
        }
        if taken == 0 {
            break;
        }
        summary.steps += taken;
        summary.rounds += 1;
        summary.most_in_flight = summary.most_in_flight.max(taken);
    }
    summary.measured = told
        .iter()
        .enumerate()
        .filter(|(i, j)| eligible[*i] && evidence[*i].learned(j).is_some_and(|l| l.level == Level::Full))
        .count();
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TruthFamily, published_groups, synthetic_templates};

    fn templates() -> Vec<JobTemplate> {
        synthetic_templates(&published_groups().expect("groups"), TruthFamily::Physical).expect("templates")
    }

    #[test]
    fn learning_closes_the_gap_and_without_it_nothing_changes() {
        let config = SeasonConfig {
            events: 10,
            jobs: 40,
            ..SeasonConfig::default()
        };
        let learned = run_season(&config, &templates(), &mut |_| {}).expect("season");
        let frozen = run_season(
            &SeasonConfig {
                learning: false,
                ..config.clone()
            },
            &templates(),
            &mut |_| {},
        )
        .expect("season");
        let first = &learned.events[0];
        let last = learned.events.last().expect("events");
        assert_eq!(
            first.knowledge.partial + first.knowledge.full,
            0,
            "nothing measured under a cap yet"
        );
        assert!(last.knowledge.partial + last.knowledge.full > 0, "{:?}", last.knowledge);
        let frozen_last = frozen.events.last().expect("events");
        assert_eq!(frozen_last.knowledge, frozen.events[0].knowledge);
        // Same cut in the last event of both runs: learning keeps more throughput.
        assert!(
            last.flexgate_kept > frozen_last.flexgate_kept,
            "{last:?} vs {frozen_last:?}"
        );
        // The oracle plans on the truths' concave hulls, and a physical truth is not concave at
        // its deepest caps (the clock floor), so a plan read off the truth itself may keep a
        // hair more than the oracle's (a job planned on its family member, near such a cap):
        // by at most what the hulls and the truths differ there, never by a tenth of a percent.
        for e in &learned.events {
            assert!(
                e.oracle_kept + 1e-3 >= e.flexgate_kept && e.oracle_kept + 1e-9 >= e.equal_kept,
                "{e:?}"
            );
        }
    }

    #[test]
    fn probing_measures_every_eligible_job_before_the_first_event() {
        let config = SeasonConfig {
            events: 2,
            jobs: 60,
            probe_share: 0.5,
            ..SeasonConfig::default()
        };
        let report = run_season(&config, &templates(), &mut |_| {}).expect("season");
        let probing = report.probing.expect("probing ran");
        assert!(probing.eligible > 10, "{probing:?}");
        assert_eq!(probing.measured, probing.eligible, "{probing:?}");
        assert!(
            probing.rounds > 3,
            "the budget spreads the steps over rounds: {probing:?}"
        );
        assert!(
            report.events[0].knowledge.full >= probing.eligible,
            "{:?}",
            report.events[0].knowledge
        );
        let without = run_season(
            &SeasonConfig {
                probe_share: 0.0,
                ..config
            },
            &templates(),
            &mut |_| {},
        )
        .expect("season");
        assert!(without.probing.is_none());
        assert_eq!(without.events[0].knowledge.full, 0);
        assert!(report.events[0].gap_closure > without.events[0].gap_closure);
    }

    #[test]
    fn bad_configurations_are_refused() {
        for bad in [
            SeasonConfig {
                events: 0,
                ..SeasonConfig::default()
            },
            SeasonConfig {
                unknown_share: 1.5,
                ..SeasonConfig::default()
            },
            SeasonConfig {
                noise_sd: f64::NAN,
                ..SeasonConfig::default()
            },
            SeasonConfig {
                probe_budget: 0.0,
                ..SeasonConfig::default()
            },
        ] {
            assert!(matches!(
                run_season(&bad, &templates(), &mut |_| {}),
                Err(SeasonError::Invalid(_))
            ));
        }
    }
}
