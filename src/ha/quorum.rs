//! The leader's quorum: each batch of its ledger committed in etcd, guarded by its term and by
//! the head it continues, before the writer writes it locally and answers (see `keys.rs` for the
//! layout).
//!
//! One transaction when the batch fits in one chunk (the usual case: a decision's few records):
//! the chunk, the batch index, the head and any anchors together. A larger batch writes its
//! chunks first (each transaction guarded by the term alone; nobody reads them until an index
//! names them), then the index and the head.
//!
//! When etcd's answer is lost (a timeout, a member gone mid-request), the commit may or may not
//! have been applied; the quorum reads the head until it can tell, for up to `resolve_within`.
//! If it still cannot, it answers "not durable": the waiters are refused (nothing was
//! acknowledged), and if the batch did land, the next batch's guard fails, the writer follows,
//! and the replica takes the batch in from etcd like any follower.

use super::keys::{ANCHOR_EVERY, BatchIndex, Head, Keys, chunk_batch};
use crate::ledger::replica::{Quorum, QuorumError, StagedRecord};
use flexgate_etcd::wire::{Compare, CompareResult, CompareTarget, PutRequest, RangeRequest, RequestOp, TxnRequest};
use flexgate_etcd::{Client, EtcdError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A leader's quorum in etcd.
pub struct EtcdQuorum {
    client: Arc<Client>,
    keys: Keys,
    epoch: i64,
    /// The head key's revision as this leader last wrote or read it (0: no head yet).
    head_revision: i64,
    /// Attempts so far; with the epoch and when this quorum was made, the name of an attempt's
    /// chunks, which no other attempt ever reuses (a reused name would let a later attempt
    /// overwrite the chunks a committed batch index names).
    attempts: u64,
    /// When this quorum was made (ns since the epoch, wall clock): tells apart the quorums of
    /// one term (a replica that leads again after a halt makes a new one).
    made_ns: i64,
    runtime: tokio::runtime::Handle,
    resolve_within: Duration,
}

impl std::fmt::Debug for EtcdQuorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdQuorum")
            .field("epoch", &self.epoch)
            .field("head_revision", &self.head_revision)
            .finish_non_exhaustive()
    }
}

/// What the head in etcd says, with its revision.
async fn read_head(client: &Client, keys: &Keys) -> Result<Option<(Head, i64)>, EtcdError> {
    let (_, kv) = client.get(&keys.head()).await?;
    kv.map(|kv| {
        serde_json::from_slice::<Head>(&kv.value)
            .map(|h| (h, kv.mod_revision))
            .map_err(|e| EtcdError::Malformed {
                endpoint: String::new(),
                path: "ledger/head".into(),
                reason: e.to_string(),
            })
    })
    .transpose()
}

impl EtcdQuorum {
    /// The quorum of the term `epoch`, continuing the head in etcd now (which the caller has
    /// caught up with). Calls from the ledger's writer thread run on `runtime`.
    pub async fn new(
        client: Arc<Client>,
        keys: Keys,
        epoch: i64,
        runtime: tokio::runtime::Handle,
        resolve_within: Duration,
    ) -> Result<Self, EtcdError> {
        let head_revision = read_head(&client, &keys).await?.map_or(0, |(_, rev)| rev);
        Ok(Self {
            client,
            keys,
            epoch,
            head_revision,
            attempts: 0,
            made_ns: crate::clock::wall_now().timestamp_nanos_opt().unwrap_or_default(),
            runtime,
            resolve_within,
        })
    }

    fn term_guard(&self) -> Compare {
        Compare::created_at(self.keys.leader(), self.epoch)
    }

    fn head_guard(&self) -> Compare {
        if self.head_revision == 0 {
            Compare::created_at(self.keys.head(), 0)
        } else {
            Compare {
                result: CompareResult::Equal,
                target: CompareTarget::Mod,
                key: self.keys.head(),
                version: 0,
                create_revision: 0,
                mod_revision: self.head_revision,
                value: Vec::new(),
            }
        }
    }

    fn put(key: Vec<u8>, value: Vec<u8>) -> RequestOp {
        RequestOp::RequestPut(PutRequest { key, value, lease: 0 })
    }

