//! The ESPI `ReadingType`: what a MeterReading's values are, and whether a site can settle on
//! them.
//!
//! A site's settlement needs **electricity**, **delivered to the site** (or net), as **energy
//! per interval or mean demand**, in **intervals of one length**. Each rule below refuses a
//! ReadingType that is something else, naming the element that says so:
//!
//! | element | accepted | refused (examples) |
//! |---|---|---|
//! | `uom` (required) | 72 Wh, 38 W | 71 VAh, 73 VArh, 169 therm, 119 ft³ |
//! | `commodity` | 1, 2 electricity; absent or 0 (then `uom` says electricity) | 7 natural gas, 9 water |
//! | `flowDirection` | 1 forward (delivered), 4 net; absent or 0 taken as forward | 19 reverse (received from the site) |
//! | `accumulationBehaviour` | Wh: 4 deltaData, absent or 0; W: also 6 indicating | 1 bulkQuantity, 3 cumulative, 9 summation (register reads); 12 instantaneous (samples) |
//! | `dataQualifier` | absent, 0, 2 average, 12 normal | 8 maximum, 9 minimum (a peak is not the mean) |
//! | `intervalLength` (required) | 1 to 86,400 s | absent (not interval data), 0 |
//! | `powerOfTenMultiplier` | -12, -9, -6, -3, -2, -1, 0, 1, 2, 3, 6, 9, 12; absent is 0 | anything else |
//!
//! The multipliers are ESPI's `UnitMultiplierKind` (the SI prefixes pico to tera the schema
//! lists). `kind`, `currency`, `phase` and `defaultQuality` are reported, and only
//! `defaultQuality` changes a reading (see [`crate::quality`]).

use serde::Serialize;

use crate::error::{ImportError, Place, Reason};
use crate::reading::Unit;

/// ESPI's power-of-ten multipliers.
pub const MULTIPLIERS: [i8; 13] = [-12, -9, -6, -3, -2, -1, 0, 1, 2, 3, 6, 9, 12];

/// A ReadingType as the file states it, checked usable (see the module's table).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadingTypeInfo {
    /// What the values are: energy per interval or mean demand.
    pub unit: Unit,
    /// The intervals' length, s (`intervalLength`).
    pub interval_length_s: u32,
    /// `powerOfTenMultiplier` (0 when absent).
    pub power_of_ten_multiplier: i8,
    /// `uom` as written (72 or 38).
    pub uom: u16,
    /// `accumulationBehaviour`, if present.
    pub accumulation_behaviour: Option<u16>,
    /// `commodity`, if present.
    pub commodity: Option<u16>,
    /// `flowDirection`, if present.
    pub flow_direction: Option<u16>,
    /// `dataQualifier`, if present.
    pub data_qualifier: Option<u16>,
    /// `kind`, if present (12 energy, 8 demand, 37 power...).
    pub kind: Option<u16>,
    /// `currency` (ISO 4217 number, 840 = USD), if present.
    pub currency: Option<u16>,
    /// `phase`, if present.
    pub phase: Option<u16>,
    /// `defaultQuality`, if present.
    pub default_quality: Option<u16>,
    /// Line of the `ReadingType` element.
    pub line: u64,
}

/// One optional field of a resource as read, with where it was.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Field<T> {
    pub(crate) value: Option<T>,
    pub(crate) place: Place,
}

/// A `ReadingType` as read, not yet checked.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadingTypeFields {
    pub(crate) place: Place,
    pub(crate) accumulation_behaviour: Field<u16>,
    pub(crate) commodity: Field<u16>,
    pub(crate) currency: Field<u16>,
    pub(crate) data_qualifier: Field<u16>,
    pub(crate) default_quality: Field<u16>,
    pub(crate) flow_direction: Field<u16>,
    pub(crate) interval_length: Field<u32>,
    pub(crate) kind: Field<u16>,
    pub(crate) phase: Field<u16>,
    pub(crate) power_of_ten_multiplier: Field<i8>,
    pub(crate) uom: Field<u16>,
}

fn unusable(name: &str, f: Place, why: String) -> ImportError {
    ImportError::at(format!("ReadingType/{name}"), f, Reason::Unusable(why))
}

