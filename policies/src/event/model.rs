//! The normalized grid event that every source produces.
//!
//! HTTP and MQTT (`dr.event/1`), OpenADR 2.0b XML and OpenADR 3.x JSON all describe the same
//! thing: "between these instants, keep the meter under (or reduce it by) this much". Each adapter
//! translates its wire format into a [`GridEvent`]; everything downstream (the target conversion,
//! the event book, the ledger) sees only this one shape, so a rule is written once and holds for
//! every source.
//!
//! [`GridEvent::validate`] is the single gate every event passes before the book accepts it. The
//! book relies on its invariants (ordered, non-overlapping intervals inside the window, bounded
//! durations, finite numbers), which is what lets the book's arithmetic stay free of overflow and
//! NaN checks.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Longest accepted event id, in characters.
///
/// Ids are dedup keys, ledger keys and MQTT topic segments; 128 characters is far above any id a
/// real VTN or utility system issues and keeps a hostile sender from bloating every record.
pub const MAX_ID_CHARS: usize = 128;

/// Longest accepted `site` or `program` label, in characters (same reasoning as [`MAX_ID_CHARS`]).
pub const MAX_LABEL_CHARS: usize = 256;

/// Longest accepted duration of any kind (window, ramp, recovery, interval, interval offset): 7 days.
///
/// No common demand-response program (emergency, capacity, economic, fast frequency) runs one event longer than a day or so;
/// a week leaves ample room while keeping every instant the book computes far from the limits of
/// the time type. Open-ended windows (`duration_s: None`) are the way to say "until cancelled".
pub const MAX_DURATION_S: u64 = 7 * 24 * 3600;

/// Largest accepted start randomization, in seconds (IEEE 2030.5 and OpenADR use at most an hour).
pub const MAX_RANDOMIZE_S: u64 = 3600;

/// Highest OpenADR SIMPLE level (0 normal, 1 moderate, 2 high, 3 special/emergency).
pub const MAX_LEVEL: u8 = 3;

/// Most intervals one event may carry.
///
/// A week of 5-minute intervals is 2016; the cap keeps a hostile event from making every book
/// query linear in an absurd interval count.
pub const MAX_INTERVALS: usize = 4096;

/// Why an event (or a part of one) was refused.
///
/// Every error names the offending field as a dotted path (`intervals[1].target.kw`,
/// `window.ramp_s`), because the error travels back to the sender in an ack or an HTTP 400 and
/// "invalid event" alone tells a utility engineer nothing about what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{field}: {message}")]
pub struct EventError {
    /// Dotted path of the offending field, or `(document)` for the document as a whole.
    pub field: String,
    /// What was wrong and, where it helps, what to send instead.
    pub message: String,
}

impl EventError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error with `prefix` put in front of its field path (`kw` → `target.kw`), so inner
    /// checks can name fields relative to themselves and callers add where they sit.
    #[must_use]
    pub fn prefixed(mut self, prefix: &str) -> Self {
        if !prefix.is_empty() {
            self.field = if self.field.is_empty() {
                prefix.to_owned()
            } else {
                format!("{prefix}.{}", self.field)
            };
        }
        self
    }
}

/// Which adapter produced an event.
///
/// Recorded because ack formats, implied-cancellation rules and M&V reports differ per source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventSource {
    /// `POST /v1/events` with a `dr.event/1` body.
    Http,
    /// An MQTT message on `dr/{site}/events/{event_id}` with a `dr.event/1` body.
    Mqtt,
    /// An OpenADR 2.0b `oadrDistributeEvent`.
    #[serde(rename = "openadr2b")]
    OpenAdr2b,
    /// An OpenADR 3.x event object.
    #[serde(rename = "openadr3")]
    OpenAdr3,
}

impl EventSource {
    /// The name used in the ledger and reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EventSource::Http => "http",
            EventSource::Mqtt => "mqtt",
            EventSource::OpenAdr2b => "openadr2b",
            EventSource::OpenAdr3 => "openadr3",
        }
    }
}

