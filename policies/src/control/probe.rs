//! Probing: measuring a job's curve outside events, before the grid asks (the paper's power-cap
//! sweep, run in production), for the jobs whose flex tier opts in.
//!
//! **What a probe is.** One *step*: one eligible job held at one cap of its range for at most
//! [`ProbeConfig::step_s`], until its reported throughput at that cap is steady (the backend says
//! every sample it aggregates came after the cap settled; [`super::evidence`] then records it as
//! a `throughput_point`). A job's *sweep* is the caps of [`sweep_caps`], highest first: when a
//! step is measured the next one follows at once if the site budget allows, else the job goes back
//! to its uncapped limit and waits for budget. Every step is a `probe_step` record (the cap, its
//! lease end, what it may cost and the budget in use) and every end of one a `probe_ended` record
//! (measured, tier reached, timed out, cap refused, event, job ended, probing disabled).
//!
//! **Bounded cost.** A step may cost its job at most [`step_cost`] of its uncapped throughput:
//! the share of its uncapped draw the cap sheds, as if throughput fell as fast as power (PFI 1:
//! below every job the paper measured, 1.10–2.67), or what was measured at that cap if more. The
//! steps in flight never cost more than [`ProbeConfig::max_fleet_share`] of the fleet's uncapped
//! throughput together (on the planner's scale: with node agents, each job's progress weighted by
//! its GPUs). A job with a tier is never stepped below the floor its tier allows (as the planner
//! estimates it), and the sweep stops at the first step measured slower than the tier.
//!
//! **Never in the way.** Only outside events, and no step starts once an announced event is
//! near enough that the step could overlap its baseline window (`[site] baseline_window_s`
//! before its start): probing must not lower the meter a reduction is measured from. When a
//! ceiling comes into force the steps in flight
//! end (`probe_ended`, outcome `event`) before the first plan, which then caps every job as it
//! would have. Each step's cap carries a lease ending with the step, so a backend with leases
//! restores the job even if the gateway is gone. Off by default.

use super::cluster::JobState;
use super::entry::{DispatchPurpose, Entry, ProbeEnded, ProbeOutcome, ProbeStep, Recorded};
use super::evidence::{JobEvidence, Level, bucket, slowdown};
use super::{Controller, Effect};
use crate::alloc::JobSpec;
use crate::ids::JobId;
use crate::units::WattsPerGpu;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::cluster::CapCommand;

/// How, and whether, the gateway probes (the `[probe]` table of its TOML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Probe at all. Off by default: a probe slows a job that no grid event asked to slow.
    pub enabled: bool,
    /// Flex tiers whose jobs may be probed (Slurm: the `tier=` flex tag). Empty: none.
    pub tiers: Vec<String>,
    /// Most the steps in flight may cost together, as a share of the fleet's uncapped throughput.
    pub max_fleet_share: f64,
    /// Longest one step holds its cap, s: its lease. A step whose throughput is not steady by
    /// then ends as timed out (the job reports nothing, or too slowly).
    pub step_s: u64,
    /// After a step timed out or its cap was refused, the job is not probed again for this long, s.
    pub retry_after_s: u64,
    /// Where the sweep's caps sit, as shares of the cap range above its minimum, highest first.
    /// The default reaches the lowest quarter of the range, where a curve counts as fully
    /// measured ([`super::evidence::FULL_REACH`]).
    pub depths: Vec<f64>,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            tiers: Vec::new(),
            max_fleet_share: 0.05,
            step_s: 180,
            retry_after_s: 3600,
            depths: vec![0.7, 0.45, 0.2],
        }
    }
}

