//! `flexgate run`: the gateway as a service.

use crate::config::Config;
use anyhow::{Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Run the gateway: HTTP API, event book, planner, dispatcher and ledger.
///
/// With no configuration file it runs on embedded defaults: ledger in ./flexgate-data, API on
/// 127.0.0.1:8080, an in-process simulated cluster (16 nodes × 8 GPUs) as the backend. Writes to
/// the API need a bearer token: set one with --api-token (or FLEXGATE_API_TOKEN), or let the
/// gateway generate one into DATA/api-token (mode 0600) at first start.
///
/// Flags override FLEXGATE_* environment variables, which override the file. Every field of the
/// file is documented in deploy/flexgate.toml.
///
/// Examples:
///   flexgate run
///   flexgate run --config /etc/flexgate/flexgate.toml --listen 0.0.0.0:8080
///   flexgate run --mqtt mqtt://127.0.0.1:1883 --site dc-east
///   curl -H "Authorization: Bearer $(cat flexgate-data/api-token)" \
///        -d @event.json http://127.0.0.1:8080/v1/events
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct RunArgs {
    /// Configuration file (TOML).
    #[arg(long, env = "FLEXGATE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory (ledger, token file).
    #[arg(long, env = "FLEXGATE_DATA", value_name = "DIR")]
    data: Option<PathBuf>,
    /// API listen address.
    #[arg(long, env = "FLEXGATE_LISTEN", value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Bearer token for writes (prefer the environment variable: command lines are visible to
    /// other users of the machine).
    #[arg(long, env = "FLEXGATE_API_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// Take events from this MQTT broker (`mqtt://host:port`, or `mqtts://` for TLS) on
    /// `dr/{site}/events/+`, and publish acks, status, telemetry and reports there. Other MQTT
    /// settings (credentials, signatures, prefix) come from the file's [mqtt] section.
    #[arg(long, env = "FLEXGATE_MQTT", value_name = "URL")]
    mqtt: Option<String>,
    /// Site name: events for other sites are refused; MQTT topics are under dr/{site}/.
    #[arg(long, env = "FLEXGATE_SITE", value_name = "NAME")]
    site: Option<String>,
    /// Print the effective configuration (file + environment + flags) as TOML and exit; the
    /// API token is replaced by a placeholder.
    #[arg(long)]
    print_config: bool,
}

/// Load the file and apply the overrides.
pub fn effective_config(args: &RunArgs) -> Result<Config> {
    let mut config = Config::load(args.config.as_deref())?;
    if let Some(data) = &args.data {
        config.gateway.data_dir = data.clone();
    }
    if let Some(listen) = args.listen {
        config.gateway.listen = listen;
    }
    if let Some(token) = &args.api_token {
        config.gateway.api_token = token.clone();
    }
    if let Some(site) = &args.site {
        config.gateway.site = site.clone();
    }
    if let Some(url) = &args.mqtt {
        match &mut config.mqtt {
            Some(mqtt) => mqtt.url = url.clone(),
            None => config.mqtt = Some(crate::config::MqttConfig::for_url(url)),
        }
    }
    config.validate()?;
    Ok(config)
}

/// Run the command until SIGINT or SIGTERM.
pub fn run(args: &RunArgs, log_format: flexgate_logging::LogFormat) -> Result<()> {
    let config = effective_config(args)?;
    if args.print_config {
        let mut shown = config.clone();
        let redact = |secret: &mut String| {
            if !secret.is_empty() {
                *secret = "<redacted>".to_string();
            }
        };
        redact(&mut shown.gateway.api_token);
        if let Some(token) = shown.openadr2b.as_mut().and_then(|o| o.push_token.as_mut()) {
            redact(token);
        }
        if let Some(token) = shown.openadr3.as_mut().and_then(|o| o.token.as_mut()) {
            redact(token);
        }
        crate::out!("{}", toml::to_string_pretty(&shown)?);
        return Ok(());
    }
    flexgate_logging::init(log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.gateway.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.gateway.listen))?;
        crate::serve::run(config, listener, shutdown_signal()).await?;
        Ok(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
