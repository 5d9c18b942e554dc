//! The site's key, and the signed ledger head a settlement report carries.
//!
//! A ledger rewritten and re-hashed on disk verifies on its own; what catches it is a
//! checkpoint held elsewhere ([`super::checkpoints`]). A season report handed to a utility or
//! an auditor is such a checkpoint, and signing its head with the site's key makes it one that
//! nobody but the site could have issued: `flexgate log verify --checkpoints report.json`
//! refuses a report whose head or signature was changed, and with `--site-key` one signed by
//! another key.
//!
//! **The key.** An Ed25519 key (RFC 8032), its 32-byte seed in `<data_dir>/site.key` as 64 hex
//! digits and a newline, owner-only (0600), made at the first report or gateway start from the
//! operating system's random source. Replicas of one site that should sign as one copy the
//! file into each data directory. The public key is printed by `flexgate log site-key`.
//!
//! **What is signed** ([`head_message`]): the ASCII bytes of [`HEAD_SCHEME`], a zero byte, the
//! record's sequence number in decimal, a zero byte, its hash (64 lowercase hex digits), a zero
//! byte, and when it was signed as RFC 3339 (`2026-07-01T12:00:00+00:00`, as written in the
//! report). The scheme name keeps the signature from meaning anything else; the zero bytes keep
//! the parts apart. Any Ed25519 library verifies it from the report alone.

use chrono::{DateTime, Utc};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The signed statement's scheme.
pub const HEAD_SCHEME: &str = "flexgate.ledger-head/1";

/// The key's file in a data directory.
pub const SITE_KEY_FILE: &str = "site.key";

/// Why the site's key cannot be used, or a signature does not verify.
#[derive(Debug, thiserror::Error)]
pub enum SiteKeyError {
    /// The file cannot be read, written or narrowed to its owner.
    #[error("site key {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file does not hold a key.
    #[error("site key {path}: {why}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The operating system's random source failed.
    #[error("no random seed for the site key: {0}")]
    Random(String),
}

/// The site's signing key.
pub struct SiteKey {
    key: SigningKey,
}

impl std::fmt::Debug for SiteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the seed.
        f.debug_struct("SiteKey")
            .field("public_key", &self.public_key())
            .finish_non_exhaustive()
    }
}

/// A ledger head signed with the site's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadSignature {
    /// [`HEAD_SCHEME`].
    pub scheme: String,
    /// The record signed.
    pub seq: u64,
    /// Its hash, hex.
    pub hash: String,
    /// When it was signed, RFC 3339.
    pub signed_at: String,
    /// The site's public key, 64 hex digits.
    pub public_key: String,
    /// The Ed25519 signature of [`head_message`], 128 hex digits.
    pub signature: String,
}

/// The bytes signed for a head.
#[must_use]
pub fn head_message(seq: u64, hash: &str, signed_at: &str) -> Vec<u8> {
    format!("{HEAD_SCHEME}\0{seq}\0{hash}\0{signed_at}").into_bytes()
}

