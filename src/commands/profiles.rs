//! `flexgate profiles`: what the gateway measured of each training configuration, listed,
//! exported as a sweep `flexgate pfi` reads, and imported into another site's ledger.

use super::{read_input, write_output};
use crate::ledger::{Ledger, LedgerError, NewRecord, Recorded};
use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use flexgate_policies::control::entry::{Entry, ThroughputPoint};
use flexgate_policies::control::evidence::JobEvidence;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The schema name of an exported profile document.
pub const PROFILE_SCHEMA: &str = "flexgate.profiles/1";

/// List, export and import job profiles: the points (cap, power, tokens/s) the gateway measured
/// of each training configuration.
///
/// A profile is keyed by the job's signature (Slurm job name, GPU count and the `profile=` flex
/// tag; in the simulator, the workload and GPU count), so a re-run of a known configuration is
/// planned on what was measured before. Each point is the running mean of up to 16 steady
/// readings at one cap (10 W buckets), taken only once the cap had held for a whole throughput
/// window. Profiles live in the ledger (`throughput_point` records); these commands read it
/// offline, and `import` writes to it, so the gateway must be stopped for `import`.
///
/// Examples:
///   flexgate profiles list --data /var/lib/flexgate
///   flexgate profiles export --data /var/lib/flexgate --profile llama70b-ft/8gpu -o llama.json
///   flexgate pfi llama.json                     # the PFI of what was measured
///   flexgate profiles import llama.json --data /var/lib/flexgate-site-b
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct ProfilesArgs {
    #[command(subcommand)]
    command: ProfilesCommand,
}

#[derive(Debug, Subcommand)]
enum ProfilesCommand {
    /// One line per profile: points, caps measured, uncapped throughput, last measured.
    List {
        /// Data directory of the gateway.
        #[arg(long, env = "FLEXGATE_DATA", default_value = "./flexgate-data", value_name = "DIR")]
        data: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write profiles as JSON (all, or those named), a document `flexgate pfi` and `import` read.
    Export {
        /// Data directory of the gateway.
        #[arg(long, env = "FLEXGATE_DATA", default_value = "./flexgate-data", value_name = "DIR")]
        data: PathBuf,
        /// A profile to export (repeatable; default: all).
        #[arg(long, value_name = "KEY")]
        profile: Vec<String>,
        /// Where to write (default: stdout).
        #[arg(long, short, value_name = "FILE.json")]
        output: Option<PathBuf>,
    },
    /// Add the profiles of an exported document to this gateway's ledger (gateway stopped).
    Import {
        /// The exported document.
        #[arg(value_name = "FILE.json")]
        file: PathBuf,
        /// Data directory of the gateway.
        #[arg(long, env = "FLEXGATE_DATA", default_value = "./flexgate-data", value_name = "DIR")]
        data: PathBuf,
    },
}

/// An exported profile document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileDocument {
    /// [`PROFILE_SCHEMA`].
    pub schema: String,
    /// The profiles.
    pub profiles: Vec<Profile>,
}

/// One exported profile: a sweep with where each point came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Its key (the job signature, or a job id).
    pub profile: String,
    /// GPUs of the job (its cap applies to each); absent in points recorded before GPU counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Points by increasing cap, the uncapped one last.
    pub points: Vec<ProfilePoint>,
}

/// One measured point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilePoint {
    /// Cap per GPU, W.
    pub cap_w: f64,
    /// The job's GPU-board power, W (measured).
    pub power_w: f64,
    /// The job's throughput, tokens/s (reported by the job).
    pub tokens_per_s: f64,
    /// The cap was the range maximum.
    pub uncapped: bool,
    /// Readings averaged into it.
    pub readings: u32,
    /// When it was last measured.
    pub measured_at: DateTime<Utc>,
}

