//! Intake: the rules every grid event passes, whatever protocol brought it (HTTP, MQTT,
//! OpenADR 2.0b or 3.x), and the acknowledgment it gets.
//!
//! In order: the document must be valid; an event for another site, or whose window already
//! ended, is refused (recorded, answered with an opt-out, and not keyed, so that a corrected copy
//! is judged afresh); a repeat of an (event, revision) already decided gets the recorded ack; each
//! interval's target must convert to a meter ceiling; a lower revision than the one held is
//! stale. What passes is interpreted (ceilings, the baseline used, the facility budget) and
//! acknowledged. Every decision is entries, recorded before the ack is returned.

use super::entry::{
    Entry, EventAcked, EventInterpreted, EventReceived, OperatorOptOut, Received, Recorded, Transport, Upserted,
};
use super::{Controller, Effect};
use crate::event::{
    Ack, BaselineEstimate, CeilingTarget, EventBook, EventError, GridEvent, LevelRule, MeterRangeKw, Participation,
    PriceRule, SiteContext, to_ceiling,
};
use crate::facility::CoolingState;
use crate::ids::EventId;
use crate::units::{Fraction, Kilowatts, Watts};
use chrono::{DateTime, Utc};

/// What became of a submission.
#[derive(Debug, Clone, PartialEq)]
pub enum IntakeDecision {
    /// Taken (opt in, or in with a reason: a test event, a cancellation, a price signal).
    Accepted {
        /// The acknowledgment.
        ack: Ack,
    },
    /// This (event, revision) was decided before: the recorded acknowledgment. The caller must
    /// wait until everything recorded so far is flushed before answering with it.
    Repeated {
        /// The acknowledgment recorded for it; where the body differs, its reason says so.
        ack: Ack,
        /// The body differs from the one first acknowledged for this revision (both received as
        /// bytes): the new body was ignored. HTTP answers 409.
        differs: bool,
    },
    /// Valid, but not something this gateway acts on (another site, an ended window, a target
    /// it cannot convert): recorded, answered with an opt-out.
    Refused {
        /// Why.
        reason: String,
        /// The opt-out acknowledgment.
        ack: Ack,
    },
    /// A lower revision than the one held.
    Stale {
        /// The revision held.
        held: u64,
        /// The opt-out acknowledgment.
        ack: Ack,
    },
    /// Not a valid event: nothing recorded, nothing changed.
    Invalid(EventError),
}

/// A submission's entries (to record, in order, before answering) and its decision.
#[derive(Debug, Clone)]
pub struct Intake {
    /// Effects: the records, and a wake-up of the planner where the book changed.
    pub effects: Vec<Effect>,
    /// The decision.
    pub decision: IntakeDecision,
}

