//! A replica that does not lead: it takes in the committed batches, in chain order, into its
//! own ledger, so that it serves the same reads and can take over from where the leader was.

use super::keys::{BatchIndex, Keys, unchunk_batch};
use crate::ledger::{Ledger, LedgerError};
use flexgate_etcd::wire::prefix_end;
use flexgate_etcd::{Client, EtcdError};
use std::time::Duration;

/// Why a replica could not take in the leader's records.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// etcd did not answer.
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// The ledger refused them (diverged, or its store failed).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The records after this ledger's head were deleted from etcd (pruned, every registered
    /// replica held them then): this replica cannot catch up from etcd alone.
    #[error(
        "this replica's ledger ends at record {have}, and etcd keeps records from {first_kept} on (older batches \
         were pruned while this replica was away): stop it, replace its data directory with a copy of a stopped \
         replica's (or of a backup that reaches record {first_kept}), and start it again"
    )]
    Pruned {
        /// This ledger's head.
        have: u64,
        /// The first record etcd holds.
        first_kept: u64,
    },
    /// What etcd holds is not a batch as the leader writes it.
    #[error("the batch at seq {seq} in etcd does not read: {reason}")]
    Malformed {
        /// Its first record.
        seq: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Take in every committed batch after this ledger's head. Returns the head seq reached.
pub async fn catch_up(client: &Client, keys: &Keys, ledger: &Ledger) -> Result<u64, FollowError> {
    loop {
        let tail = ledger.head().0;
        let (_, found) = client.get(&keys.batch(tail + 1)).await?;
        let Some(kv) = found else {
            return caught_up_or_pruned(client, keys, tail).await;
        };
        let malformed = |reason: String| FollowError::Malformed { seq: tail + 1, reason };
        let index: BatchIndex = serde_json::from_slice(&kv.value).map_err(|e| malformed(e.to_string()))?;
        let prefix = keys.chunks(&index.attempt);
        let chunks = client.range(&prefix, &prefix_end(&prefix), 0).await?;
        if chunks.kvs.len() != index.chunks {
            return Err(malformed(format!(
                "{} chunks named, {} found",
                index.chunks,
                chunks.kvs.len()
            )));
        }
        let texts = unchunk_batch(&chunks.kvs.into_iter().map(|kv| kv.value).collect::<Vec<_>>()).map_err(malformed)?;
        let reached = ledger.replicate(texts).await?;
        if reached != index.last_seq {
            return Err(malformed(format!(
                "the batch ends at {reached}, its index says {}",
                index.last_seq
            )));
        }
    }
}

/// No batch begins after `tail`: either this ledger holds every committed record, or the next
/// ones were pruned away (a batch index and the head are written in one transaction, so a head
/// beyond `tail` without the batch means it was deleted).
async fn caught_up_or_pruned(client: &Client, keys: &Keys, tail: u64) -> Result<u64, FollowError> {
    let (_, head) = client.get(&keys.head()).await?;
    let head_seq = head
        .and_then(|kv| serde_json::from_slice::<super::keys::Head>(&kv.value).ok())
        .map_or(0, |h| h.seq);
    if head_seq <= tail {
        return Ok(tail);
    }
    let (_, pruned) = client.get(&keys.pruned()).await?;
    let first_kept = pruned
        .and_then(|kv| serde_json::from_slice::<super::keys::Pruned>(&kv.value).ok())
        .map_or(1, |t| t.first_kept);
    if first_kept > tail + 1 {
        return Err(FollowError::Pruned { have: tail, first_kept });
    }
    // Committed after the batch was looked for: the next call takes it in.
    Ok(tail)
}

/// Follow until `stop` resolves: catch up, then again at every change of the head (a watch),
/// and every `poll` in case a watch is lost. Errors are logged and retried; a ledger that has
/// diverged stops the follower, since nothing it holds can be trusted to serve.
pub async fn follow(
    client: &Client,
    keys: &Keys,
    ledger: &Ledger,
    poll: Duration,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), FollowError> {
    tokio::pin!(stop);
    loop {
        match catch_up(client, keys, ledger).await {
            Ok(_) => {}
            Err(FollowError::Ledger(e @ LedgerError::Diverged { .. })) => return Err(FollowError::Ledger(e)),
            Err(e @ FollowError::Pruned { .. }) => return Err(e),
            Err(e) => tracing::warn!("following the leader's ledger: {e}; retrying"),
        }
        let head = keys.head();
        let watch = client.watch(&head, &[], 0);
        let wait = async {
            match watch.await {
                Ok(mut w) => {
                    // The first message confirms the watch; the next is a change.
                    let _ = w.next().await;
                    let _ = tokio::time::timeout(poll, w.next()).await;
                }
                Err(_) => tokio::time::sleep(poll).await,
            }
        };
        tokio::select! {
            () = wait => {}
            () = &mut stop => return Ok(()),
        }
    }
}
