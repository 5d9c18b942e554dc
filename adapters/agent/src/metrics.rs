//! GPU telemetry in the Prometheus text format, named and labelled like NVIDIA's dcgm-exporter,
//! and a parser for that format.
//!
//! Speaking dcgm-exporter's dialect means the same dashboards and the same gateway code read
//! either this agent or a real dcgm-exporter (`:9400/metrics`). The gateway uses [`parse`] and
//! [`gpu_samples`] for closed-loop control (measured power against the cap) and for PFI
//! prediction (memory activity).
//!
//! Metrics (one sample per GPU, labels `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`,
//! `Hostname`):
//!
//! | name | unit |
//! |---|---|
//! | `DCGM_FI_DEV_POWER_USAGE` | W |
//! | `DCGM_FI_PROF_DRAM_ACTIVE` | ratio 0–1 |
//! | `DCGM_FI_DEV_MEM_COPY_UTIL` | % |
//! | `DCGM_FI_DEV_POWER_MGMT_LIMIT` | W (requested limit) |
//! | `DCGM_FI_DEV_ENFORCED_POWER_LIMIT` | W |
//! | `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` | mJ (counter) |
//!
//! And the agent's own (not dcgm-exporter's), label `job` and `Hostname`:
//!
//! | name | unit |
//! |---|---|
//! | `flexgate_agent_job_tokens_per_second` | tokens/s, the job's reported throughput (top-decile mean in the window) |
//! | `flexgate_agent_throughput_reports_refused_total` | count, by `reason` |

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `DCGM_FI_DEV_POWER_USAGE`: power draw, W.
pub const POWER_USAGE: &str = "DCGM_FI_DEV_POWER_USAGE";
/// `DCGM_FI_PROF_DRAM_ACTIVE`: DRAM active ratio, 0–1.
pub const DRAM_ACTIVE: &str = "DCGM_FI_PROF_DRAM_ACTIVE";
/// `DCGM_FI_DEV_MEM_COPY_UTIL`: memory-copy utilisation, %.
pub const MEM_COPY_UTIL: &str = "DCGM_FI_DEV_MEM_COPY_UTIL";
/// `DCGM_FI_DEV_POWER_MGMT_LIMIT`: requested power limit, W.
pub const POWER_MGMT_LIMIT: &str = "DCGM_FI_DEV_POWER_MGMT_LIMIT";
/// `DCGM_FI_DEV_ENFORCED_POWER_LIMIT`: enforced power limit, W.
pub const ENFORCED_POWER_LIMIT: &str = "DCGM_FI_DEV_ENFORCED_POWER_LIMIT";
/// `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`: energy since driver load, mJ.
pub const TOTAL_ENERGY: &str = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";

/// One GPU's values to render; `None` values are left out (the driver could not read them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuRow {
    /// NVML index (`gpu` label).
    pub index: u32,
    /// Device minor (`device="nvidiaN"` label).
    pub minor: u32,
    /// UUID (`UUID` label).
    pub uuid: String,
    /// PCI bus id (`pci_bus_id` label).
    pub pci: String,
    /// Product name (`modelName` label).
    pub model: String,
    /// Power draw, W.
    pub power_w: Option<f64>,
    /// DRAM active ratio, 0–1.
    pub dram_active: Option<f64>,
    /// Memory-copy utilisation, %.
    pub mem_copy_util_pct: Option<f64>,
    /// Requested limit, W.
    pub limit_w: Option<f64>,
    /// Enforced limit, W.
    pub enforced_w: Option<f64>,
    /// Energy, mJ.
    pub energy_mj: Option<u64>,
    /// Caps re-applied on this GPU after its limit moved under a lease, since the agent started.
    pub drift_corrections: u64,
}

