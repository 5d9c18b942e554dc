//! The interval store: the site meter as interval data, on disk beside the ledger
//! (`<data_dir>/intervals`, a sled database of its own, owner-only like the ledger).
//!
//! Two kinds of intervals are kept apart:
//!
//! - **the gateway's own**, 5-minute intervals **derived from the ledger**: every `meter_sample`
//!   record folded by [`IntervalBuilder`]. They are a cache of what the ledger proves, rebuilt
//!   from it at will ([`IntervalStore::catch_up`] resumes where it stopped), so a replica that
//!   follows the ledger holds the same intervals as the one that leads. Older than
//!   [`KEEP_5MIN_DAYS`] they are compacted to 15 minutes (a year is then about 43 k intervals).
//! - **imported** intervals: the utility's revenue-meter data (Green Button, CSV), each labelled
//!   with its source, kept as imported. Settlement uses them first
//!   ([`IntervalStore::settlement_series`]); a later import of the same times replaces them (a
//!   utility re-issues corrected data). They too come **from the ledger**: an import is
//!   checked ([`IntervalStore::check_import`]), recorded with its intervals (`meter_imported`
//!   records) and folded by [`IntervalStore::catch_up`] like the samples, so the whole store
//!   can be rebuilt from the ledger, replicas hold the same data, and what settlement used is
//!   tamper-evident.
//!
//! The gateway's intervals are keyed by their end (seconds since the epoch, big-endian, offset
//! so negative times sort), so ranges are key ranges; imported ones by the UTC day they end in,
//! one value per day (a year's import is 365 writes, not 105 k). Values are a small binary
//! layout ([`encode`]); the curtailment windows and event summaries, few, are JSON.

use crate::ledger::{LedgerError, LedgerReader};
use chrono::{DateTime, Duration, Utc};
use flexgate_policies::control::entry::{Entry, ImportedRow, MeterImported, PlanRecorded, ThroughputPoint};
use flexgate_policies::control::job_cost::{EventCost, EventCostFold};
use flexgate_policies::intervals::{Interval, IntervalBuilder, IntervalQuality, IntervalSeries, IntervalSource};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The gateway's own intervals, s.
pub const GATEWAY_INTERVAL_S: u32 = 300;

/// What its 5-minute intervals compact to after [`KEEP_5MIN_DAYS`], s.
pub const COMPACT_INTERVAL_S: u32 = 900;

/// Days the gateway's 5-minute intervals are kept before they are compacted.
pub const KEEP_5MIN_DAYS: i64 = 62;

/// Why the store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, read or written.
    #[error("interval store {dir}: {detail}")]
    Db {
        /// Its directory.
        dir: PathBuf,
        /// What sled said.
        detail: String,
    },
    /// No store in a directory that must hold one.
    #[error("no interval store in {0} (no meter data was kept or imported there)")]
    NotFound(PathBuf),
    /// The ledger could not be read while catching up.
    #[error("reading the ledger: {0}")]
    Ledger(#[from] LedgerError),
    /// Intervals that cannot be stored (overlapping, mixed lengths, impossible values).
    #[error("{0}")]
    Invalid(String),
}

/// What an import changed.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ImportSummary {
    /// Intervals stored.
    pub intervals: usize,
    /// Imported intervals of the same times it replaced.
    pub replaced: usize,
    /// Their length, s.
    pub length_s: i64,
    /// The first interval's start and the last one's end.
    pub from: Option<DateTime<Utc>>,
    /// See `from`.
    pub to: Option<DateTime<Utc>>,
    /// Intervals per quality.
    pub measured: usize,
    /// See `measured`.
    pub estimated: usize,
    /// See `measured`.
    pub missing: usize,
}

/// One imported interval the gateway's own disagrees with beyond the tolerance.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Disagreement {
    /// The interval's end.
    pub end: DateTime<Utc>,
    /// The imported figure, kW.
    pub imported_kw: f64,
    /// The gateway's figure over the same time, kW.
    pub gateway_kw: f64,
    /// `(gateway − imported) / imported`.
    pub share: f64,
}

/// The meter-integrity check: imported intervals against the gateway's own measured ones.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Comparison {
    /// The tolerance, as a share of the imported figure.
    pub tolerance: f64,
    /// Imported intervals that had a measured gateway figure over the same time.
    pub compared: usize,
    /// Those beyond the tolerance.
    pub disagreements: Vec<Disagreement>,
    /// The mean of `share` over the compared intervals (a meter or scale offset shows here).
    pub mean_share: Option<f64>,
}

/// An event as its latest interpretation in the ledger states it: what a settlement report
/// reads of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EventSummary {
    /// The event's id.
    pub id: String,
    /// Its revision.
    pub revision: u64,
    /// The program it names, if it does.
    pub program: Option<String>,
    /// A test event (never settled).
    pub test: bool,
    /// Its window's start.
    pub start: DateTime<Utc>,
    /// Its end (absent: open-ended).
    pub end: Option<DateTime<Utc>>,
    /// Its targets in words (`meter ceiling 800 kW`, `reduction 200 kW`), per interval.
    pub targets: Vec<String>,
    /// The reduction it asks for, kW, where it states one (a reduction or percentage target
    /// with its baseline); `None` for a ceiling, whose reduction depends on the baseline.
    pub asked_reduction_kw: Option<f64>,
    /// The lowest meter ceiling it sets, kW.
    pub lowest_ceiling_kw: Option<f64>,
    /// When it was received.
    pub received_at: DateTime<Utc>,
    /// The ledger record of this interpretation.
    pub seq: u64,
}

