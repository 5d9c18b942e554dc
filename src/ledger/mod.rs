//! The audit ledger: an append-only, hash-chained, de-duplicating record of everything the
//! gateway received, decided and did, for energy managers, utilities and contract auditors
//! (ARCHITECTURE.md, "The ledger").
//!
//! # What a record is
//!
//! Each [`Record`] has a dense sequence number (`1, 2, 3, …`; there is no record 0), the UTC wall
//! clock time at which the writer sequenced it, a [`RecordKind`], an optional event ID, an
//! optional de-duplication key and a free-form JSON body. Records are chained:
//!
//! ```text
//! hash = SHA-256( prev_hash_bytes ‖ canonical_json(record without its "hash" member) )
//! ```
//!
//! where `prev_hash_bytes` are the 32 raw bytes of the previous record's hash (hex-decoded;
//! 32 zero bytes, [`GENESIS_HASH`] in hex, before record 1) and [`canonical_json`] is RFC 8785
//! canonical JSON from the workspace's one implementation (the `flexgate-jcs` crate, shared with
//! the MQTT signatures; its docs name the one deviation: integers beyond 2^53 written exactly).
//! Changing, inserting, deleting or reordering any record breaks the chain, which [`verify`]
//! reports with the first sequence number that does not check out. The chain alone does not stop
//! the owner of the disk from rewriting *everything* after a point; that needs the head hash
//! anchored elsewhere (the checkpoints echoed to the utility in every acknowledgement).
//!
//! Each record is stored as exactly that canonical text (with `hash` added in its sorted place),
//! and verification hashes the *stored bytes* minus the `hash` member instead of re-serialising a
//! parsed record. The workspace enables serde_json's `float_roundtrip`, so a parse →
//! canonicalise round trip gives the same bytes too; hashing the stored bytes is kept because it
//! is cheaper and does not depend on any parser's float rounding (see `raw.rs`). An outside
//! auditor can check a JSONL export line the same way (delete `,"hash":"…"`, hash the rest after
//! the previous hash's bytes), or canonicalise it with any correctly rounding JCS library.
//!
//! # Storage layout (sled 0.34)
//!
//! - tree `records`: big-endian `u64` seq → the record as canonical JSON (including `hash`);
//! - tree `dedup`: de-duplication key (UTF-8) → big-endian `u64` seq of the record that holds it;
//! - tree `meta`: `format` → `flexgate-ledger/1`.
//!
//! A record and its dedup entry are written in one sled transaction, so they are recovered
//! together or not at all.
//!
//! # Durability: what is and is not guaranteed
//!
//! [`Ledger::append`] resolves only after the batch holding the record was written, sled's
//! flush returned, **and** the files sled wrote were synced with `fdatasync(2)`. Appends are
//! group-committed: one writer thread drains everything pending (up to [`MAX_BATCH`] records),
//! writes the batch in one transaction, flushes and syncs once, and then answers every waiter.
//! (The writer is a dedicated thread calling `Db::flush`, the same call that `flush_async` hands
//! to sled's thread pool; `writer.rs` says why it is not a Tokio task.) What that means:
//!
//! - sled's own flush ends in `sync_file_range`, which flushes neither the drive's volatile
//!   write cache nor file metadata, and sled writes large values (`blobs/`) with no sync at all.
//!   The writer therefore `fdatasync`s the log file, every new blob file and the `blobs`
//!   directory after each flush (`durable.rs`; the order is checked with `strace` in
//!   `tests/ledger_durability.rs`). An acknowledged record is on stable storage **if the drive
//!   honours cache flushes** (the kernel sends one with `fdatasync`; drives with power-loss
//!   protection need none). A drive or virtual disk that acknowledges flushes it has not done
//!   can still lose it; no software above it can tell. sled is also **not safe on btrfs** (sled
//!   #1351). Put the ledger on ext4/xfs.
//! - What we test with a kill -9 harness (`tests/ledger_crash.rs`): **no acknowledged record is
//!   lost when the process crashes or is killed**, and the store reopens with an intact chain.
//!   That is evidence, not proof: corruption of sled stores after abrupt stops is still being
//!   reported upstream (sled #1527, #1533), hence the recovery path below, and the gateway walks
//!   the whole chain at start and refuses a ledger that fails it.
//! - Records can survive a crash without ever having been acknowledged (written, flush not yet
//!   returned). Delivery is therefore *at-least-once*: callers re-submit unacknowledged work
//!   with the same `dedup_key`, and the ledger answers with the original record
//!   (`duplicate: true`) instead of writing a second copy. Dropping an `append` future does not
//!   withdraw the record either; the same rule applies.
//!
//! # Recovery path
//!
//! If [`Ledger::open`] fails with a storage or corruption error, do **not** delete anything:
//! stop the gateway, move the ledger directory aside (keep it as evidence and for
//! [`verify`]/[`export`] of what is still readable), start the gateway with a fresh directory, and
//! re-sync from the sources (OpenADR `oadrRequestEvent` / VTN event listing, and the MQTT
//! broker's redelivery of unacknowledged QoS 1 messages). Dedup keys make the re-sync idempotent.
//!
//! # Locking
//!
//! sled takes an exclusive `flock` on its `db` file. Only one open handle per directory can
//! exist, even within one process: [`verify`] and [`export`] open the store themselves, so they
//! fail with [`LedgerError::Locked`] (or a `VerifyFailure` saying so) while a gateway has the
//! ledger open. Use [`LedgerReader::verify`] and [`LedgerReader::export`] on the running instance instead.
//! Note that opening a sled store is never strictly read-only: sled may write recovery state.
//! To examine a store without touching it, copy the directory first.

