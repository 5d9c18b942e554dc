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
    /// The replicas' setup (`[ha]`) cannot work: an etcd client that cannot be built, or
    /// another replica running under this replica's name.
    #[error("[ha]: {0}")]
    Ha(String),
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
        if let Some(ha) = config.ha.clone() {
            return Self::start_replica(config, ha, clock, ledger, backend, listener, token, token_file).await;
        }
        let openadr2b = config.openadr2b.clone();
        let openadr3 = config.openadr3.clone();
        let full_config = config.clone();
        let gateway = Gateway::start(config, clock, ledger, backend).await?;
        let addr = listener.local_addr().map_err(ServeError::Http)?;
        let (stop, stopped) = watch::channel(false);
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
        tasks.push(tokio::spawn(keep_intervals(gateway.clone(), wait(stopped.clone()))));
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

    /// A replica (`[ha]`): it starts as a standby (reads served, writes refused naming the
    /// leader, nothing sent to the cluster) and its supervisor (`crate::ha::replica`) campaigns,
    /// takes over and leads while its term holds. An etcd that cannot be reached leaves it a
    /// standby that says why and keeps trying; a second replica under the same name is refused.
    #[allow(clippy::too_many_arguments)] // the parts `start` has already built
    async fn start_replica(
        config: Config,
        ha: crate::ha::config::HaConfig,
        clock: Clock,
        ledger: Ledger,
        backend: Arc<dyn ClusterBackend>,
        listener: TcpListener,
        token: String,
        token_file: Option<PathBuf>,
    ) -> Result<Self, ServeError> {
        use crate::ha::keys::Keys;
        use crate::runtime::Role;
        ledger.follow().await?;
        backend.set_term(None);
        let full_config = config.clone();
        // Adapters that cannot be built (a bad URL, a missing TLS file) are refused at start, as
        // for a single gateway, not at the first term.
        Self::check_adapters(&full_config)?;
        let client = Arc::new(ha.client().map_err(ServeError::Ha)?);
        let keys = Keys::new(&ha.prefix, &config.gateway.site);
        let ttl = std::time::Duration::from_secs(ha.term_ttl_s);
        // Two replicas under one name are refused; an etcd that does not answer is not fatal.
        let registration =
            match crate::ha::register::register(&client, &keys, &ha.replica, ha.advertise_url.as_deref(), ttl).await {
                Ok(lease) => Some(lease),
                Err(e @ crate::ha::register::RegisterError::Duplicate { .. }) => {
                    return Err(ServeError::Ha(e.to_string()));
                }
                Err(e) => {
                    tracing::warn!("etcd is not reachable ({e}): this replica stays a standby and keeps trying");
                    None
                }
            };
        let gateway = Gateway::start_standby(
            config,
            clock,
            ledger,
            backend,
            Role::Standby {
                replica: ha.replica.clone(),
                leader: None,
                reason: Some("starting: no election seen yet".into()),
            },
        )
        .await?;
        let addr = listener.local_addr().map_err(ServeError::Http)?;
        let (stop, stopped) = watch::channel(false);
        let mut router = http::router(gateway.clone(), &token);
        let pushed = match &full_config.openadr2b {
            Some(cfg) => match (&cfg.push_url, &cfg.push_token) {
                (Some(_), Some(push_token)) => {
                    let (to_ven, pushed) = tokio::sync::mpsc::channel(64);
                    router = router.merge(crate::grid::openadr::push::router(push_token, to_ven));
                    Some(Arc::new(tokio::sync::Mutex::new(pushed)))
                }
                _ => None,
            },
            None => None,
        };
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(crate::ha::register::keep(
            client.clone(),
            keys.clone(),
            ha.clone(),
            registration,
            gateway.ledger().reader(),
            wait(stopped.clone()),
        )));
        // Every replica derives the same intervals from the ledger it holds.
        tasks.push(tokio::spawn(keep_intervals(gateway.clone(), wait(stopped.clone()))));
        let supervisor = crate::ha::replica::Supervisor::new(
            gateway.clone(),
            client,
            keys,
            ha,
            Self::leader_tasks(full_config.clone(), pushed),
        );
        tasks.push(tokio::spawn(supervisor.run(wait(stopped.clone()))));
        let limits = http::server::HttpLimits::from_config(&full_config.gateway)
            .within_handle_limit(http::server::open_files_limit());
        let counters = gateway.read().http_connections();
        tasks.push(tokio::spawn(http::server::serve(
            listener,
            router,
            limits,
            counters,
            wait(stopped),
        )));
        Ok(Self {
            gateway,
            addr,
            token_file,
            stop,
            tasks,
        })
    }

    /// Build every configured protocol adapter once, to refuse a bad configuration at start.
    fn check_adapters(config: &Config) -> Result<(), ServeError> {
        if let Some(cfg) = &config.openadr2b {
            flexgate_openadr::http::oadr2b::Oadr2bHttp::new(
                &cfg.url,
                cfg.tls.as_ref(),
                std::time::Duration::from_secs(cfg.timeout_s),
            )
            .map_err(|e| ServeError::OpenAdr(e.to_string()))?;
        }
        Ok(())
    }

    /// What a replica starts each time it begins to lead: the control loop and the protocol
    /// adapters (OpenADR 2.0b and 3.x, MQTT), all stopped and aborted when the term ends.
    fn leader_tasks(
        config: Config,
        pushed: Option<Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<crate::grid::openadr::ven2b::Pushed>>>>,
    ) -> crate::ha::replica::LeaderTasks {
        Box::new(move |gateway, stopped| {
            let mut tasks = Vec::new();
            if let Some(cfg) = &config.openadr2b {
                match crate::grid::openadr::ven2b::Ven2b::new(gateway.clone(), &config, cfg) {
                    Ok(ven) => {
                        let (to_ven, from_push) = tokio::sync::mpsc::channel(64);
                        if let Some(shared) = &pushed {
                            // This term's VEN takes the pushes; the next term's takes over the
                            // queue when this one is aborted.
                            let shared = shared.clone();
                            tasks.push(tokio::spawn(async move {
                                let mut queue = shared.lock().await;
                                while let Some(item) = queue.recv().await {
                                    if to_ven.send(item).await.is_err() {
                                        return;
                                    }
                                }
                            }));
                        }
                        tasks.push(tokio::spawn(ven.run(stopped.clone(), from_push)));
                    }
                    Err(e) => tracing::error!("OpenADR 2.0b: {e}"),
                }
            }
            if let Some(cfg) = &config.openadr3 {
                match crate::grid::openadr::ven3::Ven3::new(gateway.clone(), &config, cfg) {
                    Ok(client) => tasks.push(tokio::spawn(client.run(stopped.clone()))),
                    Err(e) => tracing::error!("OpenADR 3: {e}"),
                }
            }
            if let Some(cfg) = &config.mqtt {
                match crate::grid::mqtt::MqttBridge::connect(gateway.clone(), &config, cfg) {
                    Ok(bridge) => tasks.push(tokio::spawn(bridge.run(stopped.clone()))),
                    Err(e) => tracing::error!("MQTT: {e}"),
                }
            }
            tasks.push(tokio::spawn(gateway.driver().clone().control_loop(wait(stopped))));
            tasks
        })
    }

    /// Stop everything at once, as a killed process would: no resignation, no final flush of
    /// anything in flight, nothing told to anyone (for tests of what survives a dead gateway).
    pub fn kill(self) {
        for task in &self.tasks {
            task.abort();
        }
        self.gateway.read().begin_shutdown();
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

/// Resolves once `stop` turns true: the shutdown signal every task of the server waits on.
async fn wait(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
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

/// How often the interval store folds what the ledger gained (readers of the store catch up
/// themselves too: this keeps their wait short).
const INTERVALS_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Keep the interval store up to date with the ledger, and compact it once a day, on the
/// blocking pool (sled is synchronous), until `stop`.
async fn keep_intervals(gateway: Arc<Gateway>, stop: impl std::future::Future<Output = ()>) {
    let mut tick = tokio::time::interval(INTERVALS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut compacted: Option<chrono::NaiveDate> = None;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = tick.tick() => {}
        }
        let store = gateway.intervals().clone();
        let reader = gateway.ledger().reader();
        let now = crate::clock::wall_now();
        let today = now.date_naive();
        let compact = compacted != Some(today);
        let done = tokio::task::spawn_blocking(move || {
            store.catch_up(&reader)?;
            if compact {
                store.compact(now)?;
            }
            Ok::<(), crate::intervals::StoreError>(())
        })
        .await;
        match done {
            Ok(Ok(())) => {
                if compact {
                    compacted = Some(today);
                }
            }
            Ok(Err(e)) => tracing::warn!("interval meter data not brought up to date: {e}; retrying in a minute"),
            Err(e) => tracing::warn!("interval meter data task failed: {e}"),
        }
    }
}
