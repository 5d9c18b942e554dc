//! What one OpenADR 2.0b event signal asks for, in the neutral [`LoadTarget`] vocabulary.
//!
//! [`map_signal`] implements the table below (the operator's view of it, with the site
//! parameters each target uses, is "Signals → ceilings" in the repository's `README.md`). A VEN
//! calls it for every signal of every event it receives and then knows, per signal, whether it
//! is
//!
//! - a **load signal** ([`SignalMeaning::Load`]): one [`TargetInterval`] per wire interval, to be
//!   acted on;
//! - an **informational price** ([`SignalMeaning::Price`]): [`LoadTarget::Price`] intervals that a
//!   consumer acts on only when it has a price table;
//! - **acknowledged only** ([`SignalMeaning::Acknowledged`]): BID_*, CHARGE_STATE and the relative
//!   price types, which never become a cap;
//! - or a [`SignalRefusal`] carrying the `eventResponse` code to opt out with (460 unsupported,
//!   454 out of range / bad units).
//!
//! Rules, in the order they are applied:
//!
//! 1. **Scaling.** Power values are scaled by the signal's itemBase before anything else:
//!    `kW = value × siScaleCode × unit / 1000`, with siScaleCode `p n micro m c d k M G T none`
//!    (absent = `none` = ×1) and units `W` (×1), `kW`/`KW` (×1e3) or `MW` (×1e6; `mW` is refused).
//!    Only `powerReal` items are accepted for a cap; an absent itemBase on a power signal is
//!    refused (`Units`, 454) because guessing W vs kW for a cap is worse than opting out.
//! 2. **Per-type mapping** (a value that is not finite is always `OutOfRange`):
//!
//! | signal / type | value `v` | target |
//! |---|---|---|
//! | LOAD_DISPATCH / setpoint | kW ≥ 0 | `Ceiling { kw }` (negative → 454) |
//! | LOAD_DISPATCH / delta | kW ≤ 0 | `Reduction { kw: |v| }`; 0 → `Normal`; > 0 (a load *increase*) → 454 |
//! | LOAD_CONTROL / x-loadControlCapacity | [0, 1] | `CapacityFraction`; 1 → `Normal`; outside → 454 |
//! | LOAD_CONTROL / x-loadControlPercentOffset | [-100, 0] | `PercentReduction { -v }`; 0 → `Normal`; outside → 454 |
//! | LOAD_CONTROL / x-loadControlLevelOffset | integer ≤ 0 | `LevelOffset { steps: -v }`; 0 → `Normal`; > 0 or fractional → 454 |
//! | LOAD_CONTROL / x-loadControlSetpoint | power itemBase | `Ceiling { kw }` like a setpoint; other units → 460 |
//! | SIMPLE (or 2.0a `simple`) / level | integer 0..=3 | `Level { level }`; 0 → `Normal`; otherwise → 454 |
//! | ELECTRICITY_PRICE, ENERGY_PRICE, DEMAND_CHARGE / price | any | `Price { value × scale, unit }` |
//! | the same names / priceRelative, priceMultiplier, others | — | `Acknowledged` |
//! | BID_PRICE, BID_LOAD, BID_ENERGY, CHARGE_STATE / any | — | `Acknowledged` |
//! | anything else (incl. `x-` names, unknown types of a load signal) | — | `Unsupported` (460) |
//!
//! Level 0, offset 0, delta 0 and capacity 1.0 all mean "normal operation" and become
//! [`LoadTarget::Normal`] (as documented on that variant), so a consumer has one way to spell
//! "no constraint in this interval".
//!
//! 3. **Several values in one interval.** 2.0b normally carries one `payloadFloat` per interval.
//!    When there are several, every value is validated (one bad value refuses the signal) and
//!    the *most restrictive* target is kept (lowest ceiling or capacity, largest reduction,
//!    percentage, level or offset; any constraint beats `Normal`). For prices the highest value
//!    is kept. An interval without a value is refused (454).
//! 4. **Timing.** Interval `i` starts at the event's dtstart plus the durations of intervals
//!    `0..i`. An interval with a positive duration lasts that long. An interval whose duration
//!    is absent or `PT0S` lasts until the event ends: `duration_s: None` in an open-ended event,
//!    otherwise the remainder of the event's active period. Sub-second durations round up to
//!    whole seconds; a negative duration, or one that runs past the calendar, is refused (454).

use chrono::{DateTime, TimeDelta, Utc};

use super::{Event, ItemBase, Signal};
use crate::target::{LoadTarget, SignalRefusal, TargetInterval};

