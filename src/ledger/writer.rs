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
use super::replica::{Mode, Quorum, QuorumError, StagedRecord};
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
    /// From now on, make every batch durable through `quorum` before writing it (leader).
    Lead {
        quorum: Box<dyn Quorum>,
        reply: oneshot::Sender<()>,
    },
    /// From now on, refuse appends and take in the leader's records (follower).
    Follow {
        reply: oneshot::Sender<()>,
    },
    /// Take in records the leader committed, as stored, continuing this chain.
    Replicate {
        records: Vec<String>,
        reply: oneshot::Sender<Result<u64, LedgerError>>,
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
    let mut mode = Mode::Single;
    while let Some(first) = rx.blocking_recv() {
        let mut batch = Vec::new();
        let mut control = None;
        match first {
            Command::Append { entry, reply } => batch.push((entry, reply)),
            other => control = Some(other),
        }
        while control.is_none() && batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Command::Append { entry, reply }) => batch.push((entry, reply)),
                Ok(other) => control = Some(other),
                Err(_) => break,
            }
        }
        let mut failed = false;
        if !batch.is_empty()
            && let Err(reason) = commit(&store, &mut durable, &shared, &mut tail, &mut mode, batch)
        {
            tracing::error!(%reason, "ledger writer stopped");
            *shared.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
            failed = true;
        }
        match control {
            None => {}
            Some(Command::Append { .. }) => unreachable!("appends are batched above"),
            Some(Command::Flush { reply }) => {
                let _ = reply.send(flush(&store, &mut durable, &shared));
            }
            Some(Command::Close { reply }) => close_reply = Some(reply),
            Some(Command::Lead { quorum, reply }) => {
                tracing::info!(
                    epoch = quorum.epoch(),
                    "ledger writer leads: batches go through the quorum"
                );
                mode = Mode::Leader(quorum);
                // Published before the answer, so that whoever awaited the switch sees it.
                publish_mode(&shared, &mode);
                let _ = reply.send(());
            }
            Some(Command::Follow { reply }) => {
                mode = Mode::Follower;
                publish_mode(&shared, &mode);
                let _ = reply.send(());
            }
            Some(Command::Replicate { records, reply }) => {
                let answer = if failed {
                    Err(refusal(&shared))
                } else if matches!(mode, Mode::Leader(_)) {
                    Err(LedgerError::Diverged {
                        reason: "the leader itself was handed replicated records".into(),
                    })
                } else {
                    match replicate(&store, &mut durable, &shared, &mut tail, &records) {
                        Ok(seq) => Ok(seq),
                        Err(ReplicateError::Refused(e)) => Err(e),
                        Err(ReplicateError::Storage(reason)) => {
                            tracing::error!(%reason, "ledger writer stopped");
                            *shared.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
                            failed = true;
                            Err(LedgerError::WriterFailed { reason })
                        }
                    }
                };
                let _ = reply.send(answer);
            }
        }
        publish_mode(&shared, &mode);
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
            Command::Lead { reply, .. } | Command::Follow { reply } => {
                let _ = reply.send(());
            }
            Command::Replicate { reply, .. } => {
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

/// Publish the writer's mode for watchers ([`super::Ledger::writer_mode`]), when it changed.
fn publish_mode(shared: &Shared, mode: &Mode) {
    let now = mode.public();
    shared.mode.send_if_modified(|m| {
        let changed = *m != now;
        *m = now;
        changed
    });
}

/// Stages one batch, makes it durable on a majority when leading, writes and flushes it, then
/// answers its waiters. `Err` means the writer must stop; the waiters have been answered with
/// the reason. A batch the quorum did not take, or a follower's, is answered with the refusal
/// and changes nothing: the writer goes on.
fn commit(
    store: &Store,
    durable: &mut Durable,
    shared: &Shared,
    tail: &mut Tail,
    mode: &mut Mode,
    batch: Vec<(NewRecord, Reply)>,
) -> Result<(), String> {
    let (entries, replies): (Vec<NewRecord>, Vec<Reply>) = batch.into_iter().unzip();
    let fail = |replies: Vec<Reply>, reason: String| {
        for reply in replies {
            let _ = reply.send(Err(LedgerError::WriterFailed { reason: reason.clone() }));
        }
        Err(reason)
    };
    let refuse = |replies: Vec<Reply>, error: &dyn Fn() -> LedgerError| {
        for reply in replies {
            let _ = reply.send(Err(error()));
        }
        Ok(())
    };
    match mode {
        Mode::Follower => return refuse(replies, &|| LedgerError::NotLeader),
        Mode::Halted(reason) => {
            let reason = reason.clone();
            return refuse(replies, &|| LedgerError::NotDurable { reason: reason.clone() });
        }
        Mode::Single | Mode::Leader(_) => {}
    }
    let started = std::time::Instant::now();
    let observe = |ok: bool| {
        if let Some(observer) = shared.flush_observer.get() {
            observer(started.elapsed(), ok);
        }
    };
    let staged = match stage(store, tail.clone(), entries, mode.epoch()) {
        Ok(staged) => staged,
        Err(e) => {
            observe(false);
            return fail(replies, format!("staging a batch failed: {e}"));
        }
    };
    if let Mode::Leader(quorum) = mode
        && !staged.records.is_empty()
    {
        let records: Vec<StagedRecord> = staged.records.iter().map(|r| r.staged.clone()).collect();
        match quorum.commit((tail.seq, &tail.hash), &records) {
            Ok(()) => {}
            Err(QuorumError::NotDurable(reason)) => {
                observe(false);
                tracing::warn!(%reason, "a batch was not made durable on a majority; refused, nothing written; appends are refused until the replica leads again");
                *mode = Mode::Halted(reason.clone());
                publish_mode(shared, mode);
                return refuse(replies, &|| LedgerError::NotDurable { reason: reason.clone() });
            }
            Err(QuorumError::Deposed(reason)) => {
                observe(false);
                tracing::warn!(%reason, "this replica no longer leads; its writer follows from now on");
                *mode = Mode::Follower;
                publish_mode(shared, mode);
                return refuse(replies, &|| LedgerError::NotLeader);
            }
        }
    }
    if let Err(e) = write(store, &staged.records) {
        observe(false);
        return fail(replies, format!("writing a batch failed: {e}"));
    }
    if let Err(e) = durable_flush(store, durable) {
        observe(false);
        return fail(replies, format!("flushing a batch failed: {e}"));
    }
    observe(true);
    *tail = staged.tail;
    *shared.head.write().unwrap_or_else(PoisonError::into_inner) = (tail.seq, tail.hash.clone());
    for (reply, outcome) in replies.into_iter().zip(staged.outcomes) {
        let _ = reply.send(outcome); // the caller may have stopped waiting: the record stands
    }
    Ok(())
}

/// One staged record with the dedup key it indexes.
struct Staged {
    staged: StagedRecord,
    dedup_key: Option<String>,
}

/// A staged batch: the new chain end, one outcome per entry, the records to write.
struct StagedBatch {
    tail: Tail,
    outcomes: Vec<Result<Appended, LedgerError>>,
    records: Vec<Staged>,
}

/// Writes staged records and their dedup entries in one transaction.
fn write(store: &Store, staged: &[Staged]) -> Result<(), LedgerError> {
    if staged.is_empty() {
        return Ok(());
    }
    let mut records = sled::Batch::default();
    let mut dedup = sled::Batch::default();
    for r in staged {
        records.insert(&r.staged.seq.to_be_bytes(), r.staged.text.as_bytes());
        if let Some(key) = &r.dedup_key {
            dedup.insert(key.as_bytes(), &r.staged.seq.to_be_bytes());
        }
    }
    let result: Result<(), TransactionError<()>> =
        (&store.records, &store.dedup).transaction(|(records_tx, dedup_tx)| {
            records_tx.apply_batch(&records)?;
            dedup_tx.apply_batch(&dedup)?;
            Ok::<(), ConflictableTransactionError<()>>(())
        });
    match result {
        Ok(()) => Ok(()),
        Err(TransactionError::Storage(e)) => Err(LedgerError::Storage(e)),
        Err(TransactionError::Abort(())) => Err(LedgerError::WriterFailed {
            reason: "the write transaction aborted".to_string(),
        }),
    }
}

/// Why replicated records were not taken in.
enum ReplicateError {
    /// They do not continue the chain (nothing written; the writer goes on).
    Refused(LedgerError),
    /// The store failed (the writer stops).
    Storage(String),
}

/// Checks records the leader committed (as stored) against this chain and writes them. Records
/// this replica already holds with the same hash are skipped, so a repeat is harmless. Returns
/// the new head seq.
fn replicate(
    store: &Store,
    durable: &mut Durable,
    shared: &Shared,
    tail: &mut Tail,
    texts: &[String],
) -> Result<u64, ReplicateError> {
    let diverged = |reason: String| ReplicateError::Refused(LedgerError::Diverged { reason });
    let mut next = tail.clone();
    let mut staged = Vec::new();
    for text in texts {
        let probe: Record =
            serde_json::from_str(text).map_err(|e| diverged(format!("a record that does not read: {e}")))?;
        if probe.seq <= next.seq {
            // Already held: it must be the same record.
            let held = store
                .get(probe.seq)
                .map_err(|e| ReplicateError::Storage(e.to_string()))?
                .map(|r| r.hash);
            if held.as_deref() != Some(probe.hash.as_str()) {
                return Err(diverged(format!(
                    "record {} here has hash {}, the leader's has {}",
                    probe.seq,
                    held.unwrap_or_default(),
                    probe.hash
                )));
            }
            continue;
        }
        if probe.seq != next.seq + 1 {
            return Err(diverged(format!(
                "record {} arrived after record {}",
                probe.seq, next.seq
            )));
        }
        let record = check_record(probe.seq, text.as_bytes())
            .map_err(|reason| diverged(format!("record {}: {reason}", probe.seq)))?;
        if record.prev_hash != next.hash {
            return Err(diverged(format!(
                "record {} links to {}, but record {} here is {}",
                record.seq, record.prev_hash, next.seq, next.hash
            )));
        }
        next = Tail {
            seq: record.seq,
            hash: record.hash.clone(),
        };
        staged.push(Staged {
            staged: StagedRecord {
                seq: record.seq,
                hash: record.hash,
                text: text.clone(),
            },
            dedup_key: record.dedup_key,
        });
    }
    write(store, &staged).map_err(|e| ReplicateError::Storage(format!("writing replicated records failed: {e}")))?;
    durable_flush(store, durable)
        .map_err(|e| ReplicateError::Storage(format!("flushing replicated records failed: {e}")))?;
    *tail = next;
    *shared.head.write().unwrap_or_else(PoisonError::into_inner) = (tail.seq, tail.hash.clone());
    Ok(tail.seq)
}

/// Assigns seqs, chains hashes and stamps `epoch` (when leading) on the new records, without
/// writing anything. Returns the new tail, one outcome per entry in order, and the records.
fn stage(
    store: &Store,
    mut tail: Tail,
    entries: Vec<NewRecord>,
    epoch: Option<u64>,
) -> Result<StagedBatch, LedgerError> {
    let mut in_batch: HashMap<String, (u64, String)> = HashMap::new();
    let mut outcomes = Vec::with_capacity(entries.len());
    let mut records = Vec::with_capacity(entries.len());
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
        // epoch when present, event, hash, kind, prev_hash, seq, time), so it is assembled from
        // the canonical body and the small fields without copying the body into a whole-record
        // `Value` (a plan of 10,000 jobs would otherwise be deep-copied and canonicalised twice
        // per append).
        let member = |v: serde_json::Result<serde_json::Value>| v.map(|v| super::canonical_json(&v));
        let body = super::canonical_json(&entry.body);
        let epoch_member = epoch.map(|e| format!(",\"epoch\":{e}")).unwrap_or_default();
        let before_hash = format!(
            "{{\"body\":{body},\"dedup_key\":{}{epoch_member},\"event\":{}",
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
        let text = format!("{before_hash},\"hash\":\"{hash}\"{after_hash}");
        if let Some(key) = &entry.dedup_key {
            in_batch.insert(key.clone(), (seq, hash.clone()));
        }
        tail = Tail {
            seq,
            hash: hash.clone(),
        };
        outcomes.push(Ok(Appended {
            seq,
            hash: hash.clone(),
            duplicate: false,
        }));
        records.push(Staged {
            staged: StagedRecord { seq, hash, text },
            dedup_key: entry.dedup_key,
        });
    }
    Ok(StagedBatch {
        tail,
        outcomes,
        records,
    })
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
