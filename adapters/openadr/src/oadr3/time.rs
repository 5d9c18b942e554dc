//! ISO 8601 durations and RFC 3339 timestamps as OpenADR 3 writes them.
//!
//! The 2.0b helpers ([`crate::oadr2b::parse_duration`]) reject non-zero years and months because
//! 2.0b never needs them; 3.x does: `P9999Y` is the specification's "infinity" (User Guide §7.3),
//! and openleadr-rs writes every duration in the verbose `P0Y0M0DT0H30M0S` form. So 3.x has its
//! own [`IsoDuration`], which keeps calendar parts (years, months) apart from fixed ones and adds
//! them to a start with calendar arithmetic.

use std::fmt;

use chrono::{DateTime, Months, NaiveDate, TimeDelta, Utc};

/// Durations of at least this many years mean "forever" (`P9999Y`, User Guide §7.3). Anything
/// that long is past the end of any schedule a VEN will ever run.
pub const FOREVER_YEARS: u32 = 9999;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty (after trimming).
    #[error("empty duration")]
    Empty,
    /// A leading `-`: OpenADR durations are lengths, and a negative length has no meaning.
    #[error("negative duration")]
    Negative,
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
    /// A fraction on years or months, or on any component but the last.
    #[error("only the last time component may have a fraction")]
    Fraction,
    /// The value does not fit.
    #[error("duration out of range")]
    Overflow,
}

/// Why a timestamp string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an RFC 3339 date-time with an offset ({reason})")]
pub struct TimestampError {
    /// What chrono (or the sentinel check) said.
    pub reason: String,
}

/// A non-negative ISO 8601 duration with its calendar part (years, months) kept apart from its
/// fixed part (weeks, days, hours, minutes, seconds), because a month has no fixed length.
///
/// Days count as 24 hours: OpenADR times are in UTC, where every day has 24 hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IsoDuration {
    years: u32,
    months: u32,
    fixed: TimeDelta,
}

impl IsoDuration {
    /// `PT0S`.
    pub const ZERO: IsoDuration = IsoDuration {
        years: 0,
        months: 0,
        fixed: TimeDelta::zero(),
    };

    /// `P9999Y`, the specification's infinity.
    pub const FOREVER: IsoDuration = IsoDuration {
        years: FOREVER_YEARS,
        months: 0,
        fixed: TimeDelta::zero(),
    };

