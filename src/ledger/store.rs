//! Synchronous access to the sled store: opening, decoding and checking records, the chain walk
//! behind `verify`, and `export`. Shared by the live [`super::Ledger`] and the offline functions.

use super::raw;
use super::{ExportFormat, GENESIS_HASH, LedgerError, Record, VerifyFailure, VerifyReport};
#[cfg(test)]
use flexgate_jcs::canonical_json;
#[cfg(test)]
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Page cache of the ledger's sled database.
const LEDGER_CACHE_BYTES: u64 = 16 * 1024 * 1024;

/// sled's log segment size for new ledgers: 4 MiB instead of sled's 512 KiB. sled writes any
/// page larger than a quarter of a segment to a file of its own under `blobs/`, and making a new
/// file durable costs an `fdatasync` of it and an `fsync` of the directory (a journal commit on
/// ext4) at every group commit that makes one. With 512 KiB segments every plan record of a
/// site of about a thousand jobs became a blob, and the durable flush tripled the ack's p99;
/// with 4 MiB segments pages up to 1 MiB stay in the log (BENCHMARKS.md, issue 12). sled keeps
/// the size a ledger was created with (its `conf` file) and refuses another, so a ledger made
/// before keeps its own ([`segment_size_for`]).
const LEDGER_SEGMENT_BYTES: usize = 4 * 1024 * 1024;

/// How the ledger opens the sled database in `dir` (cache, segment size): for the store, and for
/// tools and tests that must read a closed ledger's store directly.
pub fn sled_config(dir: &Path) -> sled::Config {
    sled::Config::new()
        .path(dir)
        .cache_capacity(LEDGER_CACHE_BYTES)
        .segment_size(segment_size_for(dir))
}

/// The segment size to open the sled database in `dir` with: the one recorded in its `conf`
/// file, or [`LEDGER_SEGMENT_BYTES`] for a new database.
fn segment_size_for(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("conf"))
        .ok()
        .and_then(|conf| {
            conf.lines()
                .find_map(|line| line.strip_prefix("segment_size:"))
                .and_then(|value| value.trim().parse().ok())
        })
        .unwrap_or(LEDGER_SEGMENT_BYTES)
}

const FORMAT_KEY: &[u8] = b"format";
pub(crate) const FORMAT: &str = "flexgate-ledger/1";

#[derive(Clone)]
pub(crate) struct Store {
    pub(crate) db: sled::Db,
    pub(crate) records: sled::Tree,
    pub(crate) dedup: sled::Tree,
}