/// Run the command.
pub fn run(args: &ProfilesArgs) -> Result<()> {
    match &args.command {
        ProfilesCommand::List { data, json } => {
            let profiles = read_profiles(data)?;
            if *json {
                crate::outln!("{}", serde_json::to_string_pretty(&profiles)?);
            } else {
                crate::out!("{}", render_list(&profiles));
            }
            Ok(())
        }
        ProfilesCommand::Export { data, profile, output } => {
            let mut profiles = read_profiles(data)?;
            if !profile.is_empty() {
                for wanted in profile {
                    if !profiles.iter().any(|p| &p.profile == wanted) {
                        bail!(
                            "no profile {wanted:?} in {} (see `flexgate profiles list`)",
                            data.display()
                        );
                    }
                }
                profiles.retain(|p| profile.contains(&p.profile));
            }
            let document = ProfileDocument {
                schema: PROFILE_SCHEMA.to_string(),
                profiles,
            };
            let text = serde_json::to_string_pretty(&document)? + "\n";
            match output {
                Some(path) => {
                    write_output(path, &text)?;
                    eprintln!("wrote {} profiles to {}", document.profiles.len(), path.display());
                }
                None => crate::out!("{text}"),
            }
            Ok(())
        }
        ProfilesCommand::Import { file, data } => {
            let document = parse_document(&read_input(file)?).with_context(|| format!("{}", file.display()))?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the runtime")?;
            let written = runtime.block_on(import(&document, data))?;
            crate::outln!(
                "imported {} points of {} profiles into {}",
                written,
                document.profiles.len(),
                data.display()
            );
            Ok(())
        }
    }
}

/// Every profile in the ledger of `data`, folded as the gateway folds them.
fn read_profiles(data: &std::path::Path) -> Result<Vec<Profile>> {
    let records = super::audit::read_records(data)?;
    let mut evidence: BTreeMap<String, (JobEvidence, Option<u32>)> = BTreeMap::new();
    for record in &records {
        if let Entry::ThroughputPoint(p) = record.entry()? {
            let slot = evidence.entry(p.profile_key().to_string()).or_default();
            slot.0.add(&p);
            slot.1 = p.gpus.or(slot.1);
        }
    }
    Ok(evidence
        .into_iter()
        .map(|(profile, (e, gpus))| {
            let readings = |key: i64| e.readings.get(&key).copied().unwrap_or(1);
            let mut points: Vec<ProfilePoint> = e
                .capped
                .iter()
                .map(|(key, p)| ProfilePoint {
                    cap_w: p.cap_w,
                    power_w: p.power_w,
                    tokens_per_s: p.tokens,
                    uncapped: false,
                    readings: readings(*key),
                    measured_at: p.at,
                })
                .collect();
            points.sort_by(|a, b| a.cap_w.total_cmp(&b.cap_w));
            points.extend(e.uncapped.iter().map(|p| ProfilePoint {
                cap_w: p.cap_w,
                power_w: p.power_w,
                tokens_per_s: p.tokens,
                uncapped: true,
                readings: readings(i64::MAX),
                measured_at: p.at,
            }));
            Profile { profile, gpus, points }
        })
        .collect())
}