/// What one signal of an event means for the site.
#[derive(Debug, Clone, PartialEq)]
pub enum SignalMeaning {
    /// A load signal: act on these intervals.
    Load(Vec<TargetInterval>),
    /// A price signal: informational; every interval is a [`LoadTarget::Price`]. Act on it only
    /// with a price table.
    Price(Vec<TargetInterval>),
    /// A signal that is acknowledged (the event may be opted into) but never becomes a target:
    /// BID_*, CHARGE_STATE, relative price types.
    Acknowledged,
}

impl SignalMeaning {
    /// The intervals, if the signal has any (empty for [`SignalMeaning::Acknowledged`]).
    pub fn intervals(&self) -> &[TargetInterval] {
        match self {
            SignalMeaning::Load(i) | SignalMeaning::Price(i) => i,
            SignalMeaning::Acknowledged => &[],
        }
    }

    /// `true` for a load signal (one a consumer must act on).
    pub fn is_load(&self) -> bool {
        matches!(self, SignalMeaning::Load(_))
    }
}

/// Whether a signal name is one of the 2.0b load signals (LOAD_DISPATCH, LOAD_CONTROL, SIMPLE).
///
/// A VEN opts out of an event when one of these is refused; a consumer uses it to tell a load
/// signal from an informational one before mapping.
pub fn is_load_signal_name(name: &str) -> bool {
    matches!(name.trim(), "LOAD_DISPATCH" | "LOAD_CONTROL" | "SIMPLE" | "simple")
}

/// Maps one signal of `event` to what it asks for (see the module docs for the full table).
/// `event` supplies dtstart and the active period, from which interval starts and open-ended
/// durations are derived.
pub fn map_signal(event: &Event, signal: &Signal) -> Result<SignalMeaning, SignalRefusal> {
    let name = signal.name.trim();
    let kind = signal.signal_type.trim();
    let what = |i: usize| format!("{name}/{kind} signal {:?} interval {i}", signal.id);
    let unsupported = || SignalRefusal::Unsupported {
        name: name.to_string(),
        kind: kind.to_string(),
    };
    match (name, kind) {
        ("LOAD_DISPATCH", "setpoint") | ("LOAD_CONTROL", "x-loadControlSetpoint") => {
            if name == "LOAD_CONTROL" && !is_power_item(signal.item_base.as_ref()) {
                return Err(unsupported());
            }
            let kw_per_unit = power_to_kw(signal.item_base.as_ref(), &what(0))?;
            load(event, signal, |v, i| setpoint(v * kw_per_unit, &what(i)))
        }
        ("LOAD_DISPATCH", "delta") => {
            let kw_per_unit = power_to_kw(signal.item_base.as_ref(), &what(0))?;
            load(event, signal, |v, i| delta(v * kw_per_unit, &what(i)))
        }
        ("LOAD_CONTROL", "x-loadControlCapacity") => load(event, signal, |v, i| capacity(v, &what(i))),
        ("LOAD_CONTROL", "x-loadControlPercentOffset") => load(event, signal, |v, i| percent_offset(v, &what(i))),
        ("LOAD_CONTROL", "x-loadControlLevelOffset") => load(event, signal, |v, i| level_offset(v, &what(i))),
        ("SIMPLE" | "simple", "level") => load(event, signal, |v, i| simple_level(v, &what(i))),
        ("ELECTRICITY_PRICE" | "ENERGY_PRICE" | "DEMAND_CHARGE", "price") => {
            let factor = match signal.item_base.as_ref().and_then(|b| b.scale.as_deref()) {
                None => 1.0,
                Some(code) => si_scale_factor(code).ok_or_else(|| SignalRefusal::Units {
                    what: what(0),
                    units: format!("siScaleCode {code}"),
                })?,
            };
            let unit = price_unit(signal.item_base.as_ref());
            let spans = spans(event, signal, &what)?;
            let mut out = Vec::with_capacity(spans.len());
            for (i, (interval, (start, duration_s))) in signal.intervals.iter().zip(spans).enumerate() {
                let mut best: Option<f64> = None;
                for &v in &interval.values {
                    let v = finite(v * factor, &what(i))?;
                    best = Some(best.map_or(v, |b: f64| b.max(v)));
                }
                let value = best.ok_or_else(|| no_value(&what(i)))?;
                out.push(TargetInterval {
                    start,
                    duration_s,
                    target: LoadTarget::Price {
                        value,
                        unit: unit.clone(),
                    },
                });
            }
            Ok(SignalMeaning::Price(out))
        }
        ("ELECTRICITY_PRICE" | "ENERGY_PRICE" | "DEMAND_CHARGE", _)
        | ("BID_PRICE" | "BID_LOAD" | "BID_ENERGY" | "CHARGE_STATE", _) => Ok(SignalMeaning::Acknowledged),
        _ => Err(unsupported()),
    }
}