    /// Parses `PT30M`, `P1DT2H`, `PT0.5S`, `P0Y0M0DT0H30M0S`, `P9999Y`, `P2W`, `PT0S`.
    /// Surrounding whitespace is ignored; a sign of `-` is rejected ([`DurationError::Negative`]).
    ///
    /// It allocates nothing: each number is a slice of the input (digits and `.`/`,` are ASCII,
    /// so a number is one contiguous run), parsed where it stands. Decoding an event parses a
    /// few durations, and this used to be a tenth of the OpenADR 3 decode.
    pub fn parse(input: &str) -> Result<IsoDuration, DurationError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(DurationError::Empty);
        }
        let s = match s.as_bytes()[0] {
            b'-' => return Err(DurationError::Negative),
            b'+' => &s[1..],
            _ => s,
        };
        let s = s.strip_prefix('P').ok_or(DurationError::MissingP)?;
        const DATE: [char; 4] = ['Y', 'M', 'W', 'D'];
        const TIME: [char; 3] = ['H', 'M', 'S'];
        let mut in_time = false;
        let mut next_idx = 0usize;
        let mut years: u32 = 0;
        let mut months: u32 = 0;
        let mut nanos: i128 = 0;
        let mut components = 0;
        let mut time_components = 0;
        // Where the number being read starts (its digits and separators run up to the
        // designator).
        let mut num_start: Option<usize> = None;
        let mut saw_fraction = false;
        for (i, c) in s.char_indices() {
            if c.is_ascii_digit() || c == '.' || c == ',' {
                if saw_fraction {
                    return Err(DurationError::Fraction);
                }
                let start = *num_start.get_or_insert(i);
                if i - start > 40 {
                    return Err(DurationError::Overflow);
                }
                continue;
            }
            if c == 'T' {
                if in_time || num_start.is_some() {
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
            let Some(start) = num_start.take() else {
                return Err(DurationError::Unexpected(c));
            };
            if idx < next_idx {
                return Err(DurationError::Unexpected(c));
            }
            next_idx = idx + 1;
            let num = &s[start..i];
            let (int_part, frac_part) = match num.bytes().position(|b| b == b'.' || b == b',') {
                Some(at) => (&num[..at], Some(&num[at + 1..])),
                None => (num, None),
            };
            if int_part.is_empty() && frac_part.is_none_or(|f| f.is_empty()) {
                return Err(DurationError::Unexpected(c));
            }
            let has_fraction = frac_part.is_some_and(|f| f.bytes().any(|d| d != b'0'));
            if frac_part.is_some() {
                saw_fraction = true;
            }
            let whole: u128 = if int_part.is_empty() {
                0
            } else if int_part.len() <= 19 {
                // Digits only (the run ends at the first separator): fits a u64 as it is.
                u128::from(int_part.bytes().fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0')))
            } else {
                int_part.parse::<u128>().map_err(|_| DurationError::Overflow)?
            };
            match (in_time, c) {
                (false, 'Y') | (false, 'M') => {
                    if has_fraction {
                        return Err(DurationError::Fraction);
                    }
                    let n = u32::try_from(whole).map_err(|_| DurationError::Overflow)?;
                    if c == 'Y' {
                        years = n;
                    } else {
                        months = n;
                    }
                }
                _ => {
                    let unit: i128 = match (in_time, c) {
                        (false, 'W') => 7 * 86_400 * 1_000_000_000,
                        (false, 'D') => 86_400 * 1_000_000_000,
                        (true, 'H') => 3_600 * 1_000_000_000,
                        (true, 'M') => 60 * 1_000_000_000,
                        _ => 1_000_000_000,
                    };
                    let whole = i128::try_from(whole).map_err(|_| DurationError::Overflow)?;
                    let mut value = whole.checked_mul(unit).ok_or(DurationError::Overflow)?;
                    if let Some(f) = frac_part {
                        // At most 18 digits count (attoseconds of a second are far below a
                        // nanosecond); a second separator makes the digits unparsable.
                        let digits = &f[..f.len().min(18)];
                        if !digits.is_empty() {
                            let exp = u32::try_from(digits.len()).map_err(|_| DurationError::Overflow)?;
                            let frac: i128 = digits.parse().map_err(|_| DurationError::Overflow)?;
                            value += frac * unit / 10i128.pow(exp);
                        }
                    }
                    nanos = nanos.checked_add(value).ok_or(DurationError::Overflow)?;
                }
            }
            components += 1;
            if in_time {
                time_components += 1;
            }
        }
        if num_start.is_some() {
            return Err(DurationError::Dangling);
        }
        if components == 0 || (in_time && time_components == 0) {
            return Err(DurationError::NoComponents);
        }
        // 128-bit division is a library call; every duration that fits 292 years fits an i64.
        let (secs, sub) = match i64::try_from(nanos) {
            Ok(n) => (n / 1_000_000_000, n % 1_000_000_000),
            Err(_) => (
                i64::try_from(nanos / 1_000_000_000).map_err(|_| DurationError::Overflow)?,
                i64::try_from(nanos % 1_000_000_000).map_err(|_| DurationError::Overflow)?,
            ),
        };
        let sub = u32::try_from(sub).map_err(|_| DurationError::Overflow)?;
        let fixed = TimeDelta::new(secs, sub).ok_or(DurationError::Overflow)?;
        Ok(IsoDuration { years, months, fixed })
    }

    /// A fixed duration. `None` for a negative one.
    pub fn from_time_delta(d: TimeDelta) -> Option<IsoDuration> {
        (d >= TimeDelta::zero()).then_some(IsoDuration {
            years: 0,
            months: 0,
            fixed: d,
        })
    }

    /// Whole seconds, as a fixed duration.
    pub fn from_secs(secs: u32) -> IsoDuration {
        IsoDuration {
            years: 0,
            months: 0,
            fixed: TimeDelta::seconds(i64::from(secs)),
        }
    }

    /// True for `PT0S` and every spelling of it (`P0D`, `P0Y0M0DT0H0M0S`).
    pub fn is_zero(&self) -> bool {
        self.years == 0 && self.months == 0 && self.fixed.is_zero()
    }

    /// True for `P9999Y` and longer: the specification's "infinity".
    pub fn is_forever(&self) -> bool {
        self.years >= FOREVER_YEARS
    }

    /// The years component.
    pub fn years(&self) -> u32 {
        self.years
    }

    /// The months component.
    pub fn months(&self) -> u32 {
        self.months
    }

    /// The fixed part (weeks, days, hours, minutes, seconds).
    pub fn fixed_part(&self) -> TimeDelta {
        self.fixed
    }

    /// The length when it does not depend on the start (no years or months).
    pub fn as_fixed(&self) -> Option<TimeDelta> {
        (self.years == 0 && self.months == 0).then_some(self.fixed)
    }

    /// `start + self`, with calendar arithmetic for years and months. `None` when the duration is
    /// "forever" or the end would fall outside chrono's range (which is also forever, for a VEN).
    pub fn end_from(&self, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.is_forever() {
            return None;
        }
        let total_months = self.years.checked_mul(12)?.checked_add(self.months)?;
        start
            .checked_add_months(Months::new(total_months))?
            .checked_add_signed(self.fixed)
    }

    /// The length from `start`: [`Self::as_fixed`] when possible, else via [`Self::end_from`].
    /// `None` = forever.
    pub fn span_from(&self, start: DateTime<Utc>) -> Option<TimeDelta> {
        match self.as_fixed() {
            Some(d) => Some(d),
            None => self.end_from(start).map(|end| end - start),
        }
    }
}

impl fmt::Display for IsoDuration {
    /// The compact canonical form: `PT30M`, `P9999Y`, `P1DT2H`, `PT0.5S`, `PT0S`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.write_str("PT0S");
        }
        f.write_str("P")?;
        if self.years > 0 {
            write!(f, "{}Y", self.years)?;
        }
        if self.months > 0 {
            write!(f, "{}M", self.months)?;
        }
        let total = self.fixed.num_seconds();
        let nanos = self.fixed.subsec_nanos();
        let days = total / 86_400;
        let rest = total % 86_400;
        if days > 0 {
            write!(f, "{days}D")?;
        }
        if rest > 0 || nanos > 0 {
            f.write_str("T")?;
            let (h, m, s) = (rest / 3600, (rest % 3600) / 60, rest % 60);
            if h > 0 {
                write!(f, "{h}H")?;
            }
            if m > 0 {
                write!(f, "{m}M")?;
            }
            if nanos > 0 {
                let frac = format!("{nanos:09}");
                write!(f, "{s}.{}S", frac.trim_end_matches('0'))?;
            } else if s > 0 {
                write!(f, "{s}S")?;
            }
        }
        Ok(())
    }
}

