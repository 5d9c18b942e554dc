//! The site meter from its feeds, and what the gateway may believe of it. Pure: readings and
//! the clock are inputs.
//!
//! A site meter is one or more feeds (utility incomers, a PDU sum from Prometheus, …), each with
//! a sign: `+1` for power drawn through it, `−1` for power it sends back (on-site generation or
//! export metered separately). Every reading is screened before it counts ([`FeedScreen`]): not a
//! finite number, negative, or over the absurd limit (10× the facility's maximum by default) is
//! refused and counted; a jump beyond the plausible step is held as *suspect* and accepted only
//! when the next reading confirms it, so one corrupt register cannot swing a plan but a real
//! step (a cluster tripping) is believed one poll later.
//!
//! [`site_meter`] then sums the feeds. Only when every feed has a screened reading no older
//! than the allowed age is the figure **measured**. Otherwise the gateway must act as if the meter
//! were at its worst plausible value: the facility model's **upper** estimate, with the quality
//! saying why (**stale**: a feed's last reading is too old; **missing**: a feed has none).
//! Without any meter source configured the figure is the model's (**model**), and it is never
//! called measured.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where a site-meter figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quality {
    /// Every feed read, screened and fresh: the meter's own figure.
    Measured,
    /// A feed's latest reading is older than allowed: the model's upper estimate stands in.
    Stale,
    /// A feed has no usable reading (never read, refused, or its source fails): the model's
    /// upper estimate stands in.
    Missing,
    /// No meter source is configured: the facility model's estimate, by design.
    Model,
}

impl Quality {
    /// Every quality, in the order the metrics list them.
    pub const ALL: [Quality; 4] = [Quality::Measured, Quality::Model, Quality::Stale, Quality::Missing];

    /// Whether the figure is the meter's, not a model's.
    #[must_use]
    pub fn is_measured(self) -> bool {
        self == Quality::Measured
    }

    /// The name used in the API, the ledger and reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Quality::Measured => "measured",
            Quality::Stale => "stale",
            Quality::Missing => "missing",
            Quality::Model => "model",
        }
    }
}

/// One reading of one feed, as its source gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedReading {
    /// When the value was measured (the source's time where it gives one, else when read).
    pub at: DateTime<Utc>,
    /// Power through the feed, kW, never negative (direction is the feed's sign).
    pub kw: f64,
}

/// Why a reading does not count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "refused", rename_all = "snake_case")]
pub enum ReadingRefusal {
    /// NaN or infinite.
    #[error("the reading is not a finite number")]
    NotFinite,
    /// Below zero.
    #[error("the reading is negative ({kw} kW): a feed's direction is its configured sign, not the value's")]
    Negative {
        /// The value.
        kw: f64,
    },
    /// Over the absurd limit.
    #[error(
        "the reading ({kw} kW) is over {limit_kw} kW, 10 times the facility's maximum: not a plausible meter figure"
    )]
    Absurd {
        /// The value.
        kw: f64,
        /// The limit.
        limit_kw: f64,
    },
    /// A step larger than plausible, not yet confirmed by the next reading.
    #[error(
        "the reading jumps from {from_kw} kW to {kw} kW, over the plausible step of {limit_kw} kW; held until the next reading confirms it"
    )]
    Suspect {
        /// The last accepted value.
        from_kw: f64,
        /// The value.
        kw: f64,
        /// The step limit.
        limit_kw: f64,
    },
    /// Older than or as old as the last accepted reading.
    #[error("the reading is not newer than the last one accepted")]
    NotNewer,
}

/// The screening limits of one site.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScreenLimits {
    /// Readings above this are refused (default: 10× the facility's maximum).
    pub absurd_kw: f64,
    /// A change from the last accepted reading larger than this is held until confirmed.
    pub max_step_kw: f64,
    /// The confirming reading must lie within this of the suspect one.
    pub confirm_within_kw: f64,
}

impl ScreenLimits {
    /// Limits for a facility whose meter can reach `facility_max_kw`: absurd beyond 10× that,
    /// a step over half of it held for confirmation, confirmed within 5 % of it.
    #[must_use]
    pub fn for_facility(facility_max_kw: f64) -> Self {
        Self {
            absurd_kw: 10.0 * facility_max_kw,
            max_step_kw: 0.5 * facility_max_kw,
            confirm_within_kw: 0.05 * facility_max_kw,
        }
    }
}

