//! Keeping etcd small: the leader deletes committed batches that every registered replica holds
//! (keeping the newest `ha.retain_records` records in any case), then compacts etcd's history.
//!
//! etcd keeps its whole store within a space quota (2 GiB by default; past it every write is
//! refused and the site can acknowledge nothing). The chain's batches are the bulk of what a
//! site writes, and after every replica has taken them in they serve only a replica that comes
//! back from a long absence. So the leader deletes them, leaving the anchors (one hash every
//! [`super::keys::ANCHOR_EVERY`] records) and a [`Pruned`] marker that tells a replica behind
//! it why it cannot catch up (it needs a copy of another replica's data directory). Deleting
//! keys alone frees nothing: etcd keeps every revision until its history is compacted, so each
//! pass also compacts up to the revision the previous pass saw (one pass of history stays for
//! watches in flight). etcd reuses the freed pages; giving the space back to the file system is
//! `etcdctl defrag`, an operator's task.

use super::keys::{BatchIndex, Head, Keys, Pruned};
use super::register::Registration;
use flexgate_etcd::wire::prefix_end;
use flexgate_etcd::{Client, EtcdError};

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrunePass {
    /// Batches deleted.
    pub batches: usize,
    /// The first record etcd holds after the pass (1 while nothing was ever pruned).
    pub first_kept: u64,
    /// The revision this pass saw (the next pass compacts to it).
    pub revision: i64,
}

/// The first record that must stay in etcd: every registered replica's next record, and the
/// newest `retain` records. Pure.
#[must_use]
pub fn keep_from(head_seq: u64, applied: &[u64], retain: u64) -> u64 {
    let held_by_all = applied.iter().copied().min().unwrap_or(0);
    let newest = head_seq.saturating_sub(retain);
    held_by_all.min(newest).saturating_add(1)
}

/// One pass: delete the batches that end before [`keep_from`], record where etcd's records now
/// begin, and compact etcd's history up to `compact_to` (the revision a previous pass saw; 0:
/// none).
pub async fn prune_once(client: &Client, keys: &Keys, retain: u64, compact_to: i64) -> Result<PrunePass, EtcdError> {
    let (header, head) = client.get(&keys.head()).await?;
    let head_seq = head
        .and_then(|kv| serde_json::from_slice::<Head>(&kv.value).ok())
        .map_or(0, |h| h.seq);
    let prefix = keys.replicas();
    let registered = client.range(&prefix, &prefix_end(&prefix), 0).await?;
    let applied: Vec<u64> = registered
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<Registration>(&kv.value).ok())
        .map(|r| r.applied_seq)
        .collect();
    let keep = keep_from(head_seq, &applied, retain);
    let mut pass = PrunePass {
        batches: 0,
        first_kept: 1,
        revision: header.revision,
    };
    // Batch keys sort by their first record: those that begin before `keep` are candidates.
    let old = client.range(&keys.batch(1), &keys.batch(keep), 0).await?;
    let doomed: Vec<BatchIndex> = old
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<BatchIndex>(&kv.value).ok())
        .filter(|b| b.last_seq < keep)
        .collect();
    if let Some(last) = doomed.iter().map(|b| b.last_seq).max() {
        // The marker first: a replica that finds a batch missing then knows why.
        let marker = Pruned { first_kept: last + 1 };
        client
            .put(&keys.pruned(), &serde_json::to_vec(&marker).unwrap_or_default(), 0)
            .await?;
        for batch in &doomed {
            let chunks = keys.chunks(&batch.attempt);
            client.delete(&chunks, &prefix_end(&chunks)).await?;
            client.delete(&keys.batch(batch.first_seq), &[]).await?;
        }
        pass.batches = doomed.len();
    }
    let (_, marker) = client.get(&keys.pruned()).await?;
    pass.first_kept = marker
        .and_then(|kv| serde_json::from_slice::<Pruned>(&kv.value).ok())
        .map_or(1, |t| t.first_kept);
    if compact_to > 0 {
        client.compact(compact_to).await?;
    }
    Ok(pass)
}

/// The leader's pruning, every `every` while its term lasts (a leader task).
pub async fn run(client: std::sync::Arc<Client>, keys: Keys, retain: u64, every: std::time::Duration) {
    let mut compact_to = 0;
    loop {
        tokio::time::sleep(every).await;
        match prune_once(&client, &keys, retain, compact_to).await {
            Ok(pass) => {
                if pass.batches > 0 {
                    tracing::info!(
                        batches = pass.batches,
                        first_kept = pass.first_kept,
                        "deleted committed batches every replica holds from etcd"
                    );
                }
                compact_to = pass.revision;
            }
            Err(e) => tracing::warn!("pruning the ledger's batches in etcd: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::keep_from;
    use proptest::prelude::*;

    #[test]
    fn the_slowest_replica_and_the_retained_window_both_hold_records_back() {
        assert_eq!(keep_from(1_000, &[900, 950], 50), 901);
        assert_eq!(keep_from(1_000, &[990, 995], 50), 951);
        assert_eq!(
            keep_from(1_000, &[], 50),
            1,
            "no registered replica: nothing is known held"
        );
        assert_eq!(keep_from(10, &[10], 100), 1);
    }

    proptest! {
        #[test]
        fn nothing_a_registered_replica_lacks_or_the_newest_records_is_ever_deleted(
            head in 0u64..1_000_000,
            applied in proptest::collection::vec(0u64..1_000_000, 0..5),
            retain in 0u64..100_000,
        ) {
            let applied: Vec<u64> = applied.into_iter().map(|a| a.min(head)).collect();
            let keep = keep_from(head, &applied, retain);
            prop_assert!(keep >= 1);
            for a in &applied {
                prop_assert!(keep <= a + 1, "a replica at {a} would lose record {}", a + 1);
            }
            prop_assert!(keep <= head.saturating_sub(retain) + 1);
        }
    }
}