impl ProbeConfig {
    /// Why the configuration cannot be acted on, naming the field.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(self.max_fleet_share > 0.0 && self.max_fleet_share <= 0.5) {
            return Err(("probe.max_fleet_share", "must be in (0, 0.5]".into()));
        }
        if !(10..=3600).contains(&self.step_s) {
            return Err(("probe.step_s", "must be 10 to 3600 seconds".into()));
        }
        if self.retry_after_s > 7 * 86_400 {
            return Err(("probe.retry_after_s", "must be at most a week (604800 s)".into()));
        }
        let in_range = self.depths.iter().all(|d| d.is_finite() && (0.0..1.0).contains(d));
        let descending = self.depths.windows(2).all(|w| w[0] > w[1]);
        if self.depths.is_empty() || self.depths.len() > 10 || !in_range || !descending {
            return Err((
                "probe.depths",
                "must be 1 to 10 shares in [0, 1), strictly decreasing (e.g. [0.7, 0.45, 0.2])".into(),
            ));
        }
        if self.tiers.iter().any(|t| t.trim().is_empty()) {
            return Err(("probe.tiers", "names must not be empty".into()));
        }
        Ok(())
    }

    /// Whether a job of `tier` may be probed.
    #[must_use]
    pub fn eligible(&self, tier: Option<&str>) -> bool {
        self.enabled && tier.is_some_and(|t| self.tiers.iter().any(|s| s == t))
    }
}

/// A step in flight, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActiveProbe {
    /// The job's profile key: where its points are kept.
    pub profile: Arc<str>,
    /// The cap per GPU, W.
    pub cap_w: f64,
    /// When it started: a reading counts only if taken after.
    pub started: DateTime<Utc>,
    /// When its lease ends.
    pub until: DateTime<Utc>,
    /// The most it may cost the job, as a share of its uncapped throughput ([`step_cost`]).
    pub cost_share: f64,
}

/// The caps a sweep of `spec` steps through, highest first: `depths` of the cap range above its
/// minimum, none below `floor_cap` (the lowest cap the job's tier allows), one per cap bucket,
/// none at the uncapped limit.
#[must_use]
pub fn sweep_caps(spec: &JobSpec, floor_cap: f64, depths: &[f64]) -> Vec<f64> {
    let (lo, hi) = (spec.cap_range.min.value(), spec.cap_range.max.value());
    let mut caps: Vec<f64> = Vec::with_capacity(depths.len());
    for d in depths {
        let cap = ((lo + d * (hi - lo)).max(floor_cap).min(hi) * 10.0).round() / 10.0;
        let new_bucket = caps.last().is_none_or(|c| bucket(*c) != bucket(cap));
        if cap < hi - super::evidence::BUCKET_W / 2.0 && new_bucket {
            caps.push(cap);
        }
    }
    caps
}

/// The caps of `sweep` still to measure: those without a point in `evidence`, above any cap at
/// which the job was measured slower than `allowance` (deeper is slower still).
#[must_use]
pub fn steps_left(sweep: &[f64], evidence: Option<&JobEvidence>, allowance: Option<f64>) -> Vec<f64> {
    let Some(evidence) = evidence else {
        return sweep.to_vec();
    };
    let beyond_tier = match (allowance, evidence.uncapped) {
        (Some(allowance), Some(uncapped)) if uncapped.tokens > 0.0 => evidence
            .capped
            .values()
            .filter(|p| slowdown(p, &uncapped) > allowance)
            .map(|p| p.cap_w)
            .max_by(f64::total_cmp),
        _ => None,
    };
    sweep
        .iter()
        .copied()
        .filter(|c| !evidence.capped.contains_key(&bucket(*c)))
        .filter(|c| beyond_tier.is_none_or(|b| *c > b + super::evidence::BUCKET_W / 2.0))
        .collect()
}

