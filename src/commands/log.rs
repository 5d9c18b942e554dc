//! `flexgate log`: verify and export the tamper-evident ledger.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Verify or export the ledger (a stopped gateway's data directory, or a copy of it).
///
/// Every record carries SHA-256(previous hash ‖ canonical JSON of the record); `verify` walks the
/// chain and names the first record that was altered, removed or reordered. A running gateway
/// holds its ledger locked: verify it through its API with --gateway.
///
/// Examples:
///   flexgate log verify --data ./flexgate-data
///   flexgate log verify --gateway 127.0.0.1:8080
///   flexgate log export --format csv --event ev-2026-0142 > ev.csv
///   flexgate log verify --data ./flexgate-data --checkpoints season.json --site-key 3b6a…
///   flexgate log site-key --data ./flexgate-data
///   flexgate log migrate --data ./old-data --to ./new-data/ledger
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct LogArgs {
    /// Data directory of the gateway.
    #[arg(
        long,
        global = true,
        env = "FLEXGATE_DATA",
        default_value = "./flexgate-data",
        value_name = "DIR"
    )]
    data: PathBuf,
    #[command(subcommand)]
    what: LogCommand,
}

#[derive(Debug, Subcommand)]
enum LogCommand {
    /// Check the hash chain; exit 1 naming the first bad record.
    Verify {
        /// Ask the running gateway at this API address to walk its own ledger
        /// (GET /v1/ledger/verify) instead of opening --data, which it holds locked.
        #[arg(long, value_name = "ADDR")]
        gateway: Option<std::net::SocketAddr>,
        /// Also check the chain against the hashes the site's replicas committed in etcd (the
        /// anchors and the head; the `[ha]` section of this configuration file): a ledger
        /// rewritten and re-hashed on one replica's disk verifies on its own, not against them.
        #[arg(long, value_name = "CONFIG.toml", conflicts_with = "gateway")]
        anchors: Option<PathBuf>,
        /// Also check the chain against checkpoints others kept: the acks a utility was sent
        /// (`dr.ack/1` documents with `log_seq` and `log_checkpoint`, one per line or an
        /// array), a settlement report (its `ledger_head`), or `{"seq", "hash"}` pairs. A ledger
        /// rewritten and re-hashed on disk verifies alone, not against them.
        #[arg(long, value_name = "FILE", conflicts_with = "gateway")]
        checkpoints: Option<PathBuf>,
        /// The site's public key (64 hex digits, as `flexgate log site-key` prints it): a
        /// settlement report among the checkpoints must be signed with it. Without it, a
        /// signed report is checked against the key it names.
        #[arg(long, value_name = "HEX", requires = "checkpoints")]
        site_key: Option<String>,
    },
    /// Print the site's public key (the one settlement reports' ledger heads are signed with),
    /// for a utility or an auditor to keep; made in --data when there is none.
    SiteKey,
    /// Write records as JSON lines or CSV to stdout (or --out).
    Export {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Jsonl)]
        format: Format,
        /// Only records of this event.
        #[arg(long, value_name = "ID")]
        event: Option<String>,
        /// Write to this file instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Rewrite a ledger of schema 1 (written before typed entries) as typed entries in a new
    /// ledger directory, which this version replays. The old chain must verify; it is left
    /// untouched (keep it as evidence). The new ledger's first record holds the old record
    /// count and head hash; every old record follows in order.
    Migrate {
        /// The new ledger directory (it must not exist or be empty), e.g. NEW_DATA/ledger.
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Jsonl,
    Csv,
}

