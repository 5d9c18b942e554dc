//! The bounds of an import, and the reader that enforces the byte bounds and knows the line.
//!
//! Why bounds at all: an import takes files from outside (a utility portal's download, an
//! operator's upload through `POST /v1/meter/import`), and memory must stay bounded whatever they
//! hold. The importer keeps only what it returns (the readings, bounded by
//! [`Limits::max_readings`]) and one token at a time ([`Limits::max_token_bytes`]); a file over
//! [`Limits::max_bytes`] is refused before its first byte is read, and a stream that runs past it
//! is refused when it does.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::path::Path;

use crate::error::{ImportError, Place, Reason};

/// The bounds of one import. [`Limits::default`] suits a site's utility data: years of 5-minute
/// intervals, far below what would strain a small machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Largest input, bytes (default 512 MiB: a year of 5-minute Green Button data is about
    /// 20 MB). A file is checked against it before it is read.
    pub max_bytes: u64,
    /// Most readings in one import (default 1,000,000: 9.5 years of 5-minute data, about 60 MB
    /// of [`crate::Reading`]s).
    pub max_readings: usize,
    /// Deepest XML nesting (default 32; a Green Button feed nests 7 deep).
    pub max_depth: usize,
    /// Longest single XML tag, text node, comment or CSV line, bytes (default 64 KiB). This is
    /// what bounds the parser's own buffer.
    pub max_token_bytes: usize,
    /// Most IntervalBlocks (default 200,000: hourly blocks for 20 years).
    pub max_blocks: usize,
    /// Most UsagePoints, MeterReadings and ReadingTypes, each (default 64).
    pub max_resources: usize,
    /// Highest mean demand a reading may imply, W (default 10 GW, beyond any one site): what
    /// catches a wrong `powerOfTenMultiplier`, whose values are otherwise plausible integers.
    pub max_site_power_w: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 512 * 1024 * 1024,
            max_readings: 1_000_000,
            max_depth: 32,
            max_token_bytes: 64 * 1024,
            max_blocks: 200_000,
            max_resources: 64,
            max_site_power_w: 1e10,
        }
    }
}

