//! Flex tags: how a job tells the gateway how flexible it is.
//!
//! Slurm has no field for "this job tolerates a power cap", so the job's free-text comments
//! carry it. The format is one token, anywhere in the comment:
//!
//! ```text
//! flexgate:tier=batch,pfi=2.1,max_slowdown=0.25
//! ```
//!
//! - The token starts with `flexgate:` (any case) at the start of the comment or after a
//!   character that is not a letter, digit or `_`, and runs to the next whitespace or `;`.
//!   The rest of the comment is left alone, so `nightly run flexgate:tier=batch; owner=bob`
//!   works.
//! - Pairs are `key=value`, separated by `,`. Keys are case-insensitive.
//!   - `tier`: 1–64 characters of `[A-Za-z0-9_-]`, stored lowercase (the gateway maps tier
//!     names to QoS promises and to whether a job may be suspended).
//!   - `pfi`: the job's Power Flexibility Index, a finite number ≥ 0.
//!   - `max_slowdown`: the largest throughput loss the job accepts, a fraction in `[0, 1]`
//!     (`0.25` = 25 %).
//!   - `priority`: a weight in `(0, 1000]` on the job's progress under the gateway's
//!     `progress` objective (default 1): a job of priority 2 counts twice per GPU, so it is cut
//!     later. **Honoured only in the admin comment**: a user who raised their own job's weight
//!     would move the cut onto everyone else's, so a `priority=` in the user's comment is
//!     dropped with a warning.
//!   - `profile`: 1–64 characters of `[A-Za-z0-9_-]`, stored lowercase: the training
//!     configuration the job runs, so that the gateway keys what it measured of the job by its
//!     Slurm job name, its GPU count and this tag, and a re-run starts from it.
//! - Each key is checked on its own: a bad value (NaN, `inf`, a negative PFI, a slowdown
//!   outside `[0, 1]`) drops that key with a warning and keeps the others. Unknown keys are
//!   ignored with a warning, so newer tags do not break older gateways. A key given twice:
//!   the last one wins, with a warning.
//! - **Admin comment wins over comment, key by key.** Users set `--comment` themselves;
//!   `AdminComment` only an operator can set (`scontrol update jobid=N AdminComment=...`), so
//!   an operator can override what a user claimed. Keys the admin comment does not set still
//!   come from the comment.
//!
//! Parsing never panics and never fails: the result is the tags it could read plus warnings.

use serde::{Deserialize, Serialize};

/// The marker that starts a flex-tag token.
pub const TAG_PREFIX: &str = "flexgate:";

/// A job's flexibility as declared in its comments. Every field is optional: absent means
/// "unknown", and the gateway treats unknown as inflexible.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlexTags {
    /// QoS tier name, lowercase (e.g. `batch`, `critical`).
    pub tier: Option<String>,
    /// Power Flexibility Index (≥ 0).
    pub pfi: Option<f64>,
    /// Largest acceptable slowdown, fraction in `[0, 1]`.
    pub max_slowdown: Option<f64>,
    /// The training configuration it runs (lowercase), part of its profile's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Weight of the job's progress (`(0, MAX_PRIORITY]`), from the admin comment only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
}

/// The largest `priority=` weight: one job may count at most a thousand times another per GPU,
/// so that a typo (`priority=1e9`) cannot make every other job absorb the whole cut.
pub const MAX_PRIORITY: f64 = 1000.0;

impl FlexTags {
    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        self.tier.is_none()
            && self.pfi.is_none()
            && self.max_slowdown.is_none()
            && self.profile.is_none()
            && self.priority.is_none()
    }

    /// `self` with every key that `over` sets replaced by `over`'s value.
    fn overlaid_with(self, over: FlexTags) -> FlexTags {
        FlexTags {
            tier: over.tier.or(self.tier),
            pfi: over.pfi.or(self.pfi),
            max_slowdown: over.max_slowdown.or(self.max_slowdown),
            profile: over.profile.or(self.profile),
            priority: over.priority.or(self.priority),
        }
    }
}