/// The most a step at `cap` may cost `spec`, as a share of its uncapped throughput: the share of
/// its uncapped draw the cap sheds (throughput falling as fast as power, PFI 1), or the slowdown
/// measured at that cap when larger.
#[must_use]
pub fn step_cost(spec: &JobSpec, cap: f64, evidence: Option<&JobEvidence>) -> f64 {
    let p_max = spec.uncapped_power.value();
    let shed = if p_max > 0.0 {
        (1.0 - (cap * f64::from(spec.gpus)) / p_max).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let measured = evidence
        .and_then(|e| Some((e.capped.get(&bucket(cap))?, e.uncapped?)))
        .filter(|(_, u)| u.tokens > 0.0)
        .map_or(0.0, |(p, u)| slowdown(p, &u).clamp(0.0, 1.0));
    shed.max(measured)
}

/// The lowest cap per GPU `spec`'s tier allows, from the planner's floor for it (W for the job).
#[must_use]
pub fn floor_cap(spec: &JobSpec, floor_w: f64) -> f64 {
    if spec.gpus == 0 {
        return spec.cap_range.max.value();
    }
    (floor_w / f64::from(spec.gpus)).max(spec.cap_range.min.value())
}

impl Controller {
    /// The probes' part of a tick with no event in force: end the steps that are done, take the
    /// next ones, and start sweeps while the budget allows.
    pub(crate) fn probe(&mut self, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        if self.probes.is_empty() && !self.settings.probe.enabled {
            return;
        }
        let mut commands = Vec::new();
        self.advance_probes(now, effects, &mut commands);
        if self.settings.probe.enabled {
            self.start_probes(now, effects, &mut commands);
        }
        if !commands.is_empty() {
            effects.push(Effect::Dispatch {
                purpose: DispatchPurpose::Probe,
                commands,
            });
        }
    }

    /// A ceiling came into force: every step in flight ends before the plan.
    pub(crate) fn end_probes_for_event(&mut self, event: &str, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let jobs: Vec<JobId> = self.probes.keys().cloned().collect();
        for job in jobs {
            self.end_probe(
                &job,
                ProbeOutcome::Event,
                format!("event {event} in force: the plan caps the job from now"),
                now,
                effects,
            );
        }
    }

    /// The fleet's uncapped throughput on the planner's scale, and the budget of the steps.
    fn probe_budget(&self) -> f64 {
        let fleet: f64 = self.jobs.iter().map(|j| j.spec.uncapped_tokens.value()).sum();
        fleet * self.settings.probe.max_fleet_share
    }

    /// What the steps in flight may cost together, on the planner's scale; `except` left out.
    fn in_flight_cost(&self, except: Option<&str>) -> f64 {
        if self.probes.is_empty() {
            return 0.0;
        }
        let t_max: std::collections::HashMap<&str, f64> = self
            .jobs
            .iter()
            .map(|j| (&*j.spec.id, j.spec.uncapped_tokens.value()))
            .collect();
        self.probes
            .iter()
            .filter(|(job, _)| except.is_none_or(|e| e != job.as_ref()))
            .map(|(job, p)| p.cost_share * t_max.get(&**job).copied().unwrap_or(0.0))
            .sum()
    }

    /// The next cap of `job`'s sweep, with what it may cost; `None` when nothing is left.
    fn next_probe_cap(&self, job: &JobState) -> Option<(f64, f64)> {
        let evidence = self.evidence.get(job.profile_key());
        let (floor_w, _) = self.floors.floor(&job.spec);
        let sweep = sweep_caps(
            &job.spec,
            floor_cap(&job.spec, floor_w.value()),
            &self.settings.probe.depths,
        );
        let cap = *steps_left(&sweep, evidence, job.spec.max_slowdown.map(|f| f.value())).first()?;
        let cost = step_cost(&job.spec, cap, evidence) * job.spec.uncapped_tokens.value();
        Some((cap, cost))
    }

    fn advance_probes(&mut self, now: DateTime<Utc>, effects: &mut Vec<Effect>, commands: &mut Vec<CapCommand>) {
        let active: Vec<(JobId, ActiveProbe)> = self.probes.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (id, probe) in active {
            let Some(job) = self.jobs.iter().find(|j| j.spec.id == id).cloned() else {
                self.end_probe(&id, ProbeOutcome::JobEnded, "the job ended".into(), now, effects);
                continue;
            };
            if !self.settings.probe.enabled {
                self.end_probe(
                    &id,
                    ProbeOutcome::Disabled,
                    "probing is off in the configuration".into(),
                    now,
                    effects,
                );
                continue;
            }
            let measured = self
                .evidence
                .get(&probe.profile)
                .and_then(|e| Some((*e.capped.get(&bucket(probe.cap_w))?, e.uncapped?)))
                .filter(|(p, _)| p.at >= probe.started);
            let Some((point, uncapped)) = measured else {
                if now >= probe.until {
                    self.end_probe(
                        &id,
                        ProbeOutcome::Timeout,
                        format!(
                            "no steady throughput at {:.0} W/GPU within the step's {} s",
                            probe.cap_w, self.settings.probe.step_s
                        ),
                        now,
                        effects,
                    );
                }
                continue;
            };
            let measured_slowdown = slowdown(&point, &uncapped);
            let detail = format!(
                "{:.0} tokens/s at {:.0} W/GPU, {:.1} % under uncapped",
                point.tokens,
                probe.cap_w,
                measured_slowdown * 100.0
            );
            if let Some(allowance) = job.spec.max_slowdown.map(|f| f.value())
                && measured_slowdown > allowance
            {
                self.end_probe(
                    &id,
                    ProbeOutcome::TierReached,
                    format!("{detail}: beyond the tier's {:.0} %; no deeper step", allowance * 100.0),
                    now,
                    effects,
                );
                continue;
            }
            let next = self.next_probe_cap(&job);
            let others = self.in_flight_cost(Some(&id));
            match next {
                Some(_) if self.event_ahead(now) => self.end_probe(
                    &id,
                    ProbeOutcome::Measured,
                    format!("{detail}; the next step waits until after the announced event"),
                    now,
                    effects,
                ),
                Some((cap, cost)) if others + cost <= self.probe_budget() => {
                    self.start_step(&job, cap, cost, now, effects, commands);
                }
                Some(_) => self.end_probe(
                    &id,
                    ProbeOutcome::Measured,
                    format!("{detail}; the next step waits for the site budget"),
                    now,
                    effects,
                ),
                None => self.end_probe(
                    &id,
                    ProbeOutcome::Measured,
                    format!("{detail}; sweep complete"),
                    now,
                    effects,
                ),
            }
        }
    }

    /// Whether an announced event starts soon enough that a step started now could still be
    /// in force during a window its baseline reads before it: the meter before it
    /// (`site.baseline_window_s`) and every settlement method's day-of adjustment window
    /// (`[settlement]`). A probe must never lower the baseline a curtailment is measured
    /// against.
    fn event_ahead(&self, now: DateTime<Utc>) -> bool {
        let step = chrono::Duration::seconds(i64::try_from(self.settings.probe.step_s).unwrap_or(i64::MAX / 4_000));
        let meter_window =
            chrono::Duration::seconds(i64::try_from(self.settings.site.baseline_window_s).unwrap_or(i64::MAX / 4_000));
        self.book.events().any(|e| {
            if e.phase.is_terminal() || e.event.test {
                return false;
            }
            let start = e.event.window.start;
            let protected_from = self
                .settings
                .settlement_methods
                .iter()
                .filter_map(|m| m.event_day_window(start).map(|(from, _)| from))
                .fold(start - meter_window, std::cmp::min);
            protected_from <= now + step
        })
    }

    fn start_probes(&mut self, now: DateTime<Utc>, effects: &mut Vec<Effect>, commands: &mut Vec<CapCommand>) {
        if self.event_ahead(now) {
            return;
        }
        let budget = self.probe_budget();
        let jobs = self.jobs.clone();
        for job in jobs.iter() {
            let id = &job.spec.id;
            let ready = self.settings.probe.eligible(job.tier.as_deref())
                && !self.probes.contains_key(id)
                && !self.suspended.contains(id)
                && !self.caps.contains_key(id)
                && job.applied_cap.value() >= job.spec.cap_range.max.value() - 0.5
                && self.probe_retry.get(job.profile_key()).is_none_or(|at| now >= *at)
                && self
                    .evidence
                    .get(job.profile_key())
                    .is_some_and(|e| e.uncapped.is_some())
                && self
                    .learned_cache
                    .get(id)
                    .and_then(|(_, l)| l.as_ref())
                    .is_none_or(|l| l.level != Level::Full);
            if !ready {
                continue;
            }
            let Some((cap, cost)) = self.next_probe_cap(job) else {
                continue;
            };
            if self.in_flight_cost(None) + cost > budget {
                continue;
            }
            self.start_step(job, cap, cost, now, effects, commands);
        }
    }

    fn start_step(
        &mut self,
        job: &JobState,
        cap: f64,
        cost: f64,
        now: DateTime<Utc>,
        effects: &mut Vec<Effect>,
        commands: &mut Vec<CapCommand>,
    ) {
        let step_s = i64::try_from(self.settings.probe.step_s).unwrap_or(3600);
        let until = now + chrono::Duration::seconds(step_s);
        let generation = self.next_generation;
        let others = self.in_flight_cost(Some(&job.spec.id));
        let fleet: f64 = self.jobs.iter().map(|j| j.spec.uncapped_tokens.value()).sum();
        let share = |tokens: f64| if fleet > 0.0 { tokens / fleet } else { 0.0 };
        let t_max = job.spec.uncapped_tokens.value();
        self.record(
            effects,
            Recorded::new(
                Entry::ProbeStep(ProbeStep {
                    at: now,
                    job: job.spec.id.to_string(),
                    profile: job.profile_key().to_string(),
                    cap_w_per_gpu: cap,
                    until,
                    generation,
                    max_cost_share: if t_max > 0.0 { cost / t_max } else { 0.0 },
                    fleet_share_in_flight: share(others + cost),
                    fleet_share_budget: self.settings.probe.max_fleet_share,
                }),
                None,
            ),
        );
        commands.push(CapCommand {
            job: job.spec.id.clone(),
            cap: WattsPerGpu(cap),
            generation,
            until: Some(until),
        });
    }

    pub(crate) fn end_probe(
        &mut self,
        job: &JobId,
        outcome: ProbeOutcome,
        detail: String,
        now: DateTime<Utc>,
        effects: &mut Vec<Effect>,
    ) {
        let Some(probe) = self.probes.get(job) else {
            return;
        };
        let profile = probe.profile.to_string();
        self.record(
            effects,
            Recorded::new(
                Entry::ProbeEnded(ProbeEnded {
                    at: now,
                    job: job.to_string(),
                    profile,
                    outcome,
                    detail,
                    retry_after: matches!(outcome, ProbeOutcome::Timeout | ProbeOutcome::CapFailed).then(|| {
                        now + chrono::Duration::seconds(
                            i64::try_from(self.settings.probe.retry_after_s).unwrap_or(604_800),
                        )
                    }),
                }),
                None,
            ),
        );
    }

    /// Fold a `probe_step` record.
    pub(crate) fn apply_probe_step(&mut self, s: &ProbeStep) {
        self.next_generation = self.next_generation.max(s.generation.saturating_add(1));
        self.probes.insert(
            JobId::from(s.job.as_str()),
            ActiveProbe {
                profile: Arc::from(s.profile.as_str()),
                cap_w: s.cap_w_per_gpu,
                started: s.at,
                until: s.until,
                cost_share: s.max_cost_share,
            },
        );
    }

    /// Fold a `probe_ended` record.
    pub(crate) fn apply_probe_ended(&mut self, e: &ProbeEnded) {
        self.probes.remove(e.job.as_str());
        if let Some(at) = e.retry_after {
            self.probe_retry.insert(Arc::from(e.profile.as_str()), at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{CapRange, Elasticity};
    use crate::control::entry::ThroughputPoint;
    use crate::units::{Fraction, TokensPerSec, Watts};

    fn spec(max_slowdown: Option<f64>) -> JobSpec {
        JobSpec {
            id: "j".into(),
            gpus: 8,
            cap_range: CapRange::H200,
            uncapped_power: Watts(8.0 * 650.0),
            uncapped_tokens: TokensPerSec(8.0),
            elasticity: Elasticity::Unknown,
            max_slowdown: max_slowdown.and_then(|f| Fraction::new(f).ok()),
            priority: 1.0,
        }
    }

    fn point(cap: f64, tokens: f64, uncapped: bool) -> ThroughputPoint {
        ThroughputPoint {
            at: DateTime::<Utc>::UNIX_EPOCH,
            job: "j".into(),
            cap_w_per_gpu: cap,
            power_w: cap.min(650.0) * 8.0,
            tokens_per_s: tokens,
            uncapped,
            max_slowdown: None,
            profile: None,
            gpus: Some(8),
        }
    }

    #[test]
    fn a_sweep_steps_down_its_range_and_stops_at_the_tier_floor() {
        let s = spec(None);
        assert_eq!(sweep_caps(&s, 200.0, &[0.7, 0.45, 0.2]), vec![550.0, 425.0, 300.0]);
        // A tier floor at 460 W: the deeper steps collapse onto it, once.
        assert_eq!(sweep_caps(&s, 460.0, &[0.7, 0.45, 0.2]), vec![550.0, 460.0]);
        // A floor at the top leaves nothing to probe.
        assert!(sweep_caps(&s, 700.0, &[0.7, 0.45, 0.2]).is_empty());
    }

    #[test]
    fn measured_caps_and_caps_below_a_measured_tier_breach_are_not_stepped_again() {
        let sweep = [550.0, 425.0, 300.0];
        let mut e = JobEvidence::default();
        e.add(&point(700.0, 1000.0, true));
        e.add(&point(550.0, 960.0, false));
        assert_eq!(steps_left(&sweep, Some(&e), Some(0.10)), vec![425.0, 300.0]);
        // 425 W measured 15 % slower: beyond a 10 % tier, so 300 W is never tried.
        e.add(&point(425.0, 850.0, false));
        assert!(steps_left(&sweep, Some(&e), Some(0.10)).is_empty());
        // Without a tier the sweep goes on.
        assert_eq!(steps_left(&sweep, Some(&e), None), vec![300.0]);
    }

    #[test]
    fn a_step_costs_the_power_it_sheds_or_what_was_measured_if_more() {
        let s = spec(None);
        // 425 W × 8 against 650 W × 8 uncapped: 34.6 % of the draw shed.
        let shed = 1.0 - 425.0 / 650.0;
        assert!((step_cost(&s, 425.0, None) - shed).abs() < 1e-9);
        // A cap above the draw sheds nothing.
        assert!(step_cost(&s, 680.0, None).abs() < 1e-12);
        let mut e = JobEvidence::default();
        e.add(&point(700.0, 1000.0, true));
        e.add(&point(425.0, 500.0, false));
        assert!((step_cost(&s, 425.0, Some(&e)) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn only_enabled_probing_of_a_listed_tier_is_eligible() {
        let mut c = ProbeConfig {
            tiers: vec!["batch".into()],
            ..ProbeConfig::default()
        };
        assert!(!c.eligible(Some("batch")), "off by default");
        c.enabled = true;
        assert!(c.eligible(Some("batch")));
        assert!(!c.eligible(Some("prod")));
        assert!(!c.eligible(None));
        assert!(c.validate().is_ok());
        for bad in [
            ProbeConfig {
                max_fleet_share: f64::NAN,
                ..c.clone()
            },
            ProbeConfig {
                depths: vec![0.2, 0.7],
                ..c.clone()
            },
            ProbeConfig { step_s: 0, ..c.clone() },
            ProbeConfig {
                tiers: vec![" ".into()],
                ..c.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
