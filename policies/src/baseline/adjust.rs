//! The day-of adjustment: the event day's load in the hours before the event against the
//! baseline's over the same local clock times, added or multiplied into every interval.
//!
//! The window ends before the event (an hour or more, so a site's ramp-down or pre-cooling
//! does not count) and is read on the other days at the same local clock times. The event day
//! must have every interval of the window: an adjustment from part of it would be another
//! rule, so without them none is applied and the report says why. The window's intervals are
//! the data's lying wholly inside it: for an event starting off the data's grid (14:15 on
//! hourly data) the window is shortened, never widened toward the event.

use super::event::Event;
use super::local::{Slot, mean, read_slots};
use super::report::{Adjustment, AdjustmentKind};
use chrono::Duration;

/// A method's adjustment rule.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdjustRule {
    /// Additive or multiplicative.
    pub kind: AdjustmentKind,
    /// The window starts this many minutes before the event.
    pub from_min: i64,
    /// It ends this many minutes before the event.
    pub to_min: i64,
    /// The cap as a share of the baseline over the window.
    pub cap: Option<f64>,
}

impl AdjustRule {
    /// The window's intervals on the event day.
    pub fn slots(&self, event: &Event<'_>) -> Vec<Slot> {
        let start = event.input.start;
        event.grid.inside(
            start - Duration::minutes(self.from_min),
            start - Duration::minutes(self.to_min),
            event.tz(),
        )
    }

    /// The rule in words.
    pub fn describe(&self) -> String {
        let hours = |m: i64| {
            if m % 60 == 0 {
                format!("{} h", m / 60)
            } else {
                format!("{m} min")
            }
        };
        let kind = match self.kind {
            AdjustmentKind::Additive => "additive",
            AdjustmentKind::Multiplicative => "multiplicative",
        };
        let cap = self
            .cap
            .map_or_else(|| "uncapped".to_string(), |c| format!("capped at ±{:.0} %", c * 100.0));
        format!(
            "{kind} day-of adjustment from {} before to {} before the start, {cap}",
            hours(self.from_min),
            hours(self.to_min)
        )
    }

    /// The adjustment for `event`, whose baseline averages `baseline_kw` over the window's
    /// local clock times (`None` when the baseline days lack them).
    pub fn adjust(&self, event: &Event<'_>, slots: &[Slot], baseline_kw: Option<f64>) -> Adjustment {
        let start = event.input.start;
        let event_day_kw = if slots.is_empty() {
            None
        } else {
            read_slots(event.input.data, slots).and_then(|xs| mean(&xs))
        };
        let mut adjustment = Adjustment {
            kind: self.kind,
            window_start: start - Duration::minutes(self.from_min),
            window_end: start - Duration::minutes(self.to_min),
            event_day_kw,
            baseline_kw,
            uncapped: None,
            value: self.neutral(),
            cap: self.cap,
            bound: false,
            applied: false,
            not_applied: None,
        };
        let (Some(event_kw), Some(base_kw)) = (event_day_kw, baseline_kw) else {
            adjustment.not_applied = Some(if event_day_kw.is_none() {
                "the event day lacks intervals in the adjustment window".to_string()
            } else {
                "the baseline days lack intervals in the adjustment window".to_string()
            });
            return adjustment;
        };
        let uncapped = match self.kind {
            AdjustmentKind::Additive => event_kw - base_kw,
            AdjustmentKind::Multiplicative => {
                if base_kw <= 0.0 {
                    adjustment.not_applied =
                        Some("the baseline is zero over the adjustment window: no ratio".to_string());
                    return adjustment;
                }
                event_kw / base_kw
            }
        };
        let (value, bound) = match (self.kind, self.cap) {
            (_, None) => (uncapped, false),
            (AdjustmentKind::Additive, Some(cap)) => {
                let limit = cap * base_kw;
                let v = uncapped.clamp(-limit, limit);
                (v, v != uncapped)
            }
            (AdjustmentKind::Multiplicative, Some(cap)) => {
                let v = uncapped.clamp(1.0 - cap, 1.0 + cap);
                (v, v != uncapped)
            }
        };
        adjustment.uncapped = Some(uncapped);
        adjustment.value = value;
        adjustment.bound = bound;
        adjustment.applied = true;
        adjustment
    }

    fn neutral(&self) -> f64 {
        match self.kind {
            AdjustmentKind::Additive => 0.0,
            AdjustmentKind::Multiplicative => 1.0,
        }
    }
}

/// `baseline_kw` with `adjustment` applied (never below zero: a load is not negative).
pub(crate) fn apply(adjustment: Option<&Adjustment>, baseline_kw: f64) -> f64 {
    let adjusted = match adjustment {
        Some(a) if a.applied => match a.kind {
            AdjustmentKind::Additive => baseline_kw + a.value,
            AdjustmentKind::Multiplicative => baseline_kw * a.value,
        },
        _ => baseline_kw,
    };
    adjusted.max(0.0)
}