pub mod checkpoints;
mod durable;
pub mod migrate;
pub(crate) mod private;
mod raw;
pub mod replica;
pub mod site_key;
mod store;
#[cfg(test)]
mod tests;
mod writer;

pub use flexgate_jcs::canonical_json;
pub use store::sled_config;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use tokio::sync::{mpsc, oneshot};

/// `prev_hash` of record 1: 32 zero bytes, in hex.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The most records one group commit writes and flushes together.
pub const MAX_BATCH: usize = 4096;

/// How many appends may queue for the writer before `append` waits (back-pressure).
const QUEUE_DEPTH: usize = 2 * MAX_BATCH;

/// What a record is about: the coarse kind of its [`Entry`] (what was asked, interpreted, decided, done and measured).
pub use flexgate_policies::control::entry::EntryKind as RecordKind;
pub use flexgate_policies::control::entry::{Entry, Recorded};

/// One ledger record, exactly as stored and hashed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Position in the chain, from 1, without gaps.
    pub seq: u64,
    /// UTC wall-clock time at which the writer sequenced the record. Order is given by `seq`.
    pub time: DateTime<Utc>,
    pub kind: RecordKind,
    /// The grid event this record belongs to, if any (used by [`export`]'s filter).
    pub event: Option<String>,
    /// De-duplication key (e.g. `eventID/modificationNumber`), unique across the ledger.
    pub dedup_key: Option<String>,
    /// The epoch (leadership term) of the replica that wrote it, when the gateway runs as
    /// replicas (`[ha]`); absent from a single gateway's records, whose text and hashes are
    /// unchanged by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    pub body: serde_json::Value,
    /// Hash of record `seq - 1` in hex ([`GENESIS_HASH`] for record 1).
    pub prev_hash: String,
    /// This record's hash in hex (see the module docs for the formula).
    pub hash: String,
}

/// What a caller hands to [`Ledger::append`]; the ledger adds seq, time and the hashes.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRecord {
    pub kind: RecordKind,
    pub event: Option<String>,
    pub dedup_key: Option<String>,
    pub body: serde_json::Value,
}

impl NewRecord {
    /// A record of `kind` with `body`, no event and no dedup key.
    pub fn new(kind: RecordKind, body: serde_json::Value) -> Self {
        NewRecord {
            kind,
            event: None,
            dedup_key: None,
            body,
        }
    }

    /// Sets the event ID.
    pub fn with_event(mut self, event: impl Into<String>) -> Self {
        self.event = Some(event.into());
        self
    }

    /// Sets the de-duplication key.
    pub fn with_dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }
}

impl From<Recorded> for NewRecord {
    /// A typed entry as a record: its kind, its event, its key, and the entry itself as the
    /// body (tagged by `"entry"`).
    fn from(recorded: Recorded) -> Self {
        NewRecord {
            kind: recorded.entry.kind(),
            event: recorded.event.map(|e| e.to_string()),
            dedup_key: recorded.dedup_key,
            body: serde_json::to_value(&recorded.entry).unwrap_or_else(|e| {
                // Every entry type serialises (no maps with non-string keys, no failing
                // serialisers); should one not, the record says so instead of vanishing.
                serde_json::json!({"entry": "unencodable", "error": e.to_string()})
            }),
        }
    }
}

