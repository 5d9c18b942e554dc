//! Meter sources: the `[meter]` feeds (Modbus TCP, Prometheus) polled in the background, each
//! reading screened, and the site meter the control loop acts on (`flexgate_policies::meter`
//! decides what counts; this module only reads and keeps the latest state).
//!
//! Each source has its own task: read (no lock held), then offer the reading to the feed's
//! screen under a short lock. The control loop asks [`MeterSources::site_meter`] for the figure
//! at each telemetry pass, so a source that stops answering makes the figure stale after
//! `max_age_s`, and the facility model's upper estimate stands in until it answers again.

mod config;

pub use config::{Common, MeterConfig, MeterSourceConfig, ModbusSource, PrometheusSource};

use crate::clock::Clock;
use flexgate_policies::meter::{Feed, FeedReading, FeedScreen, ScreenLimits, SiteMeter};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// What one source's task shares with the control loop.
#[derive(Debug, Default)]
struct SourceState {
    screen: FeedScreen,
    /// The last read failure, until a read succeeds (for status and logs).
    last_error: Option<String>,
    /// Read failures since start.
    read_errors: u64,
}

/// The running meter sources.
pub struct MeterSources {
    feeds: Vec<Feed>,
    states: Vec<Arc<Mutex<SourceState>>>,
    /// The screen's limits, set from the facility maximum by the control loop (the maximum
    /// may be derived from the cluster, known only once it has been read).
    limits: Arc<Mutex<Option<ScreenLimits>>>,
    max_age_s: f64,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for MeterSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeterSources")
            .field("feeds", &self.feeds)
            .field("max_age_s", &self.max_age_s)
            .finish_non_exhaustive()
    }
}

impl Drop for MeterSources {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// How one source reads.
enum Reader {
    Modbus {
        meter: flexgate_modbus::ModbusMeter,
        register: flexgate_modbus::Register,
    },
    Prometheus(flexgate_prometheus::InstantQuery),
}

impl Reader {
    /// The source's figure, kW. A value that is not a number (a Modbus float register holding
    /// NaN while the meter starts, a PromQL answer of `NaN`) is a reading the meter gave, so it
    /// comes back as one, and the screen refuses it and counts it with the other refused
    /// readings (`flexgate_meter_readings_refused_total`): a read error is a source that did
    /// not answer, and the two tell an operator different things.
    async fn read_kw(&mut self) -> Result<f64, String> {
        match self {
            Reader::Modbus { meter, register } => match meter.read_kw(register).await {
                Ok(kw) => Ok(kw),
                Err(flexgate_modbus::ReadError::Decode {
                    source: flexgate_modbus::DecodeError::NotFinite(raw),
                    ..
                }) => Ok(raw),
                Err(e) => Err(e.to_string()),
            },
            Reader::Prometheus(query) => match query.read().await {
                Ok(sample) => Ok(sample.value),
                Err(flexgate_prometheus::QueryError::Answer {
                    source: flexgate_prometheus::AnswerError::NotFinite(_),
                    ..
                }) => Ok(f64::NAN),
                Err(e) => Err(e.to_string()),
            },
        }
    }
}

impl MeterSources {
    /// Starts one polling task per source of `config` (already validated), readings stamped
    /// with `clock`. Readings are screened once [`Self::set_facility_max_kw`] has given the
    /// limits; until then (the first control pass, within a second of start) they are dropped.
    ///
    /// # Errors
    /// A source that cannot be set up (an unusable address or URL).
    pub fn start(config: &MeterConfig, clock: Clock) -> Result<Arc<Self>, String> {
        let limits: Arc<Mutex<Option<ScreenLimits>>> = Arc::default();
        let mut feeds = Vec::with_capacity(config.sources.len());
        let mut states = Vec::with_capacity(config.sources.len());
        let mut tasks = Vec::with_capacity(config.sources.len());
        for source in &config.sources {
            let common = source.common();
            let timeout = Duration::from_millis(common.timeout_ms);
            let reader = match source {
                MeterSourceConfig::Modbus(m) => {
                    let addr = m
                        .address
                        .parse()
                        .map_err(|e| format!("meter source {:?}: address {:?}: {e}", common.id, m.address))?;
                    Reader::Modbus {
                        meter: flexgate_modbus::ModbusMeter::new(addr, timeout),
                        register: m.register.clone(),
                    }
                }
                MeterSourceConfig::Prometheus(p) => {
                    // The platform's roots for an https:// server, ring as everywhere else.
                    let http = flexgate_openadr::http::client(None, timeout)
                        .map_err(|e| format!("meter source {:?}: HTTP client: {e}", common.id))?;
                    Reader::Prometheus(
                        flexgate_prometheus::InstantQuery::new(http, &p.url, &p.query, timeout)
                            .map_err(|e| format!("meter source {:?}: {e}", common.id))?,
                    )
                }
            };
            let state = Arc::new(Mutex::new(SourceState::default()));
            feeds.push(Feed {
                id: common.id.clone(),
                sign: common.sign,
            });
            let period = Duration::from_secs_f64(common.poll_s);
            tasks.push(tokio::spawn(poll(
                common.id.clone(),
                reader,
                period,
                limits.clone(),
                clock,
                state.clone(),
            )));
            states.push(state);
        }
        Ok(Arc::new(Self {
            feeds,
            states,
            limits,
            max_age_s: config.max_age_s,
            tasks,
        }))
    }

