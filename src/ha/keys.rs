//! The layout of a site's replicated state in etcd, and the small documents stored there. Pure.
//!
//! Under `{prefix}/{site}/`:
//!
//! | key | value |
//! |---|---|
//! | `leader` | the leading replica's name, attached to its term's lease; its creating revision is the term's **epoch** |
//! | `ledger/head` | [`Head`]: the last committed record (seq, hash) and the epoch that wrote it |
//! | `ledger/batch/{first_seq:020}` | [`BatchIndex`]: one committed batch, where its text is |
//! | `ledger/chunk/{attempt}/{index:06}` | a slice of a batch's text (records as stored, one per line) |
//! | `ledger/anchor/{seq:020}` | the hash of record `seq`, every [`ANCHOR_EVERY`] records, kept when batches are pruned |
//! | `ledger/pruned` | [`Pruned`]: the first record etcd still holds, once older batches were deleted (`src/ha/retention.rs`) |
//! | `replicas/{name}` | a running replica's registration (`{"url", "since"}`), attached to its own lease |
//!
//! A batch's chunks are written first, under a key no reader looks at until the batch index
//! names it; the index and the head are written together, last, in one transaction guarded by
//! the leader's term and by the head it continues. So a reader sees a batch whole or not at all,
//! and the chunks of an attempt that failed are never named.

use serde::{Deserialize, Serialize};

/// An anchor (a record's hash kept in etcd) every this many records.
pub const ANCHOR_EVERY: u64 = 256;

/// Most bytes of one chunk: etcd refuses requests over 1.5 MiB by default, and a transaction
/// carries two chunks at most.
pub const CHUNK_BYTES: usize = 512 * 1024;

/// The keys of one site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    root: String,
}

impl Keys {
    /// The keys of `site` under `prefix` (e.g. `/flexgate`).
    #[must_use]
    pub fn new(prefix: &str, site: &str) -> Self {
        Self {
            root: format!("{}/{site}/", prefix.trim_end_matches('/')),
        }
    }

    fn key(&self, rest: &str) -> Vec<u8> {
        format!("{}{rest}", self.root).into_bytes()
    }

    /// The election key.
    #[must_use]
    pub fn leader(&self) -> Vec<u8> {
        self.key("leader")
    }

    /// The ledger's committed head.
    #[must_use]
    pub fn head(&self) -> Vec<u8> {
        self.key("ledger/head")
    }

    /// The index of the batch that begins at `first_seq`.
    #[must_use]
    pub fn batch(&self, first_seq: u64) -> Vec<u8> {
        self.key(&format!("ledger/batch/{first_seq:020}"))
    }

    /// The end of the batch indexes' range.
    #[must_use]
    pub fn batches_end(&self) -> Vec<u8> {
        flexgate_etcd::wire::prefix_end(&self.key("ledger/batch/"))
    }

    /// The prefix of one attempt's chunks.
    #[must_use]
    pub fn chunks(&self, attempt: &str) -> Vec<u8> {
        self.key(&format!("ledger/chunk/{attempt}/"))
    }

    /// One chunk.
    #[must_use]
    pub fn chunk(&self, attempt: &str, index: usize) -> Vec<u8> {
        self.key(&format!("ledger/chunk/{attempt}/{index:06}"))
    }

    /// The anchor of record `seq`.
    #[must_use]
    pub fn anchor(&self, seq: u64) -> Vec<u8> {
        self.key(&format!("ledger/anchor/{seq:020}"))
    }

    /// A replica's registration (its URL), attached to its own lease: one name, one replica.
    #[must_use]
    pub fn replica(&self, name: &str) -> Vec<u8> {
        self.key(&format!("replicas/{name}"))
    }

    /// The prefix of every replica's registration.
    #[must_use]
    pub fn replicas(&self) -> Vec<u8> {
        self.key("replicas/")
    }

    /// Where the first record etcd still holds is written, once older batches are deleted.
    #[must_use]
    pub fn pruned(&self) -> Vec<u8> {
        self.key("ledger/pruned")
    }

    /// The prefix of every anchor.
    #[must_use]
    pub fn anchors(&self) -> Vec<u8> {
        self.key("ledger/anchor/")
    }
}

/// The ledger's committed head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The last committed record.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
    /// The epoch of the term that committed it.
    pub epoch: u64,
}

/// Batches before `first_kept` were deleted from etcd (every registered replica held them);
/// a replica whose ledger ends before it cannot catch up from etcd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pruned {
    /// The first record etcd still holds.
    pub first_kept: u64,
}

/// One committed batch: records `first_seq..=last_seq`, their text in `chunks` chunks of
/// `attempt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchIndex {
    /// The first record.
    pub first_seq: u64,
    /// The last record.
    pub last_seq: u64,
    /// The last record's hash.
    pub last_hash: String,
    /// Which attempt's chunks hold the text.
    pub attempt: String,
    /// How many chunks.
    pub chunks: usize,
}

/// A batch's records as one text (one stored record per line), cut into chunks of at most
/// [`CHUNK_BYTES`]. Record texts are canonical JSON, which has no raw line break.
#[must_use]
pub fn chunk_batch(texts: &[&str]) -> Vec<Vec<u8>> {
    let joined = texts.join("\n").into_bytes();
    if joined.is_empty() {
        return vec![Vec::new()];
    }
    joined.chunks(CHUNK_BYTES).map(<[u8]>::to_vec).collect()
}

/// The records of a batch from its chunks, in order.
pub fn unchunk_batch(chunks: &[Vec<u8>]) -> Result<Vec<String>, String> {
    let joined: Vec<u8> = chunks.concat();
    let text = String::from_utf8(joined).map_err(|e| format!("a batch that is not UTF-8: {e}"))?;
    Ok(text.split('\n').filter(|l| !l.is_empty()).map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_sort_in_chain_order_and_stay_under_the_site() {
        let k = Keys::new("/flexgate/", "site-a");
        assert_eq!(k.leader(), b"/flexgate/site-a/leader");
        assert!(k.batch(9) < k.batch(10) && k.batch(10) < k.batch(123_456));
        assert!(k.batch(u64::MAX) < k.batches_end());
        assert_eq!(k.chunk("7-1", 2), b"/flexgate/site-a/ledger/chunk/7-1/000002");
        assert!(k.chunk("7-1", 2).starts_with(&k.chunks("7-1")));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn a_batch_cut_into_chunks_reads_back_whole(records in proptest::collection::vec("[a-z{}\":,0-9é]{1,2000}", 1..50)) {
            let texts: Vec<&str> = records.iter().map(String::as_str).collect();
            let chunks = chunk_batch(&texts);
            prop_assert!(chunks.iter().all(|c| c.len() <= CHUNK_BYTES));
            prop_assert_eq!(unchunk_batch(&chunks).expect("reads"), records);
        }
    }

    #[test]
    fn a_large_batch_spans_chunks_that_may_cut_a_character() {
        let big = "é".repeat(CHUNK_BYTES); // 2 bytes each: the cut falls inside one
        let chunks = chunk_batch(&[&big, "x"]);
        assert_eq!(chunks.len(), 3);
        assert_eq!(unchunk_batch(&chunks).expect("reads"), vec![big, "x".to_string()]);
    }
}