/// One feed's screening state: the last accepted reading and a suspect one awaiting
/// confirmation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FeedScreen {
    /// The latest reading that counts.
    pub accepted: Option<FeedReading>,
    /// A reading that jumped, held until the next one confirms or replaces it.
    pub suspect: Option<FeedReading>,
    /// Readings refused since start.
    pub refused: u64,
}

impl FeedScreen {
    /// Screens `reading`; on success it becomes the feed's accepted reading.
    ///
    /// # Errors
    /// Why the reading does not count; the state keeps the last accepted reading.
    pub fn offer(&mut self, reading: FeedReading, limits: &ScreenLimits) -> Result<(), ReadingRefusal> {
        let verdict = self.judge(&reading, limits);
        match &verdict {
            Ok(()) => {
                self.accepted = Some(reading);
                self.suspect = None;
            }
            Err(ReadingRefusal::Suspect { .. }) => {
                self.refused += 1;
                self.suspect = Some(reading);
            }
            Err(_) => self.refused += 1,
        }
        verdict
    }

    fn judge(&self, reading: &FeedReading, limits: &ScreenLimits) -> Result<(), ReadingRefusal> {
        let kw = reading.kw;
        if !kw.is_finite() {
            return Err(ReadingRefusal::NotFinite);
        }
        if kw < 0.0 {
            return Err(ReadingRefusal::Negative { kw });
        }
        if kw > limits.absurd_kw {
            return Err(ReadingRefusal::Absurd {
                kw,
                limit_kw: limits.absurd_kw,
            });
        }
        let Some(last) = &self.accepted else {
            return Ok(());
        };
        if reading.at <= last.at {
            return Err(ReadingRefusal::NotNewer);
        }
        if (kw - last.kw).abs() <= limits.max_step_kw {
            return Ok(());
        }
        // A jump: believed when it repeats.
        match &self.suspect {
            Some(suspect) if reading.at > suspect.at && (kw - suspect.kw).abs() <= limits.confirm_within_kw => Ok(()),
            _ => Err(ReadingRefusal::Suspect {
                from_kw: last.kw,
                kw,
                limit_kw: limits.max_step_kw,
            }),
        }
    }
}

/// One feed of the site meter, as configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feed {
    /// The source's id, recorded with every sample.
    pub id: String,
    /// `+1.0`: power drawn through this feed adds to the site; `−1.0`: power sent back
    /// through it (generation, export) subtracts.
    pub sign: f64,
}

/// One feed's part in a site-meter figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedState {
    /// The feed.
    pub id: String,
    /// Its sign.
    pub sign: f64,
    /// Its latest accepted reading, if any.
    pub reading: Option<FeedReading>,
    /// Its quality now.
    pub quality: Quality,
}

/// The site meter the gateway acts on, with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteMeter {
    /// kW the gateway acts on: the feeds' signed sum when measured, otherwise the facility
    /// model's upper estimate.
    pub kw: f64,
    /// Where `kw` comes from.
    pub quality: Quality,
    /// The signed sum of the feeds' latest accepted readings when every feed has one, even if
    /// some are stale: shown beside a fallback, never acted on then.
    pub last_measured_kw: Option<f64>,
    /// The oldest feed reading's time, when every feed has one.
    pub measured_at: Option<DateTime<Utc>>,
    /// Each feed.
    pub feeds: Vec<FeedState>,
}

