//! `flexgate demo`: the whole mission in one process, in under a minute.

use crate::clock::Clock;
use crate::cluster::ClusterBackend;
use crate::cluster::sim::{SimCluster, SimConfig};
use crate::config::{BackendConfig, Config};
use crate::http_client;
use crate::serve::Server;
use anyhow::{Context, Result, bail};
use chrono::{Duration as ChronoDuration, SecondsFormat};
use clap::Args;
use flexgate_policies::alloc::{AllocationPolicy, Budget, Proportional, Weighting};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::units::Watts;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Watch flexgate do the whole job: a gateway and a simulated GPU cluster in one process.
///
/// The demo starts the gateway on a loopback port with a simulated cluster (16 nodes × 8 GPUs
/// of training jobs calibrated to the 25 published H200 job groups; a fifth of them with
/// unknown elasticity), measures a baseline, then submits a real `dr.event/1` curtailment event
/// through the HTTP API: hold the meter at 80 % of its baseline for 30 minutes, with a 5-minute
/// ramp and a 5-minute recovery. Event time runs SPEED times faster than real time. It prints
/// the acknowledgment, the phases as they pass, a before/after table (per-job caps, fleet power
/// against the target, throughput kept against equal cuts), and the audit summary.
///
/// Example:
///   flexgate demo
///   flexgate demo --speed 60 --data ./demo-data     # keep the ledger, then: flexgate audit ...
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct DemoArgs {
    /// Event seconds per real second.
    #[arg(long, default_value_t = 120.0)]
    speed: f64,
    /// Simulated GPU nodes (8 GPUs each).
    #[arg(long, default_value_t = 16)]
    nodes: u32,
    /// Seed of the simulated cluster.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Ceiling as a fraction of the measured baseline.
    #[arg(long, default_value_t = 0.8)]
    ceiling_fraction: f64,
    /// Keep the ledger here (default: a temporary directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
}