    /// The facility's maximum at the meter, kW, from which the screen's limits follow (absurd
    /// beyond 10×, a step over half held for confirmation).
    pub fn set_facility_max_kw(&self, kw: f64) {
        if kw.is_finite() && kw > 0.0 {
            *self.limits.lock().unwrap_or_else(PoisonError::into_inner) = Some(ScreenLimits::for_facility(kw));
        }
    }

    /// The site meter now: measured when every feed is fresh, otherwise `model_upper_kw` with
    /// the reason in its quality.
    #[must_use]
    pub fn site_meter(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        model_nominal_kw: f64,
        model_upper_kw: f64,
    ) -> SiteMeter {
        let screens: Vec<FeedScreen> = self
            .states
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).screen.clone())
            .collect();
        let pairs: Vec<(Feed, &FeedScreen)> = self.feeds.iter().cloned().zip(screens.iter()).collect();
        flexgate_policies::meter::site_meter(&pairs, now, self.max_age_s, model_nominal_kw, model_upper_kw)
    }

    /// Per source: readings refused by the screen and reads that failed, since start.
    #[must_use]
    pub fn counts(&self) -> Vec<(String, u64, u64)> {
        self.feeds
            .iter()
            .zip(&self.states)
            .map(|(feed, s)| {
                let s = s.lock().unwrap_or_else(PoisonError::into_inner);
                (feed.id.clone(), s.screen.refused, s.read_errors)
            })
            .collect()
    }
}

/// One source's loop: read, screen, wait for the next period.
async fn poll(
    id: String,
    mut reader: Reader,
    period: Duration,
    limits: Arc<Mutex<Option<ScreenLimits>>>,
    clock: Clock,
    state: Arc<Mutex<SourceState>>,
) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let read = reader.read_kw().await;
        let at = clock.now();
        let limits = *limits.lock().unwrap_or_else(PoisonError::into_inner);
        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
        match read {
            Ok(kw) => {
                if s.last_error.take().is_some() {
                    tracing::info!(source = %id, kw, "meter source answers again");
                }
                let Some(limits) = limits else {
                    tracing::debug!(source = %id, kw, "meter reading before the facility maximum is known: not used");
                    continue;
                };
                if let Err(refusal) = s.screen.offer(FeedReading { at, kw }, &limits) {
                    tracing::warn!(source = %id, kw, "meter reading refused: {refusal}");
                }
            }
            Err(e) => {
                s.read_errors += 1;
                if s.last_error.is_none() {
                    tracing::warn!(source = %id, "meter source failed: {e}; its last reading ages until it answers");
                }
                s.last_error = Some(e);
            }
        }
    }
}