/// One curtailment window: the event, when the site began curtailing for it, and when it
/// stopped (`None`: still curtailing).
pub type Curtailment = (String, DateTime<Utc>, Option<DateTime<Utc>>);

/// The interval store of one data directory.
pub struct IntervalStore {
    dir: PathBuf,
    db: sled::Db,
    gateway: sled::Tree,
    compacted: sled::Tree,
    imported: sled::Tree,
    /// Curtailment windows by event id (`[start, end]`, end absent while it lasts), from the
    /// ledger's `event_phase` records: the event days a baseline passes over.
    curtailed: sled::Tree,
    /// The latest interpretation of each event, by id ([`EventSummary`]): what a season
    /// report needs without reading the whole ledger.
    events: sled::Tree,
    /// What each event cost the jobs ([`EventCostFold`] by event id), folded from the ledger's
    /// plans and throughput points.
    costs: sled::Tree,
    /// Each job's last uncapped throughput point `(at, tokens/s, tier)`, by job id: what a
    /// curtailment that starts later measures the job's slowdown against.
    last_uncapped: sled::Tree,
    /// The site's declarations (`declared` records, JSON) by ledger sequence: what an event is
    /// set against in the season report.
    declared: sled::Tree,
    /// Each forecast's first hour by when it was made (meter W within its cost ceiling, f64
    /// bits): the flexibility curve then, what the site could shed when an event came.
    curve_now: sled::Tree,
    meta: sled::Tree,
}

impl std::fmt::Debug for IntervalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntervalStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

const RESUME_KEY: &[u8] = b"ledger_resume_seq";

const SCHEMA_KEY: &[u8] = b"schema";

/// The store's layout: raised whenever what it derives from the ledger changes, so that an
/// older store is rebuilt rather than read half-derived.
const STORE_SCHEMA: &str = "flexgate-intervals/6";

/// The last ledger record whose plans and throughput points are folded into the events' costs
/// (the meter's resume point re-reads an open interval's records; a cost is folded once).
const COST_SEQ_KEY: &[u8] = b"cost_seq";

/// The ids of the events whose curtailment is still being folded (JSON list).
const COST_OPEN_KEY: &[u8] = b"cost_open";

/// An interval as stored: its end is the key; the value is its length (s, i64), its figure (f64
/// bits; NaN for none), its quality (one byte), its readings (u32) and its source (a tag byte,
/// then the label's UTF-8), big-endian. Binary rather than JSON: a year of 5-minute data is
/// 105 k values, written at every import and read at every report, and JSON (two RFC 3339
/// times each) made the import several times slower than parsing the file.
fn encode(interval: &Interval) -> Vec<u8> {
    let label = match &interval.source {
        IntervalSource::Gateway => "",
        IntervalSource::Imported(name) => name.as_str(),
    };
    let mut v = Vec::with_capacity(22 + label.len());
    v.extend_from_slice(&interval.length_s().to_be_bytes());
    v.extend_from_slice(&interval.kw.unwrap_or(f64::NAN).to_bits().to_be_bytes());
    v.push(match interval.quality {
        IntervalQuality::Measured => 0,
        IntervalQuality::Estimated => 1,
        IntervalQuality::Missing => 2,
    });
    v.extend_from_slice(&interval.samples.to_be_bytes());
    v.push(u8::from(matches!(interval.source, IntervalSource::Imported(_))));
    v.extend_from_slice(label.as_bytes());
    v
}

/// [`encode`]'s inverse, the end taken from the key; `None` for bytes it did not write.
fn decode(key: &[u8], value: &[u8]) -> Option<Interval> {
    let end = i64::from_be_bytes(<[u8; 8]>::try_from(key).ok()?) ^ i64::MIN;
    let end = DateTime::from_timestamp(end, 0)?;
    let length = i64::from_be_bytes(value.get(0..8)?.try_into().ok()?);
    let kw = f64::from_bits(u64::from_be_bytes(value.get(8..16)?.try_into().ok()?));
    let quality = match value.get(16)? {
        0 => IntervalQuality::Measured,
        1 => IntervalQuality::Estimated,
        2 => IntervalQuality::Missing,
        _ => return None,
    };
    let samples = u32::from_be_bytes(value.get(17..21)?.try_into().ok()?);
    let source = match value.get(21)? {
        0 => IntervalSource::Gateway,
        1 => IntervalSource::Imported(String::from_utf8(value.get(22..)?.to_vec()).ok()?),
        _ => return None,
    };
    Some(Interval {
        start: end - Duration::seconds(length),
        end,
        kw: (!kw.is_nan()).then_some(kw),
        quality,
        samples,
        source,
    })
}

/// The UTC day (days since the epoch) an interval ending at `end` is kept under: an interval
/// ending at midnight belongs to the day it closes.
fn day_of(end: DateTime<Utc>) -> i64 {
    (end.timestamp() - 1).div_euclid(86_400)
}

