//! `flexgate-agent`: the per-node GPU power-cap agent.

use anyhow::{Context, Result, bail};
use chrono::TimeDelta;
use clap::Parser;
use flexgate_agent::auth::{Auth, Token};
use flexgate_agent::config::{self, ConfigFile};
use flexgate_agent::gpu::GpuControl;
use flexgate_agent::gpu::nvml::NvmlGpus;
use flexgate_agent::gpu::sim::SimGpus;
use flexgate_agent::tls::{self, TlsFiles};
use flexgate_agent::{Agent, AgentConfig, api, clock};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// How long one NVML call may take before its GPU is reported unresponsive: NVML answers in
/// milliseconds, and a lease or health answer must not wait on a hung driver for long.
const NVML_DEADLINE_MS: u64 = 1_000;

const ABOUT: &str = "Per-node GPU power-cap agent for the flexgate demand-response gateway.";

const LONG_ABOUT: &str = "\
Per-node GPU power-cap agent for the flexgate demand-response gateway.

The gateway caps this node's GPUs through the agent's HTTP API (JSON, bearer token). Every cap
belongs to a LEASE: an id, a generation and a deadline (expires_at). While a grid event lasts,
the gateway renews its leases; the agent keeps the caps exactly that long.

DEAD-MAN SWITCH: if the gateway dies or loses the network, nobody renews the lease. A watchdog
checks every second and, once a lease expires, writes back each GPU's PRE-EVENT limit (the limit
it had before any lease touched it, not the driver default). A GPU held by several leases gets
the lowest cap and is restored only when no lease holds it.

RESTARTS: leases and pre-event limits are saved in --state-dir on every change (atomically). On
start the agent re-applies leases still valid and restores GPUs whose leases expired while it was
down; a failed restore is retried per GPU with back-off (1 s doubling to 60 s). After a NODE
REBOOT (another boot id, boot_id_file) the saved pre-event limits are stale: the driver came up
with its own, so they are dropped (or re-read for GPUs a valid lease holds), never written
back. SIGTERM/Ctrl-C stop the agent WITHOUT restoring caps: a restart must keep them, and only
expiry or DELETE ends a cap. A corrupt state file stops the agent instead of forgetting limits;
a lease in it that the API would refuse (e.g. a deadline more than the maximum lease lifetime
ahead) is logged, dropped and its GPUs restored, as if it had expired.

GENERATIONS: a PUT with the generation held and the same caps is a repeat (the first answer); the
same generation with other caps is refused (409 generation_conflict), a lower one too (409
stale_generation); a higher one replaces the lease.

SECURITY: a control token is always required (--token-file, --token, FLEXGATE_AGENT_TOKEN or the
config file); an optional read-only token may only GET. Without TLS the API is plain HTTP and
tokens travel in clear text: keep it on loopback (the agent warns otherwise). With --tls-cert
and --tls-key (or [tls] in the config file) it serves HTTPS only (rustls, TLS 1.2/1.3); add
--tls-client-ca for mutual TLS: clients must present a certificate from that CA, and still send
the token. Certificate problems stop the agent at start with the file and likely cause. Changing
power limits needs root or CAP_SYS_ADMIN; the agent self-tests that at start (writing each
current limit back) and reports not ready in GET /v1/health if it cannot.

ENDPOINTS: GET /v1/gpus, PUT|DELETE /v1/leases/{id}, POST /v1/leases/{id}/renew, GET /v1/health,
POST /v1/jobs/{job_id}/start|end (Slurm prolog/epilog), GET /metrics (dcgm-exporter names).

JOB THROUGHPUT: a training job reports its tokens/s to POST /v1/jobs/{job_id}/throughput
(deploy/flexgate_throughput.py does it in one line for PyTorch and Hugging Face), with its own
JOB TOKEN: `flexgate-agent job-token JOB_ID` prints it (an HMAC of the job id under a key derived
from the control token), for a Slurm TaskProlog to export as FLEXGATE_JOB_TOKEN. A job token is
good for that job's reports and nothing else. Impossible readings (negative, absurd, more than
100x the job's own figure) are refused with 422 and the reason, and counted. The gateway reads
GET /v1/jobs/throughput: per job, the mean of the top 10 % of its training samples in the
window (throughput_window_s, 30 s).";