/// How long a held lock is retried before [`LedgerError::Locked`] is reported.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl Store {
    /// Opens the sled database in `dir`. With `create == false` a missing database is an error
    /// instead of being created (verify/export must not conjure up an empty ledger).
    pub(crate) fn open(dir: &Path, create: bool) -> Result<Store, LedgerError> {
        if !create && !dir.join("db").is_file() {
            return Err(LedgerError::NotFound { dir: dir.to_path_buf() });
        }
        // sled's default page cache is 1 GiB; the ledger is append-mostly and read back only on
        // recovery and export, so a small cache keeps the gateway's footprint small.
        // sled releases its file lock when its last background thread lets go of the page
        // cache, which can be a moment after the closing handle returned (seen under load: a
        // verify right after close found the lock held by its own process). A held lock is
        // therefore retried for a short grace period before it is reported.
        let deadline = std::time::Instant::now() + LOCK_GRACE;
        let db = loop {
            match sled_config(dir).open() {
                Ok(db) => break db,
                Err(e) => match open_error(dir, e) {
                    LedgerError::Locked { .. } if std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    other => return Err(other),
                },
            }
        };
        let records = db.open_tree("records").map_err(|e| open_error(dir, e))?;
        let dedup = db.open_tree("dedup").map_err(|e| open_error(dir, e))?;
        let meta = db.open_tree("meta").map_err(|e| open_error(dir, e))?;
        match meta.get(FORMAT_KEY)? {
            Some(found) if found.as_ref() != FORMAT.as_bytes() => {
                return Err(LedgerError::Format {
                    dir: dir.to_path_buf(),
                    found: String::from_utf8_lossy(&found).into_owned(),
                    expected: FORMAT.to_string(),
                });
            }
            Some(_) => {}
            None if create => {
                meta.insert(FORMAT_KEY, FORMAT.as_bytes())?;
                db.flush()?;
            }
            None => {}
        }
        Ok(Store { db, records, dedup })
    }

    /// The last record's (seq, hash), after checking that record and its link to the one before.
    pub(crate) fn read_head(&self) -> Result<(u64, String), LedgerError> {
        let Some((key, bytes)) = self.records.last()? else {
            return Ok((0, GENESIS_HASH.to_string()));
        };
        let seq = key_seq(&key).ok_or_else(|| LedgerError::Corrupt {
            seq: 0,
            reason: format!("the last key {} is not an 8-byte sequence number", hex::encode(&key)),
        })?;
        let last = check_record(seq, &bytes).map_err(|reason| LedgerError::Corrupt { seq, reason })?;
        let expected_prev = if seq <= 1 {
            GENESIS_HASH.to_string()
        } else {
            match self.records.get((seq - 1).to_be_bytes())? {
                Some(prev) => {
                    check_record(seq - 1, &prev)
                        .map_err(|reason| LedgerError::Corrupt { seq: seq - 1, reason })?
                        .hash
                }
                None => {
                    return Err(LedgerError::Corrupt {
                        seq: seq - 1,
                        reason: format!("the record before the last one ({seq}) is missing"),
                    });
                }
            }
        };
        if last.prev_hash != expected_prev {
            return Err(LedgerError::Corrupt {
                seq,
                reason: format!(
                    "prev_hash {} does not match the hash of record {} ({expected_prev})",
                    last.prev_hash,
                    seq - 1
                ),
            });
        }
        Ok((seq, last.hash))
    }

    pub(crate) fn get(&self, seq: u64) -> Result<Option<Record>, LedgerError> {
        match self.records.get(seq.to_be_bytes())? {
            Some(bytes) => Ok(Some(
                decode_record(seq, &bytes).map_err(|reason| LedgerError::Corrupt { seq, reason })?,
            )),
            None => Ok(None),
        }
    }

    /// Record `seq` exactly as stored (its canonical text with `hash`).
    pub(crate) fn get_stored(&self, seq: u64) -> Result<Option<String>, LedgerError> {
        match self.records.get(seq.to_be_bytes())? {
            Some(bytes) => String::from_utf8(bytes.to_vec())
                .map(Some)
                .map_err(|e| LedgerError::Corrupt {
                    seq,
                    reason: format!("not UTF-8: {e}"),
                }),
            None => Ok(None),
        }
    }

    pub(crate) fn find_dedup(&self, key: &str) -> Result<Option<u64>, LedgerError> {
        match self.dedup.get(key.as_bytes())? {
            Some(value) => key_seq(&value).map(Some).ok_or_else(|| LedgerError::Corrupt {
                seq: 0,
                reason: format!("the dedup entry for {key:?} is not an 8-byte sequence number"),
            }),
            None => Ok(None),
        }
    }

    /// Records with seq in `from..=limit` (no upper bound without `limit`), decoded.
    pub(crate) fn iter_records(
        &self,
        from: u64,
        limit: Option<u64>,
    ) -> impl Iterator<Item = Result<Record, LedgerError>> + Send + 'static {
        let limit = limit.unwrap_or(u64::MAX);
        self.records
            .range(from.to_be_bytes()..)
            .map(|item| -> Result<(u64, Record), LedgerError> {
                let (key, bytes) = item?;
                let seq = key_seq(&key).ok_or_else(|| LedgerError::Corrupt {
                    seq: 0,
                    reason: format!("key {} is not an 8-byte sequence number", hex::encode(&key)),
                })?;
                let record = decode_record(seq, &bytes).map_err(|reason| LedgerError::Corrupt { seq, reason })?;
                Ok((seq, record))
            })
            .take_while(move |item| !matches!(item, Ok((seq, _)) if *seq > limit))
            .map(|item| item.map(|(_, record)| record))
    }

    /// The full chain walk. With `limit`, records above it are ignored (a live ledger's in-flight
    /// batch).
    pub(crate) fn verify(&self, limit: Option<u64>) -> Result<VerifyReport, VerifyFailure> {
        let limit = limit.unwrap_or(u64::MAX);
        let mut expected: u64 = 1;
        let mut prev_hash = GENESIS_HASH.to_string();
        for item in self.records.iter() {
            let (key, bytes) = item.map_err(|e| VerifyFailure {
                seq: expected,
                reason: format!("storage error while reading: {e}"),
            })?;
            let seq = key_seq(&key).ok_or_else(|| VerifyFailure {
                seq: expected,
                reason: format!("key {} is not an 8-byte sequence number", hex::encode(&key)),
            })?;
            if seq > limit {
                break;
            }
            if seq != expected {
                let reason = if seq < expected {
                    format!("unexpected record {seq}: sequence numbers start at 1")
                } else if seq == expected + 1 {
                    format!(
                        "record {expected} is missing (the chain jumps from {} to {seq})",
                        expected - 1
                    )
                } else {
                    format!(
                        "records {expected}..{} are missing (the chain jumps from {} to {seq})",
                        seq - 1,
                        expected - 1
                    )
                };
                return Err(VerifyFailure { seq: expected, reason });
            }
            let record = check_record(seq, &bytes).map_err(|reason| VerifyFailure { seq, reason })?;
            if record.prev_hash != prev_hash {
                return Err(VerifyFailure {
                    seq,
                    reason: format!(
                        "prev_hash {} does not match the hash of record {} ({prev_hash}): a record was removed, \
                         inserted or reordered",
                        record.prev_hash,
                        seq - 1
                    ),
                });
            }
            if let Some(dedup_key) = &record.dedup_key {
                let indexed = self.find_dedup(dedup_key).map_err(|e| VerifyFailure {
                    seq,
                    reason: e.to_string(),
                })?;
                if indexed != Some(seq) {
                    return Err(VerifyFailure {
                        seq,
                        reason: match indexed {
                            Some(other) => {
                                format!("dedup key {dedup_key:?} is indexed to record {other}, not to this record")
                            }
                            None => format!("dedup key {dedup_key:?} is missing from the dedup index"),
                        },
                    });
                }
            }
            prev_hash = record.hash;
            expected += 1;
        }
        let records = expected - 1;
        // Every dedup entry must point at a record that holds that key.
        for item in self.dedup.iter() {
            let (key, value) = item.map_err(|e| VerifyFailure {
                seq: 0,
                reason: format!("storage error while reading the dedup index: {e}"),
            })?;
            let name = String::from_utf8_lossy(&key).into_owned();
            let seq = key_seq(&value).ok_or_else(|| VerifyFailure {
                seq: 0,
                reason: format!("the dedup entry for {name:?} is not an 8-byte sequence number"),
            })?;
            if seq > limit {
                continue;
            }
            let holds_key = seq >= 1
                && seq <= records
                && self
                    .get(seq)
                    .ok()
                    .flatten()
                    .is_some_and(|r| r.dedup_key.as_deref() == Some(name.as_str()));
            if !holds_key {
                return Err(VerifyFailure {
                    seq,
                    reason: format!("the dedup index maps {name:?} to record {seq}, which does not hold that key"),
                });
            }
        }
        Ok(VerifyReport {
            records,
            head_hash: prev_hash,
        })
    }

    pub(crate) fn export(
        &self,
        format: ExportFormat,
        event: Option<&str>,
        limit: Option<u64>,
        out: &mut dyn Write,
    ) -> Result<u64, LedgerError> {
        let limit = limit.unwrap_or(u64::MAX);
        if format == ExportFormat::Csv {
            out.write_all(b"seq,time,kind,event,dedup_key,hash,prev_hash,body\n")?;
        }
        let mut written = 0;
        for item in self.records.iter() {
            let (key, bytes) = item?;
            let seq = key_seq(&key).ok_or_else(|| LedgerError::Corrupt {
                seq: 0,
                reason: format!("key {} is not an 8-byte sequence number", hex::encode(&key)),
            })?;
            if seq > limit {
                break;
            }
            let corrupt = |reason: String| LedgerError::Corrupt { seq, reason };
            let record = decode_record(seq, &bytes).map_err(corrupt)?;
            if event.is_some() && record.event.as_deref() != event {
                continue;
            }
            // Stored bytes are already canonical; copying them avoids re-parsing floats.
            let text = std::str::from_utf8(&bytes).map_err(|e| corrupt(format!("not UTF-8: {e}")))?;
            match format {
                ExportFormat::Jsonl => {
                    out.write_all(text.as_bytes())?;
                    out.write_all(b"\n")?;
                }
                ExportFormat::Csv => {
                    let members = raw::object_members(text).map_err(|e| corrupt(format!("cannot decode: {e}")))?;
                    let string = |name: &str| -> Result<String, LedgerError> {
                        let raw = raw::member_text(text, &members, name).unwrap_or("\"\"");
                        serde_json::from_str(raw).map_err(|e| corrupt(format!("member {name} is not a string: {e}")))
                    };
                    let fields = [
                        record.seq.to_string(),
                        string("time")?,
                        string("kind")?,
                        record.event.clone().unwrap_or_default(),
                        record.dedup_key.clone().unwrap_or_default(),
                        record.hash.clone(),
                        record.prev_hash.clone(),
                        raw::member_text(text, &members, "body").unwrap_or("null").to_string(),
                    ];
                    let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
                    out.write_all(line.join(",").as_bytes())?;
                    out.write_all(b"\n")?;
                }
            }
            written += 1;
        }
        out.flush()?;
        Ok(written)
    }
}

