//! One agent: GPUs, lease book, state file, clock and tokens, behind a cheap cloneable handle.
//!
//! The methods here are synchronous (they call the driver and `fsync`); the HTTP layer
//! ([`crate::server`]) runs them on tokio's blocking pool. A process can hold many agents (the
//! gateway's benchmark runs 1,000 on loopback): an agent owns no OS thread, its watchdog is a
//! tokio task that sleeps while nothing is held.

use crate::api::{
    GpuStatus, Health, JobRequest, JobResponse, LeaseRequest, LeaseResponse, LeaseSummary, ReleaseResponse,
    RenewRequest, mw_to_w,
};
use crate::auth::Auth;
use crate::clock::{Clock, SystemClock};
use crate::gpu::{self, GpuControl};
use crate::lease::{Journal, LeaseBook, LeaseError, MemoryJournal, TickReport};
use crate::metrics::{self, GpuRow};
use crate::state::{FileJournal, StateError};
use crate::throughput::{JobThroughput, JobWindows, Refusal, ThroughputReport};
use chrono::TimeDelta;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How one agent behaves.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Host name for metrics labels.
    pub hostname: String,
    /// Tokens.
    pub auth: Auth,
    /// Where to persist leases; `None` keeps them in memory only (benchmarks, tests): a restart
    /// then forgets pre-event limits.
    pub state_dir: Option<PathBuf>,
    /// Serve `/metrics` without a token.
    pub metrics_open: bool,
    /// Longest lease accepted.
    pub max_lease_ttl: TimeDelta,
    /// Watchdog period (expiry, restore retries, drift correction); at most 1 s in production.
    pub watchdog_period: Duration,
    /// Most leases held at once.
    pub max_leases: usize,
    /// Sliding window of the jobs' throughput aggregate.
    pub throughput_window: TimeDelta,
    /// How often readiness (the power-limit self-test) and the GPUs' persistence mode are
    /// checked again while the agent runs: a permission lost after start must show.
    pub readiness_every: Duration,
    /// This boot's id (`/proc/sys/kernel/random/boot_id`, read by the binary), recorded with
    /// the state: a different one at start means the node rebooted and the saved pre-event
    /// limits are stale ([`crate::lease::LeaseBook::note_boot`]). `None`: unknown, no reboot
    /// detection.
    pub boot_id: Option<String>,
}

impl AgentConfig {
    /// Defaults: no state directory, token-protected metrics, 24 h leases, 1 s watchdog.
    #[must_use]
    pub fn new(hostname: impl Into<String>, auth: Auth) -> Self {
        Self {
            hostname: hostname.into(),
            auth,
            state_dir: None,
            metrics_open: false,
            max_lease_ttl: crate::api::DEFAULT_MAX_LEASE_TTL,
            watchdog_period: Duration::from_secs(1),
            max_leases: crate::lease::DEFAULT_MAX_LEASES,
            throughput_window: crate::throughput::DEFAULT_WINDOW,
            readiness_every: Duration::from_secs(30),
            boot_id: None,
        }
    }
}

