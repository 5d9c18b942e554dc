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
use crate::alloc::{AllocationPolicy, Budget, CapPlan, CurveAware, Elasticity, JobSpec, Proportional, Weighting};
use crate::control::entry::ThroughputPoint;
use crate::control::evidence::{JobEvidence, Level};
use crate::estimate::CurveFamily;
use crate::units::{Fraction, WattsPerGpu};
use chrono::{DateTime, TimeDelta, Utc};
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
    /// Fleet tokens/s kept under each plan, as a share of uncapped.
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

/// The whole season.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeasonReport {
    /// The configuration.
    pub config: SeasonConfig,
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
    Plan(#[from] crate::alloc::PlanError),
}

fn at(event: usize) -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(i64::try_from(event).unwrap_or(i64::MAX / 86_400_000))
}

/// Measure `job` at `cap` on its true curve, with relative error `noise`.
fn measure(
    job: &JobSpec,
    truth: &crate::curve::PowerCurve,
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

fn kept(plan: &CapPlan, truths: &[&crate::curve::PowerCurve], full: f64) -> f64 {
    let tokens: f64 = plan
        .entries
        .iter()
        .zip(truths)
        .map(|(e, t)| t.tokens_at_cap(e.cap).value())
        .sum();
    tokens / full
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
        && config.noise_sd.is_finite()
        && config.noise_sd >= 0.0
        && config.predictor_sd.is_finite()
        && config.predictor_sd >= 0.0;
    if !sane {
        return invalid("unknown_share must be in [0, 1] and the sds non-negative numbers");
    }
    let family = Arc::new(CurveFamily::h200_generic());
    let equal = Proportional::new(Weighting::Equal, family.clone());
    let flexgate = CurveAware::flexgate(family.clone());
    let oracle = CurveAware::oracle(family);
    let weights = mix_weights(Mix::Production, templates);
    let mut rng = SplitMix64::derive(config.seed, 0x5345_4153); // "SEAS"
    let errors: Vec<f64> = templates.iter().map(|_| rng.normal() * config.predictor_sd).collect();
    let mut told: Vec<JobSpec> = Vec::with_capacity(config.jobs);
    let mut truths: Vec<&crate::curve::PowerCurve> = Vec::with_capacity(config.jobs);
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
        });
        truths.push(&t.truth);
    }
    let oracle_jobs: Vec<JobSpec> = told
        .iter()
        .zip(&truths)
        .map(|(j, t)| JobSpec {
            elasticity: Elasticity::Measured { curve: (*t).clone() },
            ..j.clone()
        })
        .collect();
    let full: f64 = truths.iter().map(|t| t.uncapped().tokens.value()).sum();
    let mut evidence: Vec<JobEvidence> = vec![JobEvidence::default(); config.jobs];
    let mut noise = SplitMix64::derive(config.seed, 0x4E4F_4953); // "NOIS"
    // Before the season: every job measured uncapped.
    for (i, job) in told.iter().enumerate() {
        let point = measure(job, truths[i], job.cap_range.max, config.noise_sd * noise.normal(), 0);
        evidence[i].add(&point);
    }
    let mut events = Vec::with_capacity(config.events);
    for e in 0..config.events {
        let cut = config.cuts[e % config.cuts.len()];
        let mut counts = KnowledgeCounts::default();
        let known: Vec<JobSpec> = told
            .iter()
            .zip(&evidence)
            .map(|(job, ev)| {
                let learned = if config.learning { ev.learned(job) } else { None };
                let elasticity = match learned {
                    Some(learned) => {
                        match learned.level {
                            Level::Full => counts.full += 1,
                            Level::Partial => counts.partial += 1,
                        }
                        learned.elasticity
                    }
                    None => {
                        match job.elasticity {
                            Elasticity::Unknown => counts.unknown += 1,
                            _ => counts.predicted += 1,
                        }
                        job.elasticity.clone()
                    }
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
            kept(&theirs, &truths, full),
            kept(&ours, &truths, full),
            kept(&best, &truths, full),
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
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{TruthFamily, published_groups, synthetic_templates};

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
        for e in &learned.events {
            assert!(
                e.oracle_kept + 1e-9 >= e.flexgate_kept && e.oracle_kept + 1e-9 >= e.equal_kept,
                "{e:?}"
            );
        }
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
        ] {
            assert!(matches!(
                run_season(&bad, &templates(), &mut |_| {}),
                Err(SeasonError::Invalid(_))
            ));
        }
    }
}