/// Opens `path` for an import, refusing a file over [`Limits::max_bytes`] from its metadata,
/// before anything is read: a 2 GB file costs one `stat`.
pub(crate) fn open_checked(path: &Path, limits: &Limits) -> Result<File, ImportError> {
    let io_err = |e: io::Error| ImportError::file(Reason::Io(format!("{}: {e}", path.display())));
    let file = File::open(path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if meta.is_dir() {
        return Err(io_err(io::Error::other("is a directory")));
    }
    if meta.len() > limits.max_bytes {
        return Err(ImportError::file(Reason::TooLarge {
            size: meta.len(),
            limit: limits.max_bytes,
        }));
    }
    Ok(file)
}

const CHUNK: usize = 64 * 1024;

/// A buffered reader that counts lines and columns as bytes are consumed, refuses to read past
/// [`Limits::max_bytes`], and refuses a token (what was consumed since [`Bounded::mark`]) longer
/// than [`Limits::max_token_bytes`].
///
/// Why its own buffered reader: quick-xml consumes exactly up to the end of each event, so the
/// bytes consumed so far say where the next event starts, and counting newlines in them is the
/// cheap way to name a line (quick-xml itself knows only byte offsets). And quick-xml grows its
/// event buffer until the event ends, so the token bound must come from below it: a limit hit
/// is an I/O error for quick-xml, and [`Bounded::hit`] says which one it was.
pub(crate) struct Bounded<R> {
    inner: R,
    buf: Box<[u8]>,
    pos: usize,
    cap: usize,
    read_total: u64,
    consumed: u64,
    /// Newlines consumed.
    newlines: u64,
    /// Characters consumed since the last newline.
    col: u64,
    mark: u64,
    max_bytes: u64,
    max_token: u64,
    hit: Option<Reason>,
}

impl<R: Read> Bounded<R> {
    pub(crate) fn new(inner: R, limits: &Limits) -> Self {
        Bounded {
            inner,
            buf: vec![0; CHUNK].into_boxed_slice(),
            pos: 0,
            cap: 0,
            read_total: 0,
            consumed: 0,
            newlines: 0,
            col: 0,
            mark: 0,
            max_bytes: limits.max_bytes,
            max_token: u64::try_from(limits.max_token_bytes).unwrap_or(u64::MAX),
            hit: None,
        }
    }

    /// Where the next byte to be consumed is.
    pub(crate) fn place(&self) -> Place {
        Place {
            line: self.newlines + 1,
            column: self.col + 1,
        }
    }

    /// Bytes consumed so far (the offset of the next byte).
    pub(crate) fn offset(&self) -> u64 {
        self.consumed
    }

    /// Starts a new token: the token bound counts from here.
    pub(crate) fn mark(&mut self) {
        self.mark = self.consumed;
    }

    /// The limit that stopped the last read, if one did.
    pub(crate) fn hit(&self) -> Option<&Reason> {
        self.hit.as_ref()
    }

    fn refuse(&mut self, reason: Reason) -> io::Error {
        let msg = reason.to_string();
        self.hit = Some(reason);
        io::Error::other(msg)
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: Read> BufRead for Bounded<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let used = self.consumed - self.mark;
        if used > self.max_token {
            let limit = usize::try_from(self.max_token).unwrap_or(usize::MAX);
            return Err(self.refuse(Reason::TokenTooLong { limit }));
        }
        if self.pos >= self.cap {
            let n = loop {
                match self.inner.read(&mut self.buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
            self.pos = 0;
            self.cap = n;
            self.read_total += n as u64;
            if self.read_total > self.max_bytes {
                let limit = self.max_bytes;
                self.cap = 0;
                return Err(self.refuse(Reason::ReadTooMuch { limit }));
            }
        }
        // Never more than one byte past the token limit: the caller's own buffer (quick-xml's
        // event, the CSV line) stays within the limit plus one byte, and the next call refuses.
        let allowed = usize::try_from(self.max_token - used + 1).unwrap_or(usize::MAX);
        let end = self.cap.min(self.pos.saturating_add(allowed));
        Ok(&self.buf[self.pos..end])
    }

    fn consume(&mut self, amt: usize) {
        let end = self.pos.saturating_add(amt).min(self.cap);
        let bytes = &self.buf[self.pos..end];
        // Counted with iterator adaptors the compiler vectorizes: this runs over every byte.
        let newlines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        let tail = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(i) => {
                self.col = 0;
                &bytes[i + 1..]
            }
            None => bytes,
        };
        // Characters, not bytes: UTF-8 continuation bytes (10xxxxxx) do not start one.
        self.col += tail.iter().filter(|&&b| b & 0xC0 != 0x80).count() as u64;
        self.newlines += newlines;
        self.consumed += (end - self.pos) as u64;
        self.pos = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lines_and_characters() {
        let mut r = Bounded::new("ab\ncé\nx".as_bytes(), &Limits::default());
        let _ = r.fill_buf().unwrap();
        r.consume(3);
        assert_eq!(r.place(), Place { line: 2, column: 1 });
        r.consume(3); // c, é (two bytes)
        assert_eq!(r.place(), Place { line: 2, column: 3 });
        r.consume(1);
        assert_eq!(r.place(), Place { line: 3, column: 1 });
    }

    #[test]
    fn refuses_past_the_byte_limit() {
        let limits = Limits {
            max_bytes: 10,
            ..Limits::default()
        };
        let mut r = Bounded::new(io::repeat(b'a').take(11), &limits);
        let mut sink = Vec::new();
        assert!(r.read_to_end(&mut sink).is_err());
        assert_eq!(r.hit(), Some(&Reason::ReadTooMuch { limit: 10 }));
    }

    #[test]
    fn refuses_a_long_token() {
        let limits = Limits {
            max_token_bytes: 100,
            ..Limits::default()
        };
        let mut r = Bounded::new(io::repeat(b'a').take(1000), &limits);
        let mut line = Vec::new();
        assert!(r.read_until(b'\n', &mut line).is_err());
        assert!(matches!(r.hit(), Some(Reason::TokenTooLong { limit: 100 })));
    }
}
