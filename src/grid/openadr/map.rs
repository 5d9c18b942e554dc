//! OpenADR targets → the gateway's event model.
//!
//! The adapter crate speaks OpenADR's vocabulary ([`LoadTarget`]); the event book speaks
//! `dr.event/1`'s ([`Target`]). This is the one place the two meet, so the whole mapping (the
//! README's OpenADR signal table) can be read top to bottom here.

use chrono::{DateTime, Utc};
use flexgate_openadr::target::{LoadTarget, TargetInterval};
use flexgate_policies::event::{EventSource, GridEvent, Interval, Target, Window};

/// Site choices the OpenADR mapping needs.
#[derive(Debug, Clone, Copy)]
pub struct MapPolicy {
    /// Percent of baseline per level-offset step.
    pub level_offset_percent_per_step: f64,
}

/// One OpenADR target as a `dr.event/1` target. `None` means "no constraint in this span"
/// (normal operation), which the book treats as no ceiling.
pub fn to_target(target: &LoadTarget, policy: MapPolicy) -> Target {
    match target {
        LoadTarget::Ceiling { kw } => Target::MeterCeiling { kw: *kw },
        LoadTarget::Reduction { kw } => Target::Reduction {
            kw: *kw,
            baseline_kw: None,
        },
        LoadTarget::PercentReduction { percent } => Target::Percent {
            percent: *percent,
            baseline_kw: None,
        },
        LoadTarget::CapacityFraction { fraction } => Target::CapacityFraction { fraction: *fraction },
        LoadTarget::Level { level } => Target::Level { level: *level },
        LoadTarget::LevelOffset { steps } => Target::Percent {
            percent: (f64::from(*steps) * policy.level_offset_percent_per_step).min(100.0),
            baseline_kw: None,
        },
        LoadTarget::Price { value, unit } => Target::Price {
            per_mwh: per_mwh(*value, unit.as_deref()),
        },
        // Level 0 is "normal": the conversion yields no ceiling for it.
        LoadTarget::Normal => Target::Level { level: 0 },
    }
}

/// A price in currency per MWh. OpenADR prices are usually per kWh (2.0b `currencyPerKWh`,
/// 3.x `USD/KWH`); a unit naming MWh is taken as is.
pub fn per_mwh(value: f64, unit: Option<&str>) -> f64 {
    match unit.map(str::to_ascii_uppercase) {
        Some(u) if u.contains("MWH") => value,
        _ => value * 1000.0,
    }
}

/// What an OpenADR event says about timing, for [`grid_event`].
#[derive(Debug, Clone)]
pub struct Timing {
    /// Nominal start.
    pub start: DateTime<Utc>,
    /// Length in seconds; `None` = open-ended.
    pub duration_s: Option<u64>,
    /// Ramp-up seconds (2.0b x-eiRampUp).
    pub ramp_s: u64,
    /// Recovery seconds (2.0b x-eiRecovery).
    pub recovery_s: u64,
    /// Randomized start bound (2.0b startafter, 3.x randomizeStart).
    pub randomize_start_s: u64,
}

/// Identity and labels of an OpenADR event, for [`grid_event`].
#[derive(Debug, Clone)]
pub struct Labels {
    /// Event id as the gateway will know it.
    pub id: String,
    /// Revision (2.0b modificationNumber; 3.x tracker revision).
    pub revision: u64,
    /// Which adapter.
    pub source: EventSource,
    /// Program / market context.
    pub program: Option<String>,
    /// When the VTN created or modified this revision.
    pub issued_at: Option<DateTime<Utc>>,
    /// Sender priority on the gateway's scale (lower = more important).
    pub priority: Option<u32>,
    /// Test event: recorded and acknowledged, never acted on.
    pub test: bool,
}