/// The agent's per-GPU counter of drift corrections (the alert `FlexgateAgentCapDrift`
/// watches its rate): a cap that keeps being undone is not a cap the site can count on.
pub const DRIFT_CORRECTIONS: &str = "flexgate_agent_drift_corrections_total";

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Render the rows of one host as Prometheus text (exposition format 0.0.4).
#[must_use]
pub fn render(hostname: &str, rows: &[GpuRow]) -> String {
    type Get = fn(&GpuRow) -> Option<f64>;
    #[allow(clippy::cast_precision_loss)]
    let families: [(&str, &str, &str, Get); 7] = [
        (POWER_USAGE, "gauge", "Power draw (in W).", |r| r.power_w),
        (
            DRAM_ACTIVE,
            "gauge",
            "Ratio of cycles the device memory interface is active sending or receiving data.",
            |r| r.dram_active,
        ),
        (MEM_COPY_UTIL, "gauge", "Memory utilization (in %).", |r| {
            r.mem_copy_util_pct
        }),
        (POWER_MGMT_LIMIT, "gauge", "Power management limit (in W).", |r| {
            r.limit_w
        }),
        (
            ENFORCED_POWER_LIMIT,
            "gauge",
            "Effective power limit that the driver enforces (in W).",
            |r| r.enforced_w,
        ),
        (
            TOTAL_ENERGY,
            "counter",
            "Total energy consumption since boot (in mJ).",
            |r| r.energy_mj.map(|e| e as f64),
        ),
        (
            DRIFT_CORRECTIONS,
            "counter",
            "Caps re-applied on a GPU whose power limit had moved under a lease (a driver reload or reset, another tool's set), since the agent started.",
            |r| Some(r.drift_corrections as f64),
        ),
    ];
    let host = escape(hostname);
    let mut out = String::new();
    for (name, kind, help, get) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for row in rows {
            if let Some(v) = get(row) {
                let _ = writeln!(
                    out,
                    "{name}{{gpu=\"{}\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"nvidia{}\",modelName=\"{}\",Hostname=\"{host}\"}} {v}",
                    row.index,
                    escape(&row.uuid),
                    escape(&row.pci),
                    row.minor,
                    escape(&row.model),
                );
            }
        }
    }
    out
}

/// Append the jobs' throughput and the refused reports' counts (every reason, zeros included,
/// so that a rate query works from the first scrape).
pub fn render_throughput(
    out: &mut String,
    hostname: &str,
    jobs: &[crate::throughput::JobThroughput],
    refused: &BTreeMap<&'static str, u64>,
) {
    let host = escape(hostname);
    let name = "flexgate_agent_job_tokens_per_second";
    let _ = writeln!(
        out,
        "# HELP {name} Training throughput the job reports, mean of the top 10 % of its training samples in the window (tokens/s)."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    for j in jobs {
        let _ = writeln!(
            out,
            "{name}{{job=\"{}\",Hostname=\"{host}\"}} {}",
            escape(&j.job_id),
            j.tokens_per_s
        );
    }
    let name = "flexgate_agent_throughput_reports_refused_total";
    let _ = writeln!(
        out,
        "# HELP {name} Throughput reports refused as implausible, by reason."
    );
    let _ = writeln!(out, "# TYPE {name} counter");
    for code in crate::throughput::Refusal::CODES {
        let n = refused.get(code).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}{{reason=\"{code}\",Hostname=\"{host}\"}} {n}");
    }
}

/// The lease book's figures for `GET /metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Leases held now.
    pub held: usize,
    /// Leases the dead-man switch removed since the agent started.
    pub expired_total: u64,
    /// GPUs no lease holds whose pre-event limit is not restored yet.
    pub restores_pending: usize,
    /// GPUs the agent serves without now (lost or unreadable at start, or a driver call hung).
    pub gpus_unavailable: usize,
    /// The highest gateway epoch seen.
    pub fence_epoch: u64,
    /// Commands refused for an older gateway epoch since the agent started.
    pub fenced_total: u64,
}

