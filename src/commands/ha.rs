//! `flexgate ha status`: the site's replicas as etcd sees them.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

/// The replicas of a site (`[ha]`): who leads under which epoch, the ledger's committed head,
/// and every registered replica with the record it has taken in.
///
/// It reads etcd directly (the endpoints and the site in the configuration), so it answers
/// with every gateway down, and it changes nothing.
///
/// Examples:
///   flexgate ha status --config /etc/flexgate/flexgate.toml
///   flexgate ha status --config flexgate.toml --json
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct HaArgs {
    #[command(subcommand)]
    command: HaCommand,
}

#[derive(Debug, Subcommand)]
enum HaCommand {
    /// Who leads, the committed head, every replica and how far behind it is.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
struct StatusArgs {
    /// The gateway's configuration file (its `[ha]` section and `gateway.site`).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Run `flexgate ha`.
pub fn run(args: &HaArgs) -> Result<()> {
    match &args.command {
        HaCommand::Status(s) => status(s),
    }
}

fn status(args: &StatusArgs) -> Result<()> {
    let config = crate::config::Config::load(Some(&args.config))?;
    let Some(ha) = config.ha.clone() else {
        bail!(
            "{} has no [ha] section: this gateway runs alone (see `flexgate run --help` for replicas)",
            args.config.display()
        );
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let view = runtime.block_on(read(&ha, &config.gateway.site))?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(());
    }
    crate::outln!("site {} · etcd {}", config.gateway.site, ha.endpoints.join(", "));
    match (&view["leader"], &view["epoch"]) {
        (serde_json::Value::String(leader), epoch) => crate::outln!("leader: {leader} (epoch {epoch})"),
        _ => crate::outln!("leader: none (an election is under way, or no replica can reach etcd)"),
    }
    crate::outln!(
        "committed ledger head: {}",
        view["committed_seq"]
            .as_u64()
            .map_or_else(|| "none yet".to_string(), |s| format!("record {s}"))
    );
    let replicas = view["replicas"].as_array().cloned().unwrap_or_default();
    if replicas.is_empty() {
        crate::outln!("replicas: none registered");
    }
    for r in replicas {
        crate::outln!(
            "  {:<20} taken in to record {:<8} {:>6} behind  {}",
            r["name"].as_str().unwrap_or(""),
            r["applied_seq"],
            r["lag_records"],
            r["url"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// The replicas' state from etcd, as JSON.
async fn read(ha: &crate::ha::config::HaConfig, site: &str) -> Result<serde_json::Value> {
    let client = ha.client().map_err(anyhow::Error::msg)?;
    let keys = crate::ha::keys::Keys::new(&ha.prefix, site);
    let election = flexgate_etcd::Election::new(
        &client,
        keys.leader(),
        ha.replica.clone(),
        Duration::from_secs(ha.term_ttl_s),
    );
    let leader = election.leader().await.context("reading the election key")?;
    let (_, head) = client.get(&keys.head()).await?;
    let committed: Option<u64> = head
        .and_then(|kv| serde_json::from_slice::<crate::ha::keys::Head>(&kv.value).ok())
        .map(|h| h.seq);
    let prefix = keys.replicas();
    let registered = client
        .range(&prefix, &flexgate_etcd::wire::prefix_end(&prefix), 0)
        .await?;
    let replicas: Vec<serde_json::Value> = registered
        .kvs
        .iter()
        .filter_map(|kv| {
            let name = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
            let r: crate::ha::register::Registration = serde_json::from_slice(&kv.value).ok()?;
            Some(serde_json::json!({
                "name": name,
                "url": r.url,
                "since": r.since,
                "applied_seq": r.applied_seq,
                "lag_records": committed.unwrap_or(0).saturating_sub(r.applied_seq),
            }))
        })
        .collect();
    Ok(serde_json::json!({
        "site": site,
        "leader": leader.as_ref().map(|l| l.name.clone()),
        "epoch": leader.map(|l| l.epoch),
        "committed_seq": committed,
        "replicas": replicas,
    }))
}
