//! A replica's ledger checked against what etcd committed: the anchors (one record's hash every
//! [`super::keys::ANCHOR_EVERY`] records) and the head. The hash chain alone is unkeyed: a ledger
//! rewritten from some record on and re-hashed to the end verifies on its own. It cannot agree
//! with the hashes the quorum committed at the time, which no one replica can rewrite.

use super::keys::{Head, Keys};
use flexgate_etcd::Client;

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnchorReport {
    /// Anchors (and the head) compared with the local records.
    pub compared: usize,
    /// The committed head's seq, when etcd has one.
    pub committed_seq: Option<u64>,
}

/// Where the local ledger and etcd disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record {seq} does not match what the replicas committed: {reason}")]
pub struct AnchorMismatch {
    /// The record.
    pub seq: u64,
    /// How.
    pub reason: String,
}

/// Compare the local hashes (`local(seq)`, `None` past the local end) with `anchors` and the
/// committed `head`. Pure. Anchors past the local end are not compared (a replica behind is not
/// a forged one); a local ledger longer than the committed head is reported, since no leader
/// committed its extra records.
pub fn compare(
    local: impl Fn(u64) -> Option<String>,
    local_len: u64,
    anchors: &[(u64, String)],
    head: Option<&Head>,
) -> Result<AnchorReport, AnchorMismatch> {
    let mut compared = 0;
    let committed = head.map(|h| (h.seq, h.hash.as_str()));
    for (seq, hash) in anchors.iter().map(|(s, h)| (*s, h.as_str())).chain(committed) {
        if seq > local_len {
            continue;
        }
        match local(seq) {
            Some(mine) if mine == hash => compared += 1,
            Some(mine) => {
                return Err(AnchorMismatch {
                    seq,
                    reason: format!("its hash here is {mine}, the committed one {hash}"),
                });
            }
            None => {
                return Err(AnchorMismatch {
                    seq,
                    reason: "it is missing here".into(),
                });
            }
        }
    }
    if let Some(h) = head
        && local_len > h.seq
    {
        return Err(AnchorMismatch {
            seq: h.seq + 1,
            reason: format!(
                "this ledger holds {local_len} records but the replicas committed {}: no leader committed the rest",
                h.seq
            ),
        });
    }
    Ok(AnchorReport {
        compared,
        committed_seq: head.map(|h| h.seq),
    })
}

/// Read the anchors and the head from etcd.
pub async fn committed(client: &Client, keys: &Keys) -> Result<(Vec<(u64, String)>, Option<Head>), String> {
    let prefix = keys.anchors();
    let found = client
        .range(&prefix, &flexgate_etcd::wire::prefix_end(&prefix), 0)
        .await
        .map_err(|e| e.to_string())?;
    let mut anchors = Vec::new();
    for kv in found.kvs {
        let seq = std::str::from_utf8(&kv.key[prefix.len()..])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| format!("an anchor key that is not a seq: {}", String::from_utf8_lossy(&kv.key)))?;
        anchors.push((seq, String::from_utf8_lossy(&kv.value).into_owned()));
    }
    let (_, head) = client.get(&keys.head()).await.map_err(|e| e.to_string())?;
    let head = head
        .map(|kv| serde_json::from_slice::<Head>(&kv.value).map_err(|e| format!("the head does not read: {e}")))
        .transpose()?;
    Ok((anchors, head))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(n: u64, salt: &str) -> impl Fn(u64) -> Option<String> {
        let salt = salt.to_string();
        move |seq| (seq >= 1 && seq <= n).then(|| format!("{salt}{seq}"))
    }

    #[test]
    fn a_ledger_that_matches_every_anchor_and_the_head_passes_and_one_rehashed_fails_at_the_first_anchor_it_changed() {
        let anchors = vec![(256, "h256".to_string()), (512, "h512".to_string())];
        let head = Head {
            seq: 600,
            hash: "h600".into(),
            epoch: 3,
        };
        let ok = compare(hashes(600, "h"), 600, &anchors, Some(&head)).expect("matches");
        assert_eq!(ok.compared, 3);
        // Rewritten from record 300 on and re-hashed: its own chain verifies, the anchor at 512
        // and the head do not.
        let forged = |seq: u64| {
            (seq <= 600).then(|| {
                if seq < 300 {
                    format!("h{seq}")
                } else {
                    format!("x{seq}")
                }
            })
        };
        let e = compare(forged, 600, &anchors, Some(&head)).expect_err("forged");
        assert_eq!(e.seq, 512);
        // Behind the head: what it has is compared, the rest is not its fault.
        assert_eq!(
            compare(hashes(300, "h"), 300, &anchors, Some(&head))
                .expect("behind")
                .compared,
            1
        );
        // Ahead of the head: records no leader committed.
        assert_eq!(
            compare(hashes(601, "h"), 601, &anchors, Some(&head))
                .expect_err("ahead")
                .seq,
            601
        );
    }
}