/// Builds a [`GridEvent`] from an OpenADR event's labels, timing and one signal's intervals.
/// Intervals are placed relative to the window start; an interval before the start is clipped.
pub fn grid_event(labels: Labels, timing: Timing, intervals: &[TargetInterval], policy: MapPolicy) -> GridEvent {
    let mut mapped: Vec<Interval> = intervals
        .iter()
        .map(|i| Interval {
            offset_s: u64::try_from((i.start - timing.start).num_seconds()).unwrap_or(0),
            duration_s: i.duration_s,
            target: to_target(&i.target, policy),
        })
        .collect();
    mapped.sort_by_key(|i| i.offset_s);
    GridEvent {
        id: labels.id.into(),
        revision: labels.revision,
        source: labels.source,
        site: None,
        program: labels.program,
        issued_at: labels.issued_at,
        mandatory: false,
        test: labels.test,
        cancel: false,
        priority: labels.priority,
        window: Window {
            start: timing.start,
            ramp_s: timing.ramp_s,
            duration_s: timing.duration_s,
            recovery_s: timing.recovery_s,
            randomize_start_s: timing.randomize_start_s,
        },
        intervals: mapped,
    }
}

/// A cancellation of `id` at `revision` (the book needs a higher revision than it holds).
pub fn cancellation(id: &str, revision: u64, source: EventSource, now: DateTime<Utc>) -> GridEvent {
    GridEvent {
        id: id.into(),
        revision,
        source,
        site: None,
        program: None,
        issued_at: None,
        mandatory: false,
        test: false,
        cancel: true,
        priority: None,
        window: Window {
            start: now,
            ramp_s: 0,
            duration_s: Some(0),
            recovery_s: 0,
            randomize_start_s: 0,
        },
        intervals: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: MapPolicy = MapPolicy {
        level_offset_percent_per_step: 5.0,
    };

    #[test]
    fn every_load_target_has_its_dr_event_form() {
        assert_eq!(to_target(&LoadTarget::Ceiling { kw: 500.0 }, POLICY).form(), "ceiling");
        assert_eq!(
            to_target(&LoadTarget::Reduction { kw: 40.0 }, POLICY),
            Target::Reduction {
                kw: 40.0,
                baseline_kw: None
            }
        );
        assert_eq!(
            to_target(&LoadTarget::LevelOffset { steps: 3 }, POLICY),
            Target::Percent {
                percent: 15.0,
                baseline_kw: None
            }
        );
        assert_eq!(
            to_target(&LoadTarget::LevelOffset { steps: 40 }, POLICY),
            Target::Percent {
                percent: 100.0,
                baseline_kw: None
            }
        );
        assert_eq!(to_target(&LoadTarget::Normal, POLICY), Target::Level { level: 0 });
    }

    #[test]
    fn prices_per_kwh_become_per_mwh() {
        assert!((per_mwh(0.25, Some("USD/KWH")) - 250.0).abs() < 1e-9);
        assert!((per_mwh(0.25, None) - 250.0).abs() < 1e-9);
        assert!((per_mwh(90.0, Some("USD/MWh")) - 90.0).abs() < 1e-9);
    }

    #[test]
    fn intervals_are_placed_relative_to_the_window() {
        let start: DateTime<Utc> = "2026-07-01T18:00:00Z".parse().unwrap();
        let intervals = vec![
            TargetInterval {
                start: start + chrono::Duration::minutes(30),
                duration_s: Some(1800),
                target: LoadTarget::Ceiling { kw: 400.0 },
            },
            TargetInterval {
                start,
                duration_s: Some(1800),
                target: LoadTarget::Ceiling { kw: 500.0 },
            },
        ];
        let ev = grid_event(
            Labels {
                id: "E1".into(),
                revision: 2,
                source: EventSource::OpenAdr2b,
                program: Some("http://prog".into()),
                issued_at: None,
                priority: Some(1),
                test: false,
            },
            Timing {
                start,
                duration_s: Some(3600),
                ramp_s: 0,
                recovery_s: 0,
                randomize_start_s: 0,
            },
            &intervals,
            POLICY,
        );
        assert_eq!(ev.intervals[0].offset_s, 0);
        assert_eq!(ev.intervals[1].offset_s, 1800);
        assert_eq!(ev.intervals[1].target, Target::MeterCeiling { kw: 400.0 });
        ev.validate().unwrap();
    }
}
