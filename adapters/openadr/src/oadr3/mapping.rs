//! OpenADR 3 payloads → protocol-neutral [`LoadTarget`]s over time.
//!
//! | payload type | value | target |
//! |---|---|---|
//! | `IMPORT_CAPACITY_LIMIT` | ≥ 0, units KW/W/MW (none: KW) | [`LoadTarget::Ceiling`] in kW |
//! | `DISPATCH_SETPOINT` | ≥ 0, units as above | [`LoadTarget::Ceiling`] in kW |
//! | `DISPATCH_SETPOINT_RELATIVE` | < 0 (less load) | [`LoadTarget::Reduction`] `{kw: |v|}`; 0 → [`LoadTarget::Normal`]; > 0 refused |
//! | `CONTROL_LEVEL_OFFSET` | integer −10..=10 | > 0 → [`LoadTarget::LevelOffset`] `{steps: v}`; ≤ 0 → [`LoadTarget::Normal`] |
//! | `CONTROL_LEVEL_OFFSET_PERCENT` | −1..=1 | > 0 → [`LoadTarget::PercentReduction`] `{percent: 100·v}`; ≤ 0 → [`LoadTarget::Normal`] |
//! | `SIMPLE` | integer 0..=3 | 0 → [`LoadTarget::Normal`], else [`LoadTarget::Level`] |
//! | `PRICE`, `EXPORT_PRICE` | any number | [`LoadTarget::Price`] with `currency/units` |
//! | `ALERT_*`, `GHG`, `OLS`, `CURVE`, `PRICE_ALTERNATE`, `IMPORT_CAPACITY_{SUBSCRIPTION,RESERVATION,RESERVATION_FEE,AVAILABLE,AVAILABLE_PRICE}`, `EXPORT_CAPACITY_*` | — | informational, not acted on |
//! | anything else (`CONTROL_SETPOINT`, `DISPATCH_INSTRUCTION`, `CHARGE_STATE_SETPOINT`, `CTA2045_*`, private types) | — | [`SignalRefusal::Unsupported`] |
//!
//! Signs. The 3.1.0 Definitions say of `CONTROL_LEVEL_OFFSET` "the higher the setpoint the less
//! load is consumed (where negative values would indicate higher load consumption)", so positive
//! steps mean less load and map to `LevelOffset` unchanged. For `CONTROL_LEVEL_OFFSET_PERCENT` the
//! text contradicts itself ("the lower the percentage the less load is consumed. Negative values
//! indicate higher load consumption"); this crate follows the explicit sign sentence, which agrees
//! with `CONTROL_LEVEL_OFFSET`: positive = less load. A request for *more* load (negative offset)
//! imposes no cap, so it maps to `Normal` with a warning. `DISPATCH_SETPOINT_RELATIVE` is a
//! "relative change of consumption": negative = less load. (The spec's enumeration schema gives it
//! `minimum: 0`, and hupe1980's VTN warns on negative values; a positive value asks for more load,
//! which a load-shedding VEN cannot promise, so it is refused as out of range.)
//!
//! Units. The specification's only real-power unit is `KW`; `W` and `MW` (private strings) are
//! converted. With no payload descriptor (or no units) the value is taken as kW, the
//! specification's only power unit, and a warning says so. Any other unit is a
//! [`SignalRefusal::Units`].
//!
//! Time. Intervals are placed by [`super::timing::resolve`]; a payload with `n > 1` values splits
//! its interval into `n` equal sub-intervals (User Guide §7.3, "multi-valued payloads"); the
//! event `duration` truncates the intervals, or loops them when longer. A looping event is
//! expanded from the cycle that holds `now` (earlier cycles are over) up to its end; for
//! `P9999Y` (forever) a single constant span simply becomes open-ended, and a longer pattern is
//! expanded for [`LOOP_HORIZON`], with [`EventTargets::expanded_until`] saying when to map again.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

