//! The slurmrestd JWT: where it comes from, and a local expiry check.
//!
//! Tokens from `scontrol token lifespan=S` expire, and Slurm 22.05 reports a rejected token as
//! an HTTP 500 "Unspecified error" (see [`crate::rest`]), which says nothing about tokens. So
//! before each request the token's `exp` claim is read (without checking the signature: that
//! is slurmctld's job) and an expired token is refused here with a message that says so.
//!
//! The token is re-read from its file or environment variable on every request, so rotating it
//! (a cron job writing a fresh `scontrol token` into the file) needs no gateway restart.

use std::path::PathBuf;

use serde::Deserialize;

use crate::error::SlurmError;

/// Where the JWT comes from. In TOML: `token = { file = "/etc/flexgate/slurm.jwt" }`,
/// `token = { env = "SLURM_JWT" }` or `token = { value = "eyJ..." }`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum TokenSource {
    /// The token itself.
    Value(String),
    /// A file holding the token, either bare or as `SLURM_JWT=...` (what `scontrol token`
    /// prints); other lines are ignored.
    File(PathBuf),
    /// An environment variable holding the token.
    Env(String),
}

impl std::fmt::Debug for TokenSource {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::Value(_) => f.write_str("Value(<redacted>)"),
            TokenSource::File(p) => f.debug_tuple("File").field(p).finish(),
            TokenSource::Env(v) => f.debug_tuple("Env").field(v).finish(),
        }
    }
}

impl TokenSource {
    /// The current token, checked for shape and expiry.
    pub fn load(&self) -> Result<String, SlurmError> {
        let token = match self {
            TokenSource::Value(v) => v.trim().to_string(),
            TokenSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| SlurmError::Token {
                    reason: format!("cannot read token file {}: {e}", path.display()),
                })?;
                token_from_text(&text).ok_or_else(|| SlurmError::Token {
                    reason: format!("token file {} holds no token", path.display()),
                })?
            }
            TokenSource::Env(var) => {
                std::env::var(var)
                    .map(|v| v.trim().to_string())
                    .map_err(|_| SlurmError::Token {
                        reason: format!("environment variable {var} is not set"),
                    })?
            }
        };
        check_token(&token, chrono::Utc::now().timestamp())?;
        Ok(token)
    }
}

/// The token in a file's text: a `SLURM_JWT=` line, else the first non-empty line.
pub(crate) fn token_from_text(text: &str) -> Option<String> {
    let lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let mut first = None;
    for line in lines {
        let line = line.strip_prefix("export ").unwrap_or(line);
        if let Some(t) = line.strip_prefix("SLURM_JWT=") {
            return Some(t.trim().trim_matches('"').to_string());
        }
        if first.is_none() && !line.contains('=') {
            first = Some(line.to_string());
        }
    }
    first
}

/// Refuses empty tokens, tokens that cannot go in an HTTP header, and JWTs whose `exp` is at or
/// before `now` (seconds since the epoch). A token that is not a decodable JWT is passed on:
/// slurmctld decides.
pub(crate) fn check_token(token: &str, now: i64) -> Result<(), SlurmError> {
    if token.is_empty() {
        return Err(SlurmError::Token {
            reason: "the token is empty".into(),
        });
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SlurmError::Token {
            reason: "the token contains spaces or control characters".into(),
        });
    }
    if let Some(exp) = jwt_exp(token)
        && exp <= now
    {
        let when = chrono::DateTime::from_timestamp(exp, 0).map_or_else(|| exp.to_string(), |t| t.to_rfc3339());
        return Err(SlurmError::TokenExpired { expired_at: when });
    }
    Ok(())
}

/// The `exp` claim of a JWT, if the token is one.
pub(crate) fn jwt_exp(token: &str) -> Option<i64> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64url_decode(payload)?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("exp")?.as_i64()
}

/// Base64url without padding (RFC 7515 §2); `None` on any other character.
fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    if s.len() > 64 * 1024 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An unsigned JWT with the given claims (enough for the local checks).
    pub(crate) fn fake_jwt(claims: &str) -> String {
        fn enc(bytes: &[u8]) -> String {
            const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            let mut out = String::new();
            for chunk in bytes.chunks(3) {
                let n = chunk
                    .iter()
                    .enumerate()
                    .fold(0u32, |a, (i, &b)| a | (u32::from(b) << (16 - 8 * i)));
                for i in 0..=chunk.len() {
                    out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
                }
            }
            out
        }
        format!(
            "{}.{}.sig",
            enc(br#"{"alg":"HS256","typ":"JWT"}"#),
            enc(claims.as_bytes())
        )
    }

    #[test]
    fn reads_exp() {
        assert_eq!(
            jwt_exp(&fake_jwt(r#"{"exp":1796022353,"iat":1,"sun":"slurmrest"}"#)),
            Some(1796022353)
        );
        assert_eq!(jwt_exp("not-a-jwt"), None);
        assert_eq!(jwt_exp("a.!!!.c"), None);
        assert_eq!(jwt_exp(&fake_jwt(r#"{"sun":"x"}"#)), None);
    }

    #[test]
    fn a_real_slurm_token_decodes() {
        // Header and claims of a token printed by `scontrol token username=slurmrest` (22.05).
        let t = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE3OTYwMjIzNTAsImlhdCI6MTc5NjAxNTE1MCwic3VuIjoic2x1cm1yZXN0In0.x";
        assert_eq!(jwt_exp(t), Some(1796022350));
    }

    #[test]
    fn expiry_and_shape() {
        let t = fake_jwt(r#"{"exp":100}"#);
        assert!(check_token(&t, 99).is_ok());
        let e = check_token(&t, 100).expect_err("expired");
        assert!(e.to_string().contains("expired"), "{e}");
        assert!(check_token("", 0).is_err());
        assert!(check_token("a b", 0).is_err());
        assert!(check_token("opaque-token", i64::MAX).is_ok());
    }

    #[test]
    fn token_files() {
        assert_eq!(token_from_text("SLURM_JWT=abc\n").as_deref(), Some("abc"));
        assert_eq!(
            token_from_text("SLURM_USER_NAME=x\nexport SLURM_JWT=\"abc\"\n").as_deref(),
            Some("abc")
        );
        assert_eq!(token_from_text("\n# c\nabc.def.ghi\n").as_deref(), Some("abc.def.ghi"));
        assert_eq!(token_from_text("A=b\n"), None);
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("t");
        std::fs::write(&p, "SLURM_JWT=tok\n").expect("write");
        assert_eq!(TokenSource::File(p).load().expect("loads"), "tok");
        let e = TokenSource::File(dir.path().join("missing"))
            .load()
            .expect_err("missing");
        assert!(e.to_string().contains("cannot read token file"));
        assert_eq!(
            format!("{:?}", TokenSource::Value("secret".into())),
            "Value(<redacted>)"
        );
    }
}
