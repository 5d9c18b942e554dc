//! Bearer-token authorisation: a control token may do everything; an optional read-only token
//! may only read (GET `/v1/*`, `/metrics`); a **job token** may only report its own job's
//! throughput (`POST /v1/jobs/{job_id}/throughput`).
//!
//! Job tokens are derived, not stored: HMAC-SHA256 of the job id under a key derived from the
//! control token ([`Auth::job_token`], printed by `flexgate-agent job-token JOB_ID` for a Slurm
//! TaskProlog). A job knows its own token only, so it cannot speak for another job; the agent
//! keeps no table that a restart could lose; rotating the control token rotates every job token.
//!
//! Tokens are kept only as SHA-256 digests and compared in constant time on the digests, so
//! neither the content nor the length of a token leaks through timing, and a token never sits
//! in memory where a `Debug` print could log it.

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Domain separation of the job-token key from the control token's digest.
const JOB_KEY_CONTEXT: &[u8] = b"flexgate-agent job-token key v1\n";

/// Shortest token accepted: shorter secrets are guessable.
pub const MIN_TOKEN_LEN: usize = 16;

/// A secret token, held as its digest.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
    /// Key of the job tokens this token mints (used only when it is the control token).
    job_key: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Why a token was refused at configuration time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Too short.
    #[error("the {0} token is shorter than {MIN_TOKEN_LEN} characters; generate one with `openssl rand -hex 32`")]
    TooShort(&'static str),
    /// Contains whitespace or control characters (cannot be sent in a header).
    #[error("the {0} token contains whitespace or control characters")]
    BadCharacters(&'static str),
    /// Control and read-only tokens are the same.
    #[error("the read-only token must differ from the control token")]
    SameTokens,
}

fn digest(secret: &[u8]) -> [u8; 32] {
    Sha256::digest(secret).into()
}

impl Token {
    /// Accept `secret` as the `role` token ("control" or "read-only").
    pub fn new(role: &'static str, secret: &str) -> Result<Self, TokenError> {
        if secret.len() < MIN_TOKEN_LEN {
            return Err(TokenError::TooShort(role));
        }
        if secret.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
            return Err(TokenError::BadCharacters(role));
        }
        let mut job_key = Sha256::new();
        job_key.update(JOB_KEY_CONTEXT);
        job_key.update(secret.as_bytes());
        Ok(Self {
            digest: digest(secret.as_bytes()),
            job_key: job_key.finalize().into(),
        })
    }

    fn matches(&self, presented_digest: &[u8; 32]) -> bool {
        self.digest.ct_eq(presented_digest).into()
    }
}

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only.
    Read,
    /// Changes caps.
    Control,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// No `Authorization: Bearer …` header (401).
    #[error("missing bearer token")]
    Missing,
    /// A token that matches neither configured token (401).
    #[error("invalid token")]
    Invalid,
    /// The read-only token on a request that changes something (403).
    #[error("the read-only token cannot change caps")]
    ReadOnly,
    /// A job token presented for another job, or for anything but reporting throughput (403).
    #[error("a job token may only report its own job's throughput")]
    WrongJob,
}

/// The agent's tokens.
#[derive(Debug, Clone)]
pub struct Auth {
    control: Token,
    read: Option<Token>,
}

impl Auth {
    /// A control token and an optional read-only one (which must differ).
    pub fn new(control: Token, read: Option<Token>) -> Result<Self, TokenError> {
        if read.as_ref().is_some_and(|r| r.digest == control.digest) {
            return Err(TokenError::SameTokens);
        }
        Ok(Self { control, read })
    }

    /// Shorthand for tests and benchmarks: tokens from strings.
    pub fn from_secrets(control: &str, read: Option<&str>) -> Result<Self, TokenError> {
        Self::new(
            Token::new("control", control)?,
            read.map(|r| Token::new("read-only", r)).transpose()?,
        )
    }

    /// Check the value of an `Authorization` header for a request needing `need`.
    pub fn check(&self, authorization: Option<&[u8]>, need: Access) -> Result<(), AuthFailure> {
        let presented = authorization.and_then(bearer).ok_or(AuthFailure::Missing)?;
        let d = digest(presented);
        // Compare with both tokens every time, so timing does not tell which one matched.
        let is_control = self.control.matches(&d);
        let is_read = self.read.as_ref().is_some_and(|r| r.matches(&d));
        match (is_control, is_read, need) {
            (true, _, _) | (false, true, Access::Read) => Ok(()),
            (false, true, Access::Control) => Err(AuthFailure::ReadOnly),
            (false, false, _) => Err(AuthFailure::Invalid),
        }
    }
}

impl Auth {
    /// The token job `job_id` reports its throughput with: 64 hex digits.
    #[must_use]
    pub fn job_token(&self, job_id: &str) -> String {
        hex::encode(self.job_mac(job_id))
    }

