//! The read side: what every reader sees, served from the snapshot the driver publishes after
//! each decision and from the ledger's flushed records. It holds no controller, no cluster
//! backend and no ledger writer, so nothing that serves a reader (the HTTP API's reads, the
//! dashboard stream, `/metrics`, MQTT status, OpenADR reports) can change a cap or add a
//! record; a replica that does not lead serves the same read side.

use super::views::{EventView, JobView, PlanView, StatusView};
use crate::clock::Clock;
use crate::config::Config;
use crate::ledger::LedgerReader;
use flexgate_policies::control::Snapshot;
use flexgate_policies::event::{IntervalDelivery, Phase, interval_delivery};
use std::sync::{Arc, PoisonError, RwLock};

/// What reads are served from.
pub(crate) struct Published {
    pub snapshot: Snapshot,
    /// When the plan in force was recorded and flushed (monotonic; for latency measurements).
    pub plan_recorded_at: Option<std::time::Instant>,
}

/// Where the driver publishes each decision's snapshot and readers take a copy of it. The lock
/// is held only to swap or clone an `Arc`: a reader never waits for a decision, the disk or an
/// agent.
pub(crate) struct Board {
    slot: RwLock<Arc<Published>>,
}

impl Board {
    pub(crate) fn new(first: Published) -> Self {
        Self {
            slot: RwLock::new(Arc::new(first)),
        }
    }