/// Run the command.
pub fn run(args: &DemoArgs) -> Result<()> {
    if !(args.speed >= 1.0 && args.speed <= 10_000.0) {
        bail!("--speed must be between 1 and 10000");
    }
    if !(args.ceiling_fraction > 0.3 && args.ceiling_fraction < 1.0) {
        bail!("--ceiling-fraction must be in (0.3, 1)");
    }
    if args.nodes == 0 || args.nodes > 4096 {
        bail!("--nodes must be between 1 and 4096");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(demo(args))
}

async fn demo(args: &DemoArgs) -> Result<()> {
    let temp = tempdir_path()?;
    let data = args.data.clone().unwrap_or_else(|| temp.clone());
    let mut config = Config::default();
    config.gateway.data_dir = data.clone();
    config.gateway.site = "demo-site".to_string();
    config.gateway.telemetry_interval_s = 10;
    config.site.baseline_window_s = 600;
    config.control.settle_s = 120;
    let facility = crate::config::facility_for_nodes(args.nodes);
    config.facility = facility.clone();
    let sim_config = SimConfig {
        nodes: args.nodes,
        seed: args.seed,
        // A cap settles over 24 s of event time (200 ms at the default ×120). A fixed real
        // settle would, at ×2000, outlast a quarter of the hold, and on a busy machine every
        // closed-loop trim would restart it before any steady reading was taken.
        settle_ms: ((24_000.0 / args.speed).round() as u64).clamp(1, 200),
        // Event time runs ×speed; the jobs' throughput window shrinks with it.
        throughput_window_ms: ((30_000.0 / args.speed).round() as u64).max(1),
        facility,
        ..SimConfig::default()
    };
    config.backend = BackendConfig::Sim(sim_config.clone());
    let sim = SimCluster::new(sim_config).context("building the simulated cluster")?;
    let backend: Arc<dyn ClusterBackend> = sim.clone();
    let clock = Clock::accelerated(args.speed);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = Server::start(config.clone(), clock, Some(backend), listener).await?;
    let addr = server.addr;
    let token = match &server.token_file {
        Some(path) => std::fs::read_to_string(path)?.trim().to_string(),
        None => config.gateway.api_token.clone(),
    };
    let event_secs = |s: f64| clock.real_duration(s);

    crate::outln!(
        "flexgate demo: gateway on http://{addr}, simulated cluster of {} nodes × 8 GPUs, event time ×{}",
        args.nodes,
        args.speed
    );
    let jobs = get(addr, "/v1/jobs").await?;
    let unknown = jobs
        .as_array()
        .map_or(0, |j| j.iter().filter(|j| j["elasticity"] == "unknown").count());
    crate::outln!(
        "  {} training jobs ({} with unknown elasticity); measuring a 10-minute baseline …",
        jobs.as_array().map_or(0, Vec::len),
        unknown
    );
    tokio::time::sleep(event_secs(600.0)).await;
    let before = get(addr, "/v1/status").await?;
    let baseline_kw = before["measured_meter_w"]
        .as_f64()
        .map(|w| w / 1000.0)
        .context("no meter reading yet")?;
    let jobs_before = get(addr, "/v1/jobs").await?;
    print_forecast_and_declare(addr, &token).await?;

    let start = clock.now() + ChronoDuration::seconds(60);
    let ceiling_kw = (baseline_kw * args.ceiling_fraction * 10.0).round() / 10.0;
    let event = json!({
        "schema": "dr.event/1", "event_id": "demo-001", "revision": 1, "site": "demo-site",
        "issued_at": clock.now().to_rfc3339_opts(SecondsFormat::Secs, true), "program": "demo-program", "mandatory": true,
        "target": {"form": "ceiling", "point": "meter", "kw": ceiling_kw},
        "window": {"start": start.to_rfc3339_opts(SecondsFormat::Secs, true), "ramp_s": 300, "duration_s": 1800, "recovery_s": 300},
        "cancel": false
    });
    let body = serde_json::to_vec(&event)?;
    let ack = http_client::request(addr, "POST", "/v1/events", Some(&token), Some(&body)).await?;
    if ack.status != 200 {
        bail!("the gateway refused the demo event ({}): {}", ack.status, ack.text());
    }
    let ack = ack.json()?;
    crate::outln!(
        "\nPOST /v1/events  ceiling {ceiling_kw:.1} kW at the meter (baseline {baseline_kw:.1} kW), ramp 5 min, hold 30 min, recovery 5 min"
    );
    crate::outln!(
        "  ack: opt {} · accepted target {} kW · ledger checkpoint {}…",
        ack["opt"],
        ack["accepted_target_kw"],
        &ack["log_checkpoint"].as_str().unwrap_or("")[..16.min(ack["log_checkpoint"].as_str().unwrap_or("").len())]
    );

    // Follow the event; keep the plan in force in the middle of the hold.
    let mut last_phase = String::new();
    let mut held_plan: Option<Value> = None;
    let mut held_status: Option<Value> = None;
    let mut held_jobs: Option<Value> = None;
    let deadline = tokio::time::Instant::now() + event_secs(4000.0);
    loop {
        let status = get(addr, "/v1/status").await?;
        let events = get(addr, "/v1/events").await?;
        let phase = events
            .as_array()
            .and_then(|e| e.iter().find(|e| e["id"] == "demo-001"))
            .and_then(|e| e["state"].as_str())
            .unwrap_or("unknown")
            .to_string();
        if phase != last_phase {
            crate::outln!(
                "  {}  {:<10} ceiling {:>8} kW · meter {:>8} kW · GPU boards {:>8} kW",
                clock.now().format("%H:%M:%S"),
                phase,
                fmt_kw(status["meter_ceiling_w"].as_f64().map(|w| w / 1000.0)),
                fmt_kw(status["measured_meter_w"].as_f64().map(|w| w / 1000.0)),
                fmt_kw(status["measured_gpu_w"].as_f64().map(|w| w / 1000.0)),
            );
            last_phase = phase.clone();
        }
        if phase == "active" && clock.now() > start + ChronoDuration::seconds(300 + 900) && held_plan.is_none() {
            held_plan = Some(get(addr, "/v1/plan").await?);
            held_status = Some(status.clone());
            held_jobs = Some(get(addr, "/v1/jobs").await?);
        }
        if phase == "completed" || phase == "cancelled" || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(event_secs(30.0)).await;
    }
    tokio::time::sleep(event_secs(600.0)).await; // meter-after baseline

    if let (Some(plan), Some(status), Some(jobs_during)) = (&held_plan, &held_status, &held_jobs) {
        let specs: Vec<_> = sim.inventory().await?.into_iter().map(|j| j.spec).collect();
        print_before_after(&sim, &specs, &jobs_before, jobs_during, plan, status, baseline_kw)?;
    }
    server.shutdown().await;

    let records = super::audit::read_records(&data)?;
    let verified = crate::ledger::verify(&data.join("ledger"));
    let report = crate::reports::audit::build(&records, "demo-001", 600, chrono_tz::Tz::UTC)?
        .context("the demo event is not in the ledger")?;
    // The command to read the audit again only where the ledger outlives the demo.
    match &args.data {
        Some(kept) => crate::outln!(
            "\nAudit summary (the whole audit: flexgate audit --event demo-001 --data {}):",
            kept.display()
        ),
        None => crate::outln!(
            "\nAudit summary (the demo's ledger is removed on exit; to keep it and read the whole audit: \
             flexgate demo --data ./demo-data, then flexgate audit --event demo-001 --data ./demo-data):"
        ),
    }
    crate::outln!(
        "  baseline {} kW ({}); {} plans, {} dispatches, {} closed-loop trims, fallbacks: {}",
        fmt_kw(report.baseline.kw),
        match report.baseline.method.as_str() {
            "pjm_economic_cbl" => "PJM Economic CBL".to_string(),
            _ => format!(
                "meter before/after; no PJM CBL: {}",
                report.baseline.cbl_unavailable.as_deref().unwrap_or("not computed")
            ),
        },
        report.plans.len(),
        report.dispatches.len(),
        report.trims.len(),
        if report.fallbacks.is_empty() {
            "none".to_string()
        } else {
            format!("{} (unknown elasticity)", jobs_count(report.fallbacks.len()))
        }
    );
    if let Some(d) = &report.declared {
        crate::outln!(
            "  declared before the event: {:.1} kW ({} % confidence); could shed when it came: {} kW; delivered: {} kW",
            d.declared_kw,
            d.confidence,
            fmt_kw(d.could_shed_kw),
            fmt_kw(report.delivered_kw)
        );
    }
    for i in &report.intervals {
        crate::outln!(
            "  interval {}: ceiling {} kW, mean meter {} kW, {} of samples at or under the ceiling, delivered {} kW, shortfall {} kW",
            i.index,
            fmt_kw(i.ceiling_kw),
            fmt_kw(i.mean_meter_kw),
            i.compliance
                .map_or_else(|| "—".into(), |c| format!("{:.0} %", c * 100.0)),
            fmt_kw(i.delivered_reduction_kw),
            fmt_kw(i.shortfall_kw)
        );
    }
    match verified {
        Ok(v) => crate::outln!(
            "  ledger: {} records, hash chain verified (head {}…)",
            v.records,
            &v.head_hash[..16.min(v.head_hash.len())]
        ),
        Err(e) => crate::outln!("  ledger verification FAILED at record {}: {}", e.seq, e.reason),
    }
    if args.data.is_none() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    Ok(())
}

/// The forecast the gateway publishes, in a few lines, and a declaration made from it at 90 %
/// confidence (what a site would offer day-ahead), which the audit later sets against the event.
async fn print_forecast_and_declare(addr: std::net::SocketAddr, token: &str) -> Result<()> {
    let forecast = get(addr, "/v1/forecast").await?;
    let steps = forecast["steps"].as_array().cloned().unwrap_or_default();
    let kw = |s: &Value, p: &str| s["available_w"][p].as_f64().map(|w| w / 1000.0);
    crate::outln!(
        "\nGET /v1/forecast  what the site can shed at the meter within {:.0} % of GPU-weighted progress:",
        forecast["cost_ceiling"].as_f64().unwrap_or(f64::NAN) * 100.0
    );
    for (label, index) in [("now", 0usize), ("in 6 h", 24), ("in 24 h", 96), ("in 48 h", 191)] {
        if let Some(s) = steps.get(index) {
            crate::outln!(
                "  {label:<8} P10 {:>7} kW · P50 {:>7} kW · P90 {:>7} kW  ({:.0} GPUs expected busy, {:.0} of them by jobs not known yet)",
                fmt_kw(kw(s, "p10")),
                fmt_kw(kw(s, "p50")),
                fmt_kw(kw(s, "p90")),
                s["gpus_expected"].as_f64().unwrap_or(0.0),
                s["gpus_unknown"].as_f64().unwrap_or(0.0)
            );
        }
    }
    for basis in forecast["basis"].as_array().into_iter().flatten().take(4) {
        crate::outln!("  · {}", basis.as_str().unwrap_or_default());
    }
    let body = serde_json::to_vec(&json!({"operator": "demo", "confidence": 90}))?;
    let declared = http_client::request(addr, "POST", "/v1/declarations", Some(token), Some(&body)).await?;
    if declared.status != 201 {
        bail!(
            "the gateway refused the demo's declaration ({}): {}",
            declared.status,
            declared.text()
        );
    }
    let declared = declared.json()?;
    crate::outln!(
        "POST /v1/declarations  declared for the next 48 h at 90 % confidence (each hour's P10): this hour {} kW, recorded for the audit",
        fmt_kw(declared["hours"][0]["available_w"].as_f64().map(|w| w / 1000.0))
    );
    Ok(())
}

async fn get(addr: std::net::SocketAddr, path: &str) -> Result<Value> {
    let response = http_client::request(addr, "GET", path, None, None).await?;
    if response.status != 200 {
        bail!("GET {path}: {} {}", response.status, response.text());
    }
    Ok(response.json()?)
}

fn fmt_kw(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.1}"))
}

