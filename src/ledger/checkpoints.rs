//! Checkpoints that others hold: `(seq, hash)` pairs the ledger gave out (an acknowledgment's
//! `log_checkpoint` and `log_seq`, a settlement report's `ledger_head`), checked against the
//! ledger on disk. A ledger rewritten and re-hashed from some record on verifies on its own
//! (every link recomputed); it does not agree with the hashes a utility kept from the acks it
//! was sent, or with a report signed before the rewrite. `flexgate log verify --checkpoints`.
//!
//! A settlement report's head is signed with the site's key ([`super::site_key`]): its
//! signature is checked as the file is read, so a report whose head was edited to match a
//! rewritten ledger is refused, and with an expected key a report signed by another key (or
//! not signed) is too.

use super::site_key::HeadSignature;

/// One checkpoint: the record and the hash it had when given out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The record's sequence number.
    pub seq: u64,
    /// Its hash then, hex.
    pub hash: String,
    /// Where it came from (`dr.ack/1 of ev-1 rev 2`, `settlement report`, `line 3`).
    pub from: String,
    /// The site key that signed it (a settlement report's head), hex; `None`: unsigned.
    pub signed_by: Option<String>,
}

/// Why a file of checkpoints cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CheckpointsError(pub String);

/// A checkpoint the ledger does not agree with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record {seq} (from {from}): {reason}")]
pub struct Disagrees {
    /// The record.
    pub seq: u64,
    /// Where the checkpoint came from.
    pub from: String,
    /// What differs.
    pub reason: String,
}

fn hash_ok(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The checkpoints in one JSON value: a `dr.ack/1` (with `log_seq`), a settlement report
/// (`ledger_head`), `{seq, hash}`, or an array of those.
fn collect(
    value: &serde_json::Value,
    from: &str,
    site_key: Option<&str>,
    out: &mut Vec<Checkpoint>,
) -> Result<(), CheckpointsError> {
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            collect(item, &format!("{from}[{i}]"), site_key, out)?;
        }
        return Ok(());
    }
    let signed_by = signature_of(value, from, site_key)?;
    let pair = if let (Some(seq), Some(hash)) = (value["log_seq"].as_u64(), value["log_checkpoint"].as_str()) {
        let what = format!(
            "{from}: dr.ack of {} revision {}",
            value["event_id"].as_str().unwrap_or("?"),
            value["revision"]
        );
        Some((seq, hash, what))
    } else if let (Some(seq), Some(hash)) = (value["ledger_head"][0].as_u64(), value["ledger_head"][1].as_str()) {
        Some((seq, hash, format!("{from}: settlement report")))
    } else if let (Some(seq), Some(hash)) = (value["seq"].as_u64(), value["hash"].as_str()) {
        Some((seq, hash, from.to_string()))
    } else {
        None
    };
    match pair {
        Some((seq, hash, what)) if hash_ok(hash) && seq > 0 => {
            let hash = hash.to_ascii_lowercase();
            if let Some(signed) = &signed_by
                && (signed.seq != seq || !signed.hash.eq_ignore_ascii_case(&hash))
            {
                return Err(CheckpointsError(format!(
                    "{what}: its ledger_head (record {seq}, {hash}) is not the head it signed (record {}, {}): \
                     the report was changed after it was signed",
                    signed.seq, signed.hash
                )));
            }
            out.push(Checkpoint {
                seq,
                hash,
                from: what,
                signed_by: signed_by.map(|s| s.public_key),
            });
            Ok(())
        }
        Some((seq, hash, what)) => Err(CheckpointsError(format!(
            "{what}: record {seq} with hash {hash:?} is not a checkpoint (a record number from 1 and a 64-digit hex hash)"
        ))),
        // An acknowledgment from before acks named their record carries no checkpoint to check.
        None if value.get("log_checkpoint").is_some() => Ok(()),
        None => Err(CheckpointsError(format!(
            "{from}: neither a dr.ack/1 with log_seq, a settlement report, nor {{\"seq\", \"hash\"}}"
        ))),
    }
}

/// A settlement report's head signature, verified (against `site_key` when given: then a
/// report must carry one). `None` for anything unsigned that may be.
fn signature_of(
    value: &serde_json::Value,
    from: &str,
    site_key: Option<&str>,
) -> Result<Option<HeadSignature>, CheckpointsError> {
    let is_report = value.get("ledger_head").is_some();
    match value.get("ledger_head_signature").filter(|v| !v.is_null()) {
        Some(sig) => {
            let sig: HeadSignature = serde_json::from_value(sig.clone())
                .map_err(|e| CheckpointsError(format!("{from}: ledger_head_signature: {e}")))?;
            sig.verify(site_key)
                .map_err(|why| CheckpointsError(format!("{from}: the report's head signature: {why}")))?;
            Ok(Some(sig))
        }
        None if is_report && site_key.is_some() => Err(CheckpointsError(format!(
            "{from}: the settlement report is not signed, and a site key was given"
        ))),
        None => Ok(None),
    }
}