/// The multiplier of an SI scale code (`k` → 1e3, `M` → 1e6, `none` → 1, ...); `None` for a
/// code the 2.0b schema does not define. Case-sensitive on purpose: `m` is milli, `M` mega.
pub fn si_scale_factor(code: &str) -> Option<f64> {
    Some(match code.trim() {
        "p" => 1e-12,
        "n" => 1e-9,
        "micro" => 1e-6,
        "m" => 1e-3,
        "c" => 1e-2,
        "d" => 1e-1,
        "none" | "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => return None,
    })
}

/// kW per wire unit for a power itemBase: siScaleCode × units, divided by 1000 (W → kW).
///
/// Refuses (`Units`, 454) a missing itemBase, an item that is not `powerReal`, units other than
/// W/kW/MW, or an unknown scale code, because each would make a cap wrong by orders of
/// magnitude.
pub fn power_to_kw(item: Option<&ItemBase>, what: &str) -> Result<f64, SignalRefusal> {
    let units_err = |units: String| SignalRefusal::Units {
        what: what.to_string(),
        units,
    };
    let item = item.ok_or_else(|| units_err("(no itemBase)".to_string()))?;
    if item.kind != "powerReal" {
        return Err(units_err(format!("{} item", item.kind)));
    }
    let units = item.units.as_deref().map(str::trim).unwrap_or("");
    let unit_w = match units {
        "W" | "w" => 1.0,
        "kW" | "KW" | "kw" => 1e3,
        "MW" => 1e6,
        _ => return Err(units_err(units.to_string())),
    };
    let scale = match item.scale.as_deref() {
        None => 1.0,
        Some(code) => si_scale_factor(code).ok_or_else(|| units_err(format!("{units} with siScaleCode {code}")))?,
    };
    Ok(scale * unit_w / 1000.0)
}

fn is_power_item(item: Option<&ItemBase>) -> bool {
    item.is_some_and(|b| b.kind == "powerReal")
}

fn price_unit(item: Option<&ItemBase>) -> Option<String> {
    let item = item?;
    let units = item.units.as_deref().map(str::trim).filter(|u| !u.is_empty());
    let per = match item.kind.as_str() {
        "currencyPerKWh" => Some("KWH"),
        "currencyPerKW" => Some("KW"),
        "currencyPerThm" => Some("THM"),
        _ => None,
    };
    match (units, per) {
        (Some(u), Some(p)) => Some(format!("{u}/{p}")),
        (Some(u), None) => Some(u.to_string()),
        (None, Some(p)) => Some(format!("per {p}")),
        (None, None) => None,
    }
}

/// Maps every interval of a load signal with `f(value, interval index)`, keeping the most
/// restrictive target when an interval carries several values.
fn load(
    event: &Event,
    signal: &Signal,
    f: impl Fn(f64, usize) -> Result<LoadTarget, SignalRefusal>,
) -> Result<SignalMeaning, SignalRefusal> {
    let what = |i: usize| {
        format!(
            "{}/{} signal {:?} interval {i}",
            signal.name, signal.signal_type, signal.id
        )
    };
    let spans = spans(event, signal, &what)?;
    let mut out = Vec::with_capacity(spans.len());
    for (i, (interval, (start, duration_s))) in signal.intervals.iter().zip(spans).enumerate() {
        let mut best: Option<LoadTarget> = None;
        for &v in &interval.values {
            let t = f(finite(v, &what(i))?, i)?;
            best = Some(match best {
                Some(b) if !more_restrictive(&t, &b) => b,
                _ => t,
            });
        }
        let target = best.ok_or_else(|| no_value(&what(i)))?;
        out.push(TargetInterval {
            start,
            duration_s,
            target,
        });
    }
    Ok(SignalMeaning::Load(out))
}

/// `true` when `a` constrains the site more than `b` (both from the same signal type).
fn more_restrictive(a: &LoadTarget, b: &LoadTarget) -> bool {
    use LoadTarget::*;
    match (a, b) {
        (Normal, _) => false,
        (_, Normal) => true,
        (Ceiling { kw: x }, Ceiling { kw: y }) => x < y,
        (Reduction { kw: x }, Reduction { kw: y }) => x > y,
        (PercentReduction { percent: x }, PercentReduction { percent: y }) => x > y,
        (CapacityFraction { fraction: x }, CapacityFraction { fraction: y }) => x < y,
        (Level { level: x }, Level { level: y }) => x > y,
        (LevelOffset { steps: x }, LevelOffset { steps: y }) => x > y,
        _ => false,
    }
}

/// Start and length (whole seconds, `None` = until the event ends) of an interval.
type Span = (DateTime<Utc>, Option<u64>);