/// Tags read from text, with what was wrong in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedTags {
    /// The keys that parsed.
    pub tags: FlexTags,
    /// One line per ignored key or value, meant for logs and the operator.
    pub warnings: Vec<String>,
}

/// Reads the flex tags of one comment.
pub fn parse_flex_tags(text: &str) -> ParsedTags {
    let mut out = ParsedTags::default();
    for token in tokens(text) {
        for pair in token.split(',') {
            let pair = pair.trim();
            if pair.is_empty() {
                continue;
            }
            let Some((key, value)) = pair.split_once('=') else {
                out.warnings.push(format!("flex tag {pair:?} has no '=value'; ignored"));
                continue;
            };
            let key = key.trim().to_ascii_lowercase();
            let value = value.trim();
            match key.as_str() {
                "profile" => match parse_tier(value) {
                    Ok(t) => set(&mut out.tags.profile, t, "profile", &mut out.warnings),
                    Err(e) => out.warnings.push(e.replace("tier=", "profile=")),
                },
                "tier" => match parse_tier(value) {
                    Ok(t) => set(&mut out.tags.tier, t, "tier", &mut out.warnings),
                    Err(why) => out.warnings.push(why),
                },
                "pfi" => match parse_number(value, "pfi") {
                    Ok(v) if v >= 0.0 => set(&mut out.tags.pfi, v, "pfi", &mut out.warnings),
                    Ok(v) => out.warnings.push(format!("pfi={v} is negative; ignored")),
                    Err(why) => out.warnings.push(why),
                },
                "max_slowdown" => match parse_number(value, "max_slowdown") {
                    Ok(v) if (0.0..=1.0).contains(&v) => {
                        set(&mut out.tags.max_slowdown, v, "max_slowdown", &mut out.warnings)
                    }
                    Ok(v) => out.warnings.push(format!(
                        "max_slowdown={v} is outside [0, 1] (a fraction: 0.25 means 25 %); ignored"
                    )),
                    Err(why) => out.warnings.push(why),
                },
                "priority" => match parse_number(value, "priority") {
                    Ok(v) if v > 0.0 && v <= MAX_PRIORITY => set(&mut out.tags.priority, v, "priority", &mut out.warnings),
                    Ok(v) => out.warnings.push(format!(
                        "priority={v} is outside (0, {MAX_PRIORITY}] (a weight: 2 counts a job's progress twice); ignored"
                    )),
                    Err(why) => out.warnings.push(why),
                },
                _ => out.warnings.push(format!("unknown flex tag key {key:?}; ignored")),
            }
        }
    }
    out
}

/// Reads a job's flex tags from its comment and admin comment; the admin comment's keys win.
/// Warnings are prefixed with the field they come from.
pub fn job_flex_tags(comment: &str, admin_comment: &str) -> ParsedTags {
    let mut user = parse_flex_tags(comment);
    let admin = parse_flex_tags(admin_comment);
    if let Some(claimed) = user.tags.priority.take() {
        user.warnings.push(format!(
            "priority={claimed} is honoured only in the admin comment (an operator's); ignored"
        ));
    }
    let mut warnings: Vec<String> = user.warnings.into_iter().map(|w| format!("comment: {w}")).collect();
    warnings.extend(admin.warnings.into_iter().map(|w| format!("admin_comment: {w}")));
    ParsedTags {
        tags: user.tags.overlaid_with(admin.tags),
        warnings,
    }
}

fn set<T: std::fmt::Debug>(slot: &mut Option<T>, value: T, key: &str, warnings: &mut Vec<String>) {
    if let Some(old) = slot.replace(value) {
        warnings.push(format!(
            "flex tag {key} given twice; {old:?} replaced by the later value"
        ));
    }
}

/// The `key=value,...` bodies of every `flexgate:` token in `text`.
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut from = 0;
    while from < bytes.len() {
        let Some(pos) = find_ascii_ci(&bytes[from..], TAG_PREFIX.as_bytes()).map(|p| p + from) else {
            break;
        };
        let boundary = pos == 0 || {
            let prev = bytes[pos - 1];
            !(prev.is_ascii_alphanumeric() || prev == b'_')
        };
        let body_start = pos + TAG_PREFIX.len();
        if boundary {
            let rest = &text[body_start..];
            let end = rest.find(|c: char| c.is_whitespace() || c == ';').unwrap_or(rest.len());
            out.push(&rest[..end]);
            from = body_start + end;
        } else {
            from = body_start;
        }
    }
    out
}