fn day_key(day: i64) -> [u8; 8] {
    (day as u64 ^ (1u64 << 63)).to_be_bytes()
}

/// A day of intervals: each its end (8 bytes), the length of its [`encode`]d value (u16), the
/// value.
fn encode_day<'a>(intervals: impl Iterator<Item = &'a Interval>) -> Vec<u8> {
    let mut v = Vec::new();
    for i in intervals {
        let one = encode(i);
        v.extend_from_slice(&key(i.end));
        v.extend_from_slice(&u16::try_from(one.len()).unwrap_or(u16::MAX).to_be_bytes());
        v.extend_from_slice(&one);
    }
    v
}

/// [`encode_day`]'s inverse; `None` for bytes it did not write.
fn decode_day(mut bytes: &[u8]) -> Option<Vec<Interval>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let k = bytes.get(0..8)?;
        let n = usize::from(u16::from_be_bytes(bytes.get(8..10)?.try_into().ok()?));
        out.push(decode(k, bytes.get(10..10 + n)?)?);
        bytes = bytes.get(10 + n..)?;
    }
    Some(out)
}

fn key(end: DateTime<Utc>) -> [u8; 8] {
    // Offset so that times before 1970 still sort before later ones.
    (end.timestamp() as u64 ^ (1u64 << 63)).to_be_bytes()
}

impl IntervalStore {
    /// The store of `data_dir` (`<data_dir>/intervals`); with `create`, made if absent.
    pub fn open(data_dir: &Path, create: bool) -> Result<Self, StoreError> {
        let dir = data_dir.join("intervals");
        let db_err = |e: &dyn std::fmt::Display| StoreError::Db {
            dir: dir.clone(),
            detail: e.to_string(),
        };
        if !create && !dir.join("db").is_file() {
            return Err(StoreError::NotFound(data_dir.to_path_buf()));
        }
        crate::ledger::private::create_private_dir(&dir).map_err(|e| db_err(&e))?;
        crate::ledger::private::restrict_to_owner(&dir).map_err(|e| db_err(&e))?;
        let db = sled::Config::new()
            .path(&dir)
            .cache_capacity(8 << 20)
            .open()
            .map_err(|e| db_err(&e))?;
        let tree = |name: &str| db.open_tree(name).map_err(|e| db_err(&e));
        // Everything here is derived from the ledger: a store of another layout is emptied
        // and rebuilt from the ledger's first record at the next catch-up.
        let meta = tree("meta")?;
        let schema = meta.get(SCHEMA_KEY).map_err(|e| db_err(&e))?;
        if schema.as_deref() != Some(STORE_SCHEMA.as_bytes()) {
            for name in [
                "gateway",
                "gateway_15min",
                "imported",
                "curtailed",
                "events",
                "costs",
                "last_uncapped",
                "declared",
                "curve_now",
                "meta",
            ] {
                tree(name)?.clear().map_err(|e| db_err(&e))?;
            }
            meta.insert(SCHEMA_KEY, STORE_SCHEMA.as_bytes())
                .map_err(|e| db_err(&e))?;
        }
        Ok(Self {
            gateway: tree("gateway")?,
            compacted: tree("gateway_15min")?,
            imported: tree("imported")?,
            curtailed: tree("curtailed")?,
            events: tree("events")?,
            costs: tree("costs")?,
            last_uncapped: tree("last_uncapped")?,
            declared: tree("declared")?,
            curve_now: tree("curve_now")?,
            meta,
            db,
            dir,
        })
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Db {
            dir: self.dir.clone(),
            detail: e.to_string(),
        }
    }

    fn put(&self, tree: &sled::Tree, interval: &Interval) -> Result<Option<sled::IVec>, StoreError> {
        tree.insert(key(interval.end), encode(interval))
            .map_err(|e| self.err(e))
    }

    /// Store one of the gateway's own intervals directly (tests: the ledger is how they come).
    #[cfg(test)]
    pub(super) fn put_gateway(&self, interval: &Interval) -> Result<(), StoreError> {
        self.put(&self.gateway, interval).map(|_| ())
    }

