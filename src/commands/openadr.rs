//! `flexgate openadr`: look inside OpenADR messages.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Inspect OpenADR messages without running a gateway.
///
/// `decode` reads one OpenADR 2.0b XML message (any prefix style: oadr:, default namespaces,
/// EPRI's d3p1:, JAXB's ns1…) or one OpenADR 3.x JSON document (an event, a list of events, a
/// notification, a program) and prints it as normalized JSON: the same fields whatever the
/// sender's spelling, times in UTC, durations in seconds, with warnings for oddities that a VEN
/// tolerates (durations that don't add up, uids out of order, values out of range).
///
/// Examples:
///   flexgate openadr decode distribute.xml
///   flexgate openadr decode events.json --compact
///   curl -s $VTN/events | flexgate openadr decode -
///
/// Exit status: 0 decoded, 1 invalid input (the message says what and where).
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct OpenAdrArgs {
    #[command(subcommand)]
    what: OpenAdrCommand,
}

#[derive(Debug, Subcommand)]
enum OpenAdrCommand {
    /// Decode a 2.0b XML or 3.x JSON message (FILE, or - for stdin) and print normalized JSON.
    Decode {
        /// The message file, or `-` for standard input.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// One line of JSON instead of pretty-printed.
        #[arg(long)]
        compact: bool,
    },
}

/// Largest message accepted (the decoders' own limit is the same).
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Run the command.
pub fn run(args: &OpenAdrArgs) -> Result<()> {
    match &args.what {
        OpenAdrCommand::Decode { file, compact } => {
            let bytes = read_message(file)?;
            let json =
                decode_to_json(&bytes).with_context(|| format!("{} is not a valid OpenADR message", file.display()))?;
            let text = if *compact {
                serde_json::to_string(&json)?
            } else {
                serde_json::to_string_pretty(&json)?
            };
            crate::outln!("{text}");
            let unusable = unusable_events(&json);
            if !unusable.is_empty() {
                bail!(
                    "{} decodes, but the VEN would refuse (454) {}",
                    file.display(),
                    unusable.join("; ")
                );
            }
            Ok(())
        }
    }
}

/// `event ID: reason` for every decoded event whose `invalid` list is not empty (an unreadable
/// duration, for example), wherever events sit in the normalized message.
fn unusable_events(json: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![json];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Array(reasons)) = map.get("invalid")
                    && !reasons.is_empty()
                {
                    let id = map.get("id").and_then(serde_json::Value::as_str).unwrap_or("?");
                    let reasons: Vec<&str> = reasons.iter().filter_map(serde_json::Value::as_str).collect();
                    out.push(format!("event {id:?}: {}", reasons.join("; ")));
                }
                stack.extend(map.values());
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    out
}

fn read_message(file: &PathBuf) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let limit = MAX_MESSAGE_BYTES as u64 + 1;
    if file.as_os_str() == "-" {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut bytes)
            .context("cannot read standard input")?;
    } else {
        std::fs::File::open(file)
            .with_context(|| format!("cannot read {}", file.display()))?
            .take(limit)
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", file.display()))?;
    }
    if bytes.len() > MAX_MESSAGE_BYTES {
        bail!("{} is larger than {MAX_MESSAGE_BYTES} bytes", file.display());
    }
    Ok(bytes)
}

/// Decodes by sniffing the first non-blank byte: `<` is 2.0b XML, `{` or `[` is 3.x JSON.
pub fn decode_to_json(bytes: &[u8]) -> Result<serde_json::Value> {
    let first = bytes
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace() && *b != 0xEF && *b != 0xBB && *b != 0xBF);
    match first {
        Some(b'<') => {
            let msg = flexgate_openadr::oadr2b::decode(bytes).context("OpenADR 2.0b")?;
            Ok(flexgate_openadr::oadr2b::normalized_json(&msg))
        }
        Some(b'{' | b'[') => {
            let doc = flexgate_openadr::oadr3::decode_any(bytes).context("OpenADR 3.x")?;
            Ok(flexgate_openadr::oadr3::normalized_json(&doc))
        }
        Some(_) => bail!("neither XML (OpenADR 2.0b) nor JSON (OpenADR 3.x): the first character is not <, {{ or ["),
        None => bail!("the input is empty"),
    }
}