fn render_list(profiles: &[Profile]) -> String {
    let mut out = String::new();
    if profiles.is_empty() {
        out.push_str("no profiles yet: jobs must report their throughput (deploy/flexgate_throughput.py) and run under a settled cap\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<40} {:>5} {:>6} {:>13} {:>22} {:>20}",
        "profile", "GPUs", "points", "caps (W/GPU)", "uncapped tokens/s", "last measured"
    );
    for p in profiles {
        let capped: Vec<f64> = p.points.iter().filter(|x| !x.uncapped).map(|x| x.cap_w).collect();
        let caps = match (capped.first(), capped.last()) {
            (Some(lo), Some(hi)) if capped.len() > 1 => format!("{lo:.0}–{hi:.0}"),
            (Some(one), _) => format!("{one:.0}"),
            _ => "uncapped only".to_string(),
        };
        let uncapped = p
            .points
            .iter()
            .find(|x| x.uncapped)
            .map_or_else(|| "—".to_string(), |x| format!("{:.0}", x.tokens_per_s));
        let last = p.points.iter().map(|x| x.measured_at).max();
        let _ = writeln!(
            out,
            "{:<40} {:>5} {:>6} {:>13} {:>22} {:>20}",
            p.profile.chars().filter(|c| !c.is_control()).collect::<String>(),
            p.gpus.map_or_else(|| "—".to_string(), |g| g.to_string()),
            p.points.len(),
            caps,
            uncapped,
            last.map_or_else(String::new, |t| t.format("%Y-%m-%d %H:%M").to_string()),
        );
    }
    out
}

/// Parse and check an exported document: every number a plausible measurement.
pub fn parse_document(text: &str) -> Result<ProfileDocument> {
    let document: ProfileDocument = serde_json::from_str(text).context("not a flexgate profile document")?;
    if document.schema != PROFILE_SCHEMA {
        bail!("schema {:?} is not {PROFILE_SCHEMA:?}", document.schema);
    }
    for p in &document.profiles {
        if p.profile.is_empty() || p.profile.len() > 256 || p.profile.chars().any(char::is_control) {
            bail!("profile key {:?} must be 1 to 256 printable characters", p.profile);
        }
        if p.gpus.is_some_and(|g| g == 0 || g > 100_000) {
            bail!("profile {}: gpus must be 1 to 100000", p.profile);
        }
        for (i, x) in p.points.iter().enumerate() {
            let plausible = |v: f64, max: f64| v.is_finite() && v >= 0.0 && v <= max;
            let sane = plausible(x.cap_w, 100_000.0)
                && x.cap_w > 0.0
                && plausible(x.power_w, 1e9)
                && plausible(x.tokens_per_s, 1e9)
                && x.readings > 0;
            if !sane {
                bail!(
                    "profile {} point {i}: cap_w, power_w and tokens_per_s must be finite, non-negative and plausible (cap > 0), and readings at least 1",
                    p.profile
                );
            }
        }
    }
    Ok(document)
}

/// Append every point of `document` to the ledger of `data` as `throughput_point` records of its
/// profile (job `import`), each as many times as it had readings (at most 16), so that it weighs
/// in this ledger as it did in its own. Refuses a ledger a running gateway holds.
async fn import(document: &ProfileDocument, data: &std::path::Path) -> Result<usize> {
    if !data.is_dir() {
        bail!(
            "no data directory at {} (create it, or give the gateway's --data)",
            data.display()
        );
    }
    // A site that has not run yet gets its ledger here, starting with the imported profiles.
    let dir = data.join("ledger");
    let ledger = match Ledger::open(&dir).await {
        Ok(l) => l,
        Err(LedgerError::Locked { .. }) => bail!(
            "the ledger at {} is open in a running gateway: stop it, import, start it again",
            dir.display()
        ),
        Err(e) => return Err(e).context("opening the ledger"),
    };
    let mut records = Vec::new();
    for p in &document.profiles {
        for x in &p.points {
            for _ in 0..x.readings.min(flexgate_policies::control::evidence::MAX_AVERAGED) {
                records.push(NewRecord::from(Recorded::new(
                    Entry::ThroughputPoint(ThroughputPoint {
                        at: x.measured_at,
                        job: "import".to_string(),
                        cap_w_per_gpu: x.cap_w,
                        power_w: x.power_w,
                        tokens_per_s: x.tokens_per_s,
                        uncapped: x.uncapped,
                        max_slowdown: None,
                        profile: Some(p.profile.clone()),
                        gpus: p.gpus,
                    }),
                    None,
                )));
            }
        }
    }
    let written = records.len();
    ledger.append_all(records).await.context("writing the profiles")?;
    ledger.close().await.context("closing the ledger")?;
    Ok(written)
}
