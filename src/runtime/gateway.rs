//! A running gateway: its write side ([`Driver`]) and its read side ([`ReadSide`]), built
//! together over one ledger and one backend. Writers (the grid side's submissions, operator
//! actions, the control loop) go to [`Gateway::driver`]; everything that only reads goes to
//! [`Gateway::read`], which can change nothing.

use super::driver::Driver;
use super::read_side::{Board, Published, ReadSide};
use super::role::Role;
use crate::clock::Clock;
use crate::cluster::ClusterBackend;
use crate::config::Config;
use crate::ledger::{Ledger, LedgerError};
use flexgate_policies::control::{Controller, Settings};
use std::sync::Arc;
use tokio::sync::{Mutex, Notify};

/// Error while building the gateway.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The facility parameters are invalid.
    #[error("facility parameters: {0}")]
    Facility(String),
    /// A meter source cannot be set up.
    #[error("{0}")]
    Meter(String),
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The ledger holds something this version cannot replay.
    #[error(transparent)]
    Schema(#[from] crate::ledger::NotAnEntry),
    /// The backend failed.
    #[error("cluster backend {0}")]
    Backend(String),
    /// The interval store beside the ledger could not be opened.
    #[error(transparent)]
    Intervals(#[from] crate::intervals::StoreError),
    /// The site's key in the data directory cannot be read or made.
    #[error(transparent)]
    SiteKey(#[from] crate::ledger::site_key::SiteKeyError),
    /// The ledger's hash chain does not verify: a record was altered, removed or inserted. The
    /// state the gateway would rebuild from it cannot be trusted, so it does not start.
    #[error(
        "the ledger in {dir}/ledger fails verification at record {seq}: {reason}. The gateway does not act on a \
         ledger it cannot trust (the state rebuilt from it may have been altered). Keep this directory as \
         evidence; see `flexgate log verify --data {dir}` and `flexgate log export --data {dir}`, then \
         restore the ledger from a backup or start on a new data directory"
    )]
    ChainBroken {
        /// The data directory holding the ledger.
        dir: String,
        /// The first record that fails.
        seq: u64,
        /// What is wrong with it.
        reason: String,
    },
}

/// The running gateway.
pub struct Gateway {
    driver: Arc<Driver>,
    read: Arc<ReadSide>,
    role: tokio::sync::watch::Sender<Role>,
    /// The site meter as interval data, derived from the ledger (`crate::intervals`): what
    /// the baselines and the settlement read.
    intervals: Arc<crate::intervals::IntervalStore>,
    /// The site's key (`<data_dir>/site.key`): the settlement report's ledger head is signed
    /// with it.
    site_key: Arc<crate::ledger::site_key::SiteKey>,
}

impl Gateway {
    /// Build a gateway over an open ledger and a backend: rebuild the state from the ledger,
    /// read the cluster, and re-apply the caps of the plan in force.
    pub async fn start(
        config: Config,
        clock: Clock,
        ledger: Ledger,
        backend: Arc<dyn ClusterBackend>,
    ) -> Result<Arc<Self>, StartError> {
        let gateway = Self::build(config, clock, ledger, backend, Role::Single)?;
        gateway.driver.recover().await?;
        Ok(gateway)
    }

    /// Build a replica that does not lead yet: its ledger verified and folded, its reads served,
    /// its writes refused; nothing is sent to the cluster. Its supervisor (`crate::ha`) makes it
    /// lead ([`Gateway::set_role`], then [`Driver::take_charge`]).
    pub async fn start_standby(
        config: Config,
        clock: Clock,
        ledger: Ledger,
        backend: Arc<dyn ClusterBackend>,
        role: Role,
    ) -> Result<Arc<Self>, StartError> {
        debug_assert!(!role.may_decide());
        let gateway = Self::build(config, clock, ledger, backend, role)?;
        gateway.driver.verify_chain().await?;
        gateway.driver.absorb().await?;
        Ok(gateway)
    }