const EXAMPLES: &str = "\
EXAMPLES:
  # Eight simulated H200s, for a laptop or CI:
  flexgate-agent --simulate --gpus 8 --token-file ./agent.token --state-dir ./agent-state

  # On a GPU node, as root, from a config file:
  flexgate-agent --config /etc/flexgate/agent.toml

  # HTTPS on the management network, only for clients with a certificate from gateway-ca.pem:
  flexgate-agent --config /etc/flexgate/agent.toml --listen 10.0.0.5:9450 \\
    --tls-cert /etc/flexgate/agent.crt --tls-key /etc/flexgate/agent.key \\
    --tls-client-ca /etc/flexgate/gateway-ca.pem
  curl --cacert agent-ca.pem --cert gw.crt --key gw.key -H \"Authorization: Bearer $TOKEN\" \\
    https://node01:9450/v1/health

  # Cap GPU-x at 350 W for 10 minutes (lease evt-42, generation 1), then look:
  LEASE='{\"generation\":1,\"expires_at\":\"2026-07-01T12:10:00Z\",
          \"gpus\":[{\"uuid\":\"GPU-x\",\"cap_w\":350}],\"restore\":\"pre_event\"}'
  curl -X PUT -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \\
    -d \"$LEASE\" http://127.0.0.1:9450/v1/leases/evt-42
  curl -H \"Authorization: Bearer $TOKEN\" http://127.0.0.1:9450/v1/gpus

  # Keep it alive, or end it now (restores pre-event limits):
  curl -X POST -H \"Authorization: Bearer $TOKEN\" -d '{\"expires_at\":\"2026-07-01T12:20:00Z\"}' \\
    http://127.0.0.1:9450/v1/leases/evt-42/renew
  curl -X DELETE -H \"Authorization: Bearer $TOKEN\" http://127.0.0.1:9450/v1/leases/evt-42

  # A Slurm TaskProlog line giving each job its own throughput token:
  echo \"export FLEXGATE_JOB_TOKEN=$(flexgate-agent --config /etc/flexgate/agent.toml job-token $SLURM_JOB_ID)\"";

#[derive(Parser)]
#[command(name = "flexgate-agent", version, about = ABOUT, long_about = LONG_ABOUT, after_long_help = EXAMPLES)]
struct Cli {
    /// Without a command, the agent serves.
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    log: flexgate_logging::LogArgs,

    /// TOML configuration file (see adapters/agent/agent.example.toml); flags override it.
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,

    /// Address to listen on [default: 127.0.0.1:9450].
    #[arg(long, value_name = "ADDR", env = "FLEXGATE_AGENT_LISTEN")]
    listen: Option<SocketAddr>,

    /// Control token (may change caps). Visible in `ps`: prefer --token-file or the env variable.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "FLEXGATE_AGENT_TOKEN",
        hide_env_values = true,
        global = true
    )]
    token: Option<String>,

    /// File holding the control token (mode 0600).
    #[arg(
        long,
        value_name = "FILE",
        env = "FLEXGATE_AGENT_TOKEN_FILE",
        conflicts_with = "token",
        global = true
    )]
    token_file: Option<PathBuf>,

    /// Read-only token (GET only; 403 on changes).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "FLEXGATE_AGENT_READ_TOKEN",
        hide_env_values = true
    )]
    read_token: Option<String>,

    /// File holding the read-only token.
    #[arg(long, value_name = "FILE", conflicts_with = "read_token")]
    read_token_file: Option<PathBuf>,

    /// Directory for the lease state file [default: /var/lib/flexgate-agent].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// Simulated GPUs instead of NVML (no driver needed).
    #[arg(long)]
    simulate: bool,

    /// Number of simulated GPUs [default: 8].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    gpus: Option<u32>,

    /// Host name for metrics labels and simulated UUIDs [default: the system's].
    #[arg(long, value_name = "NAME")]
    hostname: Option<String>,

    /// Serve /metrics without a token.
    #[arg(long)]
    metrics_open: bool,

    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key. Overrides
    /// [tls] cert_file.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,

    /// Private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1; unencrypted, mode 0600).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,

    /// Mutual TLS: require client certificates issued by these CAs (PEM); the token is still
    /// required. Needs TLS (--tls-cert/--tls-key or [tls]). Overrides [tls] client_ca_file.
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Read-only check of this node before enabling the agent: the driver and NVML versions,
    /// each GPU's model, limits and their range, power, persistence and MIG modes, and whether
    /// this process could set power limits. Changes nothing; needs no token. Exit 1 when NVML
    /// cannot be opened.
    DeviceCheck {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the token job JOB_ID reports its throughput with (derived from the control token;
    /// good for that job's POST /v1/jobs/{job_id}/throughput only).
    JobToken {
        /// The job id the job reports under (the Slurm job id under Slurm).
        job_id: String,
    },
}

/// The TLS files from the flags and the config file; `None`: plain HTTP.
fn tls_files(cli: &Cli, file: &ConfigFile) -> Result<Option<TlsFiles>> {
    let base = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert_file), Some(key_file)) => Some(TlsFiles {
            cert_file: cert_file.clone(),
            key_file: key_file.clone(),
            // Flags replace the certificate, not a configured client CA: dropping mutual TLS
            // must be explicit (edit the file), never a side effect.
            client_ca_file: file.tls.as_ref().and_then(|t| t.client_ca_file.clone()),
        }),
        (Some(_), None) => bail!("--tls-cert needs --tls-key (the private key of that certificate)"),
        (None, Some(_)) => bail!("--tls-key needs --tls-cert (the certificate chain of that key)"),
        (None, None) => file.tls.clone(),
    };
    match (base, &cli.tls_client_ca) {
        (None, Some(_)) => bail!(
            "--tls-client-ca requires TLS: also give --tls-cert FILE and --tls-key FILE (or a [tls] section \
             in the config file); client certificates cannot be checked over plain HTTP"
        ),
        (Some(mut files), Some(ca)) => {
            files.client_ca_file = Some(ca.clone());
            Ok(Some(files))
        }
        (base, None) => Ok(base),
    }
}