    /// The snapshot in force.
    pub(crate) fn get(&self) -> Arc<Published> {
        self.slot.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Publish `next`, built from the one in force (under the write lock, so two publishers
    /// cannot lose each other's change).
    pub(crate) fn publish(&self, next: impl FnOnce(&Published) -> Published) {
        let mut slot = self.slot.write().unwrap_or_else(PoisonError::into_inner);
        *slot = Arc::new(next(&slot));
    }
}

/// An event's delivery, for reports: see [`ReadSide::event_delivery`].
#[derive(Debug, Clone)]
pub struct EventDelivery {
    /// The revision in force (a cancellation counts).
    pub revision: u64,
    /// Test events are recorded, never acted on.
    pub test: bool,
    /// The phase now.
    pub phase: Phase,
    /// Per interval with a ceiling, measured so far.
    pub intervals: Vec<IntervalDelivery>,
}

/// Which agents answered their last call (for `/metrics`): a view of the backend that cannot
/// command it.
pub(crate) type AgentsAnswering = Arc<dyn Fn() -> Vec<(String, bool)> + Send + Sync>;

/// Everything a reader may ask of the gateway.
pub struct ReadSide {
    pub(crate) config: Config,
    pub(crate) clock: Clock,
    pub(crate) board: Arc<Board>,
    pub(crate) ledger: LedgerReader,
    /// Latency histograms and the ledger's flush failures (`GET /metrics`), shared with the
    /// driver that observes them.
    pub(crate) metrics: Arc<super::metrics::GatewayMetrics>,
    /// The `[meter]` sources' counts of good and refused readings.
    pub(crate) meter: Option<Arc<crate::meter::MeterSources>>,
    pub(crate) agents_answering: AgentsAnswering,
    /// Set when the server begins to stop: long-lived answers (`GET /v1/stream`) end at once
    /// instead of holding the shutdown for the HTTP server's grace period.
    pub(crate) stopping: std::sync::atomic::AtomicBool,
    /// The HTTP API's connection counts (open now, refused at a limit), kept by the server
    /// that serves this gateway ([`ReadSide::http_connections`]), read for `/metrics`.
    pub(crate) http_connections: Arc<flexgate_httpserve::Counters>,
    /// This gateway's role among its replicas.
    pub(crate) role: tokio::sync::watch::Receiver<super::Role>,
    /// The replicas as last read from etcd (`[ha]`), published by the replica's supervisor.
    pub(crate) replication: RwLock<Option<super::views::ReplicationView>>,
    /// The leading term's epoch last seen, and how many times it changed.
    pub(crate) last_epoch: std::sync::atomic::AtomicU64,
    pub(crate) term_changes: std::sync::atomic::AtomicU64,
}

impl ReadSide {
    /// The clock everything runs on.
    #[must_use]
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// This gateway's role among its replicas ([`super::Role::Single`] without `[ha]`).
    #[must_use]
    pub fn role(&self) -> super::Role {
        self.role.borrow().clone()
    }

    /// Publish the replicas as read from etcd (the replica's supervisor does, every third of a
    /// term): a read model, like the board.
    pub fn publish_replication(&self, view: super::views::ReplicationView) {
        *self.replication.write().unwrap_or_else(PoisonError::into_inner) = Some(view);
    }

    /// Note the leading term's epoch as this replica learns it (for the term-change metric).
    pub fn note_epoch(&self, epoch: u64) {
        use std::sync::atomic::Ordering;
        let previous = self.last_epoch.swap(epoch, Ordering::SeqCst);
        if previous != epoch && previous != 0 {
            self.term_changes.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The replicas as last read, with this replica's role now.
    #[must_use]
    pub fn replication(&self) -> Option<super::views::ReplicationView> {
        let mut view = self
            .replication
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        match self.role() {
            super::Role::Leader { epoch, replica } => {
                view.role = "leader".into();
                view.epoch = Some(epoch);
                view.leader = Some(replica);
                view.reason = None;
            }
            super::Role::Standby { leader, reason, .. } => {
                view.role = "standby".into();
                view.epoch = leader.as_ref().map(|l| l.epoch);
                view.leader_url = leader.as_ref().and_then(|l| l.url.clone());
                view.leader = leader.map(|l| l.replica);
                view.reason = reason;
            }
            super::Role::Single => return None,
        }
        Some(view)
    }

    /// The published snapshot, for readers that watch it change (`GET /v1/stream`).
    pub(crate) fn published(&self) -> Arc<Published> {
        self.board.get()
    }

    /// Tell long-lived readers that the gateway is stopping.
    pub fn begin_shutdown(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether [`ReadSide::begin_shutdown`] was called.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The meter's recent history (`GET /v1/meter/history`): the last `seconds` of readings the
    /// gateway keeps, with the ceiling in force at each and where each figure came from.
    pub async fn meter_history(&self, seconds: u64) -> super::views::MeterHistoryView {
        let published = self.board.get();
        let snapshot = &published.snapshot;
        let since = self.clock.now() - chrono::Duration::seconds(i64::try_from(seconds).unwrap_or(21_600));
        let points = snapshot
            .meter_history
            .iter()
            .filter(|(at, _, _)| *at >= since)
            .map(|(at, kw, quality)| super::views::MeterPoint {
                at: *at,
                meter_w: kw * 1000.0,
                quality: quality.as_str(),
                ceiling_w: snapshot.book.effective_ceiling(*at).map(|c| c.ceiling_kw * 1000.0),
            })
            .collect();
        super::views::MeterHistoryView {
            time_zone: self.config.site.time_zone.clone(),
            points,
        }
    }

    /// The audit of `event_id` from the live ledger (`GET /v1/events/{id}/audit`): `Ok(None)`
    /// when the ledger holds nothing of it.
    pub async fn audit(&self, event_id: &str) -> Result<Option<crate::reports::audit::AuditReport>, String> {
        let ledger = self.ledger.clone();
        let id = event_id.to_string();
        let window_s = self.config.site.baseline_window_s;
        let tz: chrono_tz::Tz = self.config.site.time_zone.parse().unwrap_or(chrono_tz::Tz::UTC);
        tokio::task::spawn_blocking(move || {
            let records = ledger
                .iter_from(1)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("reading the ledger: {e}"))?;
            crate::reports::audit::build(&records, &id, window_s, tz).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| format!("the audit did not complete: {e}"))?
    }

    /// What event `event_id` delivered so far, interval by interval, measured by the meter
    /// readings the gateway keeps (six hours): a model's figures are left out and counted in
    /// each interval's `modelled_samples`; `None` for an unknown event.
    pub async fn event_delivery(&self, event_id: &str) -> Option<EventDelivery> {
        let published = self.board.get();
        let snapshot = &published.snapshot;
        let entry = snapshot.book.get(event_id)?;
        let now = self.clock.now();
        let meter: Vec<(chrono::DateTime<chrono::Utc>, f64)> = snapshot
            .meter_history
            .iter()
            .filter(|(_, _, quality)| quality.is_measured())
            .map(|(at, kw, _)| (*at, *kw))
            .collect();
        let modelled: Vec<chrono::DateTime<chrono::Utc>> = snapshot
            .meter_history
            .iter()
            .filter(|(_, _, quality)| !quality.is_measured())
            .map(|(at, _, _)| *at)
            .collect();
        Some(EventDelivery {
            revision: entry.revision(),
            test: entry.event.test,
            phase: entry.phase_at(now),
            intervals: interval_delivery(entry, &meter, &modelled, now),
        })
    }

    /// Status for `GET /v1/status`.
    pub async fn status(&self) -> StatusView {
        let mut status = StatusView::build(
            &self.board.get().snapshot,
            self.clock.now(),
            &self.ledger.head().1,
            &self.config.gateway.site,
            &self.config.site.time_zone,
        );
        status.replication = self.replication();
        status.ha = status
            .replication
            .clone()
            .unwrap_or_else(super::views::ReplicationView::single);
        status
    }

    /// The phase of the binding event now (`None`: nothing constrains the site).
    #[must_use]
    pub fn phase(&self) -> Option<Phase> {
        let published = self.board.get();
        published
            .snapshot
            .book
            .effective_ceiling(self.clock.now())
            .map(|c| c.phase)
    }

    /// Events for `GET /v1/events`.
    pub async fn events(&self) -> Vec<EventView> {
        let published = self.board.get();
        let now = self.clock.now();
        published
            .snapshot
            .book
            .events()
            .map(|e| EventView::build(e, now))
            .collect()
    }

    /// The id and revision of every event in the book that `source` sent (an adapter that
    /// resumes finds what it submitted before: a restart, or a replica taking over).
    pub fn events_from(&self, source: flexgate_policies::event::EventSource) -> Vec<(String, u64)> {
        self.board
            .get()
            .snapshot
            .book
            .events()
            .filter(|e| e.event.source == source)
            .map(|e| (e.event.id.to_string(), e.event.revision))
            .collect()
    }

    /// One event for `GET /v1/events/{id}`, with its full record.
    pub async fn event(&self, id: &str) -> Option<serde_json::Value> {
        self.event_view(id).await.and_then(|v| serde_json::to_value(v).ok())
    }

    /// [`ReadSide::event`] as its typed view.
    pub async fn event_view(&self, id: &str) -> Option<super::views::EventDetailView> {
        let published = self.board.get();
        let entry = published.snapshot.book.get(id)?;
        Some(super::views::EventDetailView {
            summary: EventView::build(entry, self.clock.now()),
            detail: serde_json::to_value(entry).unwrap_or(serde_json::Value::Null),
        })
    }

    /// Jobs for `GET /v1/jobs`.
    pub async fn jobs(&self) -> Vec<JobView> {
        let published = self.board.get();
        let s = &published.snapshot;
        s.jobs
            .iter()
            .map(|j| JobView::build(j, s.caps.get(&j.spec.id), s.knowledge.get(&j.spec.id)))
            .collect()
    }

    /// When the plan in force was computed and its record flushed (monotonic clock).
    pub async fn plan_recorded_at(&self) -> Option<std::time::Instant> {
        self.board.get().plan_recorded_at
    }

    /// The plan in force, if any.
    pub async fn plan(&self) -> Option<PlanView> {
        self.board.get().snapshot.plan.as_deref().map(PlanView::build)
    }

    /// `GET /v1/plan`: the plan in force, or an empty plan (`in_force: false`) when none is.
    pub async fn plan_view(&self) -> PlanView {
        self.plan().await.unwrap_or_else(PlanView::none)
    }

    /// The site's flexibility curve now (`GET /v1/flexibility`); `None` before the first
    /// telemetry, or when the policy is a proportional rule (it has no curves to cost it on).
    pub async fn flexibility(&self) -> Option<Arc<flexgate_policies::control::flexibility::SiteFlexibility>> {
        self.board.get().snapshot.flexibility.clone()
    }

    /// The forecast of the hours ahead (`GET /v1/forecast`); `None` without a flexibility curve.
    pub async fn forecast(&self) -> Option<Arc<flexgate_policies::forecast::Forecast>> {
        self.board.get().snapshot.forecast.clone()
    }

    /// The declared hours in force (`GET /v1/declarations`): for each hour, the latest
    /// declaration's figure, with that declaration.
    pub async fn declared(
        &self,
    ) -> Arc<
        Vec<(
            Arc<flexgate_policies::forecast::declare::Declaration>,
            flexgate_policies::forecast::declare::DeclaredHour,
        )>,
    > {
        self.board.get().snapshot.declared.clone()
    }

    /// The counters the HTTP server serving this gateway keeps its connection counts in.
    #[must_use]
    pub fn http_connections(&self) -> Arc<flexgate_httpserve::Counters> {
        self.http_connections.clone()
    }

    /// The exposition for `GET /metrics` (OpenMetrics text, base units, no NaN).
    pub async fn metrics(&self) -> String {
        let status = self.status().await;
        let c = self.board.get().snapshot.counters;
        let scrape = super::metrics::Scrape {
            events_accepted: c.events_accepted,
            events_refused: c.events_refused,
            plans: c.plans,
            dispatch_failures: c.dispatch_failures,
            cap_drifts: c.drifts,
            cap_retries: c.cap_retries,
            trims: c.trims,
            http_connections_open: self.http_connections.open(),
            http_connections_refused: self.http_connections.refused(),
            active_events: status.active_events.len() as u64,
            jobs: status.jobs as u64,
            caps_unconfirmed: status.unconfirmed_jobs as u64,
            jobs_suspended: status.suspended_jobs as u64,
            meter_ceiling_watts: status.meter_ceiling_w,
            gpu_budget_watts: status.gpu_budget_w,
            meter: status.meter_w.zip(status.meter_quality),
            gpu_power_watts: status.measured_gpu_w,
            trim_watts: status.trim_w,
            flex_available_watts: status.flex_available_w,
            ledger_records: self.ledger.head().0,
            ledger_writer_failed: self.ledger.writer_failed(),
            meter_sources: self.meter.as_ref().map(|m| m.counts()).unwrap_or_default(),
            agents: (self.agents_answering)(),
            replication: self.replication(),
            term_changes: self.term_changes.load(std::sync::atomic::Ordering::SeqCst),
        };
        self.metrics.render(&scrape)
    }
}