/// The before/after table: per-job caps, fleet power against the target, and the throughput the
/// plan keeps against an equal cut of the same GPU budget (both read off the true curves).
fn print_before_after(
    sim: &SimCluster,
    specs: &[flexgate_policies::alloc::JobSpec],
    jobs_before: &Value,
    jobs_during: &Value,
    plan: &Value,
    status: &Value,
    baseline_kw: f64,
) -> Result<()> {
    let before: HashMap<String, &Value> = jobs_before
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| Some((j["id"].as_str()?.to_string(), j)))
        .collect();
    crate::outln!(
        "\nIn the middle of the hold (plan generation {}, policy {}):",
        plan["generation"],
        plan["policy"].as_str().unwrap_or("")
    );
    crate::outln!("{}", job_table_header());
    let mut rows: Vec<&Value> = jobs_during.as_array().map(|a| a.iter().collect()).unwrap_or_default();
    rows.sort_by(|a, b| {
        a["cap_w_per_gpu"]
            .as_f64()
            .unwrap_or(0.0)
            .total_cmp(&b["cap_w_per_gpu"].as_f64().unwrap_or(0.0))
    });
    let shown = rows.len().min(12);
    for j in rows.iter().take(shown) {
        let id = j["id"].as_str().unwrap_or("");
        let before_power = before
            .get(id)
            .and_then(|b| b["measured_power_w"].as_f64())
            .unwrap_or(0.0);
        let kept = j["measured_tokens_per_s"].as_f64().unwrap_or(0.0)
            / j["uncapped_tokens_per_s"].as_f64().unwrap_or(1.0).max(1e-9);
        crate::outln!(
            "{}",
            job_table_row(&JobRow {
                id,
                gpus: j["gpus"].as_u64().unwrap_or(0),
                knowledge: j["elasticity"].as_str().unwrap_or(""),
                cap_w: j["cap_w_per_gpu"].as_f64().unwrap_or(0.0),
                power_before_kw: before_power / 1000.0,
                power_kw: j["measured_power_w"].as_f64().unwrap_or(0.0) / 1000.0,
                kept_share: kept,
            })
        );
    }
    if rows.len() > shown {
        crate::outln!("  … {} more jobs (GET /v1/jobs)", rows.len() - shown);
    }
    let meter = status["measured_meter_w"].as_f64().map_or(f64::NAN, |w| w / 1000.0);
    let ceiling = status["meter_ceiling_w"].as_f64().map_or(f64::NAN, |w| w / 1000.0);
    crate::outln!(
        "\n  meter: baseline {baseline_kw:.1} kW → {meter:.1} kW against a ceiling of {ceiling:.1} kW ({})",
        if meter <= ceiling + 0.05 { "met" } else { "NOT met" }
    );

    // Throughput kept by the plan versus an equal cut of the same GPU budget, on the true curves.
    let budget = Watts(plan["gpu_budget_w"].as_f64().unwrap_or(0.0));
    let equal = Proportional::new(Weighting::Equal, Arc::new(CurveFamily::h200_generic()))
        .plan(specs, Budget::Absolute(budget))?;
    let caps: HashMap<String, f64> = plan["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["job"].as_str()?.to_string(), e["cap_w_per_gpu"].as_f64()?)))
        .collect();
    let (mut ours, mut theirs, mut full) = (0.0, 0.0, 0.0);
    // GPU-weighted progress: each job's share of its own uncapped throughput, per GPU.
    let (mut our_progress, mut their_progress, mut gpus) = (0.0, 0.0, 0.0);
    for (entry, spec) in equal.entries.iter().zip(specs) {
        let Some(truth) = sim.truth_of(&entry.job) else {
            continue;
        };
        let top = truth.uncapped().tokens.value();
        full += top;
        let equal_tokens = truth.tokens_at_cap(entry.cap).value();
        theirs += equal_tokens;
        let cap = caps
            .get(entry.job.as_ref())
            .copied()
            .map_or(truth.uncapped().cap, flexgate_policies::units::WattsPerGpu);
        let our_tokens = truth.tokens_at_cap(cap).value();
        ours += our_tokens;
        let n = f64::from(spec.gpus);
        gpus += n;
        our_progress += n * our_tokens / top.max(1e-9);
        their_progress += n * equal_tokens / top.max(1e-9);
    }
    // The yardstick: the best plan of the same budget there is, by the oracle that knows every
    // true curve, for each objective (what was possible, beside what was done).
    let oracle_specs: Vec<flexgate_policies::alloc::JobSpec> = specs
        .iter()
        .filter_map(|spec| {
            let truth = sim.truth_of(&spec.id)?;
            Some(flexgate_policies::alloc::JobSpec {
                elasticity: flexgate_policies::alloc::Elasticity::exact(truth),
                ..spec.clone()
            })
        })
        .collect();
    let best = |objective: flexgate_policies::alloc::Objective| -> Option<(f64, f64)> {
        let oracle = flexgate_policies::alloc::CurveAware::oracle(Arc::new(CurveFamily::h200_generic()))
            .with_objective(objective);
        let plan = oracle.plan(&oracle_specs, Budget::Absolute(budget)).ok()?;
        let (mut progress, mut tokens) = (0.0, 0.0);
        for (entry, spec) in plan.entries.iter().zip(&oracle_specs) {
            let truth = sim.truth_of(&entry.job)?;
            let t = truth.tokens_at_cap(entry.cap).value();
            tokens += t;
            progress += f64::from(spec.gpus) * t / truth.uncapped().tokens.value().max(1e-9);
        }
        Some((progress, tokens))
    };
    let closes = |ours: f64, equal: f64, best: f64| {
        if best > equal + 1e-9 {
            format!(
                "{:.0} % of the room over the equal cut",
                (ours - equal) / (best - equal) * 100.0
            )
        } else {
            "no room over the equal cut".to_string()
        }
    };
    if full > 0.0 && gpus > 0.0 {
        let best_progress = best(flexgate_policies::alloc::Objective::Progress).map_or(f64::NAN, |b| b.0);
        let best_tokens = best(flexgate_policies::alloc::Objective::Tokens).map_or(f64::NAN, |b| b.1);
        crate::outln!(
            "  throughput kept, on the simulated jobs' true curves (flexgate planned for {}):\n    \
             GPU-weighted progress: flexgate {:.1} %, an equal cut of the same GPU budget {:.1} %, the best plan there is \
             {:.1} % (flexgate takes {})\n    \
             tokens/s summed:       flexgate {:.1} %, the equal cut {:.1} %, the best plan for tokens {:.1} % \
             ({:+.0} tokens/s fleet-wide against the equal cut)\n    \
             (the best plans know every job's true curve, which no gateway does: the yardstick, not a target)",
            plan["objective"].as_str().unwrap_or("tokens"),
            our_progress / gpus * 100.0,
            their_progress / gpus * 100.0,
            best_progress / gpus * 100.0,
            closes(our_progress, their_progress, best_progress),
            ours / full * 100.0,
            theirs / full * 100.0,
            best_tokens / full * 100.0,
            ours - theirs
        );
    }
    Ok(())
}

