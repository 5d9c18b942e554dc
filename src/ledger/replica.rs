//! A replicated ledger: how the one writer of a chain makes each batch durable on a majority
//! before it is written here and answered, and how a replica that does not lead takes in the
//! records its leader committed.
//!
//! The writer runs in one of three modes:
//!
//! - **single** (a gateway without `[ha]`): batches are written and flushed here, as always;
//! - **leader**: each batch is staged (seqs, times, hashes, the term's epoch stamped on every
//!   record), handed to the [`Quorum`] to make durable on a majority, and only then written here
//!   and answered. A batch the quorum could not take is answered with
//!   [`super::LedgerError::NotDurable`] (retryable; nothing was written, the chain's end is
//!   unchanged); a quorum that says this writer's term is over turns the writer into a follower;
//! - **follower**: appends are refused ([`super::LedgerError::NotLeader`]); records the leader
//!   committed are taken in with [`super::Ledger::replicate`], each checked against the chain
//!   before it is written;
//! - **halted**: a leader's batch was not made durable. Whoever decided it (and whatever was
//!   decided after it, on a state that included it) must not count, so every append is refused
//!   as not durable until the replica has rebuilt its state from what is durable and leads
//!   again ([`super::Ledger::lead`]). The writer's mode is published
//!   ([`super::Ledger::writer_mode`]) so that the replica's supervisor sees it at once.

/// One record as staged by the leader's writer: exactly the text that will be stored and hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedRecord {
    /// Its place in the chain.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
    /// The stored canonical text (with `hash`).
    pub text: String,
}

/// Why a quorum did not take a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuorumError {
    /// Nothing of the batch is durable (no quorum now, a member that did not answer and a check
    /// that it did not apply); the sender may retry.
    #[error("not durable on a majority: {0}")]
    NotDurable(String),
    /// This writer's term is over: another replica leads. Nothing of the batch counts.
    #[error("this replica no longer leads: {0}")]
    Deposed(String),
}

/// Where a leader's writer makes each batch durable on a majority. Called on the writer thread,
/// in chain order, one batch at a time; it may block (up to its own deadline).
pub trait Quorum: Send {
    /// The epoch of the term this writer writes under: stamped on every record.
    fn epoch(&self) -> u64;

    /// Make `batch` durable on a majority, continuing the chain after `after` (seq, hash).
    /// `Ok` only when it is; if the outcome is unknown, find out before answering.
    fn commit(&mut self, after: (u64, &str), batch: &[StagedRecord]) -> Result<(), QuorumError>;
}

/// The writer's mode (see the module docs).
pub(crate) enum Mode {
    Single,
    Leader(Box<dyn Quorum>),
    Follower,
    Halted(String),
}

impl Mode {
    pub(crate) fn epoch(&self) -> Option<u64> {
        match self {
            Mode::Leader(q) => Some(q.epoch()),
            Mode::Single | Mode::Follower | Mode::Halted(_) => None,
        }
    }

    pub(crate) fn public(&self) -> WriterMode {
        match self {
            Mode::Single => WriterMode::Single,
            Mode::Leader(q) => WriterMode::Leader { epoch: q.epoch() },
            Mode::Follower => WriterMode::Follower,
            Mode::Halted(reason) => WriterMode::Halted { reason: reason.clone() },
        }
    }
}

/// The writer's mode as the replica's supervisor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriterMode {
    /// A single gateway's ledger.
    Single,
    /// Leading under `epoch`.
    Leader {
        /// The term's epoch.
        epoch: u64,
    },
    /// Following.
    Follower,
    /// A batch was not made durable: refusing every append until led again.
    Halted {
        /// Why.
        reason: String,
    },
}