/// Read the checkpoints of a file: one JSON document (an object or an array) or JSON lines.
/// `site_key` (hex): the key a settlement report's head must be signed with.
pub fn parse(text: &str, site_key: Option<&str>) -> Result<Vec<Checkpoint>, CheckpointsError> {
    let mut out = Vec::new();
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => collect(&value, "the file", site_key, &mut out)?,
        Err(_) => {
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let value: serde_json::Value = serde_json::from_str(line)
                    .map_err(|e| CheckpointsError(format!("line {}: not JSON: {e}", n + 1)))?;
                collect(&value, &format!("line {}", n + 1), site_key, &mut out)?;
            }
        }
    }
    if out.is_empty() {
        return Err(CheckpointsError("no checkpoint in the file".into()));
    }
    Ok(out)
}

/// Check every checkpoint against the ledger (`hash_of(seq)` its record's hash, `len` its
/// length): a record missing or with another hash is a disagreement. Returns how many agreed.
pub fn check(
    checkpoints: &[Checkpoint],
    len: u64,
    hash_of: impl Fn(u64) -> Option<String>,
) -> Result<usize, Disagrees> {
    for c in checkpoints {
        if c.seq > len {
            return Err(Disagrees {
                seq: c.seq,
                from: c.from.clone(),
                reason: format!("the ledger holds {len} records: records given out before are gone"),
            });
        }
        match hash_of(c.seq) {
            Some(h) if h == c.hash => {}
            Some(h) => {
                return Err(Disagrees {
                    seq: c.seq,
                    from: c.from.clone(),
                    reason: format!("its hash here is {h}, it was {} when given out", c.hash),
                });
            }
            None => {
                return Err(Disagrees {
                    seq: c.seq,
                    from: c.from.clone(),
                    reason: "it cannot be read here".into(),
                });
            }
        }
    }
    Ok(checkpoints.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn acks_reports_and_pairs_are_read_and_checked() {
        let lines = format!(
            "{{\"schema\":\"dr.ack/1\",\"event_id\":\"ev-1\",\"revision\":2,\"log_checkpoint\":\"{H1}\",\"log_seq\":3}}\n\
             {{\"schema\":\"flexgate.settlement/1\",\"ledger_head\":[7,\"{H2}\"]}}\n"
        );
        let got = parse(&lines, None).expect("read");
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].seq, got[1].seq), (3, 7));
        assert!(got[0].from.contains("ev-1"));
        let ledger = |seq: u64| match seq {
            3 => Some(H1.to_string()),
            7 => Some(H2.to_string()),
            _ => None,
        };
        assert_eq!(check(&got, 9, ledger), Ok(2));
        // Rewritten from record 5 on: record 7's hash differs.
        let rewritten = |seq: u64| if seq < 5 { ledger(seq) } else { Some(H1.to_string()) };
        let e = check(&got, 9, rewritten).expect_err("caught");
        assert_eq!(e.seq, 7);
        // Truncated: record 7 is gone.
        assert!(check(&got, 6, ledger).expect_err("caught").reason.contains("gone"));
        let array = format!("[{{\"seq\":3,\"hash\":\"{H1}\"}}]");
        assert_eq!(parse(&array, None).expect("an array").len(), 1);
        assert!(parse("{\"seq\":0,\"hash\":\"x\"}", None).is_err());
        assert!(parse("[]", None).is_err());
        assert!(parse("not json\n", None).is_err());
        // With a site key, an unsigned report is refused.
        assert!(parse(&lines, Some(H1)).expect_err("unsigned").0.contains("not signed"));
    }

    #[test]
    fn a_signed_report_is_checked_as_read() {
        let dir = tempfile::tempdir().expect("dir");
        let key = crate::ledger::site_key::SiteKey::load_or_create(dir.path()).expect("key");
        let signed = key.sign_head(7, H2, chrono::DateTime::UNIX_EPOCH);
        let report = serde_json::json!({
            "schema": "flexgate.settlement/1",
            "ledger_head": [7, H2],
            "ledger_head_signature": signed,
        });
        let got = parse(&report.to_string(), Some(&key.public_key())).expect("verified");
        assert_eq!(got[0].signed_by.as_deref(), Some(key.public_key().as_str()));
        // The head edited to match a rewritten ledger: refused.
        let mut edited = report.clone();
        edited["ledger_head"] = serde_json::json!([7, H1]);
        assert!(
            parse(&edited.to_string(), None)
                .expect_err("edited")
                .0
                .contains("changed after")
        );
        // Head and signature's head both edited: the signature does not verify.
        edited["ledger_head_signature"]["hash"] = serde_json::json!(H1);
        assert!(
            parse(&edited.to_string(), None)
                .expect_err("forged")
                .0
                .contains("does not verify")
        );
        // Signed by another key than the site's.
        let other =
            crate::ledger::site_key::SiteKey::load_or_create(tempfile::tempdir().expect("dir").path()).expect("key");
        assert!(parse(&report.to_string(), Some(&other.public_key())).is_err());
    }
}