/// Why an agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The state directory or file is unusable (including a corrupt file).
    #[error(transparent)]
    State(#[from] StateError),
    /// The state file parsed but does not make sense.
    #[error("state file {path} is inconsistent: {detail}; move it aside after restoring limits by hand")]
    InconsistentState {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

struct Core {
    book: LeaseBook,
    journal: Box<dyn Journal>,
}

struct Inner {
    config: AgentConfig,
    gpus: Box<dyn GpuControl>,
    clock: Arc<dyn Clock>,
    /// The last readiness check: ok, or why not (recomputed every `readiness_every`).
    ready: Mutex<Result<(), String>>,
    /// What an operator should fix though the agent works (persistence mode off, a changed GPU
    /// listing, …): recomputed at every readiness check.
    warnings: Mutex<Vec<String>>,
    /// What an operator should know from the start (a reboot detected): kept while the agent
    /// runs.
    notices: Vec<String>,
    /// The GPU count the driver listed at start (served or not): what a changed listing is
    /// compared with.
    count_at_start: u32,
    /// GPUs served at start that the driver no longer lists (by the last readiness check).
    vanished: Mutex<Vec<crate::api::UnavailableGpu>>,
    core: Mutex<Core>,
    idle: AtomicBool,
    /// Apart from the lease book: a report never waits for a GPU write.
    throughput: Mutex<JobWindows>,
}

/// A node agent. Cloning is cheap and shares the agent.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("hostname", &self.inner.config.hostname)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent on the system clock. See [`Agent::with_clock`].
    pub fn new(config: AgentConfig, gpus: Box<dyn GpuControl>) -> Result<Self, AgentError> {
        Self::with_clock(config, gpus, Arc::new(SystemClock))
    }

    /// An agent reading time from `clock`. Blocking: self-tests the GPUs (writes each current
    /// limit back), loads the state file if there is one, re-applies leases still valid and
    /// restores GPUs whose leases expired while the agent was down.
    pub fn with_clock(
        config: AgentConfig,
        gpus: Box<dyn GpuControl>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, AgentError> {
        let ready = gpu::self_test(&*gpus);
        if let Err(reason) = &ready {
            tracing::error!(%reason, "GPU self-test failed; the agent reports not ready");
        }
        let (mut journal, loaded): (Box<dyn Journal>, _) = match &config.state_dir {
            Some(dir) => {
                let (j, state) = FileJournal::open(dir)?;
                let path = j.path().to_owned();
                (Box::new(j), state.map(|s| (s, path)))
            }
            None => (Box::new(MemoryJournal), None),
        };
        let mut book = match loaded {
            Some((state, path)) => {
                let leases = state.leases.len();
                let (book, refused) = LeaseBook::from_state(state, gpus.gpus(), config.max_lease_ttl, clock.now())
                    .map_err(|e| AgentError::InconsistentState {
                        path: path.clone(),
                        detail: e.to_string(),
                    })?;
                for r in &refused {
                    tracing::error!(path = %path.display(), lease = %r.id, generation = r.generation,
                        expires_at = %r.expires_at.to_rfc3339(), gpus = ?r.gpus, reason = %r.reason,
                        "state file lease refused: the API would not accept it; its GPUs are restored to their pre-event limits (a gateway that still wants the cap re-sends it)");
                }
                tracing::info!(path = %path.display(), leases, refused = refused.len(), "state loaded");
                book
            }
            None => LeaseBook::new(gpus.gpus(), config.max_lease_ttl),
        };
        book.set_max_leases(config.max_leases);
        let mut notices = Vec::new();
        if let Some(reboot) = book.note_boot(config.boot_id.as_deref(), clock.now(), &*gpus) {
            let line = reboot.describe();
            tracing::warn!(previous_boot_id = %reboot.previous_boot_id, boot_id = %reboot.boot_id,
                dropped = ?reboot.dropped, recaptured = ?reboot.recaptured, "{line}");
            notices.push(line);
        }
        let report = book.reconcile_all(clock.now(), &*gpus, &mut *journal);
        if !report.expired.is_empty() || !report.written.is_empty() || !report.failed.is_empty() {
            tracing::info!(expired = ?report.expired, written = ?report.written, failed = ?report.failed,
                "start-up reconcile: leases re-applied, expired ones restored");
        }
        let idle = AtomicBool::new(book.is_idle());
        let warnings = gpu::warnings(&*gpus);
        for w in &warnings {
            tracing::warn!("{w}");
        }
        let count_at_start = u32::try_from(gpus.gpus().len() + gpus.unavailable().len()).unwrap_or(u32::MAX);
        Ok(Self {
            inner: Arc::new(Inner {
                gpus,
                clock,
                ready: Mutex::new(ready),
                warnings: Mutex::new(warnings),
                notices,
                count_at_start,
                vanished: Mutex::new(Vec::new()),
                throughput: Mutex::new(JobWindows::new(config.throughput_window)),
                core: Mutex::new(Core { book, journal }),
                idle,
                config,
            }),
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &AgentConfig {
        &self.inner.config
    }

    /// The GPUs.
    #[must_use]
    pub fn gpus(&self) -> &dyn GpuControl {
        &*self.inner.gpus
    }

    /// True when the last readiness check passed.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.readiness().is_ok()
    }

    /// Check readiness, the GPUs' persistence mode and the driver's GPU listing again (the
    /// watchdog calls it every `readiness_every`): a permission lost after start flips
    /// readiness, with the reason; a GPU the driver no longer lists is reported lost, and one
    /// it lists anew is never adopted while running (a warning says to restart).
    pub fn recheck(&self) {
        let now = gpu::self_test(self.gpus());
        let mut warnings = gpu::warnings(self.gpus());
        match self.gpus().inventory() {
            Ok(Some(listing)) => {
                let check = gpu::check_inventory(self.gpus().gpus(), self.inner.count_at_start, &listing);
                let mut vanished = self.inner.vanished.lock().unwrap_or_else(PoisonError::into_inner);
                if *vanished != check.vanished {
                    for w in &check.warnings {
                        tracing::error!("{w}");
                    }
                }
                *vanished = check.vanished;
                drop(vanished);
                warnings.extend(check.warnings);
            }
            Ok(None) => {}
            // Unknown now: what was seen last stands.
            Err(e) => tracing::warn!(error = %e, "the driver's GPU listing could not be read"),
        }
        let mut ready = self.inner.ready.lock().unwrap_or_else(PoisonError::into_inner);
        if *ready != now {
            match &now {
                Ok(()) => tracing::info!("readiness regained: the power-limit self-test passes again"),
                Err(reason) => tracing::error!(%reason, "the agent is no longer ready"),
            }
        }
        *ready = now;
        drop(ready);
        *self.inner.warnings.lock().unwrap_or_else(PoisonError::into_inner) = warnings;
    }

    /// [`Agent::with_core`] for a command that can change a cap: fenced by `epoch` first
    /// ([`LeaseBook::admit_epoch`]); a refusal is logged and counted, and changes nothing.
    fn fenced<T>(
        &self,
        epoch: u64,
        f: impl FnOnce(&mut LeaseBook, &mut dyn Journal, &dyn GpuControl) -> Result<T, LeaseError>,
    ) -> Result<T, LeaseError> {
        self.with_core(|book, journal, gpus| {
            if let Err(e) = book.admit_epoch(epoch, journal) {
                tracing::warn!(epoch, highest = book.fence_epoch(), "{e}");
                return Err(e);
            }
            f(book, journal, gpus)
        })
    }

    fn with_core<T>(&self, f: impl FnOnce(&mut LeaseBook, &mut dyn Journal, &dyn GpuControl) -> T) -> T {
        let mut core: MutexGuard<'_, Core> = self.inner.core.lock().unwrap_or_else(PoisonError::into_inner);
        let core = &mut *core;
        let out = f(&mut core.book, &mut *core.journal, &*self.inner.gpus);
        self.inner.idle.store(core.book.is_idle(), Ordering::Relaxed);
        out
    }

    /// `PUT /v1/leases/{id}`, sent under gateway epoch `epoch` (0: none).
    pub fn put_lease(&self, id: &str, req: &LeaseRequest, epoch: u64) -> Result<LeaseResponse, LeaseError> {
        let now = self.inner.clock.now();
        self.fenced(epoch, |book, journal, gpus| book.put(id, req, now, gpus, journal))
    }

    /// `PUT /v1/leases/{id}` with the body as received: decoded and checked by
    /// [`crate::api::decode_lease_request`] at the agent's time, then [`Agent::put_lease`]. What
    /// the HTTP handler calls, so a malformed body is refused (400) before the lease book is
    /// touched.
    pub fn put_lease_json(&self, id: &str, body: &[u8], epoch: u64) -> Result<LeaseResponse, LeaseError> {
        let now = self.inner.clock.now();
        let req = crate::api::decode_lease_request(body, now, self.inner.config.max_lease_ttl)?;
        self.fenced(epoch, |book, journal, gpus| book.put(id, &req, now, gpus, journal))
    }

    /// `POST /v1/leases/{id}/renew`.
    pub fn renew_lease(&self, id: &str, req: &RenewRequest, epoch: u64) -> Result<LeaseSummary, LeaseError> {
        let now = self.inner.clock.now();
        self.fenced(epoch, |book, journal, gpus| book.renew(id, req, now, gpus, journal))
    }

    /// `DELETE /v1/leases/{id}`.
    pub fn delete_lease(&self, id: &str, epoch: u64) -> Result<ReleaseResponse, LeaseError> {
        let now = self.inner.clock.now();
        self.fenced(epoch, |book, journal, gpus| book.delete(id, now, gpus, journal))
    }

    /// `POST /v1/fence`: raise the fence to `epoch` (a new leader's first call), or refuse it
    /// as from a deposed leader.
    pub fn fence(&self, epoch: u64) -> Result<crate::api::FenceResponse, LeaseError> {
        self.fenced(epoch, |book, _, _| {
            Ok(crate::api::FenceResponse {
                fence_epoch: book.fence_epoch(),
            })
        })
    }

    /// `POST /v1/jobs/{job_id}/start`.
    pub fn job_start(&self, job_id: &str, req: &JobRequest, epoch: u64) -> Result<JobResponse, LeaseError> {
        let now = self.inner.clock.now();
        self.fenced(epoch, |book, journal, gpus| {
            book.job_start(job_id, req, now, gpus, journal)
        })
    }

    /// `POST /v1/jobs/{job_id}/end`: also forgets the job's throughput.
    pub fn job_end(&self, job_id: &str, req: &JobRequest, epoch: u64) -> Result<JobResponse, LeaseError> {
        let now = self.inner.clock.now();
        let answer = self.fenced(epoch, |book, journal, gpus| {
            book.job_end(job_id, req, now, gpus, journal)
        });
        if answer.is_ok() {
            self.throughput().forget(job_id);
        }
        answer
    }

    fn throughput(&self) -> MutexGuard<'_, JobWindows> {
        self.inner.throughput.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `POST /v1/jobs/{job_id}/throughput` (token already checked): screen and keep one report
    /// at the agent's time. A refused report is logged with its reason and counted.
    pub fn report_throughput(&self, job_id: &str, report: &ThroughputReport) -> Result<Option<f64>, Refusal> {
        let now = self.inner.clock.now();
        let mut windows = self.throughput();
        match windows.record(job_id, report, now) {
            Ok(()) => Ok(windows
                .summaries(now)
                .into_iter()
                .find(|j| j.job_id == job_id)
                .map(|j| j.tokens_per_s)),
            Err(refusal) => {
                drop(windows);
                tracing::warn!(
                    job = job_id,
                    reason = refusal.code(),
                    "throughput report refused: {refusal}"
                );
                Err(refusal)
            }
        }
    }

    /// `GET /v1/jobs/throughput`: every job's figure now.
    #[must_use]
    pub fn job_throughput(&self) -> Vec<JobThroughput> {
        let now = self.inner.clock.now();
        self.throughput().summaries(now)
    }

    /// One watchdog pass: expire leases (restoring their GPUs), retry failed restores, correct
    /// drift. The watchdog task calls this every period; tests call it with a manual clock.
    pub fn tick(&self) -> TickReport {
        let now = self.inner.clock.now();
        self.with_core(|book, journal, gpus| book.reconcile_all(now, gpus, journal))
    }

    /// True when no lease is held and no restore is pending (the watchdog skips its pass).
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.inner.idle.load(Ordering::Relaxed)
    }

    /// `GET /v1/gpus`.
    #[must_use]
    pub fn gpu_status(&self) -> Vec<GpuStatus> {
        let now = self.inner.clock.now();
        let held: Vec<(Vec<String>, Option<u32>, u64, bool)> = self.with_core(|book, _, gpus| {
            gpus.gpus()
                .iter()
                .map(|g| {
                    (
                        book.held_by(&g.uuid),
                        book.baseline_mw(&g.uuid),
                        book.drift_corrections().get(&g.uuid).copied().unwrap_or(0),
                        book.cap_unreliable(&g.uuid, now),
                    )
                })
                .collect()
        });
        let gpus = self.gpus();
        gpus.gpus()
            .iter()
            .zip(held)
            .map(|(g, (held_by, baseline, drift_corrections, cap_unreliable))| {
                let limits = gpus.limits(g.index);
                let readings = gpus.readings(g.index);
                let error = match (&limits, &readings) {
                    (Err(e), _) | (_, Err(e)) => Some(e.to_string()),
                    _ => None,
                };
                let limits = limits.ok();
                let readings = readings.ok();
                GpuStatus {
                    uuid: g.uuid.clone(),
                    index: g.index,
                    minor: g.minor,
                    pci: g.pci.clone(),
                    name: g.name.clone(),
                    min_w: mw_to_w(g.min_mw),
                    default_w: mw_to_w(g.default_mw),
                    max_w: mw_to_w(g.max_mw),
                    limit_w: limits.map(|l| mw_to_w(l.requested_mw)),
                    enforced_w: limits.map(|l| mw_to_w(l.enforced_mw)),
                    power_w: readings.map(|r| mw_to_w(r.power_mw)),
                    energy_mj: readings.and_then(|r| r.energy_mj),
                    held_by,
                    pre_event_w: baseline.map(mw_to_w),
                    error,
                    drift_corrections,
                    cap_unreliable,
                    mig_instances: gpus.mig_instances(g.index).ok().flatten(),
                }
            })
            .collect()
    }

    /// GPUs the agent serves without: lost or unreadable at start, hung now, or no longer
    /// listed by the driver (once each, by index).
    fn unavailable(&self) -> Vec<crate::api::UnavailableGpu> {
        let mut out = self.gpus().unavailable();
        for v in self
            .inner
            .vanished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            if out.iter().all(|u| u.index != v.index) {
                out.push(v.clone());
            }
        }
        out.sort_by_key(|u| u.index);
        out
    }

    /// Whether the last readiness check passed, else why not: what `GET /readyz` says.
    pub fn readiness(&self) -> Result<(), String> {
        self.inner.ready.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// `GET /v1/health`.
    #[must_use]
    pub fn health(&self) -> Health {
        let (leases, pending_restore, restore_retries) =
            self.with_core(|book, _, _| (book.summaries(), book.pending_restore(), book.restore_retries()));
        Health {
            gpu_backend: self.gpus().backend(),
            ready: self.is_ready(),
            not_ready_reason: self.readiness().err(),
            hostname: self.inner.config.hostname.clone(),
            gpus: self.gpus().gpus().len(),
            leases,
            pending_restore,
            restore_retries,
            unavailable_gpus: self.unavailable(),
            warnings: self
                .inner
                .notices
                .iter()
                .cloned()
                .chain(
                    self.inner
                        .warnings
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .iter()
                        .cloned(),
                )
                .collect(),
        }
    }

    /// `GET /metrics`: dcgm-exporter-style Prometheus text.
    #[must_use]
    pub fn metrics_text(&self) -> String {
        let gpus = self.gpus();
        let drift = self.with_core(|book, _, _| book.drift_corrections().clone());
        let rows: Vec<GpuRow> = gpus
            .gpus()
            .iter()
            .map(|g| {
                let limits = gpus.limits(g.index).ok();
                let readings = gpus.readings(g.index).ok();
                GpuRow {
                    index: g.index,
                    minor: g.minor,
                    uuid: g.uuid.clone(),
                    pci: g.pci.clone(),
                    model: g.name.clone(),
                    power_w: readings.map(|r| mw_to_w(r.power_mw)),
                    dram_active: readings.and_then(|r| r.dram_active),
                    mem_copy_util_pct: readings.and_then(|r| r.mem_copy_util_pct),
                    limit_w: limits.map(|l| mw_to_w(l.requested_mw)),
                    enforced_w: limits.map(|l| mw_to_w(l.enforced_mw)),
                    energy_mj: readings.and_then(|r| r.energy_mj),
                    drift_corrections: drift.get(&g.uuid).copied().unwrap_or(0),
                }
            })
            .collect();
        let mut text = metrics::render(&self.inner.config.hostname, &rows);
        let now = self.inner.clock.now();
        let (jobs, refused) = {
            let mut windows = self.throughput();
            (windows.summaries(now), windows.refusals().clone())
        };
        metrics::render_throughput(&mut text, &self.inner.config.hostname, &jobs, &refused);
        let gpus_unavailable = self.unavailable().len();
        let leases = self.with_core(|book, _, _| metrics::LeaseCounts {
            held: book.held(),
            expired_total: book.expired_total(),
            restores_pending: book.pending_restore().len(),
            gpus_unavailable,
            fence_epoch: book.fence_epoch(),
            fenced_total: book.fenced_total(),
        });
        metrics::render_leases(&mut text, &self.inner.config.hostname, leases);
        text
    }
}