/// Append the agent's lease figures: what the gateway's alerts watch on the node side (a lease
/// that expired means the gateway stopped renewing it; a pending restore means a GPU is still
/// capped with nobody vouching for it).
pub fn render_leases(out: &mut String, hostname: &str, counts: LeaseCounts) {
    let host = escape(hostname);
    for (name, kind, help, value) in [
        ("flexgate_agent_leases", "gauge", "Leases held now.", counts.held as u64),
        (
            "flexgate_agent_leases_expired_total",
            "counter",
            "Leases the dead-man switch removed because the gateway did not renew them, since the agent started.",
            counts.expired_total,
        ),
        (
            "flexgate_agent_restores_pending",
            "gauge",
            "GPUs no lease holds whose pre-event power limit could not be restored yet (retried every watchdog tick).",
            counts.restores_pending as u64,
        ),
        (
            "flexgate_agent_gpus_unavailable",
            "gauge",
            "GPUs the driver lists that the agent serves without now: lost or unreadable at start, or a driver call hung past its deadline (GET /v1/health says which and why).",
            counts.gpus_unavailable as u64,
        ),
        (
            "flexgate_agent_fence_epoch",
            "gauge",
            "The highest gateway epoch (leadership term) this agent has seen; commands under a lower one are refused.",
            counts.fence_epoch,
        ),
        (
            "flexgate_agent_fenced_commands_total",
            "counter",
            "Commands refused because they came under an older gateway epoch (a deposed leader), since the agent started.",
            counts.fenced_total,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name}{{Hostname=\"{host}\"}} {value}");
    }
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value (may be NaN or ±Inf).
    pub value: f64,
    /// Optional timestamp, ms since the epoch.
    pub timestamp_ms: Option<i64>,
}

/// Why a metrics text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metrics line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// Parse Prometheus text exposition format (0.0.4): comments and blank lines are skipped,
/// every other line must be a sample.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        samples.push(parse_line(line).map_err(|reason| ParseError { line: i + 1, reason })?);
    }
    Ok(samples)
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_end];
    if !name.starts_with(is_name_start) {
        return Err(format!(
            "expected a metric name, found {:?}",
            line.chars().next().unwrap_or(' ')
        ));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let mut fields = rest.split_ascii_whitespace();
    let value_text = fields.next().ok_or("missing value")?;
    let value = parse_value(value_text).ok_or_else(|| format!("invalid value {value_text:?}"))?;
    let timestamp_ms = match fields.next() {
        Some(t) => Some(t.parse::<i64>().map_err(|_| format!("invalid timestamp {t:?}"))?),
        None => None,
    };
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected {extra:?} after the value"));
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
        timestamp_ms,
    })
}

/// Parse `name="value",…}` and return what follows the closing brace.
fn parse_labels<'a>(mut s: &'a str, labels: &mut BTreeMap<String, String>) -> Result<&'a str, String> {
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Ok(after);
        }
        let end = s.find(|c: char| !is_name_char(c)).unwrap_or(s.len());
        let key = &s[..end];
        if key.is_empty() || !key.starts_with(is_name_start) {
            return Err("expected a label name".to_owned());
        }
        s = s[end..]
            .trim_start()
            .strip_prefix('=')
            .ok_or("expected '=' after a label name")?;
        s = s
            .trim_start()
            .strip_prefix('"')
            .ok_or("expected '\"' to open a label value")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let close = loop {
            match chars.next() {
                None => return Err("unterminated label value".to_owned()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    Some((_, c)) => {
                        value.push('\\');
                        value.push(c);
                    }
                    None => return Err("unterminated label value".to_owned()),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.insert(key.to_owned(), value);
        s = s[close + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err("expected ',' or '}' after a label value".to_owned());
        }
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ if s.bytes().all(|b| b.is_ascii_digit() || b".eE+-".contains(&b)) => s.parse().ok(),
        _ => None,
    }
}

/// One GPU's readings, gathered from the samples that carry its `UUID` label.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuSample {
    /// `gpu` label (index).
    pub gpu: Option<u32>,
    /// `UUID` label.
    pub uuid: String,
    /// `modelName` label.
    pub model: Option<String>,
    /// `Hostname` label.
    pub hostname: Option<String>,
    /// `DCGM_FI_DEV_POWER_USAGE`, W.
    pub power_w: Option<f64>,
    /// `DCGM_FI_PROF_DRAM_ACTIVE`, 0–1.
    pub dram_active: Option<f64>,
    /// `DCGM_FI_DEV_MEM_COPY_UTIL`, %.
    pub mem_copy_util_pct: Option<f64>,
    /// `DCGM_FI_DEV_POWER_MGMT_LIMIT`, W.
    pub limit_w: Option<f64>,
    /// `DCGM_FI_DEV_ENFORCED_POWER_LIMIT`, W.
    pub enforced_w: Option<f64>,
    /// `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, mJ.
    pub energy_mj: Option<f64>,
}

