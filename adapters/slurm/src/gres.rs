//! Parsing Slurm's per-node GRES allocation strings (`gres_detail`).
//!
//! slurmctld describes what a job holds on each of its nodes with one string per node, such as
//! `gpu:h100:3(IDX:2-4)`: the GRES name, an optional type, the count, and the *GRES indices*
//! (positions in the node's gres.conf device list, see [`crate::gres_conf`]). Seen in the wild:
//!
//! | string | meaning |
//! |---|---|
//! | `gpu:h100:3(IDX:2-4)` | 3 GPUs of type h100, indices 2, 3, 4 |
//! | `gpu:2(IDX:0-1,4)` | no type; the count disagrees with the 3 indices (kept, flagged) |
//! | `gpu(IDX:0)` | no type, no count |
//! | `gpu:2(IDX:0-1),nic:1(IDX:0)` | several GRES on one node: only `gpu` matters here |
//! | `gpu:0(IDX:N/A)` | nothing allocated / no index information |
//!
//! Parsing is tolerant (types may contain `:` and `.`, as MIG types do; unknown parenthesised
//! parts are ignored) but never guesses indices, never panics, and bounds the work: an index
//! list may expand to at most [`MAX_INDICES`] entries, so `IDX:0-4294967295` is an error, not
//! an allocation of 16 GiB. Every error names the offending string (truncated to 200 bytes).

use std::fmt::Write as _;

/// Most GRES indices one string may expand to. No node has more than a few dozen GPUs; the
/// bound exists so a hostile or corrupt response cannot make us allocate gigabytes.
pub const MAX_INDICES: usize = 4096;

/// One `name[:type][:count](IDX:list)` item of a `gres_detail` string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresEntry {
    /// GRES name (`gpu`, `nic`, `shard`, ...).
    pub name: String,
    /// GRES type (`h100`, `a100_3g.20gb`), when the allocation names one.
    pub gres_type: Option<String>,
    /// The count Slurm printed, when there was one.
    pub count: Option<u64>,
    /// The allocated indices, sorted and de-duplicated; `None` for `IDX:N/A` or when the item
    /// carries no `IDX:` part at all (index information unknown).
    pub indices: Option<Vec<u32>>,
}

/// What a node's `gres_detail` says about GPUs, all `gpu` items merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDetail {
    /// The GPU type; several distinct types on one node are joined with `,` in order of
    /// appearance (rare: a job asking for two GPU types on the same node).
    pub gres_type: Option<String>,
    /// Sum of the printed counts, when every gpu item printed one.
    pub count: Option<u64>,
    /// GPU indices held on the node, sorted, de-duplicated.
    pub indices: Vec<u32>,
    /// False when at least one gpu item had no index information (`IDX:N/A` or no `IDX:`) while
    /// its count was not zero: the job holds GPUs there, but we cannot say which.
    pub indices_known: bool,
}

/// A `gres_detail` string (or an index list) that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse GRES string {input:?}: {reason}")]
pub struct GresError {
    /// The offending string, truncated to 200 bytes.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl GresError {
    fn new(input: &str, reason: impl Into<String>) -> Self {
        GresError {
            input: truncate(input, 200),
            reason: reason.into(),
        }
    }
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Parses a whole `gres_detail` string into its items. The empty string is no items.
pub fn parse_gres_detail(input: &str) -> Result<Vec<GresEntry>, GresError> {
    let mut entries = Vec::new();
    let mut total = 0usize;
    for item in split_top_level(input)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let entry = parse_item(input, item)?;
        total += entry.indices.as_ref().map_or(0, Vec::len);
        if total > MAX_INDICES {
            return Err(GresError::new(input, format!("more than {MAX_INDICES} indices")));
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// The GPU part of a node's `gres_detail` string; `Ok(None)` when it holds no `gpu` item.
pub fn parse_gpu_detail(input: &str) -> Result<Option<GpuDetail>, GresError> {
    let mut out: Option<GpuDetail> = None;
    for entry in parse_gres_detail(input)? {
        if entry.name != "gpu" {
            continue;
        }
        let detail = out.get_or_insert(GpuDetail {
            gres_type: None,
            count: Some(0),
            indices: Vec::new(),
            indices_known: true,
        });
        if let Some(t) = entry.gres_type {
            match &mut detail.gres_type {
                None => detail.gres_type = Some(t),
                Some(existing) if !existing.split(',').any(|e| e == t) => {
                    existing.push(',');
                    existing.push_str(&t);
                }
                Some(_) => {}
            }
        }
        detail.count = match (detail.count, entry.count) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            _ => None,
        };
        match entry.indices {
            Some(idx) => detail.indices.extend(idx),
            None if entry.count == Some(0) => {}
            None => detail.indices_known = false,
        }
    }
    if let Some(d) = &mut out {
        d.indices.sort_unstable();
        d.indices.dedup();
    }
    Ok(out)
}

/// Splits at commas that are not inside parentheses (`IDX:0-1,4` contains commas).
fn split_top_level(input: &str) -> Result<Vec<&str>, GresError> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| GresError::new(input, "unbalanced ')'"))?;
            }
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(GresError::new(input, "unbalanced '('"));
    }
    parts.push(&input[start..]);
    Ok(parts)
}