    fn range(&self, tree: &sled::Tree, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Interval>, StoreError> {
        // Keyed by end: an interval overlapping [from, to) ends after `from`; it starts before
        // `to` when its end is at most `to` plus its length (at most an hour here).
        let upper = to + Duration::hours(1);
        let mut out = Vec::new();
        for item in tree.range(key(from + Duration::seconds(1))..=key(upper)) {
            let (k, value) = item.map_err(|e| self.err(e))?;
            let interval = decode(&k, &value).ok_or_else(|| self.err("an interval it did not write"))?;
            if interval.start < to && interval.end > from {
                out.push(interval);
            }
        }
        Ok(out)
    }

    /// Fold the ledger's `meter_sample` records written since the last call into the gateway's
    /// own intervals; returns how many intervals were closed. Resumes from the first record of
    /// the interval still open, so an interval is written once, whole.
    pub fn catch_up(&self, ledger: &LedgerReader) -> Result<usize, StoreError> {
        let resume = self
            .meta
            .get(RESUME_KEY)
            .map_err(|e| self.err(e))?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(1, u64::from_be_bytes);
        // The gateway's telemetry pass is 1 s by default; an interval needs 80 % of its
        // readings to be called measured.
        let mut builder = IntervalBuilder::new(GATEWAY_INTERVAL_S, GATEWAY_INTERVAL_S * 4 / 5);
        let mut open_from: Option<u64> = None;
        let mut open_end: Option<DateTime<Utc>> = None;
        let mut closed = 0;
        let mut last_seq = resume.saturating_sub(1);
        let cost_done = self
            .meta
            .get(COST_SEQ_KEY)
            .map_err(|e| self.err(e))?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_be_bytes);
        let mut costs = CostPass::load(self)?;
        for record in ledger.iter_from(resume) {
            let record = record?;
            last_seq = record.seq;
            let fresh = record.seq > cost_done;
            let m = match record.entry() {
                Ok(Entry::MeterSample(m)) => m,
                Ok(Entry::MeterImported(imported)) => {
                    self.apply_imported(&imported)?;
                    continue;
                }
                Ok(Entry::EventPhase(t)) => {
                    self.note_phase(&t)?;
                    if fresh {
                        costs.phase(self, &t)?;
                    }
                    continue;
                }
                Ok(Entry::EventInterpreted(e)) => {
                    self.note_event(&e, record.seq)?;
                    continue;
                }
                Ok(Entry::Declared(d)) => {
                    let json = serde_json::to_vec(&d).map_err(|e| self.err(e))?;
                    self.declared
                        .insert(record.seq.to_be_bytes(), json)
                        .map_err(|e| self.err(e))?;
                    continue;
                }
                Ok(Entry::Forecast(f)) => {
                    if let Some((_, band)) = f.hourly.first() {
                        self.curve_now
                            .insert(key(f.at), &band.p50.to_bits().to_be_bytes())
                            .map_err(|e| self.err(e))?;
                    }
                    continue;
                }
                Ok(Entry::Plan(p)) if fresh => {
                    if let Some(event) = record.event.as_deref() {
                        costs.plan(self, event, &p)?;
                    }
                    continue;
                }
                Ok(Entry::ThroughputPoint(p)) if fresh => {
                    costs.point(self, &p)?;
                    continue;
                }
                _ => continue,
            };
            let measured = m.meter_quality.is_none_or(|q| q.is_measured());
            let (_, end) = builder.slot(m.at);
            if open_end != Some(end) {
                open_from = Some(record.seq);
                open_end = Some(end);
            }
            if let Some(interval) = builder.offer(m.at, m.meter_kw, measured) {
                self.put(&self.gateway, &interval)?;
                closed += 1;
            }
        }
        // The interval still open is re-read next time; with none open, the next record.
        let next = open_from.unwrap_or(last_seq + 1).max(resume);
        costs.save(self)?;
        self.meta
            .insert(COST_SEQ_KEY, &last_seq.max(cost_done).to_be_bytes())
            .map_err(|e| self.err(e))?;
        self.meta
            .insert(RESUME_KEY, &next.to_be_bytes())
            .map_err(|e| self.err(e))?;
        self.db.flush().map_err(|e| self.err(e))?;
        Ok(closed)
    }

    /// Compact the gateway's 5-minute intervals that ended more than [`KEEP_5MIN_DAYS`] before
    /// `now` into 15-minute ones (mean of the 5-minute figures; measured only when all three
    /// are; their samples summed); returns how many 5-minute intervals were folded.
    pub fn compact(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let horizon = now - Duration::days(KEEP_5MIN_DAYS);
        let mut old = Vec::new();
        for item in self.gateway.range(..key(horizon)) {
            let (k, value) = item.map_err(|e| self.err(e))?;
            let interval = decode(&k, &value).ok_or_else(|| self.err("an interval it did not write"))?;
            old.push((k, interval));
        }
        let mut groups: std::collections::BTreeMap<i64, Vec<&Interval>> = std::collections::BTreeMap::new();
        let len = i64::from(COMPACT_INTERVAL_S);
        for (_, i) in &old {
            let end = (i.end.timestamp() + len - 1).div_euclid(len) * len;
            groups.entry(end).or_default().push(i);
        }
        for (end, members) in groups {
            let Some(end) = DateTime::from_timestamp(end, 0) else {
                continue;
            };
            let figures: Vec<f64> = members.iter().filter_map(|i| i.kw).collect();
            let whole = members.len() == 3 && members.iter().all(|i| i.quality == IntervalQuality::Measured);
            let interval = Interval {
                start: end - Duration::seconds(len),
                end,
                kw: (!figures.is_empty()).then(|| figures.iter().sum::<f64>() / figures.len() as f64),
                quality: if figures.is_empty() {
                    IntervalQuality::Missing
                } else if whole {
                    IntervalQuality::Measured
                } else {
                    IntervalQuality::Estimated
                },
                samples: members.iter().map(|i| i.samples).sum(),
                source: IntervalSource::Gateway,
            };
            self.put(&self.compacted, &interval)?;
        }
        for (k, _) in &old {
            self.gateway.remove(k).map_err(|e| self.err(e))?;
        }
        self.db.flush().map_err(|e| self.err(e))?;
        Ok(old.len())
    }