/// The [`Span`] of each interval.
fn spans(event: &Event, signal: &Signal, what: &dyn Fn(usize) -> String) -> Result<Vec<Span>, SignalRefusal> {
    let too_late = |i: usize| SignalRefusal::OutOfRange {
        what: what(i),
        value: "(overflow)".to_string(),
        expected: "interval times within the calendar".to_string(),
    };
    let end = match event.duration.filter(|d| *d > TimeDelta::zero()) {
        Some(d) => Some(event.dtstart.checked_add_signed(d).ok_or_else(|| too_late(0))?),
        None => None,
    };
    let mut at = event.dtstart;
    let mut out = Vec::with_capacity(signal.intervals.len());
    for (i, interval) in signal.intervals.iter().enumerate() {
        let duration = interval.duration.unwrap_or_default();
        if duration < TimeDelta::zero() {
            return Err(SignalRefusal::OutOfRange {
                what: what(i),
                value: format!("{}s", duration.num_seconds()),
                expected: "a non-negative interval duration".to_string(),
            });
        }
        let duration_s = if duration > TimeDelta::zero() {
            Some(ceil_seconds(duration))
        } else {
            end.map(|e| if e > at { ceil_seconds(e - at) } else { 0 })
        };
        out.push((at, duration_s));
        at = at.checked_add_signed(duration).ok_or_else(|| too_late(i))?;
    }
    Ok(out)
}

fn ceil_seconds(d: TimeDelta) -> u64 {
    let whole = d.num_seconds().max(0) as u64;
    if d.subsec_nanos() > 0 { whole + 1 } else { whole }
}

fn finite(v: f64, what: &str) -> Result<f64, SignalRefusal> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(out_of_range(what, v, "a finite number"))
    }
}

fn no_value(what: &str) -> SignalRefusal {
    SignalRefusal::OutOfRange {
        what: what.to_string(),
        value: "(none)".to_string(),
        expected: "one payload value".to_string(),
    }
}

fn out_of_range(what: &str, v: f64, expected: &str) -> SignalRefusal {
    SignalRefusal::OutOfRange {
        what: what.to_string(),
        value: format!("{v}"),
        expected: expected.to_string(),
    }
}

fn setpoint(kw: f64, what: &str) -> Result<LoadTarget, SignalRefusal> {
    let kw = finite(kw, what)?;
    if kw < 0.0 {
        return Err(out_of_range(
            what,
            kw,
            "a setpoint of at least 0 kW (a negative setpoint means export)",
        ));
    }
    Ok(LoadTarget::Ceiling { kw })
}

fn delta(kw: f64, what: &str) -> Result<LoadTarget, SignalRefusal> {
    let kw = finite(kw, what)?;
    if kw > 0.0 {
        return Err(out_of_range(
            what,
            kw,
            "a delta of at most 0 kW (a positive delta asks for a load increase, which this VEN does not do)",
        ));
    }
    if kw == 0.0 {
        return Ok(LoadTarget::Normal);
    }
    Ok(LoadTarget::Reduction { kw: -kw })
}

fn capacity(v: f64, what: &str) -> Result<LoadTarget, SignalRefusal> {
    if !(0.0..=1.0).contains(&v) {
        return Err(out_of_range(what, v, "a capacity fraction in [0, 1]"));
    }
    if v == 1.0 {
        return Ok(LoadTarget::Normal);
    }
    Ok(LoadTarget::CapacityFraction { fraction: v })
}

fn percent_offset(v: f64, what: &str) -> Result<LoadTarget, SignalRefusal> {
    if !(-100.0..=0.0).contains(&v) {
        return Err(out_of_range(
            what,
            v,
            "a percent offset in [-100, 0] (a positive offset asks for a load increase)",
        ));
    }
    if v == 0.0 {
        return Ok(LoadTarget::Normal);
    }
    Ok(LoadTarget::PercentReduction { percent: -v })
}

fn level_offset(v: f64, what: &str) -> Result<LoadTarget, SignalRefusal> {
    if v.fract() != 0.0 || v > 0.0 || v < -f64::from(u32::MAX) {
        return Err(out_of_range(
            what,
            v,
            "an integer level offset of at most 0 (a positive offset asks for a load increase)",
        ));
    }
    if v == 0.0 {
        return Ok(LoadTarget::Normal);
    }
    Ok(LoadTarget::LevelOffset { steps: (-v) as u32 })
}

fn simple_level(v: f64, what: &str) -> Result<LoadTarget, SignalRefusal> {
    if v.fract() != 0.0 || !(0.0..=3.0).contains(&v) {
        return Err(out_of_range(what, v, "a SIMPLE level 0, 1, 2 or 3"));
    }
    if v == 0.0 {
        return Ok(LoadTarget::Normal);
    }
    Ok(LoadTarget::Level { level: v as u8 })
}