impl serde::Serialize for IsoDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for IsoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        IsoDuration::parse(&s).map_err(|e| serde::de::Error::custom(format!("{e}: {s:?}")))
    }
}

/// `0001-01-01T00:00:00Z`: the start the specification uses to mean "now" (User Guide §7.3).
pub fn now_sentinel() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(1, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map_or(DateTime::<Utc>::MIN_UTC, |n| n.and_utc())
}

/// Whether `t` is the "now" sentinel (any time on 0001-01-01, UTC).
pub fn is_now_sentinel(t: &DateTime<Utc>) -> bool {
    t.date_naive() == now_sentinel().date_naive()
}

/// Parses an RFC 3339 date-time with an offset (`Z`, `+00:00`, nanoseconds allowed) and converts
/// it to UTC. The sentinel `0001-01-01` is also accepted without a time or an offset, as the
/// specification spells it; it parses to [`now_sentinel`].
pub fn parse_timestamp(input: &str) -> Result<DateTime<Utc>, TimestampError> {
    let s = input.trim();
    if let Some(rest) = s.strip_prefix("0001-01-01")
        && (rest.is_empty() || rest.starts_with(['T', 't', ' ']))
    {
        return Ok(now_sentinel());
    }
    if let Some(t) = parse_plain_rfc3339(s) {
        return Ok(t);
    }
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| TimestampError { reason: e.to_string() })
}