/// A curtailment event, normalized from any source.
///
/// Identity is `(id, revision)`: a higher revision replaces the whole event, a lower one is stale,
/// an equal one is a duplicate (OpenADR's `modificationNumber` rule, applied to every source).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridEvent {
    /// The sender's event id (OpenADR eventID, `dr.event/1` `event_id`).
    pub id: crate::ids::EventId,
    /// Modification number; increments on every change, cancellation included.
    pub revision: u64,
    /// The adapter that produced the event.
    pub source: EventSource,
    /// The site the event addresses, when the source names one.
    pub site: Option<String>,
    /// The DR program (OpenADR market context), when the source names one.
    pub program: Option<String>,
    /// When the sender issued this revision, when the source says so (used to reject stale
    /// retained messages; never used for scheduling).
    pub issued_at: Option<DateTime<Utc>>,
    /// Whether participation is mandatory (opting out has contractual consequences).
    pub mandatory: bool,
    /// A test event: recorded, acknowledged and reported, but never allowed to move a cap.
    pub test: bool,
    /// This revision cancels the event.
    pub cancel: bool,
    /// Sender priority, when given (OpenADR `priority`; lower is more important). Informational:
    /// overlapping events are resolved by taking the most restrictive ceiling, not by priority.
    pub priority: Option<u32>,
    /// When the event runs.
    pub window: Window,
    /// What the event asks for, over time; ordered, non-overlapping, inside the window.
    pub intervals: Vec<Interval>,
}

/// When an event runs, relative to which every interval is placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Nominal start (before randomization).
    pub start: DateTime<Utc>,
    /// Seconds after the start by which the target must be reached; the gateway steps the ceiling
    /// down over this time instead of slamming every job at once.
    pub ramp_s: u64,
    /// Length of the window in seconds; `None` = open-ended (until modified or cancelled).
    pub duration_s: Option<u64>,
    /// Seconds after the end over which the ceiling is released gradually, so the site does not
    /// rebound in one step.
    pub recovery_s: u64,
    /// Upper bound of the start delay the gateway picks (deterministically, see
    /// [`crate::event::book::randomize_offset_s`]) so that many sites do not all move at once.
    pub randomize_start_s: u64,
}

impl Window {
    /// The nominal end of the window (`start + duration`), `None` when open-ended.
    ///
    /// Saturates at the largest representable instant instead of panicking.
    #[must_use]
    pub fn nominal_end(&self) -> Option<DateTime<Utc>> {
        self.duration_s.map(|d| plus_secs(self.start, d))
    }

    fn validate(&self) -> Result<(), EventError> {
        check_secs("ramp_s", self.ramp_s)?;
        check_secs("recovery_s", self.recovery_s)?;
        if let Some(d) = self.duration_s {
            if d == 0 {
                return Err(EventError::new(
                    "duration_s",
                    "a zero-length window is not an event; use null (absent) for an open-ended window",
                ));
            }
            check_secs("duration_s", d)?;
        }
        if self.randomize_start_s > MAX_RANDOMIZE_S {
            return Err(EventError::new(
                "randomize_start_s",
                format!(
                    "{} s is more than the {MAX_RANDOMIZE_S} s allowed",
                    self.randomize_start_s
                ),
            ));
        }
        Ok(())
    }
}

/// One part of an event with its own target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Seconds from the (randomized) window start to the start of this interval.
    pub offset_s: u64,
    /// Length in seconds; `None` = until the window ends (only the last interval may say so).
    pub duration_s: Option<u64>,
    /// What this interval asks for.
    pub target: Target,
}

