//! ISO 8601 durations (`PnYnMnWnDTnHnMnS`, optional sign, fractional last component) and
//! date-times, as OpenADR 2.0b writes them.

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
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let s = s.strip_prefix('P').ok_or(DurationError::MissingP)?;
    // Order of designators: date part Y M W D, time part H M S.
    const DATE: [char; 4] = ['Y', 'M', 'W', 'D'];
    const TIME: [char; 3] = ['H', 'M', 'S'];
    let mut in_time = false;
    let mut next_idx = 0usize; // index into DATE or TIME that the next designator must be >=
    let mut nanos: i128 = 0;
    let mut components = 0;
    let mut num = String::new();
    let mut saw_fraction = false;
    let mut time_components = 0;
    for c in s.chars() {
        if c.is_ascii_digit() || c == '.' || c == ',' {
            if saw_fraction {
                return Err(DurationError::Fraction);
            }
            num.push(if c == ',' { '.' } else { c });
            continue;
        }
        if c == 'T' {
            if in_time || !num.is_empty() {
                return Err(DurationError::Unexpected(c));
            }
            in_time = true;
            next_idx = 0;
            continue;
        }
        let table: &[char] = if in_time { &TIME } else { &DATE };
        let Some(idx) = table.iter().position(|&d| d == c) else {
            return Err(DurationError::Unexpected(c));
        };
        if idx < next_idx || num.is_empty() {
            return Err(DurationError::Unexpected(c));
        }
        next_idx = idx + 1;
        let (int_part, frac_part) = match num.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (num.as_str(), None),
        };
        if int_part.is_empty() && frac_part.is_none_or(|f| f.is_empty()) {
            return Err(DurationError::Unexpected(c));
        }
        if frac_part.is_some() {
            saw_fraction = true;
        }
        let unit_nanos: i128 = match (in_time, c) {
            (false, 'Y') | (false, 'M') => {
                let zero = int_part.chars().all(|d| d == '0') && frac_part.is_none_or(|f| f.chars().all(|d| d == '0'));
                if !zero {
                    return Err(DurationError::Calendar);
                }
                0
            }
            (false, 'W') => 7 * 86_400 * 1_000_000_000,
            (false, 'D') => 86_400 * 1_000_000_000,
            (true, 'H') => 3_600 * 1_000_000_000,
            (true, 'M') => 60 * 1_000_000_000,
            _ => 1_000_000_000,
        };
        let whole: i128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse::<i128>().map_err(|_| DurationError::Overflow)?
        };
        let mut value = whole.checked_mul(unit_nanos).ok_or(DurationError::Overflow)?;
        if let Some(f) = frac_part {
            // Keep up to 9 fractional digits of the unit's nanoseconds.
            let digits: String = f.chars().take(18).collect();
            if !digits.is_empty() {
                let scale = 10i128.pow(u32::try_from(digits.len()).map_err(|_| DurationError::Overflow)?);
                let frac: i128 = digits.parse().map_err(|_| DurationError::Overflow)?;
                value += frac * unit_nanos / scale;
            }
        }
        nanos = nanos.checked_add(value).ok_or(DurationError::Overflow)?;
        num.clear();
        components += 1;
        if in_time {
            time_components += 1;
        }
    }
    if !num.is_empty() {
        return Err(DurationError::Dangling);
    }
    if components == 0 || (in_time && time_components == 0) {
        return Err(DurationError::NoComponents);
    }
    if negative {
        nanos = -nanos;
    }
    let secs = i64::try_from(nanos.div_euclid(1_000_000_000)).map_err(|_| DurationError::Overflow)?;
    let sub = u32::try_from(nanos.rem_euclid(1_000_000_000)).map_err(|_| DurationError::Overflow)?;
    TimeDelta::new(secs, sub).ok_or(DurationError::Overflow)
}

/// Parses an xs:dateTime with an offset (`Z` or `±hh:mm`), ignoring surrounding whitespace,
/// and converts it to UTC.
pub fn parse_date_time(input: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(input.trim()).map(|d| d.with_timezone(&Utc))
}