/// One job in the demo's table of the plan in force.
struct JobRow<'a> {
    id: &'a str,
    gpus: u64,
    knowledge: &'a str,
    cap_w: f64,
    power_before_kw: f64,
    power_kw: f64,
    kept_share: f64,
}

/// The table's header; [`job_table_row`] fills the same widths.
fn job_table_header() -> String {
    format!(
        "  {:<34} {:>6} {:>26} {:>10} {:>12} {:>14}",
        "job", "GPUs", "knowledge", "cap W/GPU", "power kW", "tokens/s kept"
    )
}

/// A row under [`job_table_header`]: every column ends where its header ends. (The GPU count
/// was once a JSON value, whose `Display` ignores widths, and a predicted PFI with its interval
/// overflowed a 22-wide column.)
fn job_table_row(row: &JobRow<'_>) -> String {
    format!(
        "  {:<34} {:>6} {:>26} {:>10.0} {:>5.1} → {:>4.1} {:>12.0} %",
        row.id,
        row.gpus,
        row.knowledge,
        row.cap_w,
        row.power_before_kw,
        row.power_kw,
        row.kept_share * 100.0
    )
}

/// "1 job", "3 jobs".
fn jobs_count(n: usize) -> String {
    if n == 1 {
        "1 job".to_string()
    } else {
        format!("{n} jobs")
    }
}