/// What a utility asks for, in any of the forms DR programs use.
///
/// Every form is turned into an absolute meter ceiling by [`crate::event::target::to_ceiling`],
/// which records the baseline it used so the conversion can be audited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "form", rename_all = "snake_case")]
pub enum Target {
    /// Keep the meter at or below `kw` (PJM firm service level, OpenADR LOAD_DISPATCH setpoint).
    MeterCeiling {
        /// The ceiling, meter kW.
        kw: f64,
    },
    /// Reduce the meter by `kw` below the baseline (PJM guaranteed load drop, OpenADR delta).
    Reduction {
        /// The reduction, meter kW.
        kw: f64,
        /// The baseline the sender measures against, when it says; otherwise the gateway's own
        /// estimate is used and recorded.
        baseline_kw: Option<f64>,
    },
    /// Reduce the meter BY `percent` % of the baseline.
    Percent {
        /// The reduction, in percent of the baseline, in (0, 100].
        percent: f64,
        /// The baseline the sender measures against, when it says.
        baseline_kw: Option<f64>,
    },
    /// Keep the meter at or below `fraction` × the facility's maximum (OpenADR
    /// x-loadControlCapacity).
    CapacityFraction {
        /// Share of the facility maximum, in [0, 1].
        fraction: f64,
    },
    /// An abstract level (OpenADR SIMPLE 0..=3) mapped by the site policy table.
    Level {
        /// The level, 0 (normal) to 3 (emergency).
        level: u8,
    },
    /// A price signal; acted on only if the site policy maps prices to sheds.
    Price {
        /// Price in currency units per MWh (may be negative).
        per_mwh: f64,
    },
}

impl Target {
    /// The `dr.event/1` form name (`ceiling`, `reduction`, `percent`, `capacity`, `level`,
    /// `price`), used in ceilings and ledger records so every source reads alike.
    #[must_use]
    pub fn form(&self) -> &'static str {
        match self {
            Target::MeterCeiling { .. } => "ceiling",
            Target::Reduction { .. } => "reduction",
            Target::Percent { .. } => "percent",
            Target::CapacityFraction { .. } => "capacity",
            Target::Level { .. } => "level",
            Target::Price { .. } => "price",
        }
    }

    /// Check the value ranges of this target; field paths are relative to the target (`kw`).
    ///
    /// Public because adapters validate targets before they have a whole event.
    pub fn validate(&self) -> Result<(), EventError> {
        match *self {
            Target::MeterCeiling { kw } => check_kw("kw", kw),
            Target::Reduction { kw, baseline_kw } => {
                check_kw("kw", kw)?;
                baseline_kw.map_or(Ok(()), |b| check_kw("baseline_kw", b))
            }
            Target::Percent { percent, baseline_kw } => {
                if !(percent.is_finite() && percent > 0.0 && percent <= 100.0) {
                    return Err(EventError::new(
                        "percent",
                        format!("{percent} is not a reduction percentage: expected a number in (0, 100]"),
                    ));
                }
                baseline_kw.map_or(Ok(()), |b| check_kw("baseline_kw", b))
            }
            Target::CapacityFraction { fraction } => {
                if fraction.is_finite() && (0.0..=1.0).contains(&fraction) {
                    Ok(())
                } else {
                    Err(EventError::new(
                        "fraction",
                        format!(
                            "{fraction} is not a capacity fraction: expected a number in [0, 1] (1.0 = 100 % of \
                             facility maximum)"
                        ),
                    ))
                }
            }
            Target::Level { level } => {
                if level <= MAX_LEVEL {
                    Ok(())
                } else {
                    Err(EventError::new(
                        "level",
                        format!("{level} is not a level: expected 0 to {MAX_LEVEL}"),
                    ))
                }
            }
            Target::Price { per_mwh } => {
                if per_mwh.is_finite() {
                    Ok(())
                } else {
                    Err(EventError::new("per_mwh", "must be a finite number"))
                }
            }
        }
    }
}

