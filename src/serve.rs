//! Starting and stopping the whole gateway: ledger, backend, control loop and HTTP API.
//!
//! Startup takes its listener and its shutdown signal as arguments, so tests and the demo run
//! the real gateway in-process on port 0.

use crate::cluster::ClusterBackend;
use crate::cluster::sim::SimCluster;
use crate::config::{BackendConfig, Config};
use crate::grid::http;
use crate::ledger::{Ledger, LedgerError};
use crate::runtime::{Clock, Gateway};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The data directory or token file.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The ledger could not be opened.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The gateway could not be built.
    #[error(transparent)]
    Start(#[from] crate::runtime::StartError),
    /// The backend could not be built.
    #[error("cluster backend: {0}")]
    Backend(String),
    /// Serving failed.
    #[error("HTTP server: {0}")]
    Http(std::io::Error),
    /// An OpenADR or MQTT connection is misconfigured (URL, TLS files, credentials).
    #[error("{0}")]
    OpenAdr(String),
}

/// A running gateway.
pub struct Server {
    /// The gateway (for in-process callers: the demo, tests).
    pub gateway: Arc<Gateway>,
    /// Where the API listens.
    pub addr: SocketAddr,
    /// Path of the token file, when the token was generated.
    pub token_file: Option<PathBuf>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Server {
    /// Open the ledger under `config.gateway.data_dir`, build the backend (or use `backend`),
    /// recover state, and start the control loop and the API on `listener`.
    pub async fn start(
        config: Config,
        clock: Clock,
        backend: Option<Arc<dyn ClusterBackend>>,
        listener: TcpListener,
    ) -> Result<Self, ServeError> {
        let data = config.gateway.data_dir.clone();
        // Owner-only: it holds the API token and the ledger.
        crate::ledger::private::create_private_dir(&data).map_err(|source| ServeError::DataDir {
            path: data.clone(),
            source,
        })?;
        let (token, token_file) = api_token(&config, &data)?;
        let ledger = Ledger::open(&data.join("ledger")).await?;
        let backend = match backend {
            Some(b) => b,
            None => match &config.backend {
                BackendConfig::Sim(sim) => {
                    let sim: Arc<dyn ClusterBackend> =
                        SimCluster::new(sim.clone()).map_err(|e| ServeError::Backend(e.to_string()))?;
                    sim
                }
                BackendConfig::Agents(agents) => {
                    let facility = flexgate_policies::facility::FacilityModel::new(config.facility.clone())
                        .map_err(|e| ServeError::Backend(format!("facility parameters: {e}")))?;
                    let backend = crate::cluster::agents::AgentsBackend::new(agents, facility)
                        .map_err(|e| ServeError::Backend(e.to_string()))?;
                    tracing::warn!(
                        "agents backend: no meter source; the meter figure is the facility model's estimate from measured \
                         GPU power (meter_quality \"model\" in /v1/status), so the closed loop does not trim"
                    );
                    backend.spawn_renewal();
                    let backend: Arc<dyn ClusterBackend> = backend;
                    backend
                }
            },
        };
        let openadr2b = config.openadr2b.clone();
        let openadr3 = config.openadr3.clone();
        let full_config = config.clone();
        let gateway = Gateway::start(config, clock, ledger, backend).await?;
        let addr = listener.local_addr().map_err(ServeError::Http)?;
        let (stop, stopped) = watch::channel(false);
        let wait = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let mut tasks = Vec::new();
        let mut router = http::router(gateway.clone(), &token);
        if let Some(cfg) = &openadr2b {
            let ven = crate::grid::openadr::ven2b::Ven2b::new(gateway.clone(), &full_config, cfg)
                .map_err(|e| ServeError::OpenAdr(e.to_string()))?;
            let (to_ven, pushed) = tokio::sync::mpsc::channel(64);
            if let (Some(_), Some(push_token)) = (&cfg.push_url, &cfg.push_token) {
                router = router.merge(crate::grid::openadr::push::router(push_token, to_ven));
            }
            tasks.push(tokio::spawn(ven.run(stopped.clone(), pushed)));
        }
        if let Some(cfg) = &openadr3 {
            let client = crate::grid::openadr::ven3::Ven3::new(gateway.clone(), &full_config, cfg)
                .map_err(|e| ServeError::OpenAdr(e.to_string()))?;
            tasks.push(tokio::spawn(client.run(stopped.clone())));
        }
        if let Some(cfg) = &full_config.mqtt {
            let bridge = crate::grid::mqtt::MqttBridge::connect(gateway.clone(), &full_config, cfg)
                .map_err(|e| ServeError::OpenAdr(e.to_string()))?;
            tasks.push(tokio::spawn(bridge.run(stopped.clone())));
        }
        let control = tokio::spawn(gateway.driver().clone().control_loop(wait(stopped.clone())));
        let limits = http::server::HttpLimits::from_config(&full_config.gateway)
            .within_handle_limit(http::server::open_files_limit());
        let http_stop = wait(stopped);
        let counters = gateway.read().http_connections();
        let http = tokio::spawn(http::server::serve(listener, router, limits, counters, http_stop));
        tasks.push(control);
        tasks.push(http);
        Ok(Self {
            gateway,
            addr,
            token_file,
            stop,
            tasks,
        })
    }

    /// Stop serving, stop the control loop, and close the ledger (which unlocks its directory).
    pub async fn shutdown(self) {
        // Live streams end first, so that the HTTP server's grace period is not spent on them.
        self.gateway.read().begin_shutdown();
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        match Arc::try_unwrap(self.gateway) {
            Ok(gateway) => {
                if let Err(e) = gateway.close().await {
                    tracing::error!("closing the ledger: {e}");
                }
            }
            Err(_) => tracing::warn!("the gateway is still referenced; the ledger closes when the last reference goes"),
        }
    }
}

/// Run until `shutdown` resolves (the `flexgate run` command).
pub async fn run(config: Config, listener: TcpListener, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
    let server = Server::start(config, Clock::real(), None, listener).await?;
    match &server.token_file {
        Some(path) => tracing::info!(addr = %server.addr, token_file = %path.display(), "flexgate is serving"),
        None => tracing::info!(addr = %server.addr, "flexgate is serving (token from the configuration)"),
    }
    shutdown.await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

/// The API token: from the configuration, or from `<data>/api-token`, created on first start
/// with 32 random bytes from the OS (mode 0600). The token's value is never logged.
fn api_token(config: &Config, data: &Path) -> Result<(String, Option<PathBuf>), ServeError> {
    if !config.gateway.api_token.is_empty() {
        return Ok((config.gateway.api_token.clone(), None));
    }
    let path = data.join("api-token");
    let io = |source| ServeError::DataDir {
        path: path.clone(),
        source,
    };
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let token = existing.trim().to_string();
        if !token.is_empty() {
            return Ok((token, Some(path)));
        }
    }
    let mut bytes = [0u8; 32];
    {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(io)?;
    }
    let token = hex::encode(bytes);
    std::fs::write(&path, format!("{token}\n")).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    Ok((token, Some(path)))
}