/// Group the known DCGM metrics by GPU (`UUID` label; samples without one are skipped), ordered
/// by `gpu` index then UUID. Other metrics are ignored.
#[must_use]
pub fn gpu_samples(samples: &[Sample]) -> Vec<GpuSample> {
    let mut by_uuid: BTreeMap<String, GpuSample> = BTreeMap::new();
    for s in samples {
        let Some(uuid) = s.labels.get("UUID") else { continue };
        let slot: fn(&mut GpuSample) -> &mut Option<f64> = match s.name.as_str() {
            POWER_USAGE => |g| &mut g.power_w,
            DRAM_ACTIVE => |g| &mut g.dram_active,
            MEM_COPY_UTIL => |g| &mut g.mem_copy_util_pct,
            POWER_MGMT_LIMIT => |g| &mut g.limit_w,
            ENFORCED_POWER_LIMIT => |g| &mut g.enforced_w,
            TOTAL_ENERGY => |g| &mut g.energy_mj,
            _ => continue,
        };
        let g = by_uuid.entry(uuid.clone()).or_insert_with(|| GpuSample {
            uuid: uuid.clone(),
            ..GpuSample::default()
        });
        if g.gpu.is_none() {
            g.gpu = s.labels.get("gpu").and_then(|v| v.parse().ok());
        }
        if g.model.is_none() {
            g.model = s.labels.get("modelName").cloned();
        }
        if g.hostname.is_none() {
            g.hostname = s.labels.get("Hostname").cloned();
        }
        *slot(g) = Some(s.value);
    }
    let mut out: Vec<GpuSample> = by_uuid.into_values().collect();
    out.sort_by(|a, b| a.gpu.cmp(&b.gpu).then_with(|| a.uuid.cmp(&b.uuid)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped like real dcgm-exporter 3.x output (two GPUs, extra metrics and labels, a
    /// timestamp and a Kubernetes-style label with an escaped quote).
    const DCGM_SAMPLE: &str = r#"# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-01",DCGM_FI_DRIVER_VERSION="550.54.15"} 1980
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-01",DCGM_FI_DRIVER_VERSION="550.54.15"} 612.483000
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-8a1b2c3d-0000-1111-2222-333344445555",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-01",DCGM_FI_DRIVER_VERSION="550.54.15",pod="train-\"a\""} 301.25 1717000000000
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-01"} 4116089817
# HELP DCGM_FI_PROF_DRAM_ACTIVE Ratio of cycles the device memory interface is active sending or receiving data.
# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge
DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-01"} 0.412871
DCGM_FI_PROF_DRAM_ACTIVE{gpu="1",UUID="GPU-8a1b2c3d-0000-1111-2222-333344445555",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-01"} NaN
# TYPE DCGM_FI_DEV_ENFORCED_POWER_LIMIT gauge
DCGM_FI_DEV_ENFORCED_POWER_LIMIT{gpu="1",UUID="GPU-8a1b2c3d-0000-1111-2222-333344445555",Hostname="dgx-01"} 450
"#;

    #[test]
    fn parses_a_dcgm_exporter_sample() {
        let samples = parse(DCGM_SAMPLE).expect("parses");
        assert_eq!(samples.len(), 7);
        let ts = samples
            .iter()
            .find(|s| s.timestamp_ms.is_some())
            .expect("one timestamped sample");
        assert_eq!(ts.timestamp_ms, Some(1_717_000_000_000));
        assert_eq!(ts.labels.get("pod").map(String::as_str), Some("train-\"a\""));
        let gpus = gpu_samples(&samples);
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].gpu, Some(0));
        assert_eq!(gpus[0].model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(gpus[0].hostname.as_deref(), Some("dgx-01"));
        assert_eq!(gpus[0].power_w, Some(612.483));
        assert_eq!(gpus[0].energy_mj, Some(4_116_089_817.0));
        assert_eq!(gpus[0].dram_active, Some(0.412_871));
        assert_eq!(gpus[1].power_w, Some(301.25));
        assert!(gpus[1].dram_active.is_some_and(f64::is_nan));
        assert_eq!(gpus[1].enforced_w, Some(450.0));
        assert_eq!(gpus[1].limit_w, None);
    }

    #[test]
    fn renders_what_it_parses() {
        let rows: Vec<GpuRow> = (0..3)
            .map(|i| GpuRow {
                index: i,
                minor: i,
                uuid: format!("GPU-sim-n\"1-{i}"),
                pci: format!("00000000:{:02X}:00.0", 0x18 + i),
                model: "NVIDIA H200".into(),
                power_w: Some(600.5 + f64::from(i)),
                dram_active: Some(0.4),
                mem_copy_util_pct: Some(31.0),
                limit_w: Some(700.0),
                enforced_w: Some(450.0),
                energy_mj: Some(1_234_567_890_123),
                drift_corrections: u64::from(i),
            })
            .collect();
        let text = render("node\\1", &rows);
        let samples = parse(&text).expect("own output parses");
        assert_eq!(samples.len(), 21);
        let gpus = gpu_samples(&samples);
        assert_eq!(gpus.len(), 3);
        for (i, g) in gpus.iter().enumerate() {
            let r = &rows[i];
            assert_eq!(g.uuid, r.uuid);
            assert_eq!(g.gpu, Some(r.index));
            assert_eq!(g.hostname.as_deref(), Some("node\\1"));
            assert_eq!(g.power_w, r.power_w);
            assert_eq!(g.dram_active, r.dram_active);
            assert_eq!(g.mem_copy_util_pct, r.mem_copy_util_pct);
            assert_eq!(g.limit_w, r.limit_w);
            assert_eq!(g.enforced_w, r.enforced_w);
            assert_eq!(g.energy_mj, Some(1_234_567_890_123.0));
        }
        assert!(text.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter"));
    }

    #[test]
    fn missing_readings_are_left_out() {
        let row = GpuRow {
            uuid: "GPU-x".into(),
            power_w: Some(100.0),
            ..GpuRow::default()
        };
        let samples = parse(&render("h", &[row])).expect("parses");
        // The power reading, and the agent's own drift counter (always there, 0 here).
        let names: Vec<&str> = samples.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec![POWER_USAGE, DRIFT_CORRECTIONS]);
    }

    #[test]
    fn malformed_lines_are_errors_with_line_numbers() {
        for bad in [
            "x{a=\"1\" 3",
            "x{a=1} 3",
            "x{a=\"1} 3",
            "x 3 4 5",
            "x abc",
            "9x 1",
            "x{=\"1\"} 2",
            "x",
        ] {
            let err = parse(&format!("# ok\n{bad}\n")).expect_err(bad);
            assert_eq!(err.line, 2, "{bad}");
        }
        assert_eq!(parse("x +Inf\ny{a=\"b\",} -Inf\n").expect("valid").len(), 2);
    }
}