use super::model::{Event, PayloadValue, ValuesMap};
use super::time::IsoDuration;
use super::timing::{End, TimingError, ZeroWindow, resolve, round_secs, zero_window};
use crate::target::{LoadTarget, SignalRefusal, TargetInterval};

/// How far ahead a looping event (`duration` longer than its intervals, e.g. `P9999Y`) is
/// expanded. Callers re-map before [`EventTargets::expanded_until`].
pub const LOOP_HORIZON: TimeDelta = TimeDelta::days(7);

/// Most target spans one event may expand to (loops and multi-value splits included).
pub const MAX_SPANS: usize = 10_000;

/// A target and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedTarget {
    /// The event interval's `id` (reports echo it).
    pub interval_id: i64,
    /// The payload type it was read from.
    pub payload_type: String,
    /// When and what.
    pub span: TargetInterval,
}

/// A payload this VEN does not act on but a consumer may want to show (alerts, GHG).
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadNote {
    /// The event interval's `id`.
    pub interval_id: i64,
    /// The payload type.
    pub payload_type: String,
    /// Its values, as JSON.
    pub values: Vec<Value>,
}

/// A payload that could not become a target.
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadRefusal {
    /// The event interval's `id`.
    pub interval_id: i64,
    /// The payload type.
    pub payload_type: String,
    /// Why (carries the 2.0b-style response code).
    pub refusal: SignalRefusal,
}

/// What an event asks of the site, interval by interval.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventTargets {
    /// Target spans, sorted by start then payload type.
    pub targets: Vec<MappedTarget>,
    /// Payloads not acted on.
    pub informational: Vec<PayloadNote>,
    /// Payloads refused; by the 2.0b convention a VEN that refuses any payload opts out of the
    /// whole event, but the choice is the caller's.
    pub refusals: Vec<PayloadRefusal>,
    /// Start of the first interval ("now" resolved); `None` when cancelled.
    pub start: Option<DateTime<Utc>>,
    /// End of the event; `None` = open-ended (or cancelled).
    pub end: Option<DateTime<Utc>>,
    /// `Some` when the event's window is empty, which this crate reads as a cancellation
    /// ([`zero_window`]); `targets` is then empty.
    pub cancelled: Option<ZeroWindow>,
    /// The event-level randomizeStart: the receiver shifts every start by the same uniform
    /// random amount in ±this (User Guide §7.3).
    pub randomize_start: Option<IsoDuration>,
    /// For a looping event expanded only up to a horizon: map it again before this time.
    pub expanded_until: Option<DateTime<Utc>>,
    /// Non-fatal oddities (assumed units, ignored more-load requests, skipped intervals).
    pub warnings: Vec<String>,
}

impl EventTargets {
    /// Just the spans, for consumers that do not care where each came from.
    pub fn target_intervals(&self) -> Vec<TargetInterval> {
        self.targets.iter().map(|t| t.span.clone()).collect()
    }
}

/// How a payload type is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadClass {
    /// Mapped to a [`LoadTarget`].
    Acted,
    /// Known, not a load instruction; listed, not acted on.
    Informational,
    /// Not understood as a load instruction: refused.
    Unsupported,
}

/// The class of a payload type (see the module table).
pub fn payload_class(payload_type: &str) -> PayloadClass {
    match payload_type {
        "IMPORT_CAPACITY_LIMIT"
        | "DISPATCH_SETPOINT"
        | "DISPATCH_SETPOINT_RELATIVE"
        | "CONTROL_LEVEL_OFFSET"
        | "CONTROL_LEVEL_OFFSET_PERCENT"
        | "SIMPLE"
        | "PRICE"
        | "EXPORT_PRICE" => PayloadClass::Acted,
        "GHG"
        | "OLS"
        | "CURVE"
        | "PRICE_ALTERNATE"
        | "IMPORT_CAPACITY_SUBSCRIPTION"
        | "IMPORT_CAPACITY_RESERVATION"
        | "IMPORT_CAPACITY_RESERVATION_FEE"
        | "IMPORT_CAPACITY_AVAILABLE"
        | "IMPORT_CAPACITY_AVAILABLE_PRICE" => PayloadClass::Informational,
        t if t.starts_with("ALERT_") || t.starts_with("EXPORT_CAPACITY_") => PayloadClass::Informational,
        _ => PayloadClass::Unsupported,
    }
}