/// The site meter at `now` from `feeds` (each with its screening state), readings older than
/// `max_age_s` counting as stale, `model_upper_kw` standing in when any feed is not fresh.
/// With no feeds at all the figure is the model's nominal estimate, `model_nominal_kw`.
#[must_use]
pub fn site_meter(
    feeds: &[(Feed, &FeedScreen)],
    now: DateTime<Utc>,
    max_age_s: f64,
    model_nominal_kw: f64,
    model_upper_kw: f64,
) -> SiteMeter {
    if feeds.is_empty() {
        return SiteMeter {
            kw: model_nominal_kw,
            quality: Quality::Model,
            last_measured_kw: None,
            measured_at: None,
            feeds: Vec::new(),
        };
    }
    let states: Vec<FeedState> = feeds
        .iter()
        .map(|(feed, screen)| {
            let reading = screen.accepted.clone();
            let quality = match &reading {
                None => Quality::Missing,
                Some(r) if age_s(now, r.at) > max_age_s => Quality::Stale,
                Some(_) => Quality::Measured,
            };
            FeedState {
                id: feed.id.clone(),
                sign: feed.sign,
                reading,
                quality,
            }
        })
        .collect();
    let all_read = states.iter().all(|s| s.reading.is_some());
    let last_measured_kw = all_read.then(|| {
        states
            .iter()
            .filter_map(|s| s.reading.as_ref().map(|r| s.sign * r.kw))
            .sum::<f64>()
    });
    let measured_at = all_read
        .then(|| states.iter().filter_map(|s| s.reading.as_ref().map(|r| r.at)).min())
        .flatten();
    let quality = if states.iter().any(|s| s.quality == Quality::Missing) {
        Quality::Missing
    } else if states.iter().any(|s| s.quality == Quality::Stale) {
        Quality::Stale
    } else {
        Quality::Measured
    };
    let kw = match (quality, last_measured_kw) {
        // A net figure below zero (export above the load) is real; the site draws nothing.
        (Quality::Measured, Some(sum)) => sum.max(0.0),
        _ => model_upper_kw,
    };
    SiteMeter {
        kw,
        quality,
        last_measured_kw,
        measured_at,
        feeds: states,
    }
}

/// The facility model's side of the site meter for one telemetry reading: the screen's limit
/// and the figures that stand in for the meter when its feeds cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelMeter {
    /// The facility's maximum draw, kW: the screen refuses readings far above it.
    pub facility_max_kw: f64,
    /// The model's nominal figure for the GPU power read (the meter when no source is
    /// configured).
    pub nominal_kw: f64,
    /// The model's upper figure, or the backend's own estimate when that is higher (it counts
    /// unmeasured GPUs at their maximum): what the gateway acts on when a feed is stale or
    /// missing.
    pub upper_kw: f64,
}

/// The facility model's side of the site meter (see [`ModelMeter`]).
///
/// `configured_max_kw` is the site's configured facility maximum (0: unset, then the model's
/// upper figure with every GPU of every node at `gpu_max_kw_per_node`); `backend_kw` and
/// `backend_measured` are the cluster backend's own meter figure and whether it is a reading
/// (a reading is not an estimate of the model's kind and does not raise the upper figure).
/// When the model refuses the input (a non-finite power), the backend's figure stands for both.
#[must_use]
pub fn model_meter(
    facility: &crate::facility::FacilityModel,
    configured_max_kw: f64,
    gpu_max_kw_per_node: f64,
    gpu_board_power: crate::units::Watts,
    nodes: u32,
    backend_kw: f64,
    backend_measured: bool,
) -> ModelMeter {
    let settled = crate::facility::CoolingState::Settled;
    let facility_max_kw = if configured_max_kw > 0.0 {
        configured_max_kw
    } else {
        let all_gpus = crate::units::Watts(gpu_max_kw_per_node * 1000.0 * f64::from(nodes));
        facility
            .forward(all_gpus, nodes, &settled)
            .map_or(0.0, |m| m.hi.value())
    };
    let (nominal_kw, upper_kw) = match facility.forward(gpu_board_power, nodes, &settled) {
        Ok(m) => (m.nominal.value(), m.hi.value()),
        Err(_) => (backend_kw, backend_kw),
    };
    let backend_estimate = if backend_measured { 0.0 } else { backend_kw };
    ModelMeter {
        facility_max_kw,
        nominal_kw,
        upper_kw: upper_kw.max(backend_estimate),
    }
}

/// Seconds from `then` to `now`; a reading from the future (clock skew) counts as fresh now.
fn age_s(now: DateTime<Utc>, then: DateTime<Utc>) -> f64 {
    ((now - then).num_milliseconds() as f64 / 1000.0).max(0.0)
}

#[cfg(test)]
mod tests;
