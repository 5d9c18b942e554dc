//! ESPI `QualityOfReading` codes and the three classes a settlement counts.
//!
//! The codes are NAESB REQ.21 (ESPI) `QualityOfReading`, as its schema documents them:
//!
//! | code | ESPI meaning | here |
//! |---|---|---|
//! | 0 | valid: passed all validation checks, or verified | measured |
//! | 7 | manually edited: replaced or approved by a human | estimated |
//! | 8 | estimated using reference day | estimated |
//! | 9 | estimated using linear interpolation | estimated |
//! | 10 | questionable: failed one or more checks | estimated |
//! | 11 | derived: calculated, not necessarily measured directly | estimated |
//! | 12 | projected (forecast) | estimated |
//! | 13 | mixed | estimated |
//! | 14 | raw: not yet through validation, editing and estimation | measured |
//! | 15 | normalized for weather | estimated |
//! | 16 | other | estimated |
//! | 17 | validated (possibly edited or estimated under approved procedures) | measured |
//! | 18 | verified: failed a check but determined to represent actual usage | measured |
//! | 19 | revenue-quality (later ESPI versions) | measured |
//!
//! Why this split: "measured" is a claim that the figure is the meter's, which a settlement
//! counts as actual data; every code that says a person, a model or a calculation put the
//! figure there is "estimated", including the ambiguous ones (manually edited, derived, mixed,
//! questionable), because over-claiming measured data is the error an auditor catches. Raw data
//! (14) is a meter reading that has not been through the utility's checks yet: still the meter's.
//!
//! ESPI has no "missing" code: a missing interval is an `IntervalReading` without a `value`
//! (the schema makes `value` optional), whatever its quality codes say. A reading with no
//! `ReadingQuality` has the ReadingType's `defaultQuality`, and without one is valid (ESPI:
//! quality is given "only if different than `ReadingType.defaultQuality`", valid unless stated).
//! Several `ReadingQuality` elements on one reading: the worst class wins (missing, then
//! estimated, then measured). A code outside the table is refused, not guessed.
//!
//! Export writes measured readings with no `ReadingQuality` (valid), estimated ones with code 8,
//! and missing ones with no `value` and no code.

use crate::reading::Quality;

/// The class of an ESPI quality code, or `None` for a code ESPI does not define.
#[must_use]
pub fn class_of(code: u64) -> Option<Quality> {
    match code {
        0 | 14 | 17 | 18 | 19 => Some(Quality::Measured),
        7..=13 | 15 | 16 => Some(Quality::Estimated),
        _ => None,
    }
}

/// The code an export writes for an estimated reading: "estimated using reference day", the
/// general machine estimate (the gateway's estimated intervals are filled from other data, not
/// interpolated).
pub const EXPORT_ESTIMATED_CODE: u8 = 8;

/// The worse of two classes (missing is worst).
#[must_use]
pub fn worse(a: Quality, b: Quality) -> Quality {
    a.max(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_defined_code_has_a_class_and_no_other() {
        for code in 0..=255u64 {
            let defined = code == 0 || (7..=19).contains(&code);
            assert_eq!(class_of(code).is_some(), defined, "code {code}");
        }
        assert_eq!(class_of(u64::from(EXPORT_ESTIMATED_CODE)), Some(Quality::Estimated));
        assert_eq!(worse(Quality::Measured, Quality::Missing), Quality::Missing);
        assert_eq!(worse(Quality::Estimated, Quality::Measured), Quality::Estimated);
    }
}
