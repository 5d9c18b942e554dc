//! The single writer: group commit.
//!
//! It is a dedicated OS thread rather than a Tokio task, for three reasons: its sled work (B-tree
//! inserts, hashing, the flush) is blocking and would otherwise stall runtime workers; it must
//! not depend on the runtime that opened the ledger staying alive; and dropping the last
//! [`super::Ledger`] handle can then join it synchronously, so the directory's lock is released
//! by the time the drop returns. It calls sled's `flush()` directly, which is exactly what
//! `flush_async()` would run on sled's thread pool.
//!
//! Each round it waits for the first pending command, drains whatever else is queued (at most
//! [`MAX_BATCH`] appends, stopping at a flush or close request), assigns seqs and chains hashes,
//! writes the batch in one sled transaction (records and dedup entries together), flushes and
//! syncs once (`durable.rs`), and only then answers every waiter of the batch. After any storage error it stops: every
//! pending and later append fails with [`LedgerError::WriterFailed`], because the state of the
//! store is no longer known.

use super::durable::Durable;
use super::store::{Store, check_record};
use super::{Appended, LedgerError, MAX_BATCH, NewRecord, Record, Shared};
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use tokio::sync::{mpsc, oneshot};

type Reply = oneshot::Sender<Result<Appended, LedgerError>>;

pub(crate) enum Command {
    Append {
        entry: NewRecord,
        reply: Reply,
    },
    /// Answer once everything queued before it is flushed.
    Flush {
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
    /// Like `Flush`, then stop.
    Close {
        reply: oneshot::Sender<Result<(), LedgerError>>,
    },
}

/// The writer's view of the chain end (including records written but not yet flushed).
#[derive(Clone)]
struct Tail {
    seq: u64,
    hash: String,
}

/// Records a panic of the writer thread (a bug) as the writer's failure, so that appends say so
/// instead of reporting a plain "closed".
struct PanicGuard(Arc<Shared>);

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut failure = self.0.failure.lock().unwrap_or_else(PoisonError::into_inner);
            if failure.is_none() {
                *failure = Some("the ledger writer panicked (a bug: please report it)".to_string());
            }
        }
    }
}

fn refusal(shared: &Shared) -> LedgerError {
    match shared.failure.lock().unwrap_or_else(PoisonError::into_inner).clone() {
        Some(reason) => LedgerError::WriterFailed { reason },
        None => LedgerError::Closed,
    }
}

fn flush(store: &Store, durable: &mut Durable, shared: &Shared) -> Result<(), LedgerError> {
    if shared.failure.lock().unwrap_or_else(PoisonError::into_inner).is_some() {
        return Err(refusal(shared));
    }
    durable_flush(store, durable)
}

/// sled's flush, then the syncs that make it survive a power cut (`durable.rs`).
fn durable_flush(store: &Store, durable: &mut Durable) -> Result<(), LedgerError> {
    store.db.flush().map_err(LedgerError::Storage)?;
    durable.sync().map_err(|e| LedgerError::Storage(sled::Error::Io(e)))
}

/// The writer thread's body. Returns when every handle is gone or on `Close`.
pub(crate) fn run(
    mut rx: mpsc::Receiver<Command>,
    store: Store,
    mut durable: Durable,
    shared: Arc<Shared>,
    head: (u64, String),
) {
    let _guard = PanicGuard(shared.clone());
    let mut tail = Tail {
        seq: head.0,
        hash: head.1,
    };
    let mut close_reply = None;
    while let Some(first) = rx.blocking_recv() {
        let mut batch = Vec::new();
        let mut flush_reply = None;
        match first {
            Command::Append { entry, reply } => batch.push((entry, reply)),
            Command::Flush { reply } => flush_reply = Some(reply),
            Command::Close { reply } => close_reply = Some(reply),
        }
        while flush_reply.is_none() && close_reply.is_none() && batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Command::Append { entry, reply }) => batch.push((entry, reply)),
                Ok(Command::Flush { reply }) => flush_reply = Some(reply),
                Ok(Command::Close { reply }) => close_reply = Some(reply),
                Err(_) => break,
            }
        }
        let mut failed = false;
        if !batch.is_empty()
            && let Err(reason) = commit(&store, &mut durable, &shared, &mut tail, batch)
        {
            tracing::error!(%reason, "ledger writer stopped");
            *shared.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
            failed = true;
        }
        if let Some(reply) = flush_reply {
            let _ = reply.send(flush(&store, &mut durable, &shared));
        }
        if failed || close_reply.is_some() {
            break;
        }
    }

    // Stopping: refuse whatever is still queued, flush, answer the close.
    rx.close();
    while let Some(command) = rx.blocking_recv() {
        match command {
            Command::Append { reply, .. } => {
                let _ = reply.send(Err(refusal(&shared)));
            }
            Command::Flush { reply } | Command::Close { reply } => {
                let _ = reply.send(Err(refusal(&shared)));
            }
        }
    }
    let flushed = flush(&store, &mut durable, &shared);
    if let Err(e) = &flushed {
        tracing::error!(error = %e, "final ledger flush failed");
    }
    if let Some(reply) = close_reply {
        let _ = reply.send(flushed);
    }
}