/// A record whose body is not a typed entry of this version.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "record {seq} ({kind:?}) is not a typed ledger entry ({reason}); a ledger written by flexgate before typed \
     entries (schema 1) cannot be replayed: stop, convert it with `flexgate log migrate --data OLD_DATA --to \
     NEW_DATA/ledger` and start on NEW_DATA (the old directory stays as evidence)"
)]
pub struct NotAnEntry {
    /// The record.
    pub seq: u64,
    /// Its kind.
    pub kind: RecordKind,
    /// Why it does not read.
    pub reason: String,
}

impl Record {
    /// The typed entry this record holds.
    pub fn entry(&self) -> Result<Entry, NotAnEntry> {
        Entry::deserialize(&self.body).map_err(|e| NotAnEntry {
            seq: self.seq,
            kind: self.kind,
            reason: e.to_string(),
        })
    }
}

/// The answer to an append: where the record is (or already was) in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    pub seq: u64,
    pub hash: String,
    /// `true` when the dedup key was already present: nothing was written, and `seq`/`hash` are
    /// those of the original record.
    pub duplicate: bool,
}

/// A chain that checked out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Number of records (equal to the last seq).
    pub records: u64,
    /// Hash of the last record ([`GENESIS_HASH`] for an empty ledger): compare it with anchored
    /// checkpoints.
    pub head_hash: String,
}

/// The first place where the chain does not check out. `seq` 0 means the store as a whole
/// (it could not be opened, or its format is unknown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("ledger verification failed at record {seq}: {reason}")]
pub struct VerifyFailure {
    pub seq: u64,
    pub reason: String,
}

/// Output formats of [`export`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// One canonical JSON record per line (the hashed form plus its `hash`).
    Jsonl,
    /// A header line, then `seq,time,kind,event,dedup_key,hash,prev_hash,body` per record
    /// (RFC 4180 quoting, `\n` line ends, body as canonical compact JSON).
    Csv,
}

/// Everything that can go wrong with the ledger; every message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(
        "the ledger at {} is locked by another process (is a gateway running?): verify a running gateway's \
         ledger through its API (`flexgate log verify --gateway ADDR`, GET /v1/ledger/verify), or stop it \
         first",
        dir.display()
    )]
    Locked { dir: PathBuf },

    #[error("there is no ledger at {} (no sled database found): check the path", dir.display())]
    NotFound { dir: PathBuf },

    #[error(
        "cannot open the ledger at {}: {source}. Recovery: stop the gateway, move the directory aside (keep it \
         as evidence), start with a fresh directory and re-sync events from the sources",
        dir.display()
    )]
    Open { dir: PathBuf, source: sled::Error },

    #[error(
        "the ledger at {} has format {found:?}, but this build reads {expected:?}: use a matching flexgate \
         version",
        dir.display()
    )]
    Format {
        dir: PathBuf,
        found: String,
        expected: String,
    },

    #[error(
        "record {seq} is corrupt: {reason}. Run the ledger verification for a full report; recovery: move the \
         directory aside and re-sync from the sources"
    )]
    Corrupt { seq: u64, reason: String },

    #[error(
        "ledger storage error: {0}. Check the disk (space, I/O errors); if the gateway cannot reopen the \
         ledger, move the directory aside and re-sync from the sources"
    )]
    Storage(#[from] sled::Error),

    #[error(
        "cannot make the ledger at {} private to this user (mode 0700, files 0600): {source}. Check who owns \
         the directory",
        dir.display()
    )]
    Permissions { dir: PathBuf, source: std::io::Error },

    #[error("cannot encode a ledger record as JSON: {0} (a bug: please report it with the record)")]
    Encode(#[from] serde_json::Error),

    #[error("cannot write the export: {0}: check the output file or pipe")]
    Output(#[from] std::io::Error),

    #[error("the ledger is closed: open it again to append")]
    Closed,

    #[error("the record is not durable on a majority of the replicas' store ({reason}): nothing was recorded; retry")]
    NotDurable { reason: String },

    #[error("this replica does not lead, so it records nothing; send to the leader")]
    NotLeader,

    #[error(
        "a replicated record does not continue this replica's chain ({reason}); nothing was taken in. This \
         replica's ledger has diverged from the leader's: stop it, move its data directory aside (keep it as \
         evidence) and let it start afresh from the leader's records"
    )]
    Diverged { reason: String },

    #[error(
        "the ledger writer stopped after an error and accepts no more records ({reason}): the record may or \
         may not be stored; restart the gateway and re-submit with the same dedup key"
    )]
    WriterFailed { reason: String },
}

