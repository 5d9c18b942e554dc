//! A minimal HTTP/1.1 client for loopback calls to the gateway's own API (the demo injects its
//! event through the real API, and end-to-end tests drive it) without pulling in a full client
//! stack. One request per connection (`Connection: close`); bodies up to 16 MiB.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response: status code and body.
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as UTF-8 text (lossy).
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Connect, read or write failed.
    #[error("HTTP request to {addr} failed: {source}")]
    Io {
        /// Server address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// No complete response within the timeout.
    #[error("HTTP request to {0} timed out")]
    Timeout(SocketAddr),
    /// Not an HTTP/1.x response.
    #[error("malformed HTTP response from {0}")]
    Malformed(SocketAddr),
}

const MAX_RESPONSE: usize = 16 * 1024 * 1024;

/// Send one request and read the whole response.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Result<Response, HttpError> {
    let io = |source| HttpError::Io { addr, source };
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.map_err(io)?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        if let Some(token) = token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        if let Some(body) = body {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.map_err(io)?;
        if let Some(body) = body {
            stream.write_all(body).await.map_err(io)?;
        }
        let mut raw = Vec::new();
        stream
            .take(MAX_RESPONSE as u64)
            .read_to_end(&mut raw)
            .await
            .map_err(io)?;
        parse(addr, &raw)
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .map_err(|_| HttpError::Timeout(addr))?
}

fn parse(addr: SocketAddr, raw: &[u8]) -> Result<Response, HttpError> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(HttpError::Malformed(addr))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| HttpError::Malformed(addr))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(HttpError::Malformed(addr))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let rest = &raw[split + 4..];
    let body = if chunked {
        dechunk(rest).ok_or(HttpError::Malformed(addr))?
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_bodies() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        let plain = parse(addr, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").expect("plain");
        assert_eq!((plain.status, plain.text().as_str()), (200, "ok"));
        let chunked = parse(
            addr,
            b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .expect("chunked");
        assert_eq!((chunked.status, chunked.text().as_str()), (404, "abcde"));
        assert!(parse(addr, b"garbage").is_err());
    }
}