    /// Check intervals about to be imported, without storing anything: one series (one
    /// length, ordered, not overlapping, plausible figures), every one labelled imported, and no
    /// imported data of another length over the same times; returns what the import would do.
    /// The caller then records the import in the ledger (`meter_imported`), and
    /// [`IntervalStore::catch_up`] stores it from there.
    pub fn check_import(&self, intervals: &[Interval]) -> Result<ImportSummary, StoreError> {
        let series = IntervalSeries::new(intervals.to_vec()).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let intervals = series.intervals();
        if let Some(i) = intervals
            .iter()
            .find(|i| !matches!(i.source, IntervalSource::Imported(_)))
        {
            return Err(StoreError::Invalid(format!(
                "interval ending {} is not labelled as imported",
                i.end
            )));
        }
        let mut replaced = 0;
        // Imported intervals of another length overlapping these would make two figures for
        // one time: refused.
        if let (Some(first), Some(last)) = (intervals.first(), intervals.last()) {
            let length = first.length_s();
            let held = self.imported(first.start, last.end)?;
            let ends: std::collections::HashSet<DateTime<Utc>> = held.iter().map(|h| h.end).collect();
            replaced = intervals.iter().filter(|i| ends.contains(&i.end)).count();
            if let Some(other) = held.into_iter().find(|o| o.length_s() != length) {
                return Err(StoreError::Invalid(format!(
                    "imported data of another interval length ({} s, ending {}) covers these times; \
                     a site's settlement data has one length",
                    other.length_s(),
                    other.end
                )));
            }
        }
        let count = |q: IntervalQuality| intervals.iter().filter(|i| i.quality == q).count();
        Ok(ImportSummary {
            intervals: intervals.len(),
            replaced,
            length_s: intervals.first().map_or(0, Interval::length_s),
            from: intervals.first().map(|i| i.start),
            to: intervals.last().map(|i| i.end),
            measured: count(IntervalQuality::Measured),
            estimated: count(IntervalQuality::Estimated),
            missing: count(IntervalQuality::Missing),
        })
    }