/// Cheap, cloneable handle on an open ledger. All clones share one sled database and one writer
/// thread. The directory stays locked until the last handle is closed ([`Ledger::close`]) or
/// dropped; dropping the last handle waits (blocking) for the writer to finish its batch and
/// flush, then releases the lock before the drop returns.
#[derive(Clone)]
pub struct Ledger {
    reader: LedgerReader,
}

/// A handle that can read an open ledger and never write to it: what the read side holds, so
/// that nothing serving a reader can add a record. [`Ledger`] dereferences to one. Like every
/// handle, it keeps the ledger open until dropped.
#[derive(Clone)]
pub struct LedgerReader {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    store: store::Store,
    shared: Arc<Shared>,
    /// `Some` until `Inner` is dropped.
    tx: Option<mpsc::Sender<writer::Command>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel lets the writer finish what is queued, flush and exit; joining it
        // means its sled handle is gone when `store` is dropped next, which releases the lock.
        drop(self.tx.take());
        if let Some(writer) = self.writer.get_mut().unwrap_or_else(PoisonError::into_inner).take()
            && writer.join().is_err()
        {
            tracing::error!("the ledger writer thread panicked");
        }
    }
}

/// State shared between handles and the writer thread.
struct Shared {
    /// Latest flushed (seq, hash).
    head: RwLock<(u64, String)>,
    /// Why the writer stopped, if it failed.
    failure: Mutex<Option<String>>,
    /// Told how long each group commit took and whether it succeeded (the gateway's metrics).
    flush_observer: std::sync::OnceLock<FlushObserver>,
    /// The writer's mode (single, leader, follower, halted), published as it changes.
    mode: tokio::sync::watch::Sender<replica::WriterMode>,
}

/// What [`Ledger::observe_flushes`] is given: a group commit's duration, and whether it stored
/// its batch. Called on the writer thread: it must be quick and must not block.
pub type FlushObserver = Box<dyn Fn(std::time::Duration, bool) + Send + Sync>;

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (seq, hash) = self.head();
        f.debug_struct("Ledger")
            .field("dir", &self.inner.dir)
            .field("head_seq", &seq)
            .field("head_hash", &hash)
            .finish()
    }
}

impl Ledger {
    /// Opens (creating if needed) the ledger in `dir`, checks the last record (its hash, and its
    /// link to the record before it) and starts the writer thread.
    ///
    /// Fails with [`LedgerError::Locked`] if another handle (in any process) has the directory
    /// open, and with [`LedgerError::Corrupt`]/[`LedgerError::Open`] if the store is damaged: see
    /// the recovery path in the module docs. Nothing is repaired or truncated automatically.
    pub async fn open(dir: &Path) -> Result<Ledger, LedgerError> {
        let path = dir.to_path_buf();
        let opened = tokio::task::spawn_blocking(move || -> Result<_, LedgerError> {
            let private = |source| LedgerError::Permissions {
                dir: path.clone(),
                source,
            };
            private::create_private_dir(&path).map_err(private)?;
            private::restrict_to_owner(&path).map_err(private)?;
            let store = store::Store::open(&path, true)?;
            let head = store.read_head()?;
            let durable = durable::Durable::open(&path).map_err(|e| LedgerError::Storage(sled::Error::Io(e)))?;
            // sled has just created its files (a new ledger) with the process's umask.
            private::restrict_to_owner(&path).map_err(private)?;
            Ok((store, durable, head))
        })
        .await;
        let (store, durable, head) = match opened {
            Ok(result) => result?,
            Err(join) => {
                return Err(LedgerError::WriterFailed {
                    reason: format!("opening the store did not complete: {join}"),
                });
            }
        };
        tracing::info!(dir = %dir.display(), seq = head.0, hash = %head.1, "ledger opened");
        let shared = Arc::new(Shared {
            head: RwLock::new(head.clone()),
            failure: Mutex::new(None),
            flush_observer: std::sync::OnceLock::new(),
            mode: tokio::sync::watch::channel(replica::WriterMode::Single).0,
        });
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let thread = {
            let (store, shared) = (store.clone(), shared.clone());
            std::thread::Builder::new()
                .name("flexgate-ledger".to_string())
                .spawn(move || writer::run(rx, store, durable, shared, head))
                .map_err(|e| LedgerError::WriterFailed {
                    reason: format!("cannot start the writer thread: {e}"),
                })?
        };
        Ok(Ledger {
            reader: LedgerReader {
                inner: Arc::new(Inner {
                    dir: dir.to_path_buf(),
                    store,
                    shared,
                    tx: Some(tx),
                    writer: Mutex::new(Some(thread)),
                }),
            },
        })
    }