/// A piece of a target before the event duration is applied.
#[derive(Debug, Clone)]
struct Piece {
    interval_id: i64,
    payload_type: String,
    start: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
    target: LoadTarget,
}

/// Maps every payload of `event` to targets over time; `now` resolves the `0001-01-01` start.
///
/// Errors only when intervals cannot be placed in time at all (the first interval has no start
/// and the event none either); value problems are per-payload [`PayloadRefusal`]s.
pub fn event_targets(event: &Event, now: DateTime<Utc>) -> Result<EventTargets, TimingError> {
    let mut out = EventTargets {
        randomize_start: event.interval_period.as_ref().and_then(|p| p.randomize_start),
        ..EventTargets::default()
    };
    if let Some(zero) = zero_window(event) {
        out.cancelled = Some(zero);
        return Ok(out);
    }
    let slots = resolve(event, Some(now), &mut out.warnings)?;
    let Some(first_start) = slots.first().and_then(|s| s.start) else {
        return Ok(out);
    };
    out.start = Some(first_start);
    let mut pieces = Vec::new();
    let mut units_warned = Vec::<String>::new();
    for slot in &slots {
        let Some(start) = slot.start else { continue };
        let end = match slot.end {
            End::At(t) => Some(t),
            _ => None,
        };
        let interval = &event.intervals[slot.index];
        for payload in &interval.payloads {
            match payload_class(&payload.kind) {
                PayloadClass::Informational => out.informational.push(PayloadNote {
                    interval_id: slot.id,
                    payload_type: payload.kind.clone(),
                    values: payload.values.iter().map(PayloadValue::to_json).collect(),
                }),
                PayloadClass::Unsupported => out.refusals.push(PayloadRefusal {
                    interval_id: slot.id,
                    payload_type: payload.kind.clone(),
                    refusal: SignalRefusal::Unsupported {
                        name: payload.kind.clone(),
                        kind: "payload".into(),
                    },
                }),
                PayloadClass::Acted => {
                    let ctx = Ctx {
                        event,
                        interval_id: slot.id,
                        payload,
                    };
                    match map_payload(&ctx, start, end, &mut out.warnings, &mut units_warned) {
                        Ok(mut p) => pieces.append(&mut p),
                        Err(refusal) => out.refusals.push(PayloadRefusal {
                            interval_id: slot.id,
                            payload_type: payload.kind.clone(),
                            refusal,
                        }),
                    }
                }
            }
        }
    }
    // The pattern's extent, from the slots (refused payloads do not change the timing).
    let pattern_end: Option<DateTime<Utc>> = slots.iter().try_fold(first_start, |acc, s| match s.end {
        End::At(t) => Some(acc.max(t)),
        _ => None,
    });
    let pieces = apply_event_duration(event, first_start, pattern_end, pieces, now, &mut out);
    let mut targets: Vec<MappedTarget> = pieces
        .into_iter()
        .map(|p| MappedTarget {
            interval_id: p.interval_id,
            payload_type: p.payload_type,
            span: TargetInterval {
                start: p.start,
                duration_s: p.end.map(|e| round_secs(e - p.start)),
                target: p.target,
            },
        })
        .collect();
    targets.sort_by(|a, b| {
        a.span
            .start
            .cmp(&b.span.start)
            .then_with(|| a.payload_type.cmp(&b.payload_type))
    });
    out.targets = targets;
    Ok(out)
}