fn find_ascii_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w.eq_ignore_ascii_case(needle))
}

fn parse_tier(value: &str) -> Result<String, String> {
    if value.is_empty() || value.len() > 64 {
        return Err(format!("tier={value:?} must be 1 to 64 characters; ignored"));
    }
    if !value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(format!(
            "tier={value:?} may only contain letters, digits, '_' and '-'; ignored"
        ));
    }
    Ok(value.to_ascii_lowercase())
}

fn parse_number(value: &str, key: &str) -> Result<f64, String> {
    let v: f64 = value
        .parse()
        .map_err(|_| format!("{key}={value:?} is not a number; ignored"))?;
    if !v.is_finite() {
        return Err(format!("{key}={value:?} is not finite; ignored"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_profile_names_the_training_configuration_and_is_checked() {
        let parsed = parse_flex_tags("flexgate:tier=batch,profile=Llama70B-lora_v2");
        assert_eq!(parsed.tags.profile.as_deref(), Some("llama70b-lora_v2"));
        let bad = parse_flex_tags("flexgate:profile=has/slash");
        assert_eq!(bad.tags.profile, None);
        assert!(
            bad.warnings.iter().any(|w| w.starts_with("profile=")),
            "{:?}",
            bad.warnings
        );
    }

    #[test]
    fn full_token() {
        let p = parse_flex_tags("flexgate:tier=batch,pfi=2.1,max_slowdown=0.25");
        assert_eq!(p.tags.tier.as_deref(), Some("batch"));
        assert_eq!(p.tags.pfi, Some(2.1));
        assert_eq!(p.tags.max_slowdown, Some(0.25));
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn anywhere_in_the_comment_and_case() {
        let p = parse_flex_tags("nightly run FlexGate:TIER=Batch; owner=bob pfi=9");
        assert_eq!(p.tags.tier.as_deref(), Some("batch"));
        assert_eq!(p.tags.pfi, None, "pfi=9 is outside the token");
        assert!(p.warnings.is_empty());
        let p = parse_flex_tags("x (flexgate:pfi=1.5)");
        assert_eq!(p.tags.pfi, None, "')' is part of the value: not a number");
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn needs_a_word_boundary() {
        assert!(parse_flex_tags("notflexgate:tier=batch").tags.is_empty());
        assert_eq!(parse_flex_tags("a,flexgate:tier=x").tags.tier.as_deref(), Some("x"));
    }

    #[test]
    fn unknown_keys_warn_and_others_stay() {
        let p = parse_flex_tags("flexgate:tier=batch,color=blue,pfi=1");
        assert_eq!(p.tags.tier.as_deref(), Some("batch"));
        assert_eq!(p.tags.pfi, Some(1.0));
        assert_eq!(p.warnings.len(), 1);
        assert!(p.warnings[0].contains("color"));
    }

    #[test]
    fn bad_values_rejected_per_key() {
        for (text, warn) in [
            ("flexgate:pfi=NaN,tier=a", "not finite"),
            ("flexgate:pfi=inf,tier=a", "not finite"),
            ("flexgate:pfi=-0.5,tier=a", "negative"),
            ("flexgate:pfi=abc,tier=a", "not a number"),
            ("flexgate:max_slowdown=1.5,tier=a", "outside [0, 1]"),
            ("flexgate:max_slowdown=-0.1,tier=a", "outside [0, 1]"),
            ("flexgate:max_slowdown=nan,tier=a", "not finite"),
            ("flexgate:tier=,pfi=1", "1 to 64"),
            ("flexgate:tier=b@d,pfi=1", "letters"),
            ("flexgate:tierbatch,pfi=1", "no '=value'"),
        ] {
            let p = parse_flex_tags(text);
            assert_eq!(p.warnings.len(), 1, "{text}: {:?}", p.warnings);
            assert!(p.warnings[0].contains(warn), "{text}: {:?}", p.warnings);
            assert!(
                p.tags.tier.is_some() || p.tags.pfi.is_some(),
                "{text}: the good key stays"
            );
        }
    }

    #[test]
    fn bounds_are_inclusive() {
        let p = parse_flex_tags("flexgate:pfi=0,max_slowdown=0");
        assert_eq!((p.tags.pfi, p.tags.max_slowdown), (Some(0.0), Some(0.0)));
        let p = parse_flex_tags("flexgate:max_slowdown=1");
        assert_eq!(p.tags.max_slowdown, Some(1.0));
    }

    #[test]
    fn duplicate_key_last_wins() {
        let p = parse_flex_tags("flexgate:tier=a flexgate:tier=b");
        assert_eq!(p.tags.tier.as_deref(), Some("b"));
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn admin_comment_wins_key_by_key() {
        let p = job_flex_tags("flexgate:tier=batch,pfi=2.1", "flexgate:tier=critical,max_slowdown=0");
        assert_eq!(p.tags.tier.as_deref(), Some("critical"));
        assert_eq!(p.tags.pfi, Some(2.1));
        assert_eq!(p.tags.max_slowdown, Some(0.0));
        let p = job_flex_tags("flexgate:pfi=x", "flexgate:bogus=1");
        assert_eq!(p.warnings.len(), 2);
        assert!(p.warnings[0].starts_with("comment: "));
        assert!(p.warnings[1].starts_with("admin_comment: "));
    }

    #[test]
    fn priority_is_a_bounded_weight_taken_from_the_admin_comment_only() {
        let t = job_flex_tags("flexgate:tier=batch,priority=5", "flexgate:priority=2.5");
        assert_eq!(t.tags.priority, Some(2.5));
        assert_eq!(t.tags.tier.as_deref(), Some("batch"));
        assert!(
            t.warnings
                .iter()
                .any(|w| w.starts_with("comment: priority=5 is honoured only")),
            "{:?}",
            t.warnings
        );
        let user_only = job_flex_tags("flexgate:priority=5", "");
        assert_eq!(user_only.tags.priority, None);
        for bad in ["0", "-1", "1001", "NaN", "inf", "high"] {
            let t = job_flex_tags("", &format!("flexgate:priority={bad}"));
            assert_eq!(t.tags.priority, None, "{bad}");
            assert_eq!(t.warnings.len(), 1, "{bad}: {:?}", t.warnings);
        }
        assert_eq!(
            job_flex_tags("", "flexgate:priority=1000").tags.priority,
            Some(MAX_PRIORITY)
        );
    }

    #[test]
    fn no_tags() {
        assert_eq!(parse_flex_tags(""), ParsedTags::default());
        assert_eq!(parse_flex_tags("just a comment"), ParsedTags::default());
        assert!(parse_flex_tags("flexgate:").tags.is_empty());
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,80}") {
            let _ = job_flex_tags(&s, &s);
        }

        #[test]
        fn accepted_values_are_valid(s in "flexgate:(tier|pfi|max_slowdown)=[-0-9.a-zA-Z]{0,8}(,(pfi|max_slowdown)=[-0-9.eE]{0,6})?") {
            let p = parse_flex_tags(&s);
            if let Some(v) = p.tags.pfi { prop_assert!(v.is_finite() && v >= 0.0); }
            if let Some(v) = p.tags.max_slowdown { prop_assert!((0.0..=1.0).contains(&v)); }
        }

        #[test]
        fn written_tags_read_back(tier in "[a-z0-9_-]{1,20}", pfi in 0.0f64..100.0, slow in 0.0f64..=1.0) {
            let text = format!("job flexgate:tier={tier},pfi={pfi},max_slowdown={slow} end");
            let p = parse_flex_tags(&text);
            prop_assert_eq!(p.tags.tier.as_deref(), Some(tier.as_str()));
            prop_assert_eq!(p.tags.pfi, Some(pfi));
            prop_assert_eq!(p.tags.max_slowdown, Some(slow));
            prop_assert!(p.warnings.is_empty());
        }
    }
}
