//! Slurm hostlist expressions (`node[01-04,07]`, `rack[1-2]-gpu[1-2]`).
//!
//! Needed in two places: gres.conf `NodeName=` lines, and the job's `nodes` string when a
//! response lacks the per-node allocation list. Zero padding follows the lower bound
//! (`[08-10]` gives `08, 09, 10`). The expansion is bounded by [`MAX_HOSTS`] so a hostile
//! `n[0-999999999]` is an error, not an out-of-memory.

/// Most names one expression may expand to.
pub const MAX_HOSTS: usize = 65_536;

/// An expression that is not a valid hostlist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot expand hostlist {input:?}: {reason}")]
pub struct HostlistError {
    /// The expression (truncated to 200 bytes).
    pub input: String,
    /// What is wrong.
    pub reason: String,
}

fn err(input: &str, reason: impl Into<String>) -> HostlistError {
    HostlistError {
        input: crate::gres::truncate(input, 200),
        reason: reason.into(),
    }
}

/// Expands a hostlist expression into names, in order. The empty string gives no names.
pub fn expand_hostlist(input: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    let mut parts = Vec::new();
    for (i, c) in input.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or_else(|| err(input, "unbalanced ']'"))?,
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(err(input, "unbalanced '['"));
    }
    parts.push(&input[start..]);
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        expand_one(input, part, &mut out)?;
    }
    Ok(out)
}

/// Expands one comma-free (at top level) pattern, appending to `out`.
fn expand_one(input: &str, pattern: &str, out: &mut Vec<String>) -> Result<(), HostlistError> {
    let mut prefixes = vec![String::new()];
    let mut rest = pattern;
    while !rest.is_empty() {
        match rest.find('[') {
            None => {
                for p in &mut prefixes {
                    p.push_str(rest);
                }
                break;
            }
            Some(open) => {
                let literal = &rest[..open];
                let close = rest[open..]
                    .find(']')
                    .map(|c| c + open)
                    .ok_or_else(|| err(input, "unbalanced '['"))?;
                let inner = &rest[open + 1..close];
                if inner.contains('[') {
                    return Err(err(input, "nested '['"));
                }
                let values = expand_ranges(input, inner)?;
                if prefixes.len().saturating_mul(values.len()) + out.len() > MAX_HOSTS {
                    return Err(err(input, format!("more than {MAX_HOSTS} names")));
                }
                let mut next = Vec::with_capacity(prefixes.len() * values.len());
                for p in &prefixes {
                    for v in &values {
                        next.push(format!("{p}{literal}{v}"));
                    }
                }
                prefixes = next;
                rest = &rest[close + 1..];
            }
        }
    }
    out.extend(prefixes);
    Ok(())
}

/// `01-04,07` → `["01","02","03","04","07"]`.
fn expand_ranges(input: &str, inner: &str) -> Result<Vec<String>, HostlistError> {
    let mut values = Vec::new();
    for item in inner.split(',') {
        let item = item.trim();
        let (lo_s, hi_s) = item.split_once('-').unwrap_or((item, item));
        let digits = |s: &str| !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo_s) || !digits(hi_s) {
            return Err(err(input, format!("bad range {item:?}")));
        }
        let lo: u64 = lo_s.parse().map_err(|_| err(input, format!("bad number {lo_s:?}")))?;
        let hi: u64 = hi_s.parse().map_err(|_| err(input, format!("bad number {hi_s:?}")))?;
        if lo > hi {
            return Err(err(input, format!("descending range {item:?}")));
        }
        if (hi - lo) as usize >= MAX_HOSTS || values.len() + (hi - lo) as usize >= MAX_HOSTS {
            return Err(err(input, format!("more than {MAX_HOSTS} names")));
        }
        let width = lo_s.len();
        for n in lo..=hi {
            values.push(format!("{n:0width$}"));
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands() {
        assert_eq!(expand_hostlist("localhost").expect("ok"), vec!["localhost"]);
        assert_eq!(
            expand_hostlist("node[01-03,07],login").expect("ok"),
            vec!["node01", "node02", "node03", "node07", "login"]
        );
        assert_eq!(expand_hostlist("n[8-10]").expect("ok"), vec!["n8", "n9", "n10"]);
        assert_eq!(expand_hostlist("n[08-10]").expect("ok"), vec!["n08", "n09", "n10"]);
        assert_eq!(
            expand_hostlist("r[1-2]-g[1-2]").expect("ok"),
            vec!["r1-g1", "r1-g2", "r2-g1", "r2-g2"]
        );
        assert!(expand_hostlist("").expect("ok").is_empty());
    }

    #[test]
    fn rejects_bad_and_huge() {
        for bad in [
            "n[1-",
            "n]1[",
            "n[a-b]",
            "n[3-1]",
            "n[0-999999999]",
            "n[[1]]",
            "a[0-300]b[0-300]",
        ] {
            assert!(expand_hostlist(bad).is_err(), "{bad}");
        }
    }
}