impl GridEvent {
    /// Check every invariant the event book and the target conversion rely on.
    ///
    /// A cancellation is checked for its id and labels only: a cancel must always be honoured,
    /// and refusing one because its (informational) copy of the window is odd would leave a
    /// curtailment running.
    pub fn validate(&self) -> Result<(), EventError> {
        check_id("id", &self.id)?;
        if let Some(site) = &self.site {
            check_label("site", site)?;
        }
        if let Some(program) = &self.program {
            check_label("program", program)?;
        }
        if self.cancel {
            return Ok(());
        }
        self.window.validate().map_err(|e| e.prefixed("window"))?;
        if self.intervals.is_empty() {
            return Err(EventError::new(
                "intervals",
                "an event needs at least one interval with a target",
            ));
        }
        if self.intervals.len() > MAX_INTERVALS {
            return Err(EventError::new(
                "intervals",
                format!(
                    "{} intervals is more than the {MAX_INTERVALS} allowed",
                    self.intervals.len()
                ),
            ));
        }
        let last = self.intervals.len() - 1;
        let mut prev_end: u64 = 0;
        for (i, iv) in self.intervals.iter().enumerate() {
            let p = format!("intervals[{i}]");
            check_secs("offset_s", iv.offset_s).map_err(|e| e.prefixed(&p))?;
            if i > 0 && iv.offset_s < prev_end {
                return Err(EventError::new(
                    format!("{p}.offset_s"),
                    format!(
                        "starts at {} s, before interval {} ends at {prev_end} s; intervals must be in time order \
                         and must not overlap",
                        iv.offset_s,
                        i - 1
                    ),
                ));
            }
            if let Some(w) = self.window.duration_s
                && iv.offset_s >= w
            {
                return Err(EventError::new(
                    format!("{p}.offset_s"),
                    format!("starts at {} s, at or after the end of the {w} s window", iv.offset_s),
                ));
            }
            match iv.duration_s {
                Some(d) => {
                    if d == 0 {
                        return Err(EventError::new(
                            format!("{p}.duration_s"),
                            "an interval must last at least 1 s",
                        ));
                    }
                    check_secs("duration_s", d).map_err(|e| e.prefixed(&p))?;
                    let end = iv.offset_s + d;
                    if let Some(w) = self.window.duration_s
                        && end > w
                    {
                        return Err(EventError::new(
                            format!("{p}.duration_s"),
                            format!("ends at {end} s, after the end of the {w} s window"),
                        ));
                    }
                    prev_end = end;
                }
                None if i != last => {
                    return Err(EventError::new(
                        format!("{p}.duration_s"),
                        "only the last interval may run until the window ends; give this one a duration",
                    ));
                }
                None => {}
            }
            iv.target.validate().map_err(|e| e.prefixed(&format!("{p}.target")))?;
        }
        Ok(())
    }
}

/// `t + s` seconds, saturating at the largest representable instant instead of panicking.
pub(crate) fn plus_secs(t: DateTime<Utc>, s: u64) -> DateTime<Utc> {
    i64::try_from(s)
        .ok()
        .and_then(chrono::TimeDelta::try_seconds)
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn check_secs(field: &str, s: u64) -> Result<(), EventError> {
    if s > MAX_DURATION_S {
        Err(EventError::new(
            field,
            format!("{s} s is longer than the {MAX_DURATION_S} s (7 days) allowed"),
        ))
    } else {
        Ok(())
    }
}

fn check_kw(field: &str, kw: f64) -> Result<(), EventError> {
    if kw.is_finite() && kw >= 0.0 {
        Ok(())
    } else {
        Err(EventError::new(
            field,
            format!("{kw} is not a power: expected a finite number of kW ≥ 0"),
        ))
    }
}

/// Characters that render as nothing or reorder text; in an id they make two different ids look
/// identical in a dashboard or a report.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// Unicode noncharacters (U+FDD0–U+FDEF, and the last two code points of every plane, such as
/// U+FFFE and U+FFFF): permanently reserved for a program's internal use, never for interchange,
/// so in an id or a label they are a sender's error or an attempt to confuse a later reader.
fn is_noncharacter(c: char) -> bool {
    let code = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&code) || code & 0xFFFE == 0xFFFE
}

/// Whether `c` must not appear in an id, a label, an operator's name or a reason: a control
/// character (a terminal escape, BEL, NUL), an invisible formatting character (zero-width,
/// bidirectional override), or a noncharacter.
#[must_use]
pub fn is_unprintable(c: char) -> bool {
    c.is_control() || is_invisible(c) || is_noncharacter(c)
}

fn check_label(field: &str, s: &str) -> Result<(), EventError> {
    let n = s.chars().count();
    if n > MAX_LABEL_CHARS {
        return Err(EventError::new(
            field,
            format!("{n} characters is longer than the {MAX_LABEL_CHARS} allowed"),
        ));
    }
    if s.chars().any(is_unprintable) {
        return Err(EventError::new(
            field,
            "contains control, invisible or noncharacter code points (such as U+FFFF); use printable text",
        ));
    }
    Ok(())
}