fn parse_item(input: &str, item: &str) -> Result<GresEntry, GresError> {
    let (head, paren) = match item.find('(') {
        Some(open) => {
            if !item.ends_with(')') {
                return Err(GresError::new(input, format!("text after ')' in {item:?}")));
            }
            (&item[..open], Some(&item[open + 1..item.len() - 1]))
        }
        None => (item, None),
    };
    let head = head.trim();
    let mut parts: Vec<&str> = head.split(':').collect();
    let name = parts.remove(0).trim();
    let name = name.strip_prefix("gres/").unwrap_or(name);
    if name.is_empty() {
        return Err(GresError::new(input, format!("item {item:?} has no GRES name")));
    }
    if name.chars().any(|c| c.is_whitespace() || c == ')' || c == '=') {
        return Err(GresError::new(input, format!("bad GRES name {name:?}")));
    }
    let count = match parts.last() {
        Some(last) if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) => {
            let n = last
                .parse::<u64>()
                .map_err(|_| GresError::new(input, format!("count {last:?} is too large")))?;
            parts.pop();
            Some(n)
        }
        _ => None,
    };
    let gres_type = if parts.is_empty() {
        None
    } else {
        let t = parts.join(":");
        if t.is_empty() || t.chars().any(char::is_whitespace) {
            return Err(GresError::new(input, format!("bad GRES type {t:?}")));
        }
        Some(t)
    };
    let indices = match paren {
        None => None,
        Some(inner) => parse_paren(input, inner)?,
    };
    Ok(GresEntry {
        name: name.to_string(),
        gres_type,
        count,
        indices,
    })
}

/// The inside of `(...)`: `IDX:list` or `IDX:N/A`; other contents (future formats) carry no
/// index information.
fn parse_paren(input: &str, inner: &str) -> Result<Option<Vec<u32>>, GresError> {
    let inner = inner.trim();
    let Some(list) = inner.strip_prefix("IDX:") else {
        return Ok(None);
    };
    let list = list.trim();
    if list.eq_ignore_ascii_case("N/A") {
        return Ok(None);
    }
    parse_index_list(list)
        .map(Some)
        .map_err(|e| GresError::new(input, e.reason))
}

/// Parses an index list like `0-1,4` into sorted, de-duplicated indices (at most
/// [`MAX_INDICES`]).
pub fn parse_index_list(list: &str) -> Result<Vec<u32>, GresError> {
    let mut out = Vec::new();
    if list.trim().is_empty() {
        return Err(GresError::new(list, "empty index list"));
    }
    for part in list.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (parse_u32(list, a)?, parse_u32(list, b)?),
            None => {
                let n = parse_u32(list, part)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(GresError::new(list, format!("descending range {part:?}")));
        }
        let len = (hi - lo) as usize + 1;
        if out.len() + len > MAX_INDICES {
            return Err(GresError::new(list, format!("more than {MAX_INDICES} indices")));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn parse_u32(list: &str, s: &str) -> Result<u32, GresError> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(GresError::new(list, format!("{s:?} is not an index")));
    }
    s.parse::<u32>()
        .map_err(|_| GresError::new(list, format!("index {s:?} is too large")))
}