/// Truncates or loops `pieces` by `event.duration`, and sets `out.end` / `out.expanded_until`.
fn apply_event_duration(
    event: &Event,
    first_start: DateTime<Utc>,
    pattern_end: Option<DateTime<Utc>>,
    pieces: Vec<Piece>,
    now: DateTime<Utc>,
    out: &mut EventTargets,
) -> Vec<Piece> {
    let Some(duration) = event.duration else {
        out.end = pattern_end;
        return pieces;
    };
    let event_end = duration.end_from(first_start); // None = forever
    let Some(pattern_end) = pattern_end else {
        // Some interval is open-ended already: nothing to loop, only truncate.
        out.end = event_end;
        return truncate(pieces, event_end);
    };
    if event_end.is_some_and(|e| e <= pattern_end) {
        out.end = event_end;
        return truncate(pieces, event_end);
    }
    // The event lasts longer than its intervals: they repeat (User Guide §7.3 "looping").
    let period = pattern_end - first_start;
    if period <= TimeDelta::zero() || pieces.is_empty() {
        // Nothing to repeat. (Without this, an event of P9989Y whose payloads map to nothing
        // walked every one of its cycles, which no span limit stopped: seconds for one-hour
        // intervals, for ever for one-second ones, once past 2^31 cycles.)
        out.end = event_end;
        return pieces;
    }
    let covers_pattern =
        |p: &Piece| p.start <= first_start && p.end.is_some_and(|e| e >= pattern_end) && pieces.len() == 1;
    if event_end.is_none() && pieces.first().is_some_and(covers_pattern) {
        // One constant span repeated for ever is that span, open-ended.
        out.end = None;
        return pieces
            .into_iter()
            .map(|p| Piece {
                start: p.start.max(first_start),
                end: None,
                ..p
            })
            .collect();
    }
    let horizon_end = match event_end {
        Some(e) => e,
        None => now + LOOP_HORIZON,
    };
    // Start from the cycle that holds `now` (earlier cycles are over).
    let elapsed = now - first_start;
    let first_cycle = if elapsed <= TimeDelta::zero() {
        0
    } else {
        match (elapsed.num_nanoseconds(), period.num_nanoseconds()) {
            (Some(e), Some(p)) if p > 0 => e / p,
            _ => elapsed.num_milliseconds() / period.num_milliseconds().max(1),
        }
    };
    let mut expanded = Vec::new();
    let mut cycle = first_cycle;
    let mut capped = false;
    // A cycle number beyond i32 cannot be a multiplier; chrono's range ends long before anyway.
    // Times past chrono's range (year 262,143) end the expansion: that far is forever for a VEN.
    'cycles: while let Some(offset) = cycle_offset(period, cycle) {
        let Some(cycle_start) = first_start.checked_add_signed(offset) else {
            break;
        };
        if cycle_start >= horizon_end {
            break;
        }
        for p in &pieces {
            if expanded.len() >= MAX_SPANS {
                capped = true;
                break 'cycles;
            }
            let Some(start) = p.start.checked_add_signed(offset) else {
                break 'cycles;
            };
            expanded.push(Piece {
                start,
                end: p.end.and_then(|e| e.checked_add_signed(offset)),
                ..p.clone()
            });
        }
        cycle += 1;
    }
    if capped {
        out.warnings.push(format!(
            "looping event expanded to {MAX_SPANS} spans; later repetitions omitted"
        ));
    }
    out.end = event_end;
    if event_end.is_none() {
        out.expanded_until = cycle_offset(period, cycle).and_then(|offset| first_start.checked_add_signed(offset));
    }
    truncate(expanded, event_end)
}

/// `period × cycle`; `None` past `TimeDelta`'s range. Cycle numbers can pass i32 (one-second
/// intervals looping since year 1), which `TimeDelta::checked_mul` does not take.
fn cycle_offset(period: TimeDelta, cycle: i64) -> Option<TimeDelta> {
    if let Ok(c) = i32::try_from(cycle) {
        return period.checked_mul(c);
    }
    let nanos = i128::from(period.num_nanoseconds()?) * i128::from(cycle);
    let secs = i64::try_from(nanos.div_euclid(1_000_000_000)).ok()?;
    let sub = u32::try_from(nanos.rem_euclid(1_000_000_000)).ok()?;
    TimeDelta::new(secs, sub)
}