pub(crate) fn check_id(field: &str, id: &str) -> Result<(), EventError> {
    if id.is_empty() {
        return Err(EventError::new(field, "must not be empty"));
    }
    let n = id.chars().count();
    if n > MAX_ID_CHARS {
        return Err(EventError::new(
            field,
            format!("{n} characters is longer than the {MAX_ID_CHARS} allowed"),
        ));
    }
    if id.chars().any(is_unprintable) {
        return Err(EventError::new(
            field,
            "contains control, invisible or noncharacter code points (such as U+FFFF); use printable text",
        ));
    }
    if id.trim() != id {
        return Err(EventError::new(
            field,
            "has leading or trailing whitespace; ids are compared byte for byte, so trim it",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_labels_refuse_noncharacters_controls_and_invisibles() {
        for bad in [
            "ev\u{ffff}",
            "ev\u{fffe}x",
            "\u{fdd0}ev",
            "ev\u{1ffff}",
            "ev\u{10ffff}",
            "e\u{1b}[2Jv",
            "e\u{200b}v",
        ] {
            let e = check_id("event_id", bad).expect_err(bad);
            assert!(e.message.contains("U+FFFF"), "{bad:?}: {e}");
            assert!(check_label("label", bad).is_err(), "{bad:?}");
        }
        for good in ["ev-2026-0142", "événement-1", "事件-7", "ev\u{fffd}"] {
            assert!(check_id("event_id", good).is_ok(), "{good:?}");
        }
        assert!(!is_unprintable('\u{fffd}'), "the replacement character is a character");
    }

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn ceiling(kw: f64) -> Target {
        Target::MeterCeiling { kw }
    }

    fn sample() -> GridEvent {
        GridEvent {
            id: "ev-1".into(),
            revision: 1,
            source: EventSource::Http,
            site: Some("dc-east".into()),
            program: None,
            issued_at: None,
            mandatory: true,
            test: false,
            cancel: false,
            priority: None,
            window: Window {
                start: t("2026-07-14T19:00:00Z"),
                ramp_s: 600,
                duration_s: Some(7200),
                recovery_s: 600,
                randomize_start_s: 0,
            },
            intervals: vec![
                Interval {
                    offset_s: 0,
                    duration_s: Some(3600),
                    target: ceiling(8000.0),
                },
                Interval {
                    offset_s: 3600,
                    duration_s: None,
                    target: ceiling(7000.0),
                },
            ],
        }
    }

    fn field_of(ev: &GridEvent) -> String {
        ev.validate().unwrap_err().field
    }

    #[test]
    fn valid_event_passes() {
        sample().validate().unwrap();
    }

    #[test]
    fn id_rules() {
        for bad in ["", " ev", "ev\n1", "ev\u{202E}1"] {
            let mut ev = sample();
            ev.id = bad.into();
            assert_eq!(field_of(&ev), "id", "{bad:?}");
        }
        let mut ev = sample();
        ev.id = "x".repeat(129).into();
        assert_eq!(field_of(&ev), "id");
        ev.id = "é".repeat(128).into();
        ev.validate().unwrap();
    }

    #[test]
    fn interval_layout_rules() {
        let mut ev = sample();
        ev.intervals.clear();
        assert_eq!(field_of(&ev), "intervals");

        let mut ev = sample();
        ev.intervals[1].offset_s = 3000;
        assert_eq!(field_of(&ev), "intervals[1].offset_s");

        let mut ev = sample();
        ev.intervals[0].duration_s = None;
        assert_eq!(field_of(&ev), "intervals[0].duration_s");

        let mut ev = sample();
        ev.intervals[1].duration_s = Some(4000);
        assert_eq!(field_of(&ev), "intervals[1].duration_s");

        let mut ev = sample();
        ev.intervals[1].offset_s = 7200;
        assert_eq!(field_of(&ev), "intervals[1].offset_s");

        let mut ev = sample();
        ev.intervals[0].duration_s = Some(0);
        assert_eq!(field_of(&ev), "intervals[0].duration_s");

        // Open-ended window: the last interval may be open too.
        let mut ev = sample();
        ev.window.duration_s = None;
        ev.validate().unwrap();
    }

    #[test]
    fn value_rules() {
        let cases: Vec<(Target, &str)> = vec![
            (ceiling(-1.0), "intervals[0].target.kw"),
            (ceiling(f64::INFINITY), "intervals[0].target.kw"),
            (ceiling(f64::NAN), "intervals[0].target.kw"),
            (
                Target::Reduction {
                    kw: 10.0,
                    baseline_kw: Some(-3.0),
                },
                "intervals[0].target.baseline_kw",
            ),
            (
                Target::Percent {
                    percent: 0.0,
                    baseline_kw: None,
                },
                "intervals[0].target.percent",
            ),
            (
                Target::Percent {
                    percent: 100.5,
                    baseline_kw: None,
                },
                "intervals[0].target.percent",
            ),
            (
                Target::CapacityFraction { fraction: 1.5 },
                "intervals[0].target.fraction",
            ),
            (
                Target::CapacityFraction { fraction: -0.1 },
                "intervals[0].target.fraction",
            ),
            (Target::Level { level: 4 }, "intervals[0].target.level"),
            (Target::Price { per_mwh: f64::NAN }, "intervals[0].target.per_mwh"),
        ];
        for (target, field) in cases {
            let mut ev = sample();
            ev.intervals[0].target = target.clone();
            assert_eq!(field_of(&ev), field, "{target:?}");
        }
        let mut ev = sample();
        ev.intervals[0].target = Target::Percent {
            percent: 100.0,
            baseline_kw: None,
        };
        ev.intervals[1].target = Target::Price { per_mwh: -20.0 };
        ev.validate().unwrap();
    }

    #[test]
    fn window_rules() {
        let mut ev = sample();
        ev.window.randomize_start_s = 3601;
        assert_eq!(field_of(&ev), "window.randomize_start_s");
        let mut ev = sample();
        ev.window.ramp_s = MAX_DURATION_S + 1;
        assert_eq!(field_of(&ev), "window.ramp_s");
        let mut ev = sample();
        ev.window.duration_s = Some(0);
        assert_eq!(field_of(&ev), "window.duration_s");
        let mut ev = sample();
        ev.window.duration_s = Some(MAX_DURATION_S + 1);
        assert_eq!(field_of(&ev), "window.duration_s");
    }

    #[test]
    fn cancel_needs_only_an_id() {
        let mut ev = sample();
        ev.cancel = true;
        ev.intervals.clear();
        ev.window.duration_s = Some(0);
        ev.validate().unwrap();
        ev.id = "".into();
        assert_eq!(field_of(&ev), "id");
    }

    #[test]
    fn error_display_and_prefix() {
        let e = EventError::new("kw", "bad").prefixed("target");
        assert_eq!(e.to_string(), "target.kw: bad");
    }

    #[test]
    fn serde_tags_are_snake_case() {
        let v = serde_json::to_value(sample()).unwrap();
        assert_eq!(v["source"], "http");
        assert_eq!(v["intervals"][0]["target"]["form"], "meter_ceiling");
        let back: GridEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, sample());
        assert_eq!(serde_json::to_value(EventSource::OpenAdr2b).unwrap(), "openadr2b");
        assert_eq!(
            serde_json::to_value(Target::CapacityFraction { fraction: 0.5 }).unwrap()["form"],
            "capacity_fraction"
        );
    }

    #[test]
    fn plus_secs_saturates() {
        assert_eq!(plus_secs(DateTime::<Utc>::MAX_UTC, 10), DateTime::<Utc>::MAX_UTC);
        assert_eq!(plus_secs(t("2026-01-01T00:00:00Z"), u64::MAX), DateTime::<Utc>::MAX_UTC);
        assert_eq!(plus_secs(t("2026-01-01T00:00:00Z"), 60), t("2026-01-01T00:01:00Z"));
    }
}