fn control_token(cli: &Cli, file: &ConfigFile) -> Result<Token> {
    let secret = if let Some(t) = &cli.token {
        t.trim().to_owned()
    } else if let Some(p) = &cli.token_file {
        warn_if_open(p);
        config::read_token_file(p)?
    } else {
        if let Some(p) = &file.token_file {
            warn_if_open(p);
        }
        file.control_token()?.context(
            "no control token: set --token-file FILE, FLEXGATE_AGENT_TOKEN, or token_file in the config \
             (the agent never runs without one)",
        )?
    };
    Ok(Token::new("control", &secret)?)
}

fn read_token(cli: &Cli, file: &ConfigFile) -> Result<Option<Token>> {
    let secret = if let Some(t) = &cli.read_token {
        Some(t.trim().to_owned())
    } else if let Some(p) = &cli.read_token_file {
        Some(config::read_token_file(p)?)
    } else {
        file.read_token()?
    };
    Ok(secret.map(|s| Token::new("read-only", &s)).transpose()?)
}

fn warn_if_open(path: &std::path::Path) {
    if config::token_file_too_open(path) {
        tracing::warn!(file = %path.display(), "token file is readable by group or others; chmod 600 it");
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGTERM");
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            () = term => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutting down; caps stay in force until their leases expire or are deleted");
}

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flexgate-agent: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the whole cause chain on one line, without a backtrace.
            eprintln!("flexgate-agent: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    let cli = Cli::parse();
    flexgate_logging::init(cli.log.log_format);
    let file = match &cli.config {
        Some(p) => ConfigFile::load(p)?,
        None => ConfigFile::default(),
    };

    if let Some(Command::DeviceCheck { json }) = &cli.command {
        return device_check(*json);
    }
    let auth = Auth::new(control_token(&cli, &file)?, read_token(&cli, &file)?)?;
    if let Some(Command::JobToken { job_id }) = &cli.command {
        api::validate_id("job", job_id)?;
        // Not println!: a closed stdout (`| head -c0`) is an error to report, not a panic.
        writeln!(std::io::stdout(), "{}", auth.job_token(job_id)).context("writing the token")?;
        return Ok(());
    }
    // Certificates are checked before anything touches a GPU: a wrong file stops the agent here.
    let tls_files = tls_files(&cli, &file)?;
    let tls_config = match &tls_files {
        Some(files) => Some(tls::server_config(files).context("TLS is configured but cannot be used")?),
        None => None,
    };
    let hostname = cli
        .hostname
        .clone()
        .or_else(|| file.hostname.clone())
        .unwrap_or_else(config::system_hostname);
    let listen = match cli.listen.or(file.listen) {
        Some(a) => a,
        None => api::DEFAULT_LISTEN.parse().context("default listen address")?,
    };
    let state_dir = cli
        .state_dir
        .clone()
        .or_else(|| file.state_dir.clone())
        .unwrap_or_else(|| config::DEFAULT_STATE_DIR.into());
    let max_ttl_s = file.max_lease_ttl_s.unwrap_or(86_400);
    if max_ttl_s == 0 || max_ttl_s > 7 * 86_400 {
        bail!("max_lease_ttl_s must be 1 to 604800 s (a lease must end if the gateway dies)");
    }

    let clock: Arc<dyn clock::Clock> = Arc::new(clock::SystemClock);
    let simulate = cli.simulate || file.simulate.enabled;
    let gpus: Box<dyn GpuControl> = if simulate {
        let opts = file.simulate.to_options(&hostname, cli.gpus)?;
        tracing::info!(gpus = opts.gpus, model = %opts.name, "simulated GPUs");
        Box::new(SimGpus::new(&opts, clock.clone())?)
    } else {
        if cli.gpus.is_some() {
            bail!("--gpus only applies with --simulate");
        }
        let nvml = NvmlGpus::open()?;
        tracing::info!(gpus = nvml.gpus().len(), "NVML opened");
        // Every driver call under a deadline, off the other GPUs' way (gpu/deadline.rs).
        Box::new(flexgate_agent::gpu::deadline::Deadlined::new(
            Box::new(nvml),
            std::time::Duration::from_millis(NVML_DEADLINE_MS),
        ))
    };

    let mut config = AgentConfig::new(hostname, auth);
    config.state_dir = Some(state_dir);
    config.metrics_open = cli.metrics_open || file.metrics_open;
    config.max_lease_ttl = TimeDelta::seconds(i64::try_from(max_ttl_s)?);
    let window_s = file.throughput_window_s.unwrap_or(30);
    if !(1..=600).contains(&window_s) {
        bail!("throughput_window_s must be 1 to 600 s");
    }
    config.throughput_window = TimeDelta::seconds(i64::try_from(window_s)?);
    let readiness_s = file.readiness_check_s.unwrap_or(30);
    if !(1..=3600).contains(&readiness_s) {
        bail!("readiness_check_s must be 1 to 3600 s");
    }
    config.readiness_every = std::time::Duration::from_secs(readiness_s);
    let boot_id_file = file
        .boot_id_file
        .clone()
        .unwrap_or_else(|| config::DEFAULT_BOOT_ID_FILE.into());
    config.boot_id = config::read_boot_id(&boot_id_file);
    let agent = Agent::with_clock(config, gpus, clock)?;

    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let local = listener.local_addr()?;
    match (&tls_config, &tls_files) {
        (Some(tls_config), Some(files)) => {
            tracing::info!(
                %local,
                ready = agent.is_ready(),
                cert = %files.cert_file.display(),
                mutual_tls = files.client_ca_file.is_some(),
                "flexgate-agent serving HTTPS"
            );
            // A machine-readable line for scripts and tests that start the agent on port 0.
            println!("flexgate-agent listening on https://{local}");
            std::io::stdout().flush()?;
            agent.serve_tls(listener, tls_config.clone(), shutdown_signal()).await?;
        }
        _ => {
            if !local.ip().is_loopback() {
                tracing::warn!(
                    %local,
                    "listening beyond loopback over plain HTTP: tokens travel in clear text; \
                     use --tls-cert/--tls-key (and --tls-client-ca), or keep the agent on loopback"
                );
            }
            tracing::info!(%local, ready = agent.is_ready(), "flexgate-agent serving");
            println!("flexgate-agent listening on http://{local}");
            std::io::stdout().flush()?;
            agent.serve(listener, shutdown_signal()).await?;
        }
    }
    Ok(())
}

/// `flexgate-agent device-check`: print what NVML says of this node, changing nothing.
fn device_check(json: bool) -> Result<()> {
    let report = flexgate_agent::gpu::nvml::device_report()?;
    let mut out = std::io::stdout();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?).context("writing the report")?;
        return Ok(());
    }
    let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    let watts = |w: Option<f64>| w.map_or_else(|| "?".into(), |w| format!("{w:.0} W"));
    let mode = |m: Option<bool>| match m {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    };
    writeln!(
        out,
        "driver {}, NVML {}",
        shown(&report.driver_version),
        shown(&report.nvml_version)
    )
    .context("writing the report")?;
    writeln!(out, "can set power limits: {}", report.can_set_limits).context("writing the report")?;
    writeln!(out, "{} GPU(s):", report.gpus.len()).context("writing the report")?;
    for g in &report.gpus {
        match &g.gpu {
            Some(info) => writeln!(
                out,
                "  {} {} {} ({}): limit {} (enforced {}), range {}–{} W, default {} W, drawing {}, persistence {}, MIG {}{}",
                g.index,
                info.name,
                info.uuid,
                info.pci,
                watts(g.limit_w),
                watts(g.enforced_w),
                f64::from(info.min_mw) / 1000.0,
                f64::from(info.max_mw) / 1000.0,
                f64::from(info.default_mw) / 1000.0,
                watts(g.power_w),
                mode(g.persistence),
                mode(g.mig),
                g.mig_instances
                    .map_or_else(String::new, |n| format!(" ({n} instances, one power limit for all)")),
            ),
            None => writeln!(out, "  {}: {}", g.index, g.error.as_deref().unwrap_or("unreadable")),
        }
        .context("writing the report")?;
    }
    Ok(())
}
