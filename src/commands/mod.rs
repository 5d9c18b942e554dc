//! One module per CLI command.
//!
//! Commands write their output with [`outln!`](crate::outln) and [`out!`](crate::out), never `println!`: `println!`
//! panics when stdout is a closed pipe (`flexgate simulate --json | head`), and a reader that
//! stopped reading is input like any other. The macros return the write error instead, and
//! `main` ends quietly when the error is a closed pipe ([`is_closed_pipe`]).

/// `println!` that returns a write error (with `?`) instead of panicking on a closed pipe.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

/// `print!` that returns a write error (with `?`) instead of panicking on a closed pipe.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)?
    }};
}

pub mod audit;
pub mod baseline;
pub mod demo;
pub mod facility;
pub mod forecast;
pub mod ha;
pub mod log;
pub mod meter;
pub mod openadr;
pub mod openapi;
pub mod pfi;
pub mod predictor;
pub mod profiles;
pub mod run;
pub mod season;
pub mod settlement;
pub mod simulate;
mod simulate_forecast;
mod simulate_frontier;

use anyhow::{Context, Result, bail};
use std::path::Path;

/// Whether `error` is, somewhere in its chain, a write to a pipe whose reader has gone (`| head`):
/// not a failure of the command, so `main` exits quietly and successfully.
#[must_use]
pub fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Largest input file the CLI reads (fleet files, telemetry samples, parameters): big enough
/// for a million-job fleet, small enough that a wrong path to a disk image fails fast.
pub const MAX_INPUT_BYTES: u64 = 512 * 1024 * 1024;

/// Read a UTF-8 input file with a size limit and an error that names the path.
pub fn read_input(path: &Path) -> Result<String> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if meta.len() > MAX_INPUT_BYTES {
        bail!(
            "{} is {} bytes; the limit is {MAX_INPUT_BYTES}",
            path.display(),
            meta.len()
        );
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {} as UTF-8 text", path.display()))
}

/// Write an output file, naming the path on failure.
/// `GET path` on the running gateway at `addr`, from a command (its own runtime): the JSON it
/// answers, or an error saying what went wrong in the reader's terms (not reachable, a refusal
/// with the gateway's words, not JSON).
pub(crate) fn gateway_json(addr: std::net::SocketAddr, path: &str) -> Result<serde_json::Value> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let response = runtime
        .block_on(crate::http_client::request(addr, "GET", path, None, None))
        .with_context(|| format!("cannot reach the gateway at {addr}"))?;
    if response.status != 200 {
        anyhow::bail!(
            "the gateway at {addr} answered {}: {}",
            response.status,
            response.text().trim()
        );
    }
    response
        .json()
        .with_context(|| format!("the gateway at {addr} did not answer JSON"))
}

pub fn write_output(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).with_context(|| format!("cannot write {}", path.display()))
}