    /// Fold one lifecycle transition into the event's curtailment window: it starts when the
    /// event first ramps or holds, and ends when it recovers or ends.
    fn note_phase(&self, t: &flexgate_policies::event::Transition) -> Result<(), StoreError> {
        use flexgate_policies::event::Phase;
        let key = t.event_id.as_bytes();
        let mut window: (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = match self.curtailed.get(key) {
            Ok(Some(v)) => serde_json::from_slice(&v).map_err(|e| self.err(e))?,
            Ok(None) => (None, None),
            Err(e) => return Err(self.err(e)),
        };
        match t.to {
            Phase::Ramping | Phase::Active => {
                window.0 = Some(window.0.map_or(t.at, |s| s.min(t.at)));
                window.1 = None;
            }
            Phase::Recovering | Phase::Completed | Phase::Cancelled | Phase::OptedOut => {
                if window.0.is_some() {
                    window.1 = Some(window.1.map_or(t.at, |e| e.max(t.at)));
                }
            }
            Phase::Pending => return Ok(()),
        }
        if window.0.is_none() {
            return Ok(());
        }
        self.curtailed
            .insert(key, serde_json::to_vec(&window).map_err(|e| self.err(e))?)
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Keep the latest interpretation of an event.
    fn note_event(&self, e: &flexgate_policies::control::entry::EventInterpreted, seq: u64) -> Result<(), StoreError> {
        use flexgate_policies::event::Target;
        let event = &e.event;
        let end = event
            .window
            .duration_s
            .and_then(|d| i64::try_from(d).ok())
            .map(|d| event.window.start + Duration::seconds(d));
        let mut asked = None;
        let targets = event
            .intervals
            .iter()
            .map(|i| match &i.target {
                Target::MeterCeiling { kw } => format!("meter ceiling {kw:.1} kW"),
                Target::Reduction { kw, .. } => {
                    asked = Some(asked.map_or(*kw, |a: f64| a.max(*kw)));
                    format!("reduction {kw:.1} kW")
                }
                Target::Percent { percent, baseline_kw } => {
                    if let Some(b) = baseline_kw {
                        let kw = b * percent / 100.0;
                        asked = Some(asked.map_or(kw, |a: f64| a.max(kw)));
                    }
                    format!("reduction {percent:.1} % of the baseline")
                }
                other => serde_json::to_string(other).unwrap_or_default(),
            })
            .collect();
        let summary = EventSummary {
            id: event.id.to_string(),
            revision: event.revision,
            program: event.program.clone(),
            test: event.test,
            start: event.window.start,
            end,
            targets,
            asked_reduction_kw: asked,
            lowest_ceiling_kw: e.ceilings.iter().flatten().map(|c| c.ceiling_kw).reduce(f64::min),
            received_at: e.received_at,
            seq,
        };
        self.events
            .insert(
                event.id.as_bytes(),
                serde_json::to_vec(&summary).map_err(|e| self.err(e))?,
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// What the event cost the jobs (as far as the ledger has been folded); `None` when the
    /// site never curtailed nor planned for it.
    pub fn event_cost(&self, event_id: &str) -> Result<Option<EventCost>, StoreError> {
        match self.costs.get(event_id.as_bytes()).map_err(|e| self.err(e))? {
            Some(v) => {
                let fold: EventCostFold = serde_json::from_slice(&v).map_err(|e| self.err(e))?;
                Ok(Some(fold.cost()))
            }
            None => Ok(None),
        }
    }

    /// The declarations made at or before `at`, in ledger order.
    pub fn declarations_before(
        &self,
        at: DateTime<Utc>,
    ) -> Result<Vec<flexgate_policies::forecast::declare::Declaration>, StoreError> {
        let mut out = Vec::new();
        for item in self.declared.iter() {
            let (_, v) = item.map_err(|e| self.err(e))?;
            let d: flexgate_policies::forecast::declare::Declaration =
                serde_json::from_slice(&v).map_err(|e| self.err(e))?;
            if d.at <= at {
                out.push(d);
            }
        }
        Ok(out)
    }

    /// The last forecast's first hour made at or before `at`: (when, meter W within its cost
    /// ceiling), the flexibility curve then.
    pub fn curve_before(&self, at: DateTime<Utc>) -> Result<Option<(DateTime<Utc>, f64)>, StoreError> {
        let Some(item) = self.curve_now.range(..=key(at)).next_back() else {
            return Ok(None);
        };
        let (k, v) = item.map_err(|e| self.err(e))?;
        let (Ok(k), Ok(v)) = (<[u8; 8]>::try_from(k.as_ref()), <[u8; 8]>::try_from(v.as_ref())) else {
            return Err(self.err("a forecast figure it did not write"));
        };
        let secs = (u64::from_be_bytes(k) ^ (1u64 << 63)) as i64;
        Ok(DateTime::from_timestamp(secs, 0).map(|t| (t, f64::from_bits(u64::from_be_bytes(v)))))
    }

    /// The events whose window starts in `[from, to)`, by start.
    pub fn events(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<EventSummary>, StoreError> {
        let mut out = Vec::new();
        for item in self.events.iter() {
            let (_, v) = item.map_err(|e| self.err(e))?;
            let summary: EventSummary = serde_json::from_slice(&v).map_err(|e| self.err(e))?;
            if summary.start >= from && summary.start < to {
                out.push(summary);
            }
        }
        out.sort_by(|a, b| a.start.cmp(&b.start).then_with(|| a.id.cmp(&b.id)));
        Ok(out)
    }

    /// The site's curtailment windows `(event, start, end)` that overlap `[from, to)` (an end of
    /// `None`: still curtailing), from the ledger's lifecycle records.
    pub fn curtailments(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Curtailment>, StoreError> {
        let mut out = Vec::new();
        for item in self.curtailed.iter() {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let (start, end): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) =
                serde_json::from_slice(&v).map_err(|e| self.err(e))?;
            let Some(start) = start else { continue };
            if start < to && end.is_none_or(|e| e > from) {
                out.push((String::from_utf8_lossy(&k).into_owned(), start, end));
            }
        }
        out.sort_by_key(|(_, s, _)| *s);
        Ok(out)
    }

    /// The local days (in `tz`) on which the site curtailed, over `[from, to)`: what a baseline
    /// passes over as event days.
    pub fn event_days(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        tz: chrono_tz::Tz,
        now: DateTime<Utc>,
    ) -> Result<std::collections::BTreeSet<chrono::NaiveDate>, StoreError> {
        let mut days = std::collections::BTreeSet::new();
        for (_, start, end) in self.curtailments(from, to)? {
            let mut day = start.with_timezone(&tz).date_naive();
            let last = end.unwrap_or(now).with_timezone(&tz).date_naive();
            while day <= last {
                days.insert(day);
                match day.succ_opt() {
                    Some(next) => day = next,
                    None => break,
                }
            }
        }
        Ok(days)
    }

    /// Store one `meter_imported` record's intervals (replacing imported ones that end at the
    /// same times). Imported intervals are kept by the UTC day (one value per day, the
    /// intervals ending in it in time order): a year is 365 writes, not 105 k.
    fn apply_imported(&self, record: &MeterImported) -> Result<(), StoreError> {
        let mut by_day: std::collections::BTreeMap<i64, Vec<Interval>> = std::collections::BTreeMap::new();
        for ImportedRow(end, kw, quality) in &record.rows {
            by_day.entry(day_of(*end)).or_default().push(Interval {
                start: *end - Duration::seconds(record.length_s),
                end: *end,
                kw: *kw,
                quality: *quality,
                samples: 0,
                source: IntervalSource::Imported(record.source.clone()),
            });
        }
        let mut batch = sled::Batch::default();
        for (day, fresh) in by_day {
            let k = day_key(day);
            let mut merged: std::collections::BTreeMap<DateTime<Utc>, Interval> = match self.imported.get(k) {
                Ok(Some(v)) => decode_day(&v)
                    .ok_or_else(|| self.err("a day of imported data it did not write"))?
                    .into_iter()
                    .map(|i| (i.end, i))
                    .collect(),
                Ok(None) => std::collections::BTreeMap::new(),
                Err(e) => return Err(self.err(e)),
            };
            for i in fresh {
                merged.insert(i.end, i);
            }
            batch.insert(&k, encode_day(merged.values()));
        }
        self.imported.apply_batch(batch).map_err(|e| self.err(e))
    }

    /// Imported intervals overlapping `[from, to)`.
    pub fn imported(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Interval>, StoreError> {
        // Days are keyed by the day their intervals end in; an interval overlapping `from` may
        // end on the next day, one overlapping `to` at most an hour after it.
        let first = day_of(from) - 1;
        let last = day_of(to + Duration::hours(1)) + 1;
        let mut out = Vec::new();
        for item in self.imported.range(day_key(first)..=day_key(last)) {
            let (_, v) = item.map_err(|e| self.err(e))?;
            let day = decode_day(&v).ok_or_else(|| self.err("a day of imported data it did not write"))?;
            out.extend(day.into_iter().filter(|i| i.start < to && i.end > from));
        }
        Ok(out)
    }

    /// The gateway's own intervals overlapping `[from, to)` (15-minute where compacted,
    /// 5-minute after), in time order.
    pub fn gateway(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Interval>, StoreError> {
        let mut out = self.range(&self.compacted, from, to)?;
        let recent = self.range(&self.gateway, from, to)?;
        let cut = recent.first().map(|i| i.start);
        if let Some(cut) = cut {
            out.retain(|i| i.end <= cut);
        }
        out.extend(recent);
        Ok(out)
    }

    /// The series settlement uses over `[from, to)`: the imported intervals where there are
    /// any, the gateway's own aggregated to the imported length elsewhere (or 5-minute ones
    /// when nothing is imported), each labelled with its source and quality.
    pub fn settlement_series(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<IntervalSeries, StoreError> {
        let imported = self.imported(from, to)?;
        let gateway = self.gateway(from, to)?;
        let length = imported
            .first()
            .map_or(i64::from(GATEWAY_INTERVAL_S), Interval::length_s)
            .max(1);
        let mut slots: std::collections::BTreeMap<i64, Interval> = std::collections::BTreeMap::new();
        // The gateway's, aggregated into slots of the chosen length.
        let mut groups: std::collections::BTreeMap<i64, Vec<&Interval>> = std::collections::BTreeMap::new();
        for i in &gateway {
            let end = (i.end.timestamp() + length - 1).div_euclid(length) * length;
            groups.entry(end).or_default().push(i);
        }
        for (end, members) in groups {
            let Some(end_t) = DateTime::from_timestamp(end, 0) else {
                continue;
            };
            let start = end_t - Duration::seconds(length);
            if start < from || end_t > to {
                continue;
            }
            let covered: i64 = members.iter().map(|i| i.length_s()).sum();
            let figures: Vec<(f64, i64)> = members.iter().filter_map(|i| Some((i.kw?, i.length_s()))).collect();
            let weight: i64 = figures.iter().map(|(_, l)| *l).sum();
            let kw = (weight > 0).then(|| figures.iter().map(|(kw, l)| kw * *l as f64).sum::<f64>() / weight as f64);
            let all_measured = members.iter().all(|i| i.quality == IntervalQuality::Measured);
            slots.insert(
                end,
                Interval {
                    start,
                    end: end_t,
                    kw,
                    quality: match kw {
                        None => IntervalQuality::Missing,
                        Some(_) if all_measured && covered >= length => IntervalQuality::Measured,
                        Some(_) => IntervalQuality::Estimated,
                    },
                    samples: members.iter().map(|i| i.samples).sum(),
                    source: IntervalSource::Gateway,
                },
            );
        }
        for i in imported {
            if i.length_s() == length && i.start >= from && i.end <= to {
                slots.insert(i.end.timestamp(), i);
            }
        }
        IntervalSeries::new(slots.into_values().collect()).map_err(|e| StoreError::Invalid(e.to_string()))
    }

    /// The meter-integrity check over `[from, to)`: each imported interval against the
    /// gateway's own measured intervals inside it (only where they cover it whole).
    pub fn compare(&self, from: DateTime<Utc>, to: DateTime<Utc>, tolerance: f64) -> Result<Comparison, StoreError> {
        let imported = self.imported(from, to)?;
        let gateway = self.gateway(from, to)?;
        let mut shares = Vec::new();
        let mut disagreements = Vec::new();
        for i in imported {
            let Some(imported_kw) = i.kw else { continue };
            let inside: Vec<&Interval> = gateway
                .iter()
                .filter(|g| g.start >= i.start && g.end <= i.end)
                .collect();
            let covered: i64 = inside.iter().map(|g| g.length_s()).sum();
            if covered < i.length_s() || inside.iter().any(|g| g.quality != IntervalQuality::Measured) {
                continue;
            }
            let gateway_kw = inside
                .iter()
                .filter_map(|g| Some(g.kw? * g.length_s() as f64))
                .sum::<f64>()
                / covered as f64;
            let share = if imported_kw > 0.0 {
                (gateway_kw - imported_kw) / imported_kw
            } else if gateway_kw > 0.0 {
                1.0
            } else {
                0.0
            };
            shares.push(share);
            if share.abs() > tolerance {
                disagreements.push(Disagreement {
                    end: i.end,
                    imported_kw,
                    gateway_kw,
                    share,
                });
            }
        }
        Ok(Comparison {
            tolerance,
            compared: shares.len(),
            mean_share: (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64),
            disagreements,
        })
    }
}

/// A job's last uncapped point `(at, tokens/s, tier)`.
type LastUncapped = (DateTime<Utc>, f64, Option<f64>);

/// One catch-up's folding of the events' costs: the open events' folds and the jobs' last
/// uncapped points in memory, written back once at the end (a season's throughput points are
/// many; the folds and jobs few).
struct CostPass {
    /// Folds read or changed in this pass, by event id.
    folds: BTreeMap<String, EventCostFold>,
    /// Those changed.
    changed: BTreeSet<String>,
    /// The events still being folded.
    open: BTreeSet<String>,
    /// Jobs' last uncapped points read or changed in this pass (`None`: none known).
    last: BTreeMap<String, Option<LastUncapped>>,
    /// Those changed.
    last_changed: BTreeSet<String>,
}

impl CostPass {
    fn load(store: &IntervalStore) -> Result<Self, StoreError> {
        let open: BTreeSet<String> = match store.meta.get(COST_OPEN_KEY).map_err(|e| store.err(e))? {
            Some(v) => serde_json::from_slice(&v).map_err(|e| store.err(e))?,
            None => BTreeSet::new(),
        };
        let mut pass = Self {
            folds: BTreeMap::new(),
            changed: BTreeSet::new(),
            open: BTreeSet::new(),
            last: BTreeMap::new(),
            last_changed: BTreeSet::new(),
        };
        for id in open {
            if let Some(fold) = pass.fold(store, &id)?
                && fold.is_open()
            {
                pass.open.insert(id);
            }
        }
        Ok(pass)
    }

    /// The event's fold, read from the store the first time.
    fn fold(&mut self, store: &IntervalStore, id: &str) -> Result<Option<&mut EventCostFold>, StoreError> {
        if !self.folds.contains_key(id)
            && let Some(v) = store.costs.get(id.as_bytes()).map_err(|e| store.err(e))?
        {
            let fold: EventCostFold = serde_json::from_slice(&v).map_err(|e| store.err(e))?;
            self.folds.insert(id.to_string(), fold);
        }
        Ok(self.folds.get_mut(id))
    }

    fn phase(&mut self, store: &IntervalStore, t: &flexgate_policies::event::Transition) -> Result<(), StoreError> {
        use flexgate_policies::event::Phase;
        let id = t.event_id.to_string();
        match t.to {
            Phase::Ramping | Phase::Active => {
                match self.fold(store, &id)? {
                    Some(fold) => {
                        if fold.started.is_none() {
                            fold.started = Some(t.at);
                        }
                        fold.resume();
                    }
                    None => {
                        self.folds.insert(id.clone(), EventCostFold::starting(t.at));
                    }
                }
                self.open.insert(id.clone());
                self.changed.insert(id);
            }
            phase if phase.is_terminal() => {
                if let Some(fold) = self.fold(store, &id)?
                    && fold.started.is_some()
                {
                    fold.end(t.at);
                    self.open.remove(&id);
                    self.changed.insert(id);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn plan(&mut self, store: &IntervalStore, event: &str, plan: &PlanRecorded) -> Result<(), StoreError> {
        if self.fold(store, event)?.is_none() {
            self.folds.insert(event.to_string(), EventCostFold::default());
        }
        if let Some(fold) = self.folds.get_mut(event) {
            fold.plan(plan);
        }
        self.changed.insert(event.to_string());
        Ok(())
    }

    fn point(&mut self, store: &IntervalStore, p: &ThroughputPoint) -> Result<(), StoreError> {
        if !self.last.contains_key(&p.job) {
            let known = match store.last_uncapped.get(p.job.as_bytes()).map_err(|e| store.err(e))? {
                Some(v) => Some(serde_json::from_slice::<LastUncapped>(&v).map_err(|e| store.err(e))?),
                None => None,
            };
            self.last.insert(p.job.clone(), known);
        }
        let before = self.last.get(&p.job).copied().flatten();
        for id in &self.open {
            if let Some(fold) = self.folds.get_mut(id) {
                fold.offer(p, before);
                self.changed.insert(id.clone());
            }
        }
        if p.uncapped {
            let tier = p.max_slowdown.or(before.and_then(|b| b.2));
            self.last.insert(p.job.clone(), Some((p.at, p.tokens_per_s, tier)));
            self.last_changed.insert(p.job.clone());
        }
        Ok(())
    }

    fn save(self, store: &IntervalStore) -> Result<(), StoreError> {
        for id in &self.changed {
            if let Some(fold) = self.folds.get(id) {
                store
                    .costs
                    .insert(id.as_bytes(), serde_json::to_vec(fold).map_err(|e| store.err(e))?)
                    .map_err(|e| store.err(e))?;
            }
        }
        for job in &self.last_changed {
            if let Some(Some(last)) = self.last.get(job) {
                store
                    .last_uncapped
                    .insert(job.as_bytes(), serde_json::to_vec(last).map_err(|e| store.err(e))?)
                    .map_err(|e| store.err(e))?;
            }
        }
        store
            .meta
            .insert(COST_OPEN_KEY, serde_json::to_vec(&self.open).map_err(|e| store.err(e))?)
            .map_err(|e| store.err(e))?;
        Ok(())
    }
}