fn open_error(dir: &Path, error: sled::Error) -> LedgerError {
    let dir: PathBuf = dir.to_path_buf();
    match &error {
        // sled 0.34 reports a held `flock` as an `Io` error of kind `Other` with this text.
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => LedgerError::Locked { dir },
        _ => LedgerError::Open { dir, source: error },
    }
}

/// The big-endian seq in an 8-byte key or value.
pub(crate) fn key_seq(bytes: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(bytes).ok().map(u64::from_be_bytes)
}

/// `SHA-256(prev_hash_bytes ‖ canonical_json(unhashed))`, in hex. `unhashed` is the record's JSON
/// object without its `hash` member.
#[cfg(test)]
pub(crate) fn chain_hash(prev_hash: &str, unhashed: &Value) -> Result<String, String> {
    chain_hash_text(prev_hash, &canonical_json(unhashed))
}

/// `SHA-256(prev_hash_bytes ‖ unhashed_text)`, in hex.
pub(crate) fn chain_hash_text(prev_hash: &str, unhashed_text: &str) -> Result<String, String> {
    let prev = hex::decode(prev_hash).map_err(|e| format!("prev_hash {prev_hash:?} is not hex: {e}"))?;
    if prev.len() != 32 {
        return Err(format!("prev_hash {prev_hash:?} is not 32 bytes"));
    }
    let mut hasher = Sha256::new();
    hasher.update(&prev);
    hasher.update(unhashed_text.as_bytes());
    Ok(hex::encode(hasher.finalize()))
}

