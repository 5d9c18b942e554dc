//! Reading a request body within a size limit and a deadline, and saying which one failed.
//!
//! `axum::body::to_bytes` reports every failure the same way; answering all of them 413 "the
//! body exceeds N bytes" misleads a client whose chunked encoding was malformed. And without a
//! deadline a client that declares a chunk of 2^64−1 bytes and sends a few holds the handler
//! until it gives up: here it gets a 408 when the deadline passes.

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use std::time::Duration;

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// More bytes than the limit.
    #[error("the body exceeds {limit} bytes")]
    TooLarge {
        /// The limit, bytes.
        limit: usize,
    },
    /// The body did not arrive within the deadline.
    #[error("the body did not arrive within {seconds} s")]
    TimedOut {
        /// The deadline, seconds.
        seconds: u64,
    },
    /// The body's framing is broken (e.g. a malformed chunked encoding) or the connection
    /// failed while it was read.
    #[error("the body cannot be read: {0}")]
    Malformed(String),
}

impl BodyError {
    /// The HTTP status that answers it.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::TimedOut { .. } => StatusCode::REQUEST_TIMEOUT,
            BodyError::Malformed(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Reads `body`: at most `limit` bytes, within `deadline`.
pub async fn read_body(body: Body, limit: usize, deadline: Duration) -> Result<Bytes, BodyError> {
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if is_length_limit(&e) => Err(BodyError::TooLarge { limit }),
        Ok(Err(e)) => Err(BodyError::Malformed(e.to_string())),
        Err(_) => Err(BodyError::TimedOut {
            seconds: deadline.as_secs(),
        }),
    }
}

/// Whether `to_bytes` failed on the size limit (anywhere in the error's source chain).
fn is_length_limit(error: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    fn streamed(chunks: Vec<Result<&'static [u8], std::io::Error>>) -> Body {
        Body::from_stream(stream::iter(chunks))
    }

    #[tokio::test]
    async fn each_failure_is_named_for_what_it_is() {
        let ok = read_body(Body::from("{}"), 8, Duration::from_secs(1)).await;
        assert_eq!(ok.as_deref(), Ok(&b"{}"[..]));
        let big = read_body(streamed(vec![Ok(b"0123456789")]), 8, Duration::from_secs(1)).await;
        assert_eq!(big, Err(BodyError::TooLarge { limit: 8 }));
        let broken = read_body(
            streamed(vec![Ok(b"01"), Err(std::io::Error::other("invalid chunk size line"))]),
            8,
            Duration::from_secs(1),
        )
        .await;
        assert!(
            matches!(&broken, Err(BodyError::Malformed(m)) if m.contains("chunk")),
            "{broken:?}"
        );
        assert_eq!(broken.unwrap_err().status(), StatusCode::BAD_REQUEST);
        let never = Body::from_stream(stream::pending::<Result<&'static [u8], std::io::Error>>());
        let slow = read_body(never, 8, Duration::from_millis(50)).await;
        assert_eq!(slow, Err(BodyError::TimedOut { seconds: 0 }));
    }
}