/// Why an operator action was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OperatorError {
    /// No such event.
    #[error("no event {0:?}")]
    UnknownEvent(String),
    /// A field is missing or invalid.
    #[error("{field}: {message}")]
    Invalid {
        /// Field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// The longest operator name and reason accepted, characters.
const OPERATOR_MAX: usize = 128;
const REASON_MAX: usize = 1024;

impl Controller {
    /// The site's rules for converting targets, with the facility maximum derived from the
    /// jobs' uncapped draw when none is configured.
    pub(crate) fn site_context(&self) -> SiteContext {
        let mut site = SiteContext::default();
        let rules = &self.settings.site;
        site.facility_max_kw = if rules.facility_max_kw > 0.0 {
            rules.facility_max_kw
        } else {
            let uncapped: Watts = self.jobs.iter().map(|j| j.spec.uncapped_power).sum();
            self.facility
                .forward(uncapped, self.nodes(), &CoolingState::Settled)
                .map_or(0.0, |m| m.hi.value())
        };
        for (rule, fraction) in site.level_table.iter_mut().zip(rules.level_shed_fraction) {
            if let Ok(shed) = Fraction::new(fraction) {
                *rule = LevelRule {
                    level: rule.level,
                    shed,
                };
            }
        }
        site.price_table = rules
            .price_table
            .iter()
            .filter_map(|row| {
                Fraction::new(row.shed_fraction).ok().map(|shed| PriceRule {
                    min_per_mwh: row.min_per_mwh,
                    shed,
                })
            })
            .collect();
        site
    }

    /// Meter-before baseline: the mean metered power over the configured window before `now`.
    /// On meter readings only when there are any (`meter_before`); otherwise on the facility
    /// model's figures, and then named so (`model_before`): a baseline that was never read off
    /// a meter must not pass for one.
    pub(crate) fn baseline(&self, now: DateTime<Utc>) -> Option<BaselineEstimate> {
        let window = self.settings.site.baseline_window_s;
        let from = now - chrono::Duration::seconds(i64::try_from(window).unwrap_or(i64::MAX / 2_000));
        let mean = |readings_only: bool| {
            let (sum, n) = self
                .meter_history
                .iter()
                .filter(|(t, _, quality)| *t >= from && *t <= now && (quality.is_measured() || !readings_only))
                .fold((0.0, 0usize), |(s, n), (_, kw, _)| (s + kw, n + 1));
            (n > 0).then(|| sum / n as f64)
        };
        let (kw, method) = match mean(true) {
            Some(kw) => (kw, "meter_before"),
            None => (mean(false)?, "model_before"),
        };
        Some(BaselineEstimate {
            kw,
            method: method.to_string(),
            window_s: window,
        })
    }

    /// Nodes behind the meter, as last measured (at least 1).
    pub(crate) fn nodes(&self) -> u32 {
        self.telemetry.as_ref().map_or(1, |t| t.nodes.max(1))
    }

    /// Take a grid event from any transport. The ack is decided without its ledger anchor
    /// ([`Ack::log_checkpoint`]): the runtime sets that from the ack's own record once it is
    /// flushed.
    pub fn submit(
        &mut self,
        mut event: GridEvent,
        transport: Transport,
        received: Received,
        now: DateTime<Utc>,
    ) -> Intake {
        if let Err(e) = event.validate() {
            self.counters.events_refused += 1;
            return Intake {
                effects: Vec::new(),
                decision: IntakeDecision::Invalid(e),
            };
        }
        // The protocol that brought it is the event's source, whatever the parser assumed.
        event.source = transport.source();
        let opt_out = |reason: String| {
            let mut ack = Ack::new(event.id.clone(), event.revision, now, Participation::Out);
            ack.reason = Some(reason);
            ack
        };
        let input_sha256 = received.sha256();
        let received_entry = Entry::EventReceived(EventReceived {
            received_at: now,
            source: transport.source(),
            transport,
            received,
        });
        let id = Some(event.id.clone());
        let wrong_site = event
            .site
            .as_ref()
            .filter(|site| **site != self.settings.site_id)
            .map(|site| {
                format!(
                    "event is for site {site:?}; this gateway serves {:?}",
                    self.settings.site_id
                )
            });
        let expired = (!event.cancel)
            .then(|| event.window.nominal_end())
            .flatten()
            .filter(|end| *end <= now)
            .map(|end| format!("the event's window ended at {end}, before it was received"));
        let mut effects = Vec::new();
        if let Some(reason) = wrong_site.or(expired) {
            let ack = opt_out(reason.clone());
            self.record(&mut effects, Recorded::new(received_entry, id.clone()));
            self.record(&mut effects, ack_entry(&ack, false, input_sha256.clone()));
            self.counters.events_refused += 1;
            return Intake {
                effects,
                decision: IntakeDecision::Refused { reason, ack },
            };
        }
        let key = (event.id.clone(), event.revision);
        if let Some(ack) = self.acks.get(&key) {
            let first = self.ack_inputs.get(&key);
            let differs = matches!((first, &input_sha256), (Some(a), Some(b)) if a != b);
            let mut ack = ack.clone();
            if differs {
                ack.reason = Some(format!(
                    "revision {} of {} is already held with a different body (SHA-256 {} first, this copy {}): \
                     this copy was ignored; send revision {} to change the event",
                    event.revision,
                    event.id,
                    first.map_or("?", String::as_str),
                    input_sha256.as_deref().unwrap_or("?"),
                    event.revision.saturating_add(1)
                ));
            }
            return Intake {
                effects,
                decision: IntakeDecision::Repeated { ack, differs },
            };
        }
        let raw_key = super::entry::dedup_key::event_received(&event.id, event.revision);
        let received_record = Recorded::new(received_entry, id.clone()).keyed(raw_key);

        let site = self.site_context();
        let baseline = self.baseline(now);
        let mut ceilings: Vec<Option<CeilingTarget>> = Vec::with_capacity(event.intervals.len());
        for (i, interval) in event.intervals.iter().enumerate() {
            match to_ceiling(&interval.target, &site, baseline.as_ref()) {
                Ok(c) => ceilings.push(c),
                Err(e) => {
                    let reason = format!("intervals[{i}]: {e}");
                    let ack = opt_out(reason.clone());
                    self.record(&mut effects, received_record);
                    self.record(&mut effects, ack_entry(&ack, true, input_sha256.clone()));
                    self.counters.events_refused += 1;
                    return Intake {
                        effects,
                        decision: IntakeDecision::Refused { reason, ack },
                    };
                }
            }
        }
        let pre_event_meter = baseline
            .as_ref()
            .map(|b| b.kw)
            .or_else(|| self.telemetry.as_ref().map(|t| t.meter_kw.value()))
            .unwrap_or(site.facility_max_kw);
        let held = self.book.get(&event.id).map(|e| e.revision());
        if let Some(held) = held.filter(|h| *h > event.revision) {
            let ack = opt_out(format!("stale revision: {held} is held"));
            self.record(&mut effects, received_record);
            self.record(&mut effects, ack_entry(&ack, false, input_sha256.clone()));
            return Intake {
                effects,
                decision: IntakeDecision::Stale { held, ack },
            };
        }
        if let Err(e) = EventBook::check_upsert(&event, &ceilings, pre_event_meter) {
            self.counters.events_refused += 1;
            return Intake {
                effects,
                decision: IntakeDecision::Invalid(e),
            };
        }
        let outcome = if held == Some(event.revision) {
            Upserted::Duplicate
        } else if event.cancel {
            Upserted::Cancelled
        } else if event.test {
            Upserted::Test
        } else if held.is_none() {
            Upserted::New
        } else {
            Upserted::Revised
        };

        // The interpretation: every target → ceiling, the baseline used, the GPU budget chain.
        let nodes = self.nodes();
        let first_ceiling = ceilings.iter().flatten().map(|c| c.ceiling_kw).reduce(f64::min);
        let budget = first_ceiling.and_then(|kw| {
            self.facility
                .ceiling_budget(Kilowatts(kw), nodes, &CoolingState::Settled)
                .ok()
        });
        let expectation = budget.as_ref().zip(first_ceiling).map(|(b, ceiling_kw)| {
            let forward = self.facility.forward(b.gpu_budget, nodes, &CoolingState::Settled).ok();
            expected_meter(
                ceiling_kw,
                MeterRangeKw {
                    lo: forward.as_ref().map_or(0.0, |m| m.lo.value()),
                    hi: b.fsl.value(),
                },
                forward.as_ref().map_or(b.fsl.value(), |m| m.hi.value()),
                pre_event_meter,
                site.facility_max_kw,
            )
        });
        let (expected, expectation_note) = match expectation {
            Some((range, note)) => (Some(range), note),
            None => (None, None),
        };
        let mut ack = Ack::new(event.id.clone(), event.revision, now, Participation::In);
        ack.reason = match (outcome, event.test) {
            (_, true) => Some("test event: recorded, not acted on".to_string()),
            (Upserted::Duplicate, _) => Some("revision already held".to_string()),
            (Upserted::Cancelled, _) => Some("cancelled".to_string()),
            _ if first_ceiling.is_none() => Some("price signal recorded; no price table maps it".to_string()),
            _ => expectation_note,
        };
        ack.accepted_target_kw = first_ceiling;
        ack.expected_meter_kw = expected;
        let interpreted = Entry::EventInterpreted(EventInterpreted {
            event: event.clone(),
            ceilings,
            baseline,
            pre_event_meter_kw: pre_event_meter,
            received_at: now,
            outcome,
            settled_budget: budget.as_ref().and_then(|b| serde_json::to_value(b).ok()),
            facility_fingerprint: self.facility.fingerprint().to_string(),
        });
        self.record(&mut effects, received_record);
        self.record(
            &mut effects,
            Recorded::new(interpreted, id).keyed(super::entry::dedup_key::interpretation(&event.id, event.revision)),
        );
        self.record(&mut effects, ack_entry(&ack, true, input_sha256.clone()));
        self.counters.events_accepted += 1;
        // A test event or a repeat cannot change any ceiling: no re-plan (a burst of them would
        // otherwise cost one pass over the whole book each).
        if !matches!(outcome, Upserted::Test | Upserted::Duplicate) {
            effects.push(Effect::Wake);
        }
        Intake {
            effects,
            decision: IntakeDecision::Accepted { ack },
        }
    }

    /// An operator opts the site out of an event (e.g. a must-run emergency): its ceiling stops
    /// counting at once, the event ends as opted out, the opt-out is recorded with the
    /// operator's name and reason, and an opt-out acknowledgment for the counterparty.
    pub fn operator_opt_out(
        &mut self,
        event_id: &str,
        operator: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(Ack, Vec<Effect>), OperatorError> {
        let invalid = |field, message: &str| OperatorError::Invalid {
            field,
            message: message.to_string(),
        };
        let printable = |s: &str| !s.chars().any(crate::event::model::is_unprintable);
        if operator.trim().is_empty() || operator.chars().count() > OPERATOR_MAX || !printable(operator) {
            return Err(invalid(
                "operator",
                "give the operator's name (1–128 printable characters)",
            ));
        }
        if reason.trim().is_empty() || reason.chars().count() > REASON_MAX || !printable(reason) {
            return Err(invalid("reason", "give a reason (1–1024 printable characters)"));
        }
        let entry = self
            .book
            .get(event_id)
            .ok_or_else(|| OperatorError::UnknownEvent(event_id.to_string()))?;
        if entry.release.is_some_and(|r| r.opted_out) {
            return Err(invalid("event_id", "the site has already opted out of this event"));
        }
        let revision = entry.revision();
        let mut ack = Ack::new(event_id, revision, now, Participation::Out);
        ack.reason = Some(format!("operator opt-out: {reason}"));
        let mut effects = Vec::new();
        self.record(
            &mut effects,
            Recorded::new(
                Entry::OperatorOptOut(OperatorOptOut {
                    at: now,
                    event_id: event_id.to_string(),
                    revision,
                    operator: operator.to_string(),
                    reason: reason.to_string(),
                }),
                Some(EventId::from(event_id)),
            ),
        );
        self.record(&mut effects, ack_entry(&ack, false, None));
        effects.push(Effect::OptOutNotice {
            event_id: event_id.to_string(),
            reason: reason.to_string(),
        });
        effects.push(Effect::Wake);
        Ok((ack, effects))
    }
}

/// The meter range to promise for a ceiling, and a note where the ceiling is not what it seems.
///
/// `model` is the facility model's range at the GPU budget the ceiling allows (its lower
/// estimate at that budget, and the ceiling's settled limit); `deepest_hi` the model's upper
/// estimate there. Two cases would otherwise promise nonsense:
/// - a ceiling below what the site can reach (a reduction larger than the baseline, a 0 kW
///   ceiling): the model's lower bound lies above the ceiling, and the range would be inverted.
///   The promise is what the deepest shed gives (`lo..deepest_hi`), and the note says the
///   ceiling will not be met;
/// - a ceiling above the load before the event (10× the meter): nothing needs to be shed, and
///   the meter stays near that load, at most the facility's maximum, not anywhere up to the
///   ceiling.
///
/// The range returned always has `lo <= hi`.
#[must_use]
pub fn expected_meter(
    ceiling_kw: f64,
    model: MeterRangeKw,
    deepest_hi: f64,
    pre_event_meter_kw: f64,
    facility_max_kw: f64,
) -> (MeterRangeKw, Option<String>) {
    if model.lo > model.hi {
        let hi = deepest_hi.max(model.lo);
        return (
            MeterRangeKw { lo: model.lo, hi },
            Some(format!(
                "the ceiling {ceiling_kw:.1} kW is below the lowest meter power the site can reach (about \
                 {:.1} kW with every GPU at its lowest cap): the gateway sheds as far as it can and expects \
                 {:.1}–{hi:.1} kW, above the ceiling",
                model.lo, model.lo
            )),
        );
    }
    if ceiling_kw >= pre_event_meter_kw {
        let cap = if facility_max_kw > 0.0 {
            ceiling_kw.min(facility_max_kw)
        } else {
            ceiling_kw
        };
        let hi = cap;
        let lo = model.lo.min(pre_event_meter_kw).min(hi);
        let above_max = if facility_max_kw > 0.0 && ceiling_kw > facility_max_kw {
            format!(", and above the facility's maximum of {facility_max_kw:.1} kW")
        } else {
            String::new()
        };
        return (
            MeterRangeKw { lo, hi },
            Some(format!(
                "the ceiling {ceiling_kw:.1} kW is above the site's load before the event \
                 ({pre_event_meter_kw:.1} kW){above_max}: nothing needs to be shed"
            )),
        );
    }
    (model, None)
}

/// The record of an ack. The ack of an (event, revision) decided on its merits keeps a key, so
/// that a repeat gets the same ack.
fn ack_entry(ack: &Ack, keyed: bool, input_sha256: Option<String>) -> Recorded {
    let record = Recorded::new(
        Entry::EventAcked(EventAcked {
            ack: ack.clone(),
            keyed,
            input_sha256,
        }),
        Some(ack.event_id.clone()),
    );
    if keyed {
        record.keyed(super::entry::dedup_key::ack(&ack.event_id, ack.revision))
    } else {
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_unreachable_ceiling_is_flagged_and_its_range_is_not_inverted() {
        // A 0 kW ceiling: the model's lower bound at a zero GPU budget is the non-GPU load.
        let (range, note) = expected_meter(0.0, MeterRangeKw { lo: 33.8, hi: 0.0 }, 41.0, 120.0, 200.0);
        assert_eq!(range, MeterRangeKw { lo: 33.8, hi: 41.0 });
        let note = note.expect("flagged");
        assert!(note.contains("below the lowest meter power"), "{note}");
    }

    #[test]
    fn a_ceiling_far_above_the_load_promises_the_load_not_the_ceiling() {
        let (range, note) = expected_meter(
            10_000.0,
            MeterRangeKw {
                lo: 7_191.0,
                hi: 10_000.0,
            },
            10_500.0,
            1_000.0,
            1_200.0,
        );
        assert_eq!(
            range,
            MeterRangeKw {
                lo: 1_000.0,
                hi: 1_200.0
            }
        );
        let note = note.expect("flagged");
        assert!(
            note.contains("nothing needs to be shed") && note.contains("facility's maximum"),
            "{note}"
        );
    }

    #[test]
    fn a_baseline_of_model_figures_is_named_so_and_readings_win_over_them() {
        use crate::control::cluster::Telemetry;
        use crate::control::{Input, Settings};
        use crate::facility::FacilityParams;
        use crate::meter::Quality;
        use crate::units::{Kilowatts, Watts};
        let settings = Settings {
            site_id: "site-1".into(),
            site: crate::control::config::SiteConfig::default(),
            control: crate::control::config::ControlConfig::default(),
            policy: crate::control::config::PolicyKind::Flexgate,
            objective: crate::alloc::Objective::Progress,
            hedge_tolerance: Some(crate::alloc::curve_aware::REGRET_TOLERANCE),
            facility: FacilityParams::for_nodes(8),
            probe: crate::control::probe::ProbeConfig::default(),
            forecast: crate::control::ForecastSettings::default(),
            settlement_methods: Vec::new(),
        };
        let mut controller = Controller::new(settings).expect("controller");
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).expect("valid");
        let sample = |at: DateTime<Utc>, kw: f64, quality: Quality| Telemetry {
            at,
            jobs: Vec::new(),
            gpu_board_power: Watts(0.0),
            meter_kw: Kilowatts(kw),
            meter_quality: quality,
            nodes: 8,
        };
        for s in 0..5 {
            let at = t0 + chrono::Duration::seconds(s);
            controller.handle(Input::Telemetry(sample(at, 100.0, Quality::Model)), at);
        }
        let now = t0 + chrono::Duration::seconds(10);
        let modelled = controller.baseline(now).expect("a baseline");
        assert_eq!((modelled.kw, modelled.method.as_str()), (100.0, "model_before"));
        let at = t0 + chrono::Duration::seconds(6);
        controller.handle(Input::Telemetry(sample(at, 80.0, Quality::Measured)), at);
        let read = controller.baseline(now).expect("a baseline");
        assert_eq!(
            (read.kw, read.method.as_str()),
            (80.0, "meter_before"),
            "readings only, once there are any"
        );
    }

    #[test]
    fn an_ordinary_ceiling_keeps_the_model_range() {
        let model = MeterRangeKw { lo: 90.0, hi: 100.0 };
        assert_eq!(expected_meter(100.0, model, 104.0, 130.0, 200.0), (model, None));
    }

    proptest! {
        #[test]
        fn the_promised_range_is_never_inverted(
            ceiling in 0.0..5_000.0f64,
            lo in 0.0..5_000.0f64,
            hi in 0.0..5_000.0f64,
            deepest in 0.0..5_000.0f64,
            pre in 0.0..5_000.0f64,
            max in 0.0..5_000.0f64,
        ) {
            let (range, _) = expected_meter(ceiling, MeterRangeKw { lo, hi }, deepest, pre, max);
            prop_assert!(range.lo <= range.hi, "{range:?}");
        }
    }
}