/// Drops pieces that start at or after `end` and clips the rest to it.
fn truncate(pieces: Vec<Piece>, end: Option<DateTime<Utc>>) -> Vec<Piece> {
    let Some(end) = end else { return pieces };
    pieces
        .into_iter()
        .filter(|p| p.start < end)
        .map(|p| Piece {
            end: Some(p.end.map_or(end, |e| e.min(end))),
            ..p
        })
        .collect()
}

struct Ctx<'a> {
    event: &'a Event,
    interval_id: i64,
    payload: &'a ValuesMap,
}

impl Ctx<'_> {
    fn what(&self) -> String {
        format!("{} in interval {}", self.payload.kind, self.interval_id)
    }

    fn out_of_range(&self, value: &PayloadValue, expected: &str) -> SignalRefusal {
        SignalRefusal::OutOfRange {
            what: self.what(),
            value: value.to_json().to_string(),
            expected: expected.into(),
        }
    }

    fn number(&self, value: &PayloadValue) -> Result<f64, SignalRefusal> {
        value.as_f64().ok_or_else(|| self.out_of_range(value, "a number"))
    }

    /// Factor to kW for the payload's units.
    fn kw_factor(&self, warnings: &mut Vec<String>, warned: &mut Vec<String>) -> Result<f64, SignalRefusal> {
        let descriptor = self.event.payload_descriptor(&self.payload.kind);
        let units = descriptor.and_then(|d| d.units.as_deref()).map(str::trim);
        match units.map(str::to_ascii_uppercase).as_deref() {
            None | Some("") => {
                if !warned.contains(&self.payload.kind) {
                    warned.push(self.payload.kind.clone());
                    warnings.push(format!(
                        "{}: no units in the event's payloadDescriptors; assumed KW",
                        self.payload.kind
                    ));
                }
                Ok(1.0)
            }
            Some("KW") => Ok(1.0),
            Some("W") => Ok(0.001),
            Some("MW") => Ok(1000.0),
            Some(_) => Err(SignalRefusal::Units {
                what: self.what(),
                units: units.unwrap_or_default().to_string(),
            }),
        }
    }
}

/// Maps one payload over `[start, end)`; several values split the span equally.
fn map_payload(
    ctx: &Ctx<'_>,
    start: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
    warnings: &mut Vec<String>,
    units_warned: &mut Vec<String>,
) -> Result<Vec<Piece>, SignalRefusal> {
    let values = &ctx.payload.values;
    if values.is_empty() {
        return Err(SignalRefusal::OutOfRange {
            what: ctx.what(),
            value: "[]".into(),
            expected: "at least one value".into(),
        });
    }
    let n = values.len();
    if n > MAX_SPANS {
        return Err(SignalRefusal::OutOfRange {
            what: ctx.what(),
            value: format!("{n} values"),
            expected: format!("at most {MAX_SPANS} values"),
        });
    }
    let step = match (n, end) {
        (1, _) => None,
        (_, Some(e)) => {
            let n32 = i32::try_from(n).unwrap_or(i32::MAX);
            Some((e - start) / n32)
        }
        (_, None) => {
            return Err(SignalRefusal::OutOfRange {
                what: ctx.what(),
                value: format!("{n} values"),
                expected: "one value in an open-ended interval (several values split an interval's duration)".into(),
            });
        }
    };
    let targets = values
        .iter()
        .map(|v| map_value(ctx, v, warnings, units_warned))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(targets
        .into_iter()
        .enumerate()
        .map(|(i, target)| {
            let (s, e) = match step {
                None => (start, end),
                Some(step) => {
                    let i32i = i32::try_from(i).unwrap_or(i32::MAX);
                    let s = start + step * i32i;
                    let e = if i + 1 == n {
                        end
                    } else {
                        Some(start + step * (i32i + 1))
                    };
                    (s, e)
                }
            };
            Piece {
                interval_id: ctx.interval_id,
                payload_type: ctx.payload.kind.clone(),
                start: s,
                end: e,
                target,
            }
        })
        .collect())
}

