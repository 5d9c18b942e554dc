//! The state file: leases and pre-event limits in `<state_dir>/leases.json`, so that a restarted
//! agent re-applies valid leases and restores GPUs whose leases expired while it was down.
//!
//! Every write is atomic and durable: a temporary file is written and `fsync`ed, renamed over the
//! old one, and the directory is `fsync`ed, so a crash or power loss leaves either the old or the
//! new state, never a torn one. A file that exists but cannot be parsed stops the agent: it may
//! hold the only record of the GPUs' pre-event limits, and silently starting fresh would leave
//! caps on forever.

use crate::lease::{Journal, JournalError, PersistedState, STATE_VERSION};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// Name of the state file inside the state directory.
pub const STATE_FILE: &str = "leases.json";

/// Why the state directory or file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The directory or file could not be created or read.
    #[error("state {path}: {source}; check that --state-dir exists and is writable by the agent")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file exists but is not a valid state.
    #[error(
        "state file {path} is corrupt: {detail}. It may hold the GPUs' pre-event power limits, so the agent refuses to start rather than forget them. Inspect it, restore the limits by hand if needed (nvidia-smi -i N -pl W), then move the file aside"
    )]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

/// A [`Journal`] writing `<dir>/leases.json` atomically.
#[derive(Debug)]
pub struct FileJournal {
    dir: PathBuf,
    path: PathBuf,
    tmp: PathBuf,
}

impl FileJournal {
    /// Open (creating the directory if needed) and read the existing state, if any.
    pub fn open(dir: &Path) -> Result<(Self, Option<PersistedState>), StateError> {
        fs::create_dir_all(dir).map_err(|source| StateError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let journal = Self {
            dir: dir.to_owned(),
            path: dir.join(STATE_FILE),
            tmp: dir.join(format!("{STATE_FILE}.tmp")),
        };
        let state = match fs::read(&journal.path) {
            Ok(bytes) => Some(parse(&journal.path, &bytes)?),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(source) => {
                return Err(StateError::Io {
                    path: journal.path.clone(),
                    source,
                });
            }
        };
        // A leftover temporary file is an interrupted write of a state never made current.
        let _ = fs::remove_file(&journal.tmp);
        Ok((journal, state))
    }

    /// The state file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&self, state: &PersistedState) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&self.tmp, &self.path)?;
        File::open(&self.dir)?.sync_all()
    }
}

/// Read a state file's bytes (`path` only names it in errors): JSON of the layout
/// [`STATE_VERSION`], unknown fields refused. Whether its leases are acceptable is
/// [`crate::lease::LeaseBook::from_state`]'s decision. Public so the fuzz target
/// (`adapters/agent/fuzz`) reads a journal exactly as the agent does.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<PersistedState, StateError> {
    let corrupt = |detail: String| StateError::Corrupt {
        path: path.to_owned(),
        detail,
    };
    let state: PersistedState = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if state.version != STATE_VERSION {
        return Err(corrupt(format!("version {} is not {STATE_VERSION}", state.version)));
    }
    Ok(state)
}

impl Journal for FileJournal {
    fn save(&mut self, state: &PersistedState) -> Result<(), JournalError> {
        self.write(state)
            .map_err(|e| JournalError(format!("{}: {e}", self.path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn round_trip_and_atomic_replace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut j, state) = FileJournal::open(dir.path()).expect("opens");
        assert!(state.is_none());
        let mut s = PersistedState {
            version: STATE_VERSION,
            leases: Vec::new(),
            baselines: BTreeMap::from([("GPU-a".to_owned(), 650_000)]),
            deleted: BTreeMap::new(),
            fence_epoch: 0,
            boot_id: Some("0f5c1a2e-aaaa-bbbb-cccc-000000000001".to_owned()),
        };
        j.save(&s).expect("saves");
        s.baselines.insert("GPU-b".to_owned(), 700_000);
        j.save(&s).expect("saves again");
        assert!(!dir.path().join("leases.json.tmp").exists());
        let (_j, back) = FileJournal::open(dir.path()).expect("reopens");
        assert_eq!(back, Some(s));
    }

    #[test]
    fn corrupt_file_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(STATE_FILE), b"{\"version\":1,\"leases\":[").expect("write");
        let err = FileJournal::open(dir.path()).expect_err("corrupt");
        let msg = err.to_string();
        assert!(msg.contains("corrupt") && msg.contains("pre-event"), "{msg}");

        fs::write(
            dir.path().join(STATE_FILE),
            br#"{"version":99,"leases":[],"baselines":{}}"#,
        )
        .expect("write");
        assert!(matches!(FileJournal::open(dir.path()), Err(StateError::Corrupt { .. })));
    }
}
