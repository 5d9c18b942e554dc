//! Making a group commit survive a power cut, not only a process crash.
//!
//! sled's `flush()` writes its log buffers and then calls `sync_file_range(2)` on its log file
//! (`<ledger>/db`). That pushes the dirty pages to the device but is documented to flush neither
//! the file's metadata (its size, after an append) nor the drive's volatile write cache, so an
//! acknowledged record could be lost when the power goes. Values too large for a log segment
//! (about 128 KiB: a plan of many jobs) go to their own files under `<ledger>/blobs/`, which sled
//! writes without any sync at all.
//!
//! After each sled flush the writer therefore calls [`Durable::sync`]: `fdatasync(2)` on the log
//! file (data, the size change, and a cache flush on drives that honour it), then `fdatasync` on
//! every blob file it has not synced before and `fsync` on the `blobs` directory that names them.
//! Only then are the batch's waiters answered. `strace` checks this order in
//! `tests/ledger_durability.rs`; its cost is measured in `benches/ledger.rs`.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// The files whose data must be on stable storage before a batch is acknowledged.
pub(crate) struct Durable {
    /// sled's log file.
    log: File,
    /// sled's directory of large values.
    blobs: PathBuf,
    /// Blob files already synced (sled never rewrites a blob in place: it writes a new one).
    synced_blobs: HashSet<std::ffi::OsString>,
}

impl Durable {
    /// Opens the log file of the sled database in `dir` and syncs the directory entries sled
    /// created (the log file, `blobs/`), so that a ledger created just before a power cut still
    /// exists after it. Blobs present at open are treated as synced: they were written before
    /// this process, whose own writer synced them before answering.
    pub(crate) fn open(dir: &Path) -> io::Result<Durable> {
        let log = File::open(dir.join("db"))?;
        sync_directory(dir)?;
        let blobs = dir.join("blobs");
        let mut synced_blobs = HashSet::new();
        if blobs.is_dir() {
            sync_directory(&blobs)?;
            for entry in std::fs::read_dir(&blobs)? {
                synced_blobs.insert(entry?.file_name());
            }
        }
        Ok(Durable {
            log,
            blobs,
            synced_blobs,
        })
    }

    /// Makes everything sled has flushed durable (see the module docs). Call after
    /// `sled::Db::flush` and before acknowledging.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        self.log.sync_data()?;
        if !self.blobs.is_dir() {
            return Ok(());
        }
        let mut new_blobs = false;
        let mut present = HashSet::with_capacity(self.synced_blobs.len());
        for entry in std::fs::read_dir(&self.blobs)? {
            let name = entry?.file_name();
            if !self.synced_blobs.contains(&name) {
                match File::open(self.blobs.join(&name)) {
                    Ok(file) => file.sync_data()?,
                    // sled removed it meanwhile (a blob replaced by a newer one): nothing to keep.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                new_blobs = true;
            }
            present.insert(name);
        }
        if new_blobs {
            sync_directory(&self.blobs)?;
        }
        // Forget blobs sled has deleted, so the set does not grow without bound.
        self.synced_blobs = present;
        Ok(())
    }
}

/// `fsync(2)` on a directory, which makes the names in it durable (Linux and the BSDs allow
/// opening a directory read-only for this).
fn sync_directory(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