    fn build(
        config: Config,
        clock: Clock,
        ledger: Ledger,
        backend: Arc<dyn ClusterBackend>,
        role: Role,
    ) -> Result<Arc<Self>, StartError> {
        let settings = Settings {
            site_id: config.gateway.site.clone(),
            site: config.site.clone(),
            control: config.control.clone(),
            policy: config.gateway.policy,
            objective: config.gateway.objective,
            hedge_tolerance: config.gateway.hedge.then(|| {
                config.gateway.hedge_tolerance.unwrap_or_else(|| {
                    flexgate_policies::alloc::curve_aware::default_tolerance(config.gateway.objective)
                })
            }),
            facility: config.facility.clone(),
            probe: config.probe.clone(),
            settlement_methods: config.settlement.methods(),
            forecast: flexgate_policies::control::ForecastSettings {
                cost_ceiling: config.forecast.cost_ceiling,
                min_refresh_s: i64::try_from(config.forecast.min_refresh_s).unwrap_or(i64::MAX),
            },
        };
        let controller = Controller::new(settings.clone()).map_err(|e| StartError::Facility(e.to_string()))?;
        // Beside the ledger, in the same data directory.
        let data_dir = ledger.dir().parent().unwrap_or(ledger.dir()).to_path_buf();
        let intervals = Arc::new(crate::intervals::IntervalStore::open(&data_dir, true)?);
        let site_key = Arc::new(crate::ledger::site_key::SiteKey::load_or_create(&data_dir)?);
        let (role_tx, role_rx) = tokio::sync::watch::channel(role);
        let facility = flexgate_policies::facility::FacilityModel::new(config.facility.clone())
            .map_err(|e| StartError::Facility(e.to_string()))?;
        let meter = match &config.meter {
            Some(m) => Some(crate::meter::MeterSources::start(m, clock).map_err(StartError::Meter)?),
            None => None,
        };
        let board = Arc::new(Board::new(Published {
            snapshot: controller.snapshot(),
            plan_recorded_at: None,
        }));
        let metrics = Arc::new(super::metrics::GatewayMetrics::new());
        {
            let metrics = metrics.clone();
            ledger.observe_flushes(Box::new(move |elapsed, ok| metrics.observe_ledger_flush(elapsed, ok)));
        }
        let read = Arc::new(ReadSide {
            config: config.clone(),
            clock,
            board: board.clone(),
            ledger: ledger.reader(),
            metrics: metrics.clone(),
            meter: meter.clone(),
            agents_answering: {
                let backend = backend.clone();
                Arc::new(move || backend.agents_answering())
            },
            stopping: std::sync::atomic::AtomicBool::new(false),
            http_connections: Arc::default(),
            role: role_rx.clone(),
            replication: std::sync::RwLock::new(None),
            last_epoch: std::sync::atomic::AtomicU64::new(0),
            term_changes: std::sync::atomic::AtomicU64::new(0),
        });
        let driver = Arc::new(Driver {
            config,
            clock,
            ledger,
            backend,
            core: Mutex::new(controller),
            control_pass: Mutex::new(()),
            board,
            wake: Notify::new(),
            opt_outs: tokio::sync::broadcast::channel(64).0,
            transitions: tokio::sync::broadcast::channel(1024).0,
            meter,
            facility,
            metrics,
            settings,
            applied: std::sync::atomic::AtomicU64::new(0),
            events_seen: std::sync::atomic::AtomicUsize::new(0),
            role: role_rx,
            term_deadline: std::sync::Mutex::new(None),
            scheduler_answer: std::sync::Mutex::new(None),
            scheduler_print: std::sync::atomic::AtomicU64::new(0),
            queue_read_started: std::sync::Mutex::new(None),
            queue_read_in_flight: std::sync::atomic::AtomicBool::new(false),
            queue_unavailable: std::sync::atomic::AtomicBool::new(false),
        });
        Ok(Arc::new(Self {
            driver,
            read,
            role: role_tx,
            intervals,
            site_key,
        }))
    }

    /// Change this replica's role (its supervisor does, as terms begin and end). Decisions
    /// under way finish; no new one is taken once the role may not decide.
    pub fn set_role(&self, role: Role) {
        self.role.send_replace(role);
    }

    /// The role now.
    #[must_use]
    pub fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    /// The write side: submissions, operator actions, the control loop.
    #[must_use]
    pub fn driver(&self) -> &Arc<Driver> {
        &self.driver
    }

    /// The read side: everything served to readers.
    #[must_use]
    pub fn read(&self) -> &Arc<ReadSide> {
        &self.read
    }

    /// The clock everything runs on.
    #[must_use]
    pub fn clock(&self) -> Clock {
        self.read.clock()
    }

    /// The interval store (derived from the ledger: bring it up to date with
    /// [`IntervalStore::catch_up`](crate::intervals::IntervalStore::catch_up) before reading).
    #[must_use]
    pub fn intervals(&self) -> &Arc<crate::intervals::IntervalStore> {
        &self.intervals
    }

    /// The site's key.
    #[must_use]
    pub fn site_key(&self) -> &Arc<crate::ledger::site_key::SiteKey> {
        &self.site_key
    }

    /// The ledger handle (the writer's: it also reads).
    #[must_use]
    pub fn ledger(&self) -> &Ledger {
        &self.driver.ledger
    }

    /// Give up the gateway and close its ledger (flush, unlock the directory). Other holders
    /// of the read side or the driver (adapters still running) keep the ledger open until
    /// they let go.
    pub async fn close(self) -> Result<(), LedgerError> {
        let Self { driver, read, .. } = self;
        drop(read);
        match Arc::try_unwrap(driver) {
            Ok(driver) => driver.ledger.close().await,
            Err(driver) => driver.ledger.clone().close().await,
        }
    }
}
