//! The gateway (`flexgate run`) and the node agent (`flexgate-agent`) log the same way, so an
//! operator's journal, log shipper and alerting read both alike:
//!
//! - to stderr, one event per line;
//! - `--log-format text` (the default): human-readable, coloured **only** when stderr is a
//!   terminal and `NO_COLOR` is unset, so a redirected log or the journal never holds ANSI
//!   escape codes;
//! - `--log-format json`: one JSON object per line (`timestamp`, `level`, `target`, the event's
//!   fields flattened beside `message`), for Loki, Elasticsearch or `jq`;
//! - the level from `RUST_LOG` (default `info`), the format also from `FLEXGATE_LOG_FORMAT`.
//!
//! Secrets are kept out by the callers (tokens are never a logged field); this crate only
//! decides the shape.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The environment variable that sets the format when the flag is absent.
pub const FORMAT_ENV: &str = "FLEXGATE_LOG_FORMAT";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; colour only on a terminal.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// The `--log-format` flag, the same in both binaries: flatten it into the command's arguments.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct LogArgs {
    /// Log format on stderr: `text` (coloured only on a terminal) or `json` (one object per
    /// line). The level comes from RUST_LOG (default info).
    #[arg(long, value_enum, env = FORMAT_ENV, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Whether text logs on stderr should carry colour: only on a terminal, and never when the
/// user asked for none (`NO_COLOR`, <https://no-color.org>).
#[must_use]
pub fn stderr_wants_colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The level filter: `RUST_LOG`, else `info`.
fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Install the process's logger on stderr. Later calls are no-ops (tests start the gateway more
/// than once in a process), which is why this returns nothing.
pub fn init(format: LogFormat) {
    let _ = tracing::subscriber::set_global_default(subscriber(
        format,
        stderr_wants_colour(),
        env_filter(),
        std::io::stderr,
    ));
}

/// The subscriber for a format, colour choice and writer: separate from [`init`] so the shape
/// of the lines is tested without touching the process's global logger.
pub fn subscriber<W>(
    format: LogFormat,
    colour: bool,
    filter: EnvFilter,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer);
    match format {
        LogFormat::Text => Box::new(builder.with_ansi(colour).finish()),
        LogFormat::Json => Box::new(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false)
                .finish(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Captured {
        type Writer = Captured;
        fn make_writer(&'w self) -> Self::Writer {
            self.clone()
        }
    }

    fn log_with(format: LogFormat, colour: bool) -> String {
        let out = Captured::default();
        let sub = subscriber(format, colour, EnvFilter::new("info"), out.clone());
        tracing::subscriber::with_default(sub, || {
            tracing::info!(job = "7", watts = 412.5, "cap confirmed");
            tracing::debug!("below the level: not written");
        });
        let bytes = out.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }

    #[test]
    fn text_without_a_terminal_has_no_escape_codes() {
        let text = log_with(LogFormat::Text, false);
        assert!(text.contains("cap confirmed"), "{text}");
        assert!(text.contains("job=\"7\""), "{text}");
        assert!(!text.contains('\u{1b}'), "ANSI escape in redirected log: {text:?}");
        assert!(!text.contains("below the level"));
    }

    #[test]
    fn text_on_a_terminal_is_coloured() {
        assert!(log_with(LogFormat::Text, true).contains('\u{1b}'));
    }

    #[test]
    fn json_is_one_object_per_line_with_the_fields_flattened() {
        let json = log_with(LogFormat::Json, false);
        let lines: Vec<&str> = json.lines().collect();
        assert_eq!(lines.len(), 1, "{json}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON object");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["message"], "cap confirmed");
        assert_eq!(v["job"], "7");
        assert_eq!(v["watts"], 412.5);
        assert!(v["timestamp"].is_string());
        assert!(!json.contains('\u{1b}'));
    }

    #[test]
    fn the_format_parses_from_its_names_only() {
        use clap::ValueEnum as _;
        assert_eq!(LogFormat::from_str("json", true), Ok(LogFormat::Json));
        assert_eq!(LogFormat::from_str("text", true), Ok(LogFormat::Text));
        assert!(LogFormat::from_str("yaml", true).is_err());
    }
}