impl SiteKey {
    /// The key of `data_dir`, made (owner-only) when there is none.
    pub fn load_or_create(data_dir: &Path) -> Result<Self, SiteKeyError> {
        if let Some(key) = Self::load(data_dir)? {
            return Ok(key);
        }
        let path = data_dir.join(SITE_KEY_FILE);
        let io = |source| SiteKeyError::Io {
            path: path.clone(),
            source,
        };
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| SiteKeyError::Random(e.to_string()))?;
        std::fs::create_dir_all(data_dir).map_err(io)?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        match options.open(&path) {
            Ok(mut file) => {
                use std::io::Write as _;
                file.write_all(format!("{}\n", hex::encode(seed)).as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(io)?;
                Ok(Self {
                    key: SigningKey::from_bytes(&seed),
                })
            }
            // Another process made it first: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Self::load(data_dir)?.ok_or_else(|| SiteKeyError::Malformed {
                    path,
                    why: "vanished while being made".into(),
                })
            }
            Err(e) => Err(io(e)),
        }
    }

    /// The key of `data_dir`, if it has one. A key file others can read is narrowed to its
    /// owner.
    pub fn load(data_dir: &Path) -> Result<Option<Self>, SiteKeyError> {
        let path = data_dir.join(SITE_KEY_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(SiteKeyError::Io { path, source }),
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(|source| {
                SiteKeyError::Io {
                    path: path.clone(),
                    source,
                }
            })?;
        }
        let malformed = |why: &str| SiteKeyError::Malformed {
            path: path.clone(),
            why: why.to_string(),
        };
        let bytes = hex::decode(text.trim()).map_err(|_| malformed("not hex digits"))?;
        let seed: [u8; 32] = bytes
            .try_into()
            .map_err(|_| malformed("not 32 bytes (64 hex digits)"))?;
        Ok(Some(Self {
            key: SigningKey::from_bytes(&seed),
        }))
    }

    /// The public key, 64 hex digits.
    #[must_use]
    pub fn public_key(&self) -> String {
        hex::encode(self.key.verifying_key().as_bytes())
    }

    /// Sign the ledger head `(seq, hash)` at `at`.
    #[must_use]
    pub fn sign_head(&self, seq: u64, hash: &str, at: DateTime<Utc>) -> HeadSignature {
        let signed_at = at.to_rfc3339();
        let hash = hash.to_ascii_lowercase();
        let signature = self.key.sign(&head_message(seq, &hash, &signed_at));
        HeadSignature {
            scheme: HEAD_SCHEME.to_string(),
            seq,
            hash,
            signed_at,
            public_key: self.public_key(),
            signature: hex::encode(signature.to_bytes()),
        }
    }
}

impl HeadSignature {
    /// Check the signature against its own public key (and, when given, that this is the
    /// key expected).
    pub fn verify(&self, expected_key: Option<&str>) -> Result<(), String> {
        if self.scheme != HEAD_SCHEME {
            return Err(format!("signature scheme {:?} is not {HEAD_SCHEME}", self.scheme));
        }
        if let Some(expected) = expected_key
            && !expected.trim().eq_ignore_ascii_case(&self.public_key)
        {
            return Err(format!(
                "signed by key {}, not the site key given ({})",
                self.public_key,
                expected.trim()
            ));
        }
        let key_bytes: [u8; 32] = hex::decode(&self.public_key)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or("the public key is not 64 hex digits")?;
        let key = VerifyingKey::from_bytes(&key_bytes).map_err(|_| "the public key is not an Ed25519 key")?;
        let sig_bytes: [u8; 64] = hex::decode(&self.signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or("the signature is not 128 hex digits")?;
        key.verify_strict(
            &head_message(self.seq, &self.hash, &self.signed_at),
            &Signature::from_bytes(&sig_bytes),
        )
        .map_err(|_| "the signature does not verify: the head, its time or the signature was changed".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_owner_only_and_signs_heads_that_verify_and_only_as_signed() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(SiteKey::load(dir.path()).expect("none").is_none());
        let key = SiteKey::load_or_create(dir.path()).expect("made");
        let again = SiteKey::load_or_create(dir.path()).expect("read");
        assert_eq!(key.public_key(), again.public_key());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(SITE_KEY_FILE))
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(
            !format!("{key:?}").contains(&std::fs::read_to_string(dir.path().join(SITE_KEY_FILE)).expect("seed")[..64])
        );
        let hash = "ab".repeat(32);
        let signed = key.sign_head(42, &hash, DateTime::UNIX_EPOCH);
        assert_eq!(signed.verify(None), Ok(()));
        assert_eq!(signed.verify(Some(&key.public_key())), Ok(()));
        let mut other = signed.clone();
        other.seq = 43;
        assert!(other.verify(None).is_err());
        let mut other = signed.clone();
        other.hash = "cd".repeat(32);
        assert!(other.verify(None).is_err());
        let stranger = SiteKey::load_or_create(tempfile::tempdir().expect("dir").path()).expect("made");
        assert!(
            signed
                .verify(Some(&stranger.public_key()))
                .expect_err("other key")
                .contains("not the site key")
        );
        // A stranger's signature on the same head, claiming the site's key, fails.
        let mut forged = stranger.sign_head(42, &hash, DateTime::UNIX_EPOCH);
        forged.public_key = key.public_key();
        assert!(forged.verify(None).is_err());
        std::fs::write(dir.path().join(SITE_KEY_FILE), "zz\n").expect("write");
        assert!(matches!(SiteKey::load(dir.path()), Err(SiteKeyError::Malformed { .. })));
    }
}