impl ReadingTypeFields {
    /// Checks the rules of the module's table and gives the summary.
    pub(crate) fn check(&self) -> Result<ReadingTypeInfo, ImportError> {
        let missing =
            |what: &str| ImportError::at("ReadingType", self.place, Reason::Missing { what: what.to_string() });
        // Commodity first: "natural gas" says more than the gas meter's unit does.
        if let Some(c) = self.commodity.value
            && !matches!(c, 0..=2)
        {
            let name = match c {
                4 => " (air)",
                7 => " (natural gas)",
                8 => " (propane)",
                9 => " (potable water)",
                10 => " (steam)",
                11 => " (waste water)",
                12 => " (heating fluid)",
                13 => " (cooling fluid)",
                _ => "",
            };
            return Err(unusable(
                "commodity",
                self.commodity.place,
                format!("commodity {c}{name} is not electricity (1 or 2)"),
            ));
        }
        let uom = self.uom.value.ok_or_else(|| missing("uom"))?;
        let unit = match uom {
            72 => Unit::Wh,
            38 => Unit::W,
            other => {
                let name = match other {
                    71 => " (VAh, apparent energy)",
                    73 => " (VArh, reactive energy)",
                    61 => " (VA)",
                    63 => " (VAr)",
                    169 => " (therm)",
                    119 => " (cubic feet)",
                    42 => " (cubic metres)",
                    132 => " (BTU)",
                    _ => "",
                };
                return Err(unusable(
                    "uom",
                    self.uom.place,
                    format!("uom {other}{name} is neither Wh (72) nor W (38)"),
                ));
            }
        };
        match self.flow_direction.value {
            None | Some(0 | 1 | 4) => {}
            Some(19) => {
                return Err(unusable(
                    "flowDirection",
                    self.flow_direction.place,
                    "flowDirection 19 is reverse: energy the site sent to the grid, not its load".into(),
                ));
            }
            Some(d) => {
                return Err(unusable(
                    "flowDirection",
                    self.flow_direction.place,
                    format!("flowDirection {d} is neither forward (1) nor net (4)"),
                ));
            }
        }
        match (unit, self.accumulation_behaviour.value) {
            (_, None | Some(0 | 4)) | (Unit::W, Some(6)) => {}
            (_, Some(a @ (1 | 3 | 9))) => {
                return Err(unusable(
                    "accumulationBehaviour",
                    self.accumulation_behaviour.place,
                    format!(
                        "accumulationBehaviour {a} is a register reading (bulk, cumulative or summation), not interval data"
                    ),
                ));
            }
            (_, Some(12)) => {
                return Err(unusable(
                    "accumulationBehaviour",
                    self.accumulation_behaviour.place,
                    "accumulationBehaviour 12 is an instantaneous sample, not the interval's figure".into(),
                ));
            }
            (_, Some(a)) => {
                return Err(unusable(
                    "accumulationBehaviour",
                    self.accumulation_behaviour.place,
                    format!(
                        "accumulationBehaviour {a} is not interval {} (deltaData 4)",
                        if unit == Unit::Wh { "energy" } else { "demand" }
                    ),
                ));
            }
        }
        match self.data_qualifier.value {
            None | Some(0 | 2 | 12) => {}
            Some(q) => {
                let what = match q {
                    8 => "a maximum",
                    9 => "a minimum",
                    _ => "not a plain figure",
                };
                return Err(unusable(
                    "dataQualifier",
                    self.data_qualifier.place,
                    format!("dataQualifier {q} is {what}, not the interval's energy or mean demand"),
                ));
            }
        }
        let interval_length_s = self
            .interval_length
            .value
            .ok_or_else(|| missing("intervalLength (interval data have one length)"))?;
        if interval_length_s == 0 {
            return Err(ImportError::at(
                "ReadingType/intervalLength",
                self.interval_length.place,
                Reason::ZeroDuration,
            ));
        }
        if interval_length_s > 86_400 {
            return Err(unusable(
                "intervalLength",
                self.interval_length.place,
                format!("intervalLength {interval_length_s} s is longer than a day"),
            ));
        }
        if let Some(q) = self.default_quality.value
            && crate::quality::class_of(u64::from(q)).is_none()
        {
            return Err(ImportError::at(
                "ReadingType/defaultQuality",
                self.default_quality.place,
                Reason::QualityCode(u64::from(q)),
            ));
        }
        Ok(ReadingTypeInfo {
            unit,
            interval_length_s,
            power_of_ten_multiplier: self.power_of_ten_multiplier.value.unwrap_or(0),
            uom,
            accumulation_behaviour: self.accumulation_behaviour.value,
            commodity: self.commodity.value,
            flow_direction: self.flow_direction.value,
            data_qualifier: self.data_qualifier.value,
            kind: self.kind.value,
            currency: self.currency.value,
            phase: self.phase.value,
            default_quality: self.default_quality.value,
            line: self.place.line,
        })
    }
}

/// ESPI `LocalTimeParameters`: the customer's zone as the utility states it (for display; the
/// readings themselves are in UTC).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct LocalTimeParameters {
    /// `tzOffset`: standard time's offset from UTC, s (e.g. -18000 for US Eastern).
    pub tz_offset_s: Option<i64>,
    /// `dstOffset`: the extra offset in daylight saving time, s (usually 3600).
    pub dst_offset_s: Option<i64>,
    /// `dstStartRule`, as written (ESPI's packed hex rule).
    pub dst_start_rule: Option<String>,
    /// `dstEndRule`, as written.
    pub dst_end_rule: Option<String>,
}