fn tempdir_path() -> Result<PathBuf> {
    let base = std::env::temp_dir().join(format!(
        "flexgate-demo-{}-{}",
        std::process::id(),
        crate::clock::wall_now().timestamp_millis()
    ));
    std::fs::create_dir_all(&base)?;
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The column each header or cell ends at (its last non-space character), in characters.
    fn column_ends(line: &str) -> Vec<usize> {
        let chars: Vec<char> = line.chars().collect();
        (0..chars.len())
            .filter(|&i| chars[i] != ' ' && chars.get(i + 1).is_none_or(|c| *c == ' '))
            .collect()
    }

    #[test]
    fn the_job_table_stays_aligned_for_any_gpu_count_and_power() {
        let header = job_table_header();
        let header_ends = column_ends(&header);
        // Headers: job, GPUs, knowledge, cap W/GPU, power kW, tokens/s kept; a right-aligned
        // cell ends where the last word of its header does.
        let wanted: Vec<usize> = [1, 2, 4, 6, 8].iter().map(|&i| header_ends[i]).collect();
        for (gpus, before, after) in [(8, 5.0, 3.0), (16, 11.2, 7.5), (128, 89.6, 60.1)] {
            let row = job_table_row(&JobRow {
                id: "job-005-qwen30b-a3b-ft",
                gpus,
                knowledge: "predicted PFI 1.40 ± 0.24",
                cap_w: 354.0,
                power_before_kw: before,
                power_kw: after,
                kept_share: 0.83,
            });
            let ends = column_ends(&row);
            // Cells: id, GPUs, knowledge (five words), cap, power (before → after), kept and "%".
            let got = [ends[1], ends[6], ends[7], ends[10], ends[12]];
            assert_eq!(got.to_vec(), wanted, "{gpus} GPUs:\n{header}\n{row}");
        }
        assert_eq!(jobs_count(1), "1 job");
        assert_eq!(jobs_count(3), "3 jobs");
    }
}