/// Run the command.
pub fn run(args: &LogArgs) -> Result<()> {
    if let LogCommand::Migrate { to } = &args.what {
        let from = args.data.join("ledger");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the runtime")?;
        let report = runtime.block_on(crate::ledger::migrate::migrate(&from, to))?;
        crate::outln!(
            "migrated {} records from {} (head {}) into {} (head {}); keep the old directory as evidence",
            report.records,
            from.display(),
            report.old_head,
            to.display(),
            report.new_head
        );
        return Ok(());
    }
    if let LogCommand::SiteKey = &args.what {
        let key = crate::ledger::site_key::SiteKey::load_or_create(&args.data)?;
        crate::outln!("{}", key.public_key());
        return Ok(());
    }
    if let LogCommand::Verify {
        gateway: Some(addr), ..
    } = &args.what
    {
        return verify_live(*addr);
    }
    let dir = args.data.join("ledger");
    if !dir.exists() {
        bail!(
            "no ledger at {} (is --data the gateway's data directory?)",
            dir.display()
        );
    }
    match &args.what {
        LogCommand::Verify {
            anchors,
            checkpoints,
            site_key,
            ..
        } => match crate::ledger::verify_dir(&dir) {
            Ok(Ok(report)) => {
                crate::outln!(
                    "ok: {} records, chain intact, head {}",
                    report.records,
                    report.head_hash
                );
                if let Some(file) = checkpoints {
                    verify_checkpoints(&dir, file, site_key.as_deref())?;
                }
                match anchors {
                    Some(config) => verify_anchors(&dir, config),
                    None => Ok(()),
                }
            }
            Ok(Err(failure)) => bail!(
                "ledger verification FAILED at record {}: {}",
                failure.seq,
                failure.reason
            ),
            Err(crate::ledger::LedgerError::Locked { dir }) => bail!(
                "the ledger at {} is held by a running gateway, so it was not checked (this is not a \
                 verification failure): ask the gateway with `flexgate log verify --gateway ADDR` (its API \
                 address, e.g. 127.0.0.1:8080), or stop it and run this again",
                dir.display()
            ),
            Err(e) => bail!("the ledger was not checked: {e}"),
        },
        LogCommand::Migrate { .. } | LogCommand::SiteKey => Ok(()),
        LogCommand::Export { format, event, out } => {
            let format = match format {
                Format::Jsonl => crate::ledger::ExportFormat::Jsonl,
                Format::Csv => crate::ledger::ExportFormat::Csv,
            };
            let mut sink: Box<dyn std::io::Write> = match out {
                Some(path) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
                )),
                None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
            };
            let n = crate::ledger::export(&dir, format, event.as_deref(), &mut sink)?;
            sink.flush()?;
            eprintln!("exported {n} records");
            Ok(())
        }
    }
}

/// `log verify --checkpoints`: the local chain against checkpoints others kept.
fn verify_checkpoints(dir: &std::path::Path, file: &std::path::Path, site_key: Option<&str>) -> Result<()> {
    let text = super::read_input(file)?;
    let checkpoints =
        crate::ledger::checkpoints::parse(&text, site_key).with_context(|| format!("{}", file.display()))?;
    let signers: std::collections::BTreeSet<&str> = checkpoints.iter().filter_map(|c| c.signed_by.as_deref()).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let ledger = crate::ledger::Ledger::open(dir).await?;
        let len = ledger.len();
        let outcome =
            crate::ledger::checkpoints::check(&checkpoints, len, |seq| ledger.get(seq).ok().flatten().map(|r| r.hash));
        ledger.close().await?;
        match outcome {
            Ok(n) => {
                crate::outln!("ok: {n} checkpoints from {} agree", file.display());
                for key in signers {
                    crate::outln!("ok: a settlement report's head signed by site key {key} verifies");
                }
                Ok(())
            }
            Err(e) => bail!(
                "ledger verification FAILED against the checkpoints of {}: {e}",
                file.display()
            ),
        }
    })
}

/// `log verify --anchors`: the local chain against the hashes committed in etcd.
fn verify_anchors(dir: &std::path::Path, config: &std::path::Path) -> Result<()> {
    let config = crate::config::Config::load(Some(config))?;
    let Some(ha) = config.ha.clone() else {
        bail!("the configuration has no [ha] section: this site keeps no anchors in etcd");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let client = ha.client().map_err(anyhow::Error::msg)?;
        let keys = crate::ha::keys::Keys::new(&ha.prefix, &config.gateway.site);
        let (anchors, head) = crate::ha::anchors::committed(&client, &keys)
            .await
            .map_err(|e| anyhow::anyhow!("reading the anchors from etcd: {e}"))?;
        let ledger = crate::ledger::Ledger::open(dir).await?;
        let len = ledger.len();
        let outcome = crate::ha::anchors::compare(
            |seq| ledger.get(seq).ok().flatten().map(|r| r.hash),
            len,
            &anchors,
            head.as_ref(),
        );
        ledger.close().await?;
        match outcome {
            Ok(report) => {
                crate::outln!(
                    "ok: {} committed hashes agree (anchors and the head, committed to record {})",
                    report.compared,
                    report
                        .committed_seq
                        .map_or_else(|| "none".to_string(), |s| s.to_string())
                );
                Ok(())
            }
            Err(e) => bail!("ledger verification FAILED against the committed anchors: {e}"),
        }
    })
}

/// `log verify --gateway`: the running gateway walks its own chain.
fn verify_live(addr: std::net::SocketAddr) -> Result<()> {
    let answer = super::gateway_json(addr, "/v1/ledger/verify")?;
    if answer["intact"] == serde_json::Value::Bool(true) {
        crate::outln!(
            "ok: {} records, chain intact, head {} (verified by the gateway at {addr})",
            answer["records"],
            answer["head_hash"].as_str().unwrap_or("?")
        );
        Ok(())
    } else {
        bail!(
            "ledger verification FAILED at record {}: {} (verified by the gateway at {addr})",
            answer["failed_at_record"],
            answer["reason"].as_str().unwrap_or("no reason given")
        )
    }
}