/// Maps one value of an acted-on payload type.
fn map_value(
    ctx: &Ctx<'_>,
    value: &PayloadValue,
    warnings: &mut Vec<String>,
    units_warned: &mut Vec<String>,
) -> Result<LoadTarget, SignalRefusal> {
    let kind = ctx.payload.kind.as_str();
    match kind {
        "IMPORT_CAPACITY_LIMIT" | "DISPATCH_SETPOINT" => {
            let v = ctx.number(value)?;
            if v < 0.0 {
                return Err(ctx.out_of_range(value, ">= 0"));
            }
            Ok(LoadTarget::Ceiling {
                kw: v * ctx.kw_factor(warnings, units_warned)?,
            })
        }
        "DISPATCH_SETPOINT_RELATIVE" => {
            let v = ctx.number(value)?;
            if v > 0.0 {
                return Err(ctx.out_of_range(value, "<= 0 (negative = less load; this VEN only sheds)"));
            }
            let factor = ctx.kw_factor(warnings, units_warned)?;
            if v == 0.0 {
                Ok(LoadTarget::Normal)
            } else {
                Ok(LoadTarget::Reduction { kw: -v * factor })
            }
        }
        "CONTROL_LEVEL_OFFSET" => {
            let v = ctx.number(value)?;
            if v.fract() != 0.0 || !(-10.0..=10.0).contains(&v) {
                return Err(ctx.out_of_range(value, "an integer in -10..=10"));
            }
            if v < 0.0 {
                warnings.push(format!("{}: {v} asks for more load; no cap", ctx.what()));
            }
            if v <= 0.0 {
                Ok(LoadTarget::Normal)
            } else {
                Ok(LoadTarget::LevelOffset { steps: v as u32 })
            }
        }
        "CONTROL_LEVEL_OFFSET_PERCENT" => {
            let v = ctx.number(value)?;
            if !(-1.0..=1.0).contains(&v) {
                return Err(ctx.out_of_range(value, "a fraction in -1.0..=1.0"));
            }
            let units = ctx
                .event
                .payload_descriptor(kind)
                .and_then(|d| d.units.as_deref())
                .map(str::trim)
                .unwrap_or("");
            if !units.is_empty() && !units.eq_ignore_ascii_case("PERCENT") {
                return Err(SignalRefusal::Units {
                    what: ctx.what(),
                    units: units.to_string(),
                });
            }
            if v < 0.0 {
                warnings.push(format!("{}: {v} asks for more load; no cap", ctx.what()));
            }
            if v <= 0.0 {
                Ok(LoadTarget::Normal)
            } else {
                Ok(LoadTarget::PercentReduction { percent: v * 100.0 })
            }
        }
        "SIMPLE" => {
            let v = ctx.number(value)?;
            if v.fract() != 0.0 || !(0.0..=3.0).contains(&v) {
                return Err(ctx.out_of_range(value, "an integer in 0..=3"));
            }
            if v == 0.0 {
                Ok(LoadTarget::Normal)
            } else {
                Ok(LoadTarget::Level { level: v as u8 })
            }
        }
        "PRICE" | "EXPORT_PRICE" => {
            let v = ctx.number(value)?;
            let d = ctx.event.payload_descriptor(kind);
            let currency = d.and_then(|d| d.currency.clone());
            let units = d.and_then(|d| d.units.clone());
            let unit = match (currency, units) {
                (Some(c), Some(u)) => Some(format!("{c}/{u}")),
                (c, u) => c.or(u),
            };
            Ok(LoadTarget::Price { value: v, unit })
        }
        other => Err(SignalRefusal::Unsupported {
            name: other.to_string(),
            kind: "payload".into(),
        }),
    }
}