    /// Appends `entry` and resolves once it is durably flushed (see the module docs for what
    /// "durably" means with sled). If `entry.dedup_key` is already in the ledger (or earlier in
    /// the same group commit), nothing is written and the original seq and hash are returned
    /// with `duplicate: true`.
    ///
    /// Dropping the returned future does not withdraw the record: it may still be written.
    /// Re-submit with the same dedup key to learn its fate.
    pub async fn append(&self, entry: NewRecord) -> Result<Appended, LedgerError> {
        let (reply, answer) = oneshot::channel();
        self.send(writer::Command::Append { entry, reply }).await?;
        answer.await.unwrap_or_else(|_| Err(self.stopped()))
    }

    /// Appends several records in this order, so that the writer can commit them in one batch
    /// (one flush instead of one each); resolves when all are flushed. Used where one decision
    /// produces several records (lifecycle transitions and the plan they lead to).
    pub async fn append_all(&self, entries: Vec<NewRecord>) -> Result<Vec<Appended>, LedgerError> {
        self.enqueue_all(entries).await?.flushed().await
    }

    /// Hands records to the writer and returns as soon as they hold their place in the chain,
    /// without waiting for the flush; [`Queued::flushed`] waits for it.
    ///
    /// This lets a caller fix the order of its records under a lock and wait for the disk
    /// after releasing it: records queued later are sequenced after these, and if these fail
    /// to flush the writer stops, so no later record is ever written without them.
    pub async fn enqueue_all(&self, entries: Vec<NewRecord>) -> Result<Queued, LedgerError> {
        let mut answers = Vec::with_capacity(entries.len());
        for entry in entries {
            let (reply, answer) = oneshot::channel();
            self.send(writer::Command::Append { entry, reply }).await?;
            answers.push(answer);
        }
        Ok(Queued {
            answers,
            shared: self.inner.shared.clone(),
        })
    }

    /// Resolves once everything appended before the call is flushed. Every `append` already
    /// waits for its own flush, so this is only a barrier (e.g. at shutdown); it fails if the
    /// writer has stopped.
    pub async fn flush(&self) -> Result<(), LedgerError> {
        let (reply, answer) = oneshot::channel();
        self.send(writer::Command::Flush { reply }).await?;
        answer.await.unwrap_or_else(|_| Err(self.stopped()))
    }

    /// Have `observer` told of every group commit from now on (its duration, and whether it
    /// stored its batch). One observer per ledger: a second call is ignored and returns false.
    pub fn observe_flushes(&self, observer: FlushObserver) -> bool {
        self.inner.shared.flush_observer.set(observer).is_ok()
    }

    /// Flushes and stops the writer (appends queued before the call are still written and
    /// answered; later ones, from any clone, fail with [`LedgerError::Closed`]), then drops this
    /// handle. The directory is unlocked when this returns unless other clones are still alive.
    pub async fn close(self) -> Result<(), LedgerError> {
        let (reply, answer) = oneshot::channel();
        let flushed = match self.send(writer::Command::Close { reply }).await {
            Ok(()) => answer.await.unwrap_or_else(|_| Err(self.stopped())),
            Err(e) => Err(e),
        };
        // Dropping the last handle joins the writer and sled's flusher thread: keep that blocking
        // off the runtime's workers. sled lets go of its file lock from a background thread a
        // moment later, so wait (briefly) until the lock is free: after `close` returns, the
        // directory can be opened again, by this process or another.
        let lock_file = self.inner.dir.join("db");
        let last = Arc::strong_count(&self.inner) == 1;
        let _ = tokio::task::spawn_blocking(move || {
            drop(self);
            if last {
                wait_for_unlock(&lock_file, std::time::Duration::from_secs(2));
            }
        })
        .await;
        match flushed {
            Err(LedgerError::Closed) => Ok(()), // closed before: nothing left to flush
            other => other,
        }
    }