/// Writes and flushes one batch, then answers its waiters. `Err` means the writer must stop; the
/// waiters have been answered with the reason.
fn commit(
    store: &Store,
    durable: &mut Durable,
    shared: &Shared,
    tail: &mut Tail,
    batch: Vec<(NewRecord, Reply)>,
) -> Result<(), String> {
    let (entries, replies): (Vec<NewRecord>, Vec<Reply>) = batch.into_iter().unzip();
    let fail = |replies: Vec<Reply>, reason: String| {
        for reply in replies {
            let _ = reply.send(Err(LedgerError::WriterFailed { reason: reason.clone() }));
        }
        Err(reason)
    };
    let started = std::time::Instant::now();
    let observe = |ok: bool| {
        if let Some(observer) = shared.flush_observer.get() {
            observer(started.elapsed(), ok);
        }
    };
    let (new_tail, outcomes) = match stage_and_write(store, tail.clone(), entries) {
        Ok(staged) => staged,
        Err(e) => {
            observe(false);
            return fail(replies, format!("writing a batch failed: {e}"));
        }
    };
    if let Err(e) = durable_flush(store, durable) {
        observe(false);
        return fail(replies, format!("flushing a batch failed: {e}"));
    }
    observe(true);
    *tail = new_tail;
    *shared.head.write().unwrap_or_else(PoisonError::into_inner) = (tail.seq, tail.hash.clone());
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        let _ = reply.send(outcome); // the caller may have stopped waiting: the record stands
    }
    Ok(())
}

/// Assigns seqs, chains hashes and writes the new records and their dedup entries in one
/// transaction. Returns the new tail and one outcome per entry, in order.
#[allow(clippy::type_complexity)]
fn stage_and_write(
    store: &Store,
    mut tail: Tail,
    entries: Vec<NewRecord>,
) -> Result<(Tail, Vec<Result<Appended, LedgerError>>), LedgerError> {
    let mut records = sled::Batch::default();
    let mut dedup = sled::Batch::default();
    let mut in_batch: HashMap<String, (u64, String)> = HashMap::new();
    let mut outcomes = Vec::with_capacity(entries.len());
    let mut written = 0usize;
    for entry in entries {
        if let Some(key) = &entry.dedup_key {
            if let Some((seq, hash)) = in_batch.get(key) {
                outcomes.push(Ok(Appended {
                    seq: *seq,
                    hash: hash.clone(),
                    duplicate: true,
                }));
                continue;
            }
            match store.find_dedup(key) {
                Ok(None) => {}
                Ok(Some(seq)) => {
                    outcomes.push(original(store, key, seq));
                    continue;
                }
                Err(LedgerError::Corrupt { seq, reason }) => {
                    outcomes.push(Err(LedgerError::Corrupt { seq, reason }));
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        let seq = tail.seq + 1;
        let time = crate::clock::wall_now();
        // The canonical text of a record is its members in sorted key order (body, dedup_key,
        // event, hash, kind, prev_hash, seq, time), so it is assembled from the canonical body
        // and the small fields without copying the body into a whole-record `Value` (a plan of
        // 10,000 jobs would otherwise be deep-copied and canonicalised twice per append).
        let member = |v: serde_json::Result<serde_json::Value>| v.map(|v| super::canonical_json(&v));
        let body = super::canonical_json(&entry.body);
        let before_hash = format!(
            "{{\"body\":{body},\"dedup_key\":{},\"event\":{}",
            member(serde_json::to_value(&entry.dedup_key))?,
            member(serde_json::to_value(&entry.event))?
        );
        let after_hash = format!(
            ",\"kind\":{},\"prev_hash\":{},\"seq\":{seq},\"time\":{}}}",
            member(serde_json::to_value(entry.kind))?,
            member(serde_json::to_value(&tail.hash))?,
            member(serde_json::to_value(time))?
        );
        let hash = super::store::chain_hash_text(&tail.hash, &format!("{before_hash}{after_hash}"))
            .map_err(|reason| LedgerError::Corrupt { seq, reason })?;
        let stored = format!("{before_hash},\"hash\":\"{hash}\"{after_hash}");
        let record = Record {
            seq,
            time,
            kind: entry.kind,
            event: entry.event,
            dedup_key: entry.dedup_key,
            body: serde_json::Value::Null,
            prev_hash: tail.hash.clone(),
            hash,
        };
        records.insert(&seq.to_be_bytes(), stored.as_bytes());
        if let Some(key) = record.dedup_key {
            dedup.insert(key.as_bytes(), &seq.to_be_bytes());
            in_batch.insert(key, (seq, record.hash.clone()));
        }
        tail = Tail { seq, hash: record.hash };
        outcomes.push(Ok(Appended {
            seq,
            hash: tail.hash.clone(),
            duplicate: false,
        }));
        written += 1;
    }
    if written > 0 {
        let result: Result<(), TransactionError<()>> =
            (&store.records, &store.dedup).transaction(|(records_tx, dedup_tx)| {
                records_tx.apply_batch(&records)?;
                dedup_tx.apply_batch(&dedup)?;
                Ok::<(), ConflictableTransactionError<()>>(())
            });
        match result {
            Ok(()) => {}
            Err(TransactionError::Storage(e)) => return Err(LedgerError::Storage(e)),
            Err(TransactionError::Abort(())) => {
                return Err(LedgerError::WriterFailed {
                    reason: "the write transaction aborted".to_string(),
                });
            }
        }
    }
    Ok((tail, outcomes))
}

/// The answer for a duplicate of the stored record `seq`.
fn original(store: &Store, key: &str, seq: u64) -> Result<Appended, LedgerError> {
    let bytes = store
        .records
        .get(seq.to_be_bytes())?
        .ok_or_else(|| LedgerError::Corrupt {
            seq,
            reason: format!("the dedup index maps {key:?} to this record, which does not exist"),
        })?;
    let record = check_record(seq, &bytes).map_err(|reason| LedgerError::Corrupt { seq, reason })?;
    Ok(Appended {
        seq,
        hash: record.hash,
        duplicate: true,
    })
}