/// The form every VTN writes, `2026-07-01T18:00:00Z` or `…T18:00:00.639004168+02:00`, read
/// directly; `None` for anything else (a lowercase `t` or `z`, a space, a leap second, more
/// than nine fraction digits, a date that does not exist), which chrono's full parser then
/// decides. A test checks that both agree wherever this accepts. chrono's general parser was a
/// twentieth of decoding an event list, which carries three timestamps per event.
fn parse_plain_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = two_digits(b, 0)? * 100 + two_digits(b, 2)?;
    let (month, day) = (two_digits(b, 5)?, two_digits(b, 8)?);
    let (hour, minute, second) = (two_digits(b, 11)?, two_digits(b, 14)?, two_digits(b, 17)?);
    let mut at = 19;
    let mut nanos = 0u32;
    if b[at] == b'.' {
        let mut scale = 100_000_000;
        at += 1;
        let first = at;
        while let Some(&d) = b.get(at).filter(|d| d.is_ascii_digit()) {
            if at - first == 9 {
                return None;
            }
            nanos += u32::from(d - b'0') * scale;
            scale /= 10;
            at += 1;
        }
        if at == first {
            return None;
        }
    }
    let offset_secs = match b.get(at..)? {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (two_digits(b, at + 1)?, two_digits(b, at + 4)?);
            if h > 23 || m > 59 {
                return None;
            }
            let secs = i64::from(h * 3600 + m * 60);
            if *sign == b'-' { -secs } else { secs }
        }
        _ => return None,
    };
    if second > 59 {
        return None;
    }
    let local = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?
        .and_hms_nano_opt(hour, minute, second, nanos)?;
    if offset_secs == 0 {
        return Some(local.and_utc());
    }
    Some(local.checked_sub_signed(TimeDelta::seconds(offset_secs))?.and_utc())
}

/// The two ASCII digits at `b[at..at + 2]` as a number.
#[inline]
fn two_digits(b: &[u8], at: usize) -> Option<u32> {
    let (hi, lo) = (b.get(at)?.wrapping_sub(b'0'), b.get(at + 1)?.wrapping_sub(b'0'));
    (hi < 10 && lo < 10).then(|| u32::from(hi) * 10 + u32::from(lo))
}

/// Formats a timestamp the way OpenADR 3 VTNs write them: RFC 3339, `Z`, fractional seconds only
/// when present.
pub fn format_timestamp(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Serde helpers for `Option<DateTime<Utc>>` fields, with [`parse_timestamp`]'s rules.
pub mod serde_ts_opt {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `Some(t)` with [`super::format_timestamp`].
    pub fn serialize<S: Serializer>(v: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(t) => s.serialize_str(&super::format_timestamp(t)),
            None => s.serialize_none(),
        }
    }

    /// Reads with [`super::parse_timestamp`]; `null` is `None`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => super::parse_timestamp(&s)
                .map(Some)
                .map_err(|e| serde::de::Error::custom(format!("{e}: {s:?}"))),
            None => Ok(None),
        }
    }
}
