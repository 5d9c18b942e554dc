//! ISO 8601 durations (`PnYnMnWnDTnHnMnS`, optional sign, fractional last component) and
//! date-times, as OpenADR 2.0b writes them.

use crate::oadr3::time::{DurationError as Iso, IsoDuration};
use chrono::{DateTime, TimeDelta, Utc};

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty (after trimming).
    #[error("empty duration")]
    Empty,
    /// Missing the leading `P`.
    #[error("duration must start with 'P'")]
    MissingP,
    /// `P` or `PT` with no components.
    #[error("duration has no components")]
    NoComponents,
    /// A designator that is not valid at that point, or components out of order.
    #[error("unexpected '{0}' in duration")]
    Unexpected(char),
    /// A number without a designator after it.
    #[error("number without a designator at the end of the duration")]
    Dangling,
    /// A non-zero year or month count has no fixed length.
    #[error("non-zero years or months have no fixed length")]
    Calendar,
    /// The value does not fit.
    #[error("duration out of range")]
    Overflow,
    /// A fraction anywhere but on the last component.
    #[error("only the last component may have a fraction")]
    Fraction,
}

/// Parses an ISO 8601 duration such as `PT1H`, `PT120M`, `P1DT2H`, `PT0.5S`, `-PT5M`,
/// `P0Y0M0DT0H30M0S`. Surrounding whitespace is ignored. Non-zero years or months are
/// rejected (they have no fixed length).
pub fn parse_duration(input: &str) -> Result<TimeDelta, DurationError> {
    // One ISO 8601 parser serves both protocol versions (crate::oadr3::time); 2.0b differs only
    // in allowing a sign and in having no use for calendar years or months.
    let s = input.trim();
    let (negative, rest) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if negative && rest.starts_with(['+', '-']) {
        return Err(DurationError::MissingP);
    }
    let iso = IsoDuration::parse(rest).map_err(|e| match e {
        Iso::Empty => DurationError::Empty,
        Iso::Negative => DurationError::Unexpected('-'),
        Iso::MissingP => DurationError::MissingP,
        Iso::NoComponents => DurationError::NoComponents,
        Iso::Unexpected(c) => DurationError::Unexpected(c),
        Iso::Dangling => DurationError::Dangling,
        Iso::Fraction => DurationError::Fraction,
        Iso::Overflow => DurationError::Overflow,
    })?;
    if iso.years() != 0 || iso.months() != 0 {
        return Err(DurationError::Calendar);
    }
    let fixed = iso.fixed_part();
    Ok(if negative { -fixed } else { fixed })
}

/// Parses an xs:dateTime with an offset (`Z` or `±hh:mm`), ignoring surrounding whitespace,
/// and converts it to UTC.
pub fn parse_date_time(input: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(input.trim()).map(|d| d.with_timezone(&Utc))
}