    fn job_mac(&self, job_id: &str) -> [u8; 32] {
        // HMAC pads a key shorter than SHA-256's 64-byte block with zeros (RFC 2104), so the
        // padded block is the same key, in the fixed-size form that cannot fail.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&self.control.job_key);
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new(&block.into());
        mac.update(job_id.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Check an `Authorization` header on a throughput report of `job_id`: the control token,
    /// or that job's own token. Another job's token, or the read-only token, is `WrongJob`.
    pub fn check_job(&self, authorization: Option<&[u8]>, job_id: &str) -> Result<(), AuthFailure> {
        if self.check(authorization, Access::Control).is_ok() {
            return Ok(());
        }
        let presented = authorization.and_then(bearer).ok_or(AuthFailure::Missing)?;
        let mut decoded = [0u8; 32];
        // Decoding takes the same time for every wrong token of the right length; its length is
        // public (64 hex digits), so nothing secret leaks by refusing other lengths early.
        if hex::decode_to_slice(presented, &mut decoded).is_err() {
            return Err(self.refusal_for_other(presented));
        }
        if bool::from(self.job_mac(job_id).ct_eq(&decoded)) {
            Ok(())
        } else {
            Err(AuthFailure::WrongJob)
        }
    }

    fn refusal_for_other(&self, presented: &[u8]) -> AuthFailure {
        match self.read.as_ref().is_some_and(|r| r.matches(&digest(presented))) {
            true => AuthFailure::WrongJob,
            false => AuthFailure::Invalid,
        }
    }
}

/// The token of a `Bearer` header value (scheme case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = (value.get(..7)?, value.get(7..)?);
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROL: &str = "control-token-0123456789";
    const READ: &str = "read-token-0123456789ab";

    fn auth() -> Auth {
        Auth::from_secrets(CONTROL, Some(READ)).expect("valid tokens")
    }

    #[test]
    fn control_token_may_do_everything() {
        let h = format!("Bearer {CONTROL}");
        assert_eq!(auth().check(Some(h.as_bytes()), Access::Control), Ok(()));
        assert_eq!(auth().check(Some(h.as_bytes()), Access::Read), Ok(()));
        let lower = format!("bearer {CONTROL}");
        assert_eq!(auth().check(Some(lower.as_bytes()), Access::Control), Ok(()));
    }

    #[test]
    fn read_token_may_only_read() {
        let h = format!("Bearer {READ}");
        assert_eq!(auth().check(Some(h.as_bytes()), Access::Read), Ok(()));
        assert_eq!(
            auth().check(Some(h.as_bytes()), Access::Control),
            Err(AuthFailure::ReadOnly)
        );
    }

    #[test]
    fn missing_or_wrong_tokens_are_refused() {
        let a = auth();
        assert_eq!(a.check(None, Access::Read), Err(AuthFailure::Missing));
        assert_eq!(
            a.check(Some(b"Basic dXNlcjpwYXNz"), Access::Read),
            Err(AuthFailure::Missing)
        );
        assert_eq!(a.check(Some(b"Bearer "), Access::Read), Err(AuthFailure::Missing));
        assert_eq!(
            a.check(Some(b"Bearer control-token-012345678"), Access::Read),
            Err(AuthFailure::Invalid)
        );
        let longer = format!("Bearer {CONTROL}x");
        assert_eq!(
            a.check(Some(longer.as_bytes()), Access::Read),
            Err(AuthFailure::Invalid)
        );
        let no_read = Auth::from_secrets(CONTROL, None).expect("valid");
        let h = format!("Bearer {READ}");
        assert_eq!(
            no_read.check(Some(h.as_bytes()), Access::Read),
            Err(AuthFailure::Invalid)
        );
    }

    #[test]
    fn a_job_token_reports_for_its_own_job_only() {
        let a = auth();
        let own = format!("Bearer {}", a.job_token("1234"));
        assert_eq!(a.job_token("1234").len(), 64);
        assert_eq!(a.check_job(Some(own.as_bytes()), "1234"), Ok(()));
        assert_eq!(a.check_job(Some(own.as_bytes()), "1235"), Err(AuthFailure::WrongJob));
        // It is nothing else: not a read token, not a control token.
        assert_eq!(a.check(Some(own.as_bytes()), Access::Read), Err(AuthFailure::Invalid));
        let control = format!("Bearer {CONTROL}");
        assert_eq!(a.check_job(Some(control.as_bytes()), "1234"), Ok(()));
        let read = format!("Bearer {READ}");
        assert_eq!(a.check_job(Some(read.as_bytes()), "1234"), Err(AuthFailure::WrongJob));
        assert_eq!(a.check_job(Some(b"Bearer zz"), "1234"), Err(AuthFailure::Invalid));
        assert_eq!(a.check_job(None, "1234"), Err(AuthFailure::Missing));
        // Another control token mints other job tokens.
        let other = Auth::from_secrets("another-control-token-xyz", None).expect("valid");
        assert_ne!(other.job_token("1234"), a.job_token("1234"));
        assert!(!format!("{a:?}").contains(&a.job_token("1234")));
    }

    #[test]
    fn weak_or_duplicate_tokens_are_refused_and_never_printed() {
        assert_eq!(
            Token::new("control", "short").expect_err("too short"),
            TokenError::TooShort("control")
        );
        assert!(matches!(
            Token::new("control", "has space in the token"),
            Err(TokenError::BadCharacters(_))
        ));
        assert_eq!(
            Auth::from_secrets(CONTROL, Some(CONTROL)).expect_err("same"),
            TokenError::SameTokens
        );
        let printed = format!("{:?}", auth());
        assert!(!printed.contains(CONTROL) && !printed.contains(READ), "{printed}");
    }
}
