//! Plain decimals scaled by a thousand in the text, so kWh ↔ Wh is exact.
//!
//! Why not multiply: `x * 1000.0` and `x / 1000.0` round, and a round trip through them can
//! move a value by one unit in the last place, so an exported CSV would not import to the very
//! readings it came from. Moving the decimal point in the text and parsing once (Rust's parse is
//! correctly rounded) gives the `f64` nearest the decimal, and Rust's `Display` of an `f64` is
//! the shortest decimal that parses back to it: so `Wh → text → kWh text → Wh` is the identity.

/// What is wrong with a number's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecimalError {
    /// A minus sign.
    Negative,
    /// `NaN`, `inf` and the like.
    NotFinite,
    /// Anything else that is not `digits[.digits]`.
    Syntax,
}

/// Parses `digits[.digits]` as a number times 10^`shift` (`shift` is 3 or -3).
pub(crate) fn parse_scaled(text: &str, shift: i32) -> Result<f64, DecimalError> {
    let (int, frac) = split(text)?;
    let moved = shift_text(int, frac, shift);
    moved.parse::<f64>().map_err(|_| DecimalError::Syntax)
}

fn split(text: &str) -> Result<(&str, &str), DecimalError> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, f),
        None => (text, ""),
    };
    if digits(int) && ((frac.is_empty() && !text.ends_with('.')) || digits(frac)) {
        return Ok((int, frac));
    }
    if let Some(rest) = text.strip_prefix('-')
        && split(rest).is_ok()
    {
        return Err(DecimalError::Negative);
    }
    if text.parse::<f64>().is_ok_and(|f| !f.is_finite()) {
        return Err(DecimalError::NotFinite);
    }
    Err(DecimalError::Syntax)
}

/// The decimal `int.frac` with its point moved `shift` places right (left when negative), as
/// text without an exponent.
fn shift_text(int: &str, frac: &str, shift: i32) -> String {
    let n = shift.unsigned_abs() as usize;
    let mut s = String::with_capacity(int.len() + frac.len() + n + 2);
    if shift >= 0 {
        s.push_str(int);
        let take = frac.len().min(n);
        s.push_str(&frac[..take]);
        for _ in take..n {
            s.push('0');
        }
        if frac.len() > n {
            s.push('.');
            s.push_str(&frac[n..]);
        }
    } else if int.len() > n {
        s.push_str(&int[..int.len() - n]);
        s.push('.');
        s.push_str(&int[int.len() - n..]);
        s.push_str(frac);
    } else {
        s.push_str("0.");
        for _ in int.len()..n {
            s.push('0');
        }
        s.push_str(int);
        s.push_str(frac);
    }
    s
}

/// `value` (finite, not negative) divided by a thousand, as the shortest plain decimal that
/// [`parse_scaled`]`(_, 3)` reads back to exactly `value`.
pub(crate) fn format_thousandths(value: f64) -> String {
    let text = value.to_string();
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let moved = shift_text(int, frac, -3);
    // Trailing zeros of the fraction, and a point left alone, say nothing.
    let trimmed = if moved.contains('.') {
        moved.trim_end_matches('0').trim_end_matches('.')
    } else {
        &moved
    };
    // Leading zeros of the integer part ("0012.5" cannot occur: the integer part is either
    // "0" or the value's own digits).
    trimmed.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shifts_in_the_text() {
        assert_eq!(parse_scaled("12.345678", 3), Ok(12345.678));
        assert_eq!(parse_scaled("0.001", 3), Ok(1.0));
        assert_eq!(parse_scaled("5", 3), Ok(5000.0));
        assert_eq!(parse_scaled("1.5", 3), Ok(1500.0));
        assert_eq!(parse_scaled("1500", -3), Ok(1.5));
        assert_eq!(parse_scaled("-1.5", 3), Err(DecimalError::Negative));
        assert_eq!(parse_scaled("NaN", 3), Err(DecimalError::NotFinite));
        assert_eq!(parse_scaled("inf", 3), Err(DecimalError::NotFinite));
        for bad in ["", ".", "1.", ".5", "1e3", "1,5", "+1", "1.2.3", " 1"] {
            assert_eq!(parse_scaled(bad, 3), Err(DecimalError::Syntax), "{bad:?}");
        }
        assert_eq!(format_thousandths(12345.678), "12.345678");
        assert_eq!(format_thousandths(1000.0), "1");
        assert_eq!(format_thousandths(1.0), "0.001");
        assert_eq!(format_thousandths(0.0), "0");
        assert_eq!(format_thousandths(0.5), "0.0005");
    }

    proptest! {
        #[test]
        fn round_trips_exactly(v in 0.0f64..1e12) {
            let text = format_thousandths(v);
            prop_assert_eq!(parse_scaled(&text, 3), Ok(v), "{}", text);
        }

        #[test]
        fn round_trips_small_values(v in 0.0f64..1e-3) {
            let text = format_thousandths(v);
            prop_assert_eq!(parse_scaled(&text, 3), Ok(v), "{}", text);
        }
    }
}