/// Formats indices the way Slurm does (`0-1,4`); the inverse of [`parse_index_list`] on sorted,
/// de-duplicated input. Used in messages and tests.
pub fn format_index_list(indices: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && end.checked_add(1) == Some(indices[i + 1]) {
            i += 1;
            end = indices[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gpu(s: &str) -> GpuDetail {
        parse_gpu_detail(s).expect("parses").expect("has gpu")
    }

    #[test]
    fn typed_range() {
        let d = gpu("gpu:h100:3(IDX:2-4)");
        assert_eq!(d.gres_type.as_deref(), Some("h100"));
        assert_eq!(d.count, Some(3));
        assert_eq!(d.indices, vec![2, 3, 4]);
        assert!(d.indices_known);
    }

    #[test]
    fn untyped_list_with_gap() {
        let d = gpu("gpu:2(IDX:0-1,4)");
        assert_eq!(d.gres_type, None);
        assert_eq!(d.count, Some(2));
        assert_eq!(d.indices, vec![0, 1, 4]);
    }

    #[test]
    fn bare_name() {
        let d = gpu("gpu(IDX:0)");
        assert_eq!((d.gres_type, d.count, d.indices), (None, None, vec![0]));
    }

    #[test]
    fn eight_gpus() {
        assert_eq!(gpu("gpu:h100:8(IDX:0-7)").indices, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn keeps_only_gpu_among_several() {
        let all = parse_gres_detail("gpu:2(IDX:0-1),nic:1(IDX:0)").expect("parses");
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].name, "nic");
        let d = gpu("gpu:2(IDX:0-1),nic:1(IDX:0)");
        assert_eq!(d.indices, vec![0, 1]);
        assert_eq!(d.count, Some(2));
        let d = gpu("nic:1(IDX:0),gpu:a100:1(IDX:3)");
        assert_eq!(d.indices, vec![3]);
    }

    #[test]
    fn not_available() {
        let d = gpu("gpu:0(IDX:N/A)");
        assert!(d.indices.is_empty());
        assert!(d.indices_known, "zero GPUs: nothing is unknown");
        let d = gpu("gpu(IDX:N/A)");
        assert!(!d.indices_known);
        let d = gpu("gpu:h100:2(IDX:N/A)");
        assert!(!d.indices_known);
        assert_eq!(d.count, Some(2));
    }

    #[test]
    fn mig_type_with_dots_and_two_types() {
        let d = gpu("gpu:a100_3g.20gb:1(IDX:0),gpu:a100:1(IDX:2)");
        assert_eq!(d.gres_type.as_deref(), Some("a100_3g.20gb,a100"));
        assert_eq!(d.count, Some(2));
        assert_eq!(d.indices, vec![0, 2]);
    }

    #[test]
    fn no_gpu_and_empty() {
        assert_eq!(parse_gpu_detail("").expect("empty ok"), None);
        assert_eq!(parse_gpu_detail("nic:1(IDX:0)").expect("ok"), None);
    }

    #[test]
    fn errors_name_the_string() {
        for bad in [
            "gpu:2(IDX:0-1",
            "gpu:2IDX:0)",
            "gpu:2(IDX:1-0)",
            "gpu:2(IDX:a-b)",
            "gpu:2(IDX:)",
            "gpu:2(IDX:0-4294967295)",
            "gpu:2(IDX:99999999999)",
            ":2(IDX:0)",
            "gpu:2(IDX:0)x",
            "gpu:99999999999999999999999(IDX:0)",
        ] {
            let err = parse_gpu_detail(bad).expect_err(bad);
            assert!(err.to_string().contains(&truncate(bad, 200)), "{err} should name {bad}");
        }
    }

    #[test]
    fn huge_input_is_bounded_and_truncated_in_errors() {
        let huge = format!("gpu:1(IDX:{})", "1,".repeat(100_000));
        let err = parse_gpu_detail(&huge).expect_err("too many");
        assert!(err.input.len() < 300);
        let many = (0..5000)
            .map(|i| format!("x{i}:1(IDX:0)"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(parse_gres_detail(&many).is_err());
    }

    #[test]
    fn formats_ranges() {
        assert_eq!(format_index_list(&[]), "");
        assert_eq!(format_index_list(&[0, 1, 4]), "0-1,4");
        assert_eq!(format_index_list(&[2, 3, 4]), "2-4");
        assert_eq!(format_index_list(&[7]), "7");
        assert_eq!(
            format_index_list(&[u32::MAX - 1, u32::MAX]),
            format!("{}-{}", u32::MAX - 1, u32::MAX)
        );
    }

    proptest! {
        #[test]
        fn formatted_range_list_parses_back(set in proptest::collection::btree_set(0u32..512, 1..64)) {
            let v: Vec<u32> = set.into_iter().collect();
            let s = format_index_list(&v);
            prop_assert_eq!(parse_index_list(&s).expect("parses"), v.clone());
            let detail = format!("gpu:h100:{}(IDX:{s}),nic:1(IDX:0)", v.len());
            let d = parse_gpu_detail(&detail).expect("parses").expect("gpu");
            prop_assert_eq!(d.count, Some(v.len() as u64));
            prop_assert_eq!(d.indices, v);
        }

        #[test]
        fn never_panics_on_arbitrary_input(s in "\\PC{0,64}") {
            let _ = parse_gres_detail(&s);
            let _ = parse_gpu_detail(&s);
        }

        #[test]
        fn never_panics_on_gres_like_input(s in "[gpu:h1IDX()N/A0-9,\\-]{0,40}") {
            if let Ok(Some(d)) = parse_gpu_detail(&s) {
                prop_assert!(d.indices.len() <= MAX_INDICES);
                prop_assert!(d.indices.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
