//! The first leader of a site that ran as a single gateway: its ledger becomes the chain in
//! etcd, uploaded as committed batches before it leads, so that every later replica takes in the
//! same history from record 1.

use super::quorum::EtcdQuorum;
use crate::ledger::replica::StagedRecord;
use crate::ledger::{GENESIS_HASH, Ledger};

/// Records per uploaded batch.
const SEED_BATCH: u64 = 512;

/// Upload every record of `ledger` (as stored) through `quorum`, in order.
pub async fn upload(quorum: &mut EtcdQuorum, ledger: &Ledger) -> Result<(), String> {
    let head = ledger.head().0;
    let mut after = (0u64, GENESIS_HASH.to_string());
    let mut seq = 1;
    while seq <= head {
        let last = (seq + SEED_BATCH - 1).min(head);
        let mut batch = Vec::new();
        for s in seq..=last {
            let text = ledger
                .stored(s)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("record {s} is missing from this replica's ledger"))?;
            let hash = ledger
                .get(s)
                .map_err(|e| e.to_string())?
                .map(|r| r.hash)
                .ok_or_else(|| format!("record {s} is missing"))?;
            batch.push(StagedRecord { seq: s, hash, text });
        }
        quorum
            .commit_batch((after.0, &after.1), &batch)
            .await
            .map_err(|e| format!("uploading records {seq}–{last}: {e}"))?;
        if let Some(end) = batch.last() {
            after = (end.seq, end.hash.clone());
        }
        seq = last + 1;
    }
    tracing::info!(records = head, "this replica's ledger is now the site's chain in etcd");
    Ok(())
}