    async fn send(&self, command: writer::Command) -> Result<(), LedgerError> {
        let Some(tx) = &self.inner.tx else {
            return Err(LedgerError::Closed);
        };
        tx.send(command).await.map_err(|_| self.stopped())
    }

    fn stopped(&self) -> LedgerError {
        stopped(&self.inner.shared)
    }

    /// Lead: from the next batch on, every batch is made durable through `quorum` (a majority
    /// of the replicas' store) before it is written here and answered, and its records carry
    /// the term's epoch (see [`replica`]). Resolves once the writer has switched, after
    /// everything queued before.
    pub async fn lead(&self, quorum: Box<dyn replica::Quorum>) -> Result<(), LedgerError> {
        let (reply, answer) = oneshot::channel();
        self.send(writer::Command::Lead { quorum, reply }).await?;
        answer.await.map_err(|_| self.stopped())
    }

    /// Follow: from now on appends are refused ([`LedgerError::NotLeader`]) and the leader's
    /// records are taken in with [`Ledger::replicate`].
    pub async fn follow(&self) -> Result<(), LedgerError> {
        let (reply, answer) = oneshot::channel();
        self.send(writer::Command::Follow { reply }).await?;
        answer.await.map_err(|_| self.stopped())
    }

    /// Take in records the leader committed, as stored (canonical text with `hash`), in chain
    /// order. Each must continue this chain (its `prev_hash` the last record's hash, its hash
    /// correct); records already held with the same hash are skipped. Resolves with the head
    /// seq once they are flushed; [`LedgerError::Diverged`] if they do not continue the chain.
    pub async fn replicate(&self, records: Vec<String>) -> Result<u64, LedgerError> {
        let (reply, answer) = oneshot::channel();
        self.send(writer::Command::Replicate { records, reply }).await?;
        answer.await.unwrap_or_else(|_| Err(self.stopped()))
    }

    /// The writer's mode, as it changes (a replica's supervisor watches for `Halted` and
    /// `Follower` while it leads).
    #[must_use]
    pub fn writer_mode(&self) -> tokio::sync::watch::Receiver<replica::WriterMode> {
        self.inner.shared.mode.subscribe()
    }

    /// A read-only handle on this ledger, for code that must not write (the read side).
    #[must_use]
    pub fn reader(&self) -> LedgerReader {
        self.reader.clone()
    }
}

impl std::ops::Deref for Ledger {
    type Target = LedgerReader;

    fn deref(&self) -> &LedgerReader {
        &self.reader
    }
}

impl LedgerReader {
    /// Latest flushed (seq, hash); `(0, GENESIS_HASH)` for an empty ledger.
    pub fn head(&self) -> (u64, String) {
        self.inner
            .shared
            .head
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Number of flushed records (equal to the head seq: seqs are dense from 1).
    pub fn len(&self) -> u64 {
        self.head().0
    }

    /// `true` when no record has been flushed yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The directory this ledger lives in.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Flushed records with `seq >= from`, in order, up to the head at the time of the call.
    /// Records are decoded but not hash-checked (that is [`verify`]'s job).
    pub fn iter_from(&self, from: u64) -> impl Iterator<Item = Result<Record, LedgerError>> + Send + 'static {
        self.inner.store.iter_records(from, Some(self.len()))
    }

    /// The flushed record `seq`, if it exists.
    pub fn get(&self, seq: u64) -> Result<Option<Record>, LedgerError> {
        if seq == 0 || seq > self.len() {
            return Ok(None);
        }
        self.inner.store.get(seq)
    }

    /// The flushed record `seq` exactly as stored (its canonical text, with `hash`): what a
    /// replica is handed, and what the hash is computed over.
    pub fn stored(&self, seq: u64) -> Result<Option<String>, LedgerError> {
        if seq == 0 || seq > self.len() {
            return Ok(None);
        }
        self.inner.store.get_stored(seq)
    }

    /// The seq of the flushed record holding dedup key `key`, if any.
    pub fn find_dedup(&self, key: &str) -> Result<Option<u64>, LedgerError> {
        Ok(self.inner.store.find_dedup(key)?.filter(|seq| *seq <= self.len()))
    }