/// Decodes a stored record and checks that it is the record for `seq`. No hash check.
fn decode_record(seq: u64, bytes: &[u8]) -> Result<Record, String> {
    let record: Record = serde_json::from_slice(bytes).map_err(|e| format!("cannot decode: {e}"))?;
    if record.seq != seq {
        return Err(format!("stored under seq {seq} but says seq {}", record.seq));
    }
    Ok(record)
}

/// Decodes a stored record, checks its seq, and recomputes its hash over the stored bytes minus
/// the `hash` member (not over a re-serialisation: see `raw.rs` for why). Members unknown to
/// [`Record`] are rejected by decoding, and could not hide from the hash anyway.
pub(crate) fn check_record(seq: u64, bytes: &[u8]) -> Result<Record, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("cannot decode: not UTF-8: {e}"))?;
    let record: Record = serde_json::from_str(text).map_err(|e| format!("cannot decode: {e}"))?;
    if record.seq != seq {
        return Err(format!("stored under seq {seq} but says seq {}", record.seq));
    }
    let members = raw::object_members(text).map_err(|e| format!("cannot decode: {e}"))?;
    let unhashed = raw::without_member(text, &members, "hash").ok_or("cannot decode: no hash member")?;
    let computed = chain_hash_text(&record.prev_hash, &unhashed)?;
    if computed != record.hash {
        return Err(format!(
            "hash mismatch: stored {}, computed {computed}: the record was modified after it was written",
            record.hash
        ));
    }
    Ok(record)
}

/// One CSV field, quoted per RFC 4180 when it holds a comma, quote or line break.
pub(crate) fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}
