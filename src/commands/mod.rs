//! One module per CLI command.

pub mod audit;
pub mod demo;
pub mod facility;
pub mod log;
pub mod openadr;
pub mod pfi;
pub mod predictor;
pub mod run;
pub mod simulate;

use anyhow::{Context, Result, bail};
use std::path::Path;

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
pub fn write_output(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).with_context(|| format!("cannot write {}", path.display()))
}