    /// Verifies the chain of the open ledger up to its head (the same checks as [`verify`],
    /// which cannot run while this handle holds the lock).
    pub fn verify(&self) -> Result<VerifyReport, VerifyFailure> {
        self.inner.store.verify(Some(self.len()))
    }

    /// Whether the writer has stopped after a storage failure (nothing more is acknowledged).
    #[must_use]
    pub fn writer_failed(&self) -> bool {
        self.inner
            .shared
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Exports the flushed records of the open ledger (see [`export`]).
    pub fn export(&self, format: ExportFormat, event: Option<&str>, out: &mut dyn Write) -> Result<u64, LedgerError> {
        self.inner.store.export(format, event, Some(self.len()), out)
    }
}

/// Why appends fail once the writer is gone: its failure if it failed, else closed.
fn stopped(shared: &Shared) -> LedgerError {
    match shared.failure.lock().unwrap_or_else(PoisonError::into_inner).clone() {
        Some(reason) => LedgerError::WriterFailed { reason },
        None => LedgerError::Closed,
    }
}

/// Records queued by [`Ledger::enqueue_all`], in their place in the chain.
#[must_use = "the records are durable only once `flushed` resolves"]
pub struct Queued {
    answers: Vec<oneshot::Receiver<Result<Appended, LedgerError>>>,
    /// For the writer's failure reason (not a `Ledger`: a pending wait must not keep the
    /// writer, and the directory lock, alive).
    shared: Arc<Shared>,
}

impl Queued {
    /// Nothing queued (resolves at once).
    pub(crate) fn empty() -> Self {
        Queued {
            answers: Vec::new(),
            shared: Arc::new(Shared {
                head: RwLock::new((0, GENESIS_HASH.to_string())),
                failure: Mutex::new(None),
                flush_observer: std::sync::OnceLock::new(),
                mode: tokio::sync::watch::channel(replica::WriterMode::Single).0,
            }),
        }
    }

    /// Resolves once every queued record is durably flushed (or fails as
    /// [`Ledger::append`] would).
    pub async fn flushed(self) -> Result<Vec<Appended>, LedgerError> {
        let mut appended = Vec::with_capacity(self.answers.len());
        for answer in self.answers {
            appended.push(answer.await.unwrap_or_else(|_| Err(stopped(&self.shared)))?);
        }
        Ok(appended)
    }
}

/// Walks the whole chain of the ledger in `dir` (the gateway must not be running: this opens the
/// store and takes sled's exclusive lock). Reports the first sequence gap, `prev_hash` mismatch,
/// hash mismatch (a modified record), undecodable record or dedup-index inconsistency.
pub fn verify(dir: &Path) -> Result<VerifyReport, VerifyFailure> {
    verify_dir(dir).map_err(|e| VerifyFailure {
        seq: 0,
        reason: e.to_string(),
    })?
}

/// [`verify`], telling a ledger that could not be read at all (the outer error: locked by a
/// running gateway, missing, of another format) from a chain that was read and does not check
/// out (the inner one). A locked ledger is not evidence of tampering and must not read like it.
pub fn verify_dir(dir: &Path) -> Result<Result<VerifyReport, VerifyFailure>, LedgerError> {
    let store = store::Store::open(dir, false)?;
    Ok(store.verify(None))
}

/// Writes the records of the ledger in `dir` (optionally only those whose `event` equals
/// `event`) to `out`; returns how many were written. Opens the store itself, so the gateway must
/// not be running (use [`LedgerReader::export`] on a running one). Stops at the first undecodable
/// record with [`LedgerError::Corrupt`]; it does not check hashes (use [`verify`]).
pub fn export(dir: &Path, format: ExportFormat, event: Option<&str>, out: &mut dyn Write) -> Result<u64, LedgerError> {
    let store = store::Store::open(dir, false)?;
    store.export(format, event, None, out)
}

/// Waits until nobody holds the exclusive lock on `lock_file` (sled's `db` file), at most
/// `limit`. Taking and releasing the lock ourselves is the only reliable probe.
fn wait_for_unlock(lock_file: &Path, limit: std::time::Duration) {
    let deadline = std::time::Instant::now() + limit;
    while let Ok(file) = std::fs::File::open(lock_file) {
        match file.try_lock() {
            Ok(()) => {
                let _ = file.unlock();
                return;
            }
            Err(_) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(10)),
            Err(_) => return,
        }
    }
}