    /// Commit one batch (see the module docs).
    pub async fn commit_batch(&mut self, after: (u64, &str), batch: &[StagedRecord]) -> Result<(), QuorumError> {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return Ok(());
        };
        debug_assert_eq!(first.seq, after.0 + 1);
        self.attempts += 1;
        let attempt = format!("{}-{}-{}", self.epoch, self.made_ns, self.attempts);
        let texts: Vec<&str> = batch.iter().map(|r| r.text.as_str()).collect();
        let chunks = chunk_batch(&texts);
        let head = Head {
            seq: last.seq,
            hash: last.hash.clone(),
            epoch: u64::try_from(self.epoch).unwrap_or(0),
        };
        let index = BatchIndex {
            first_seq: first.seq,
            last_seq: last.seq,
            last_hash: last.hash.clone(),
            attempt: attempt.clone(),
            chunks: chunks.len(),
        };
        let mut last_ops = vec![
            Self::put(self.keys.batch(first.seq), json(&index)),
            Self::put(self.keys.head(), json(&head)),
        ];
        last_ops.extend(
            batch
                .iter()
                .filter(|r| r.seq % ANCHOR_EVERY == 0)
                .map(|r| Self::put(self.keys.anchor(r.seq), r.hash.clone().into_bytes())),
        );
        // Chunks first when they do not fit beside the index.
        let mut chunk_ops: Vec<RequestOp> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, c)| Self::put(self.keys.chunk(&attempt, i), c))
            .collect();
        let deadline = Instant::now() + self.resolve_within;
        if chunk_ops.len() > 1 {
            while !chunk_ops.is_empty() {
                let rest = chunk_ops.split_off(chunk_ops.len().min(2));
                let group = std::mem::replace(&mut chunk_ops, rest);
                let txn = TxnRequest {
                    compare: vec![self.term_guard()],
                    success: group,
                    failure: Vec::new(),
                };
                // Unnamed chunks are harmless, so a lost answer is simply sent again.
                loop {
                    match self.client.txn(&txn).await {
                        Ok(answer) if answer.succeeded => break,
                        Ok(_) => {
                            return Err(QuorumError::Deposed(format!(
                                "the term of epoch {} is over",
                                self.epoch
                            )));
                        }
                        Err(e) if Instant::now() < deadline => {
                            tracing::debug!("writing a chunk: {e}; again");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => return Err(QuorumError::NotDurable(e.to_string())),
                    }
                }
            }
        } else {
            last_ops.splice(0..0, chunk_ops);
        }
        let txn = TxnRequest {
            compare: vec![self.term_guard(), self.head_guard()],
            success: last_ops,
            failure: vec![RequestOp::RequestRange(RangeRequest {
                key: self.keys.leader(),
                ..RangeRequest::default()
            })],
        };
        loop {
            match self.client.txn(&txn).await {
                Ok(answer) if answer.succeeded => {
                    self.head_revision = answer.header.revision;
                    return Ok(());
                }
                Ok(answer) => {
                    let leader_epoch = answer
                        .ranges()
                        .first()
                        .and_then(|r| r.kvs.first())
                        .map_or(0, |kv| kv.create_revision);
                    if leader_epoch != self.epoch {
                        return Err(QuorumError::Deposed(format!(
                            "the election key is now of epoch {leader_epoch}, not {}",
                            self.epoch
                        )));
                    }
                    // The head moved: by an earlier copy of this very request whose answer was
                    // lost, or by someone else.
                    return match self.landed(&head, after.0).await {
                        Ok(true) => Ok(()),
                        _ => Err(QuorumError::Deposed(format!(
                            "the ledger's head in etcd moved under this leader (after seq {}): it must catch up",
                            after.0
                        ))),
                    };
                }
                Err(cause) => match self.landed(&head, after.0).await {
                    Ok(true) => return Ok(()),
                    // Not applied (the head is where it was): safe to send again.
                    Ok(false) if Instant::now() < deadline => {
                        tracing::debug!("committing a batch: {cause}; not applied, again");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Ok(false) => return Err(QuorumError::NotDurable(cause.to_string())),
                    Err(Landed::Elsewhere) => {
                        return Err(QuorumError::Deposed(
                            "the ledger's head in etcd is neither this batch nor the one before it".into(),
                        ));
                    }
                    Err(Landed::Unknown(e)) => {
                        return Err(QuorumError::NotDurable(format!(
                            "{cause}; whether it landed is unknown ({e}): if it did, this replica takes it in as a follower"
                        )));
                    }
                },
            }
        }
    }

    /// Did the batch ending in `wanted` land? `Ok(false)`: the head is still the one it
    /// continues. Reads until it can tell, up to `resolve_within`.
    async fn landed(&mut self, wanted: &Head, after_seq: u64) -> Result<bool, Landed> {
        let deadline = Instant::now() + self.resolve_within;
        loop {
            match read_head(&self.client, &self.keys).await {
                Ok(Some((head, revision))) if head == *wanted => {
                    self.head_revision = revision;
                    return Ok(true);
                }
                Ok(Some((head, revision))) if head.seq == after_seq && revision == self.head_revision => {
                    return Ok(false);
                }
                Ok(None) if after_seq == 0 && self.head_revision == 0 => return Ok(false),
                Ok(_) => return Err(Landed::Elsewhere),
                Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => return Err(Landed::Unknown(e.to_string())),
            }
        }
    }
}

/// Why [`EtcdQuorum::landed`] could not say yes or no.
enum Landed {
    /// The head is another chain's end.
    Elsewhere,
    /// etcd did not answer in time.
    Unknown(String),
}

impl Quorum for EtcdQuorum {
    fn epoch(&self) -> u64 {
        u64::try_from(self.epoch).unwrap_or(0)
    }

    fn commit(&mut self, after: (u64, &str), batch: &[StagedRecord]) -> Result<(), QuorumError> {
        let runtime = self.runtime.clone();
        runtime.block_on(self.commit_batch(after, batch))
    }
}

/// The small documents as JSON: plain structs of strings and numbers, which always encode.
fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}
