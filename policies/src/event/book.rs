//! The event book: every known event, its lifecycle, and the meter ceiling in force.
//!
//! A pure state machine. Time is always an argument, never read from a clock, so the runtime can
//! drive it from its clock abstraction, tests can run hours of event time in microseconds, and
//! an auditor can rebuild the exact state by replaying the ledger's upserts in order.
//!
//! # Lifecycle
//!
//! `Pending → Ramping → Active → Recovering → Completed`, or `… → Cancelled`. With `E` the
//! effective start (window start plus a deterministic randomization, see
//! [`randomize_offset_s`]):
//!
//! - **Ramping** `[E, E + ramp_s)`: the ceiling steps down from the pre-event meter reading to
//!   the interval ceiling in equal steps at most [`STEP_MAX_S`] apart, so a site does not drop
//!   (and its cooling plant does not react to) the whole shed at once. The first step is the
//!   pre-event meter reading itself.
//! - **Active** until the window ends: the ceiling of the interval in force (changing at
//!   interval boundaries). Open-ended events stay Active until modified or cancelled.
//! - **Recovering** for `recovery_s` after the end (or after a cancellation): the ceiling steps
//!   back up to the pre-event reading, again at most [`STEP_MAX_S`] apart; the last step is the
//!   pre-event reading. This is what prevents the rebound spike a utility penalizes.
//! - **Completed** / **Cancelled**: nothing in force.
//!
//! The phase and the ceiling at any instant are pure functions of an entry
//! ([`BookEntry::phase_at`], [`BookEntry::ceiling_at`]); [`EventBook::advance`] only moves the
//! *recorded* phase forward and reports the transitions, so the runtime can log them.
//!
//! # Revisions
//!
//! `(id, revision)` is an event's identity (OpenADR's `modificationNumber` rule): a lower revision than the one held
//! is stale, an equal one a duplicate (at-least-once delivery), a higher one replaces the whole
//! event. A replacement of an event already in force keeps the original pre-event meter reading
//! (the meter is curtailed by then and no longer a baseline); if the new revision's window has
//! already ended, the ceiling in force is released through a recovery ramp rather than at once.
//! A modification that moves an in-force event's start into the future releases its ceiling at
//! once (utilities postpone events that have not started; this case is not worth a second ramp
//! shape).
//!
//! # Overlap
//!
//! Every non-test event in Ramping, Active or Recovering contributes its ceiling; the most
//! restrictive (lowest) wins ([`EventBook::effective_ceiling`]). Test events run their lifecycle
//! (they are acknowledged and reported) but never contribute.

use crate::ids::EventId;
use imbl::OrdMap;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::model::{EventError, GridEvent, plus_secs};
use super::target::CeilingTarget;

/// Longest time between two ceiling steps of a ramp or a recovery, seconds.
///
/// One minute is the finest resolution at which utilities settle (1-min revenue-meter data is
/// the finest interval programs settle on), so finer steps buy nothing, and coarser ones leave visible plateaus.
pub const STEP_MAX_S: u64 = 60;

/// Where an event is in its lifecycle. Ordered: an event only ever moves forward along this
/// order, except when a new revision moves its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Accepted, not started.
    Pending,
    /// Stepping the ceiling down towards the target.
    Ramping,
    /// Holding the target.
    Active,
    /// Stepping the ceiling back up after the end or a cancellation.
    Recovering,
    /// Over; nothing in force.
    Completed,
    /// Cancelled; nothing in force.
    Cancelled,
    /// The site's operator opted out of it (a must-run emergency): its ceiling stopped counting
    /// at once, and it never constrains the site again.
    OptedOut,
}

impl Phase {
    /// Completed, Cancelled or OptedOut: the event will never constrain the site again (unless
    /// a new revision revives a completed or cancelled one; an opt-out holds for every revision).
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Completed | Phase::Cancelled | Phase::OptedOut)
    }

    /// The name used in the API, the ledger and reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Ramping => "ramping",
            Phase::Active => "active",
            Phase::Recovering => "recovering",
            Phase::Completed => "completed",
            Phase::Cancelled => "cancelled",
            Phase::OptedOut => "opted_out",
        }
    }

    /// Ramping, Active or Recovering: the event constrains the site.
    #[must_use]
    pub fn in_force(self) -> bool {
        matches!(self, Phase::Ramping | Phase::Active | Phase::Recovering)
    }
}

/// An early start of the recovery ramp, overriding the window's natural end: set by a
/// cancellation, or by a revision whose window has already ended.
///
/// Stored (not recomputed) because it depends on the ceiling that was in force at the moment it
/// happened, which a later revision no longer describes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Release {
    /// When the recovery starts.
    pub at: DateTime<Utc>,
    /// The ceiling in force when it started (`None`: nothing was in force).
    pub from_kw: Option<f64>,
    /// Length of the recovery ramp, seconds.
    pub recovery_s: u64,
    /// Whether the event ends as Cancelled (rather than Completed).
    pub cancelled: bool,
    /// Whether the site's operator opted out: the event ends as OptedOut, at once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub opted_out: bool,
}

/// The receipt of a cancellation: kept so the cancel's revision counts for dedup, while the
/// entry keeps executing the plan (and the ceilings) of the revision it cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRecord {
    /// The revision that cancelled the event.
    pub revision: u64,
    /// When the cancellation was accepted.
    pub received_at: DateTime<Utc>,
}

/// One event in the book.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BookEntry {
    /// The revision whose plan is being executed (for a cancellation of an unknown event, the
    /// cancellation itself).
    pub event: GridEvent,
    /// The meter ceiling of each interval of `event` (`None`: nothing to enforce in it).
    pub ceilings: Vec<Option<CeilingTarget>>,
    /// The phase as of the last [`EventBook::advance`].
    pub phase: Phase,
    /// The meter reading before the event: the ramp starts here and the recovery returns here.
    pub pre_event_meter_kw: f64,
    /// When `event` (this revision) was accepted.
    pub accepted_at: DateTime<Utc>,
    /// Window start plus the deterministic randomization offset.
    pub effective_start: DateTime<Utc>,
    /// Early start of the recovery, if any.
    pub release: Option<Release>,
    /// The cancellation, if one was received.
    pub cancel: Option<CancelRecord>,
}

/// What [`EventBook::upsert`] did with an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum UpsertOutcome {
    /// A new event, or a higher revision that replaced the held one.
    Accepted {
        /// Whether the id was unknown.
        new: bool,
    },
    /// A lower revision than the one held; nothing changed.
    IgnoredStale {
        /// The revision the book holds.
        held_revision: u64,
    },
    /// The revision the book already holds (at-least-once delivery); nothing changed.
    Duplicate,
    /// A cancellation: a pending event ends at once, an event in force recovers gradually.
    Cancelled {
        /// Whether the id was unknown (the cancellation is recorded so a late copy of the
        /// original cannot revive it).
        new: bool,
    },
    /// A test event (new or replaced): recorded and tracked, never allowed to affect a ceiling.
    TestOnly {
        /// Whether the id was unknown.
        new: bool,
    },
    /// The event or the accompanying data was invalid; nothing changed.
    Rejected {
        /// What was wrong.
        error: EventError,
    },
}

/// A phase change of one event, for the ledger and for acks/reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// The event.
    pub event_id: EventId,
    /// Phase before.
    pub from: Phase,
    /// Phase after.
    pub to: Phase,
    /// When the change took effect per the schedule (never before the revision was accepted).
    pub at: DateTime<Utc>,
}

/// The meter ceiling in force and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffectiveCeiling {
    /// The lowest ceiling of all contributing events, meter kW.
    pub ceiling_kw: f64,
    /// The event that sets it (ties: the smallest id).
    pub binding_event: EventId,
    /// The binding event's phase.
    pub phase: Phase,
    /// Every event contributing a ceiling right now, by id.
    pub events: Vec<String>,
}

/// All known events, keyed by id.
///
/// Serializable as a whole, so the runtime can snapshot it and rebuild it from the ledger;
/// replaying the same upserts in the same order gives the same book.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventBook {
    /// A persistent (structurally shared) map: the gateway publishes a snapshot of the book
    /// after every decision, and with thousands of events held (terminal ones still deduplicate
    /// late copies) a copy per submission would make a burst of events quadratic.
    /// Values are shared too, so that copying a node on a write copies pointers, not events.
    entries: OrdMap<EventId, Arc<BookEntry>>,
}

/// The start delay of event `id` in `[0, max_s]`, derived from the id (64-bit FNV-1a).
///
/// OpenADR asks for a uniformly random delay; a hash of the id is as good as random across a
/// fleet of sites (the ids differ) while replaying the ledger reproduces it exactly, which a
/// random number would not.
#[must_use]
pub fn randomize_offset_s(id: &str, max_s: u64) -> u64 {
    if max_s == 0 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    match max_s.checked_add(1) {
        Some(m) => h % m,
        None => h,
    }
}

impl EventBook {
    /// An empty book.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Offer an event (new, modified, cancelled or repeated) to the book at time `now`.
    ///
    /// `ceilings` holds one converted ceiling per interval of `event` (see
    /// [`crate::event::target::event_ceilings`]); `pre_event_meter_kw` is the meter reading
    /// before the event, where the ramp starts and the recovery returns. The recorded phase is
    /// not moved here: call [`EventBook::advance`] with the same `now` to get the transitions.
    pub fn upsert(
        &mut self,
        event: GridEvent,
        ceilings: Vec<Option<CeilingTarget>>,
        pre_event_meter_kw: f64,
        now: DateTime<Utc>,
    ) -> UpsertOutcome {
        if let Err(error) = check_inputs(&event, &ceilings, pre_event_meter_kw) {
            return UpsertOutcome::Rejected { error };
        }
        if let Some(held) = self.entries.get(event.id.as_str()) {
            let r = held.revision();
            if event.revision < r {
                return UpsertOutcome::IgnoredStale { held_revision: r };
            }
            if event.revision == r {
                return UpsertOutcome::Duplicate;
            }
        }
        if event.cancel {
            return self.cancel(event, ceilings, pre_event_meter_kw, now);
        }
        let test = event.test;
        let id = EventId::from(event.id.as_str());
        let (entry, new) = match self.entries.remove(&*id) {
            None => (BookEntry::new(event, ceilings, pre_event_meter_kw, now), true),
            Some(old) => (
                replace(Arc::unwrap_or_clone(old), event, ceilings, pre_event_meter_kw, now),
                false,
            ),
        };
        self.entries.insert(id, Arc::new(entry));
        if test {
            UpsertOutcome::TestOnly { new }
        } else {
            UpsertOutcome::Accepted { new }
        }
    }

    fn cancel(
        &mut self,
        event: GridEvent,
        ceilings: Vec<Option<CeilingTarget>>,
        pre_event_meter_kw: f64,
        now: DateTime<Utc>,
    ) -> UpsertOutcome {
        let record = CancelRecord {
            revision: event.revision,
            received_at: now,
        };
        if let Some(entry) = self.entries.get_mut(event.id.as_str()).map(Arc::make_mut) {
            match entry.phase_at(now) {
                Phase::Pending => {
                    entry.release = Some(Release {
                        at: now,
                        from_kw: None,
                        recovery_s: 0,
                        cancelled: true,
                        opted_out: false,
                    });
                }
                Phase::Ramping | Phase::Active => {
                    entry.release = Some(Release {
                        at: now,
                        from_kw: entry.ceiling_at(now),
                        recovery_s: entry.event.window.recovery_s,
                        cancelled: true,
                        opted_out: false,
                    });
                }
                // An early recovery (from a modification) now ends as Cancelled; a natural one
                // means the window ran its course, and the event completes.
                Phase::Recovering => {
                    if let Some(r) = entry.release.as_mut() {
                        r.cancelled = true;
                    }
                }
                Phase::Completed | Phase::Cancelled | Phase::OptedOut => {}
            }
            entry.cancel = Some(record);
            return UpsertOutcome::Cancelled { new: false };
        }
        let pre = if pre_event_meter_kw.is_finite() && pre_event_meter_kw >= 0.0 {
            pre_event_meter_kw
        } else {
            0.0
        };
        let id = event.id.clone();
        let mut entry = BookEntry::new(event, ceilings, pre, now);
        entry.release = Some(Release {
            at: now.min(entry.effective_start),
            from_kw: None,
            recovery_s: 0,
            cancelled: true,
            opted_out: false,
        });
        entry.cancel = Some(record);
        self.entries.insert(EventId::from(id.as_str()), Arc::new(entry));
        UpsertOutcome::Cancelled { new: true }
    }

    /// The site's operator opts out of event `id` at `now`: from then on its ceiling does not
    /// count and it ends as [`Phase::OptedOut`] (recorded by the next [`EventBook::advance`]).
    /// Returns false for an unknown event or one already opted out.
    pub fn opt_out(&mut self, id: &str, now: DateTime<Utc>) -> bool {
        let Some(entry) = self.entries.get_mut(id).map(Arc::make_mut) else {
            return false;
        };
        if entry.release.is_some_and(|r| r.opted_out) {
            return false;
        }
        entry.release = Some(Release {
            at: now.max(entry.accepted_at),
            from_kw: None,
            recovery_s: 0,
            cancelled: false,
            opted_out: true,
        });
        true
    }

    /// Applies one recorded phase change: event `t.event_id` moves to `t.to` unless it is
    /// unknown, already there or beyond, or terminal. Returns whether it moved.
    ///
    /// This is how a recorded transition is folded back into the book (live, right after
    /// [`EventBook::advance`] produced it, where it changes nothing, and at recovery). It costs
    /// one lookup: folding by re-running `advance` at every recorded instant walked the whole
    /// book once per transition, so a burst of N events cost N² steps under the gateway's state
    /// lock (20,000 MQTT test events stalled every acknowledgement for over a minute).
    pub fn apply_transition(&mut self, t: &Transition) -> bool {
        let moves = self
            .entries
            .get(t.event_id.as_str())
            .is_some_and(|e| !e.phase.is_terminal() && t.to > e.phase);
        if moves && let Some(entry) = self.entries.get_mut(t.event_id.as_str()).map(Arc::make_mut) {
            entry.phase = t.to;
        }
        moves
    }

    /// Whether `upsert` would accept these inputs (the same checks, nothing changed), so that a
    /// caller can record its interpretation before applying it.
    pub fn check_upsert(
        event: &GridEvent,
        ceilings: &[Option<CeilingTarget>],
        pre_event_meter_kw: f64,
    ) -> Result<(), EventError> {
        check_inputs(event, ceilings, pre_event_meter_kw)
    }

    /// Move every event's recorded phase to where it is at `now`, returning the transitions in
    /// time order.
    ///
    /// Catches up across several phases when `now` jumps (each transition carries its scheduled
    /// instant), and is idempotent: a second call with the same `now` returns nothing.
    pub fn advance(&mut self, now: DateTime<Utc>) -> Vec<Transition> {
        let mut out = Vec::new();
        let mut moved = Vec::new();
        // Read first, write only the entries that moved: the map is persistent (a snapshot of
        // the book costs nothing), and a write copies the path to the entry it changes.
        for (id, entry) in &self.entries {
            // Terminal phases never change (a new revision replaces the entry).
            if entry.phase.is_terminal() {
                continue;
            }
            let mut cur = entry.phase;
            for (at, phase) in entry.phase_points() {
                if at <= now && phase > cur {
                    out.push(Transition {
                        event_id: EventId::from(&**id),
                        from: cur,
                        to: phase,
                        at: at.max(entry.accepted_at),
                    });
                    cur = phase;
                }
            }
            if cur != entry.phase {
                moved.push((id.clone(), cur));
            }
        }
        for (id, phase) in moved {
            if let Some(entry) = self.entries.get_mut(&*id).map(Arc::make_mut) {
                entry.phase = phase;
            }
        }
        out.sort_by_key(|t| t.at);
        out
    }

    /// The meter ceiling in force at `now`: the lowest over all non-test events that are
    /// Ramping, Active or Recovering and have a ceiling; `None` when nothing constrains the site.
    ///
    /// Computed from the schedule, so it is right even if [`EventBook::advance`] lags.
    #[must_use]
    pub fn effective_ceiling(&self, now: DateTime<Utc>) -> Option<EffectiveCeiling> {
        self.effective_ceiling_where(now, |_| true)
    }

    /// Like [`EventBook::effective_ceiling`], counting only the events for which `counts(id)`
    /// holds: an operator who opts the site out of one event (a must-run emergency) removes its
    /// ceiling without touching the utility's revision history in the book.
    #[must_use]
    pub fn effective_ceiling_where(
        &self,
        now: DateTime<Utc>,
        counts: impl Fn(&str) -> bool,
    ) -> Option<EffectiveCeiling> {
        let mut best: Option<(f64, &str, Phase)> = None;
        let mut events = Vec::new();
        for (id, entry) in &self.entries {
            if entry.event.test || !counts(id) {
                continue;
            }
            let phase = entry.phase_at(now);
            if !phase.in_force() {
                continue;
            }
            let Some(c) = entry.ceiling_at(now) else {
                continue;
            };
            events.push(id.to_string());
            if best.is_none_or(|(b, _, _)| c < b) {
                best = Some((c, id, phase));
            }
        }
        best.map(|(ceiling_kw, id, phase)| EffectiveCeiling {
            ceiling_kw,
            binding_event: EventId::from(id),
            phase,
            events,
        })
    }

    /// The next instant after `now` at which any event's phase or ceiling may change (ramp and
    /// recovery steps and interval boundaries included), so a runtime can sleep exactly until
    /// then. `None` when nothing will ever change without a new upsert.
    #[must_use]
    pub fn next_wakeup(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.entries
            .values()
            .filter(|e| !e.phase.is_terminal())
            .filter_map(|e| e.next_change_after(now))
            .min()
    }

    /// Every entry, by id.
    pub fn events(&self) -> impl Iterator<Item = &BookEntry> {
        self.entries.values().map(|e| &**e)
    }

    /// The entry of event `id`.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<&BookEntry> {
        self.entries.get(id).map(|e| &**e)
    }

    /// Number of entries (terminal ones included: they still deduplicate late copies).
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the book holds no entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl BookEntry {
    fn new(
        event: GridEvent,
        ceilings: Vec<Option<CeilingTarget>>,
        pre_event_meter_kw: f64,
        now: DateTime<Utc>,
    ) -> Self {
        let offset = randomize_offset_s(&event.id, event.window.randomize_start_s);
        let effective_start = plus_secs(event.window.start, offset);
        Self {
            event,
            ceilings,
            phase: Phase::Pending,
            pre_event_meter_kw,
            accepted_at: now,
            effective_start,
            release: None,
            cancel: None,
        }
    }

    /// The highest revision accepted for this id (a cancellation's included): the dedup key.
    #[must_use]
    pub fn revision(&self) -> u64 {
        self.cancel
            .map_or(self.event.revision, |c| c.revision.max(self.event.revision))
    }

    /// The end of the window after randomization (`None`: open-ended).
    #[must_use]
    pub fn effective_end(&self) -> Option<DateTime<Utc>> {
        self.event.window.duration_s.map(|d| plus_secs(self.effective_start, d))
    }

    /// Ramp length, never longer than the window.
    #[must_use]
    pub fn ramp_s(&self) -> u64 {
        let r = self.event.window.ramp_s;
        self.event.window.duration_s.map_or(r, |d| r.min(d))
    }

    /// Start and end of interval `i` (end `None`: never, for the last interval of an open-ended
    /// event).
    #[must_use]
    pub fn interval_span(&self, i: usize) -> Option<(DateTime<Utc>, Option<DateTime<Utc>>)> {
        let iv = self.event.intervals.get(i)?;
        let start = plus_secs(self.effective_start, iv.offset_s);
        let end = iv
            .duration_s
            .map(|d| plus_secs(start, d))
            .or_else(|| self.effective_end());
        Some((start, end))
    }

    /// The ceiling of the interval containing `t`, if any.
    fn interval_ceiling(&self, t: DateTime<Utc>) -> Option<f64> {
        (0..self.event.intervals.len()).find_map(|i| {
            let (start, end) = self.interval_span(i)?;
            if start <= t && end.is_none_or(|e| t < e) {
                Some(self.ceilings.get(i).and_then(Option::as_ref).map(|c| c.ceiling_kw))
            } else {
                None
            }
        })?
    }

    /// Where the ramp aims: the lowest ceiling among the intervals that start during the ramp.
    fn ramp_floor(&self) -> Option<f64> {
        let ramp = self.ramp_s();
        self.event
            .intervals
            .iter()
            .zip(&self.ceilings)
            .filter(|(iv, _)| iv.offset_s < ramp)
            .filter_map(|(_, c)| c.as_ref().map(|c| c.ceiling_kw))
            .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.min(c))))
    }

    /// The ceiling the plan asks for at `t` during the window, ignoring any early release.
    fn plan_ceiling(&self, t: DateTime<Utc>) -> Option<f64> {
        let start = self.effective_start;
        if t < start || self.effective_end().is_some_and(|e| t >= e) {
            return None;
        }
        let ic = self.interval_ceiling(t)?;
        let ramp = self.ramp_s();
        if ramp > 0 && t < plus_secs(start, ramp) {
            let floor = self.ramp_floor().unwrap_or(ic);
            let (k, n) = step_index(start, ramp, t);
            let pre = self.pre_event_meter_kw;
            let envelope = pre - (pre - floor) * (k as f64) / (n as f64);
            Some(ic.max(envelope))
        } else {
            Some(ic)
        }
    }

    /// The recovery that applies at `t`, if `t` is at or after its start.
    fn recovery_at(&self, t: DateTime<Utc>) -> Option<Release> {
        if let Some(r) = self.release {
            return (t >= r.at).then_some(r);
        }
        let end = self.effective_end()?;
        if t < end {
            return None;
        }
        let last_second = end.checked_sub_signed(TimeDelta::seconds(1)).unwrap_or(end);
        Some(Release {
            at: end,
            from_kw: self.plan_ceiling(last_second),
            recovery_s: self.event.window.recovery_s,
            cancelled: false,
            opted_out: false,
        })
    }

    /// The instants at which the phase changes, with the phase entered; ordered by time and by
    /// phase. Before the first one the event is Pending.
    #[must_use]
    pub fn phase_points(&self) -> Vec<(DateTime<Utc>, Phase)> {
        fn push(pts: &mut Vec<(DateTime<Utc>, Phase)>, at: DateTime<Utc>, phase: Phase) {
            // A phase that lasts no time (e.g. a ramp as long as the window) is skipped.
            while pts.last().is_some_and(|(last, _)| *last >= at) {
                pts.pop();
            }
            pts.push((at, phase));
        }
        let start = self.effective_start;
        let ramp = self.ramp_s();
        let mut pts = Vec::with_capacity(5);
        if ramp > 0 {
            push(&mut pts, start, Phase::Ramping);
        }
        push(&mut pts, plus_secs(start, ramp), Phase::Active);
        match self.release {
            None => {
                if let Some(end) = self.effective_end() {
                    let rec = self.event.window.recovery_s;
                    if rec > 0 {
                        push(&mut pts, end, Phase::Recovering);
                    }
                    push(&mut pts, plus_secs(end, rec), Phase::Completed);
                }
            }
            Some(r) => {
                pts.retain(|(at, _)| *at < r.at);
                if r.recovery_s > 0 {
                    push(&mut pts, r.at, Phase::Recovering);
                }
                let terminal = if r.opted_out {
                    Phase::OptedOut
                } else if r.cancelled {
                    Phase::Cancelled
                } else {
                    Phase::Completed
                };
                push(&mut pts, plus_secs(r.at, r.recovery_s), terminal);
            }
        }
        pts
    }

    /// The phase at `t` according to the schedule (independent of [`BookEntry::phase`]).
    #[must_use]
    pub fn phase_at(&self, t: DateTime<Utc>) -> Phase {
        self.phase_points()
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .map_or(Phase::Pending, |(_, p)| *p)
    }

    /// This event's own ceiling at `t`, meter kW (`None`: it constrains nothing then). Test
    /// events have one too; the book just never lets it count.
    #[must_use]
    pub fn ceiling_at(&self, t: DateTime<Utc>) -> Option<f64> {
        match self.phase_at(t) {
            Phase::Ramping | Phase::Active => self.plan_ceiling(t),
            Phase::Recovering => {
                let r = self.recovery_at(t)?;
                let from = r.from_kw?;
                if r.recovery_s == 0 {
                    return None;
                }
                let (k, n) = step_index(r.at, r.recovery_s, t);
                let pre = self.pre_event_meter_kw;
                let stepped = from + (pre - from) * ((k + 1) as f64) / (n as f64);
                // Recovery only ever loosens: if the ceiling was above the pre-event reading,
                // it holds there.
                Some(stepped.max(from))
            }
            Phase::Pending | Phase::Completed | Phase::Cancelled | Phase::OptedOut => None,
        }
    }

    /// The next instant after `now` at which this entry's phase or ceiling may change.
    #[must_use]
    pub fn next_change_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut best: Option<DateTime<Utc>> = None;
        let mut offer = |t: DateTime<Utc>| {
            if t > now && best.is_none_or(|b| t < b) {
                best = Some(t);
            }
        };
        let cut = self.release.map(|r| r.at);
        let mut natural = |t: DateTime<Utc>| {
            if cut.is_none_or(|c| t < c) {
                offer(t);
            }
        };
        let start = self.effective_start;
        natural(start);
        let ramp = self.ramp_s();
        if let Some(t) = next_step_after(start, ramp, now) {
            natural(t);
        }
        for i in 0..self.event.intervals.len() {
            if let Some((s, e)) = self.interval_span(i) {
                natural(s);
                if let Some(e) = e {
                    natural(e);
                }
            }
        }
        if self.release.is_none()
            && let Some(end) = self.effective_end()
        {
            natural(end);
            let rec = self.event.window.recovery_s;
            if let Some(t) = next_step_after(end, rec, now) {
                natural(t);
            }
            natural(plus_secs(end, rec));
        }
        if let Some(r) = self.release {
            offer(r.at);
            if let Some(t) = next_step_after(r.at, r.recovery_s, now) {
                offer(t);
            }
            offer(plus_secs(r.at, r.recovery_s));
        }
        best
    }
}

/// Replace `old` by a higher, non-cancelling revision (see the module docs for the rules).
fn replace(
    old: BookEntry,
    event: GridEvent,
    ceilings: Vec<Option<CeilingTarget>>,
    pre_event_meter_kw: f64,
    now: DateTime<Utc>,
) -> BookEntry {
    let old_phase = old.phase_at(now);
    let pre = if old_phase.in_force() {
        old.pre_event_meter_kw
    } else {
        pre_event_meter_kw
    };
    let mut entry = BookEntry::new(event, ceilings, pre, now);
    if entry.phase_at(now) >= Phase::Recovering {
        entry.release = match old_phase {
            Phase::Ramping | Phase::Active => Some(Release {
                at: now,
                from_kw: old.ceiling_at(now),
                recovery_s: entry.event.window.recovery_s,
                cancelled: false,
                opted_out: false,
            }),
            Phase::Recovering => old.recovery_at(now).map(|r| Release { cancelled: false, ..r }),
            Phase::Pending | Phase::Completed | Phase::Cancelled | Phase::OptedOut => None,
        };
    }
    // An operator's opt-out holds for every later revision of the event.
    if let Some(opt_out) = old.release.filter(|r| r.opted_out) {
        entry.release = Some(opt_out);
    }
    entry.phase = old.phase.min(entry.phase_at(now));
    entry
}

fn check_inputs(
    event: &GridEvent,
    ceilings: &[Option<CeilingTarget>],
    pre_event_meter_kw: f64,
) -> Result<(), EventError> {
    event.validate()?;
    if event.cancel {
        return Ok(());
    }
    if ceilings.len() != event.intervals.len() {
        return Err(EventError::new(
            "ceilings",
            format!(
                "{} ceilings for {} intervals; pass one entry (None: nothing to enforce) per interval",
                ceilings.len(),
                event.intervals.len()
            ),
        ));
    }
    for (i, c) in ceilings.iter().enumerate() {
        if let Some(c) = c
            && !(c.ceiling_kw.is_finite() && c.ceiling_kw >= 0.0)
        {
            return Err(EventError::new(
                format!("ceilings[{i}].ceiling_kw"),
                format!("{} is not a ceiling: expected a finite number of kW ≥ 0", c.ceiling_kw),
            ));
        }
    }
    if !(pre_event_meter_kw.is_finite() && pre_event_meter_kw >= 0.0) {
        return Err(EventError::new(
            "pre_event_meter_kw",
            format!("{pre_event_meter_kw} is not a meter reading: expected a finite number of kW ≥ 0"),
        ));
    }
    Ok(())
}

/// Number of steps of a ramp of `len_s` seconds: as few as keep every step ≤ [`STEP_MAX_S`].
fn steps(len_s: u64) -> u64 {
    len_s.div_ceil(STEP_MAX_S).max(1)
}

/// Step `k` (of `n`) of a ramp of `len_s` seconds starting at `start` that contains `t`.
///
/// Step `k` begins `floor(len_s · k / n)` whole seconds after `start`, so boundaries are exact
/// and at most [`STEP_MAX_S`] apart.
fn step_index(start: DateTime<Utc>, len_s: u64, t: DateTime<Utc>) -> (u64, u64) {
    let n = steps(len_s);
    if len_s == 0 {
        return (0, n);
    }
    let elapsed = t.signed_duration_since(start).num_seconds().max(0).unsigned_abs();
    // The largest k with floor(len·k/n) ≤ elapsed is ceil((elapsed + 1)·n / len) − 1.
    let k = ((u128::from(elapsed) + 1) * u128::from(n))
        .div_ceil(u128::from(len_s))
        .saturating_sub(1);
    (u64::try_from(k).unwrap_or(u64::MAX).min(n - 1), n)
}

/// The first step boundary of the ramp `[start, start + len_s]` strictly after `now` (the ramp's
/// end included), or `None` if the ramp is over.
fn next_step_after(start: DateTime<Utc>, len_s: u64, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if len_s == 0 || now >= plus_secs(start, len_s) {
        return None;
    }
    if now < start {
        return Some(start);
    }
    let (k, n) = step_index(start, len_s, now);
    let offset = u128::from(len_s) * u128::from(k + 1) / u128::from(n);
    Some(plus_secs(start, u64::try_from(offset).unwrap_or(len_s)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::model::{EventSource, Interval, Target, Window};
    use crate::event::target::{BaselineEstimate, SiteContext, event_ceilings};
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        "2026-07-14T19:00:00Z".parse().unwrap()
    }

    fn at(s: i64) -> DateTime<Utc> {
        t0() + TimeDelta::seconds(s)
    }

    fn ceiling(kw: f64) -> Target {
        Target::MeterCeiling { kw }
    }

    /// A 1-hour event at t0 with a 10-min ramp and recovery and one 8000 kW ceiling.
    fn event(id: &str, revision: u64) -> GridEvent {
        GridEvent {
            id: id.into(),
            revision,
            source: EventSource::Mqtt,
            site: None,
            program: None,
            issued_at: None,
            mandatory: true,
            test: false,
            cancel: false,
            priority: None,
            window: Window {
                start: t0(),
                ramp_s: 600,
                duration_s: Some(3600),
                recovery_s: 600,
                randomize_start_s: 0,
            },
            intervals: vec![Interval {
                offset_s: 0,
                duration_s: None,
                target: ceiling(8000.0),
            }],
        }
    }

    fn ceilings(ev: &GridEvent) -> Vec<Option<CeilingTarget>> {
        let site = SiteContext {
            facility_max_kw: 12_000.0,
            ..SiteContext::default()
        };
        event_ceilings(ev, &site, Some(&BaselineEstimate::meter_before(10_000.0, 900))).unwrap()
    }

    fn upsert(book: &mut EventBook, ev: GridEvent, pre: f64, now: DateTime<Utc>) -> UpsertOutcome {
        let c = ceilings(&ev);
        book.upsert(ev, c, pre, now)
    }

    fn cancel_of(id: &str, revision: u64) -> GridEvent {
        let mut ev = event(id, revision);
        ev.cancel = true;
        ev
    }

    fn ceil_at(book: &EventBook, s: i64) -> Option<f64> {
        book.effective_ceiling(at(s)).map(|c| c.ceiling_kw)
    }

    /// (second, ceiling) at every change of the effective ceiling over `[from, to]`.
    fn changes(book: &EventBook, from: i64, to: i64) -> Vec<(i64, Option<f64>)> {
        let mut out: Vec<(i64, Option<f64>)> = Vec::new();
        for s in from..=to {
            let c = ceil_at(book, s);
            if out.last().is_none_or(|(_, prev)| *prev != c) {
                out.push((s, c));
            }
        }
        out
    }

    #[test]
    fn revision_rules() {
        let mut book = EventBook::new();
        assert_eq!(
            upsert(&mut book, event("a", 2), 10_000.0, at(-60)),
            UpsertOutcome::Accepted { new: true }
        );
        assert_eq!(
            upsert(&mut book, event("a", 1), 10_000.0, at(-50)),
            UpsertOutcome::IgnoredStale { held_revision: 2 }
        );
        let mut same = event("a", 2);
        same.intervals[0].target = ceiling(1.0);
        assert_eq!(upsert(&mut book, same, 10_000.0, at(-40)), UpsertOutcome::Duplicate);
        assert_eq!(book.get("a").unwrap().ceilings[0].as_ref().unwrap().ceiling_kw, 8000.0);
        assert_eq!(book.get("a").unwrap().accepted_at, at(-60));

        let mut higher = event("a", 5);
        higher.intervals[0].target = ceiling(6000.0);
        assert_eq!(
            upsert(&mut book, higher, 10_000.0, at(-30)),
            UpsertOutcome::Accepted { new: false }
        );
        assert_eq!(book.get("a").unwrap().event.revision, 5);
        assert_eq!(ceil_at(&book, 1000), Some(6000.0));
        assert_eq!(book.len(), 1);
    }

    #[test]
    fn invalid_inputs_are_rejected_without_change() {
        let mut book = EventBook::new();
        let ev = event("a", 1);
        let out = book.upsert(ev.clone(), vec![], 10_000.0, at(0));
        assert!(
            matches!(out, UpsertOutcome::Rejected { ref error } if error.field == "ceilings"),
            "{out:?}"
        );
        let c = ceilings(&ev);
        let out = book.upsert(ev.clone(), c.clone(), f64::NAN, at(0));
        assert!(matches!(out, UpsertOutcome::Rejected { ref error } if error.field == "pre_event_meter_kw"));
        let mut bad = ev.clone();
        bad.intervals[0].offset_s = 4000;
        let out = book.upsert(bad, c.clone(), 10_000.0, at(0));
        assert!(matches!(out, UpsertOutcome::Rejected { ref error } if error.field == "intervals[0].offset_s"));
        let mut nan = c;
        nan[0].as_mut().unwrap().ceiling_kw = f64::INFINITY;
        let out = book.upsert(ev, nan, 10_000.0, at(0));
        assert!(matches!(out, UpsertOutcome::Rejected { ref error } if error.field == "ceilings[0].ceiling_kw"));
        assert!(book.is_empty());
    }

    #[test]
    fn overlapping_events_lowest_ceiling_wins() {
        let mut book = EventBook::new();
        let mut a = event("a", 1);
        a.window.ramp_s = 0;
        a.window.recovery_s = 0;
        let mut b = event("b", 1);
        b.window.start = at(1800);
        b.window.ramp_s = 0;
        b.window.recovery_s = 0;
        b.intervals[0].target = ceiling(7000.0);
        upsert(&mut book, a, 10_000.0, at(-10));
        upsert(&mut book, b, 10_000.0, at(-10));

        let c = book.effective_ceiling(at(100)).unwrap();
        assert_eq!(
            (c.ceiling_kw, c.binding_event.as_str(), c.events.len()),
            (8000.0, "a", 1)
        );
        let c = book.effective_ceiling(at(2000)).unwrap();
        assert_eq!((c.ceiling_kw, c.binding_event.as_str()), (7000.0, "b"));
        assert_eq!(c.events, vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(c.phase, Phase::Active);
        assert_eq!(ceil_at(&book, 4000), Some(7000.0));
        assert_eq!(ceil_at(&book, 6000), None);
        assert_eq!(ceil_at(&book, -1), None);
    }

    #[test]
    fn test_events_never_affect_the_ceiling() {
        let mut book = EventBook::new();
        let mut t = event("drill", 1);
        t.test = true;
        t.intervals[0].target = ceiling(100.0);
        assert_eq!(
            upsert(&mut book, t, 10_000.0, at(-10)),
            UpsertOutcome::TestOnly { new: true }
        );
        assert_eq!(ceil_at(&book, 1000), None);
        // …but it runs its lifecycle, for acks and reports.
        assert_eq!(book.get("drill").unwrap().phase_at(at(1000)), Phase::Active);
        assert_eq!(book.get("drill").unwrap().ceiling_at(at(1000)), Some(100.0));
        upsert(&mut book, event("real", 1), 10_000.0, at(-10));
        let c = book.effective_ceiling(at(1000)).unwrap();
        assert_eq!((c.ceiling_kw, c.binding_event.as_str()), (8000.0, "real"));
        assert_eq!(c.events, vec!["real".to_owned()]);
        let mut t2 = event("drill", 2);
        t2.test = true;
        assert_eq!(
            upsert(&mut book, t2, 10_000.0, at(0)),
            UpsertOutcome::TestOnly { new: false }
        );
    }

    #[test]
    fn ramp_steps_down_from_the_pre_event_meter() {
        let mut book = EventBook::new();
        upsert(&mut book, event("a", 1), 10_000.0, at(-10));
        let ch = changes(&book, -5, 700);
        // None before the start, then 10 steps of 60 s and the target.
        assert_eq!(ch[0], (-5, None));
        assert_eq!(ch[1], (0, Some(10_000.0)));
        let steps: Vec<_> = ch[1..].to_vec();
        assert_eq!(steps.len(), 11, "{steps:?}");
        for w in steps.windows(2) {
            assert!(w[1].0 - w[0].0 <= 60, "{w:?}");
            assert!(w[1].1.unwrap() < w[0].1.unwrap(), "{w:?}");
        }
        assert_eq!(*steps.last().unwrap(), (600, Some(8000.0)));
        assert_eq!(book.get("a").unwrap().phase_at(at(599)), Phase::Ramping);
        assert_eq!(book.get("a").unwrap().phase_at(at(600)), Phase::Active);

        // An odd ramp: 150 s → 3 steps of 50 s.
        let mut book = EventBook::new();
        let mut ev = event("b", 1);
        ev.window.ramp_s = 150;
        upsert(&mut book, ev, 9_000.0, at(-10));
        assert_eq!(
            changes(&book, 0, 200),
            vec![
                (0, Some(9000.0)),
                (50, Some(9000.0 - 1000.0 / 3.0)),
                (100, Some(9000.0 - 2000.0 / 3.0)),
                (150, Some(8000.0))
            ]
        );
    }

    #[test]
    fn recovery_steps_up_without_a_jump() {
        let mut book = EventBook::new();
        upsert(&mut book, event("a", 1), 10_000.0, at(-10));
        let ch = changes(&book, 3000, 4300);
        assert_eq!(ch[0], (3000, Some(8000.0)));
        // First recovery step is one tenth of the way, not the pre-event meter.
        assert_eq!(ch[1], (3600, Some(8200.0)));
        let rec: Vec<_> = ch[1..ch.len() - 1].to_vec();
        assert_eq!(rec.len(), 10);
        for w in rec.windows(2) {
            assert!(w[1].0 - w[0].0 <= 60 && w[1].1.unwrap() > w[0].1.unwrap(), "{w:?}");
        }
        assert_eq!(rec.last().unwrap().1, Some(10_000.0));
        assert_eq!(*ch.last().unwrap(), (4200, None));
        assert_eq!(book.get("a").unwrap().phase_at(at(4199)), Phase::Recovering);
        assert_eq!(book.get("a").unwrap().phase_at(at(4200)), Phase::Completed);
    }

    #[test]
    fn intervals_change_the_ceiling_at_their_boundaries() {
        let mut book = EventBook::new();
        let mut ev = event("a", 1);
        ev.window.ramp_s = 0;
        ev.intervals = vec![
            Interval {
                offset_s: 0,
                duration_s: Some(1200),
                target: ceiling(8000.0),
            },
            Interval {
                offset_s: 1200,
                duration_s: Some(1200),
                target: Target::Price { per_mwh: 50.0 },
            },
            Interval {
                offset_s: 2400,
                duration_s: None,
                target: ceiling(6000.0),
            },
        ];
        upsert(&mut book, ev, 10_000.0, at(-10));
        assert_eq!(ceil_at(&book, 0), Some(8000.0));
        assert_eq!(ceil_at(&book, 1199), Some(8000.0));
        assert_eq!(
            ceil_at(&book, 1200),
            None,
            "an unmapped price interval enforces nothing"
        );
        assert_eq!(ceil_at(&book, 2400), Some(6000.0));
        assert_eq!(ceil_at(&book, 3599), Some(6000.0));
        assert_eq!(ceil_at(&book, 3600), Some(6400.0));
        assert_eq!(book.next_wakeup(at(0)), Some(at(1200)));
        assert_eq!(book.next_wakeup(at(1200)), Some(at(2400)));
    }

    #[test]
    fn open_ended_event_stays_active_until_cancelled() {
        let mut book = EventBook::new();
        let mut ev = event("open", 1);
        ev.window.duration_s = None;
        upsert(&mut book, ev, 10_000.0, at(-10));
        book.advance(at(-10));
        let tr = book.advance(at(6 * 86_400));
        assert_eq!(
            tr.iter().map(|t| t.to).collect::<Vec<_>>(),
            vec![Phase::Ramping, Phase::Active]
        );
        assert_eq!(ceil_at(&book, 6 * 86_400), Some(8000.0));
        assert_eq!(
            book.next_wakeup(at(6 * 86_400)),
            None,
            "nothing changes until a new revision"
        );

        let now = at(6 * 86_400 + 7);
        assert_eq!(
            upsert(&mut book, cancel_of("open", 2), 0.0, now),
            UpsertOutcome::Cancelled { new: false }
        );
        let tr = book.advance(now);
        assert_eq!(
            tr,
            vec![Transition {
                event_id: "open".into(),
                from: Phase::Active,
                to: Phase::Recovering,
                at: now
            }]
        );
        assert_eq!(book.effective_ceiling(now).unwrap().ceiling_kw, 8200.0);
        assert_eq!(book.next_wakeup(now), Some(at(6 * 86_400 + 67)));
        let tr = book.advance(at(7 * 86_400));
        assert_eq!(tr.len(), 1);
        assert_eq!(
            (tr[0].from, tr[0].to, tr[0].at),
            (Phase::Recovering, Phase::Cancelled, at(6 * 86_400 + 607))
        );
        assert_eq!(book.get("open").unwrap().phase, Phase::Cancelled);
    }

    #[test]
    fn cancel_of_an_active_event_recovers_gradually() {
        let mut book = EventBook::new();
        upsert(&mut book, event("a", 1), 10_000.0, at(-10));
        book.advance(at(1000));
        upsert(&mut book, cancel_of("a", 2), 10_000.0, at(1000));
        // No instant jump back to 10 MW: one step of ten at the moment of the cancel.
        assert_eq!(ceil_at(&book, 999), Some(8000.0));
        assert_eq!(ceil_at(&book, 1000), Some(8200.0));
        assert_eq!(ceil_at(&book, 1599), Some(10_000.0));
        assert_eq!(ceil_at(&book, 1600), None);
        let tr = book.advance(at(2000));
        let seq: Vec<_> = tr.iter().map(|t| (t.from, t.to, t.at)).collect();
        assert_eq!(
            seq,
            vec![
                (Phase::Active, Phase::Recovering, at(1000)),
                (Phase::Recovering, Phase::Cancelled, at(1600))
            ]
        );
        // Cancelling mid-ramp starts the recovery from the ramp step in force.
        let mut book = EventBook::new();
        upsert(&mut book, event("b", 1), 10_000.0, at(-10));
        upsert(&mut book, cancel_of("b", 2), 10_000.0, at(125));
        assert_eq!(ceil_at(&book, 124), Some(9600.0));
        assert_eq!(ceil_at(&book, 125), Some(9640.0));
        // A late copy of the original is stale.
        assert_eq!(
            upsert(&mut book, event("b", 1), 10_000.0, at(130)),
            UpsertOutcome::IgnoredStale { held_revision: 2 }
        );
        assert_eq!(
            upsert(&mut book, cancel_of("b", 2), 10_000.0, at(130)),
            UpsertOutcome::Duplicate
        );
    }

    #[test]
    fn cancel_of_a_pending_or_unknown_event_is_immediate() {
        let mut book = EventBook::new();
        upsert(&mut book, event("a", 1), 10_000.0, at(-100));
        assert_eq!(
            upsert(&mut book, cancel_of("a", 2), 0.0, at(-50)),
            UpsertOutcome::Cancelled { new: false }
        );
        let tr = book.advance(at(-50));
        assert_eq!(
            tr,
            vec![Transition {
                event_id: "a".into(),
                from: Phase::Pending,
                to: Phase::Cancelled,
                at: at(-50)
            }]
        );
        assert!(changes(&book, -60, 5000).iter().all(|(_, c)| c.is_none()));
        assert_eq!(book.next_wakeup(at(-50)), None);

        // Unknown id: recorded (so a late original cannot revive it), never in force, even when
        // its window is already running.
        assert_eq!(
            upsert(&mut book, cancel_of("ghost", 4), 0.0, at(100)),
            UpsertOutcome::Cancelled { new: true }
        );
        let tr = book.advance(at(100));
        assert_eq!(
            tr,
            vec![Transition {
                event_id: "ghost".into(),
                from: Phase::Pending,
                to: Phase::Cancelled,
                at: at(100)
            }]
        );
        assert_eq!(ceil_at(&book, 100), None);
        assert_eq!(
            upsert(&mut book, event("ghost", 3), 10_000.0, at(101)),
            UpsertOutcome::IgnoredStale { held_revision: 4 }
        );
    }

    #[test]
    fn advance_catches_up_across_phases_in_one_call() {
        let mut book = EventBook::new();
        upsert(&mut book, event("a", 1), 10_000.0, at(-10));
        let tr = book.advance(at(100_000));
        let seq: Vec<_> = tr.iter().map(|t| (t.from, t.to, t.at)).collect();
        assert_eq!(
            seq,
            vec![
                (Phase::Pending, Phase::Ramping, at(0)),
                (Phase::Ramping, Phase::Active, at(600)),
                (Phase::Active, Phase::Recovering, at(3600)),
                (Phase::Recovering, Phase::Completed, at(4200)),
            ]
        );
        assert!(book.advance(at(100_000)).is_empty(), "idempotent");
        assert!(book.advance(at(200_000)).is_empty());
        assert_eq!(book.get("a").unwrap().phase, Phase::Completed);

        // An event accepted late never reports a phase before it was known.
        let mut book = EventBook::new();
        upsert(&mut book, event("late", 1), 10_000.0, at(900));
        let tr = book.advance(at(900));
        assert_eq!(tr.iter().map(|t| t.at).collect::<Vec<_>>(), vec![at(900), at(900)]);
        assert_eq!(tr.last().unwrap().to, Phase::Active);
    }

    #[test]
    fn applying_recorded_transitions_reaches_what_advance_reached() {
        // Recovery folds recorded transitions one by one; the result must be the book that
        // `advance` produced live, at the same instants, for several events at once.
        let mut live = EventBook::new();
        upsert(&mut live, event("a", 1), 10_000.0, at(-10));
        upsert(&mut live, event("b", 1), 9_000.0, at(300));
        upsert(&mut live, event("late", 1), 9_500.0, at(900));
        let mut folded = live.clone();
        let mut recorded = live.advance(at(700));
        recorded.extend(live.advance(at(5_000)));
        for t in &recorded {
            assert!(folded.apply_transition(t), "{t:?} moves the folded book");
        }
        for id in ["a", "b", "late"] {
            assert_eq!(folded.get(id).unwrap().phase, live.get(id).unwrap().phase, "{id}");
        }
        // Applying a transition again, or one that goes backwards, changes nothing.
        assert!(!folded.apply_transition(&recorded[0]));
        let backwards = Transition {
            event_id: "a".into(),
            from: Phase::Completed,
            to: Phase::Ramping,
            at: at(6_000),
        };
        assert!(!folded.apply_transition(&backwards));
        assert!(!folded.apply_transition(&Transition {
            event_id: "unknown".into(),
            ..backwards
        }));
        assert_eq!(folded.get("a").unwrap().phase, Phase::Completed);
    }

    #[test]
    fn zero_ramp_and_zero_recovery_skip_those_phases() {
        let mut book = EventBook::new();
        let mut ev = event("a", 1);
        ev.window.ramp_s = 0;
        ev.window.recovery_s = 0;
        upsert(&mut book, ev, 10_000.0, at(-10));
        let seq: Vec<_> = book.advance(at(10_000)).iter().map(|t| (t.to, t.at)).collect();
        assert_eq!(seq, vec![(Phase::Active, at(0)), (Phase::Completed, at(3600))]);
        // A ramp as long as the window leaves no Active phase.
        let mut book = EventBook::new();
        let mut ev = event("b", 1);
        ev.window.ramp_s = 5000;
        upsert(&mut book, ev, 10_000.0, at(-10));
        let seq: Vec<_> = book.advance(at(10_000)).iter().map(|t| t.to).collect();
        assert_eq!(seq, vec![Phase::Ramping, Phase::Recovering, Phase::Completed]);
    }

    #[test]
    fn modification_in_force_keeps_the_pre_event_meter() {
        let mut book = EventBook::new();
        upsert(&mut book, event("a", 1), 10_000.0, at(-10));
        book.advance(at(1000));
        let mut deeper = event("a", 2);
        deeper.intervals[0].target = ceiling(7000.0);
        // The meter now reads 8000 (curtailed); that is not a baseline.
        assert_eq!(
            upsert(&mut book, deeper, 8000.0, at(1000)),
            UpsertOutcome::Accepted { new: false }
        );
        assert!(book.advance(at(1000)).is_empty());
        assert_eq!(book.get("a").unwrap().pre_event_meter_kw, 10_000.0);
        assert_eq!(ceil_at(&book, 1000), Some(7000.0));
        assert_eq!(ceil_at(&book, 4199), Some(10_000.0));
    }

    #[test]
    fn modification_that_ends_the_window_recovers_gradually() {
        let mut book = EventBook::new();
        upsert(&mut book, event("a", 1), 10_000.0, at(-10));
        book.advance(at(2000));
        let mut shorter = event("a", 2);
        shorter.window.duration_s = Some(1800);
        upsert(&mut book, shorter, 8000.0, at(2000));
        assert_eq!(ceil_at(&book, 2000), Some(8200.0));
        assert_eq!(ceil_at(&book, 2599), Some(10_000.0));
        assert_eq!(ceil_at(&book, 2600), None);
        let seq: Vec<_> = book.advance(at(3000)).iter().map(|t| (t.to, t.at)).collect();
        assert_eq!(seq, vec![(Phase::Recovering, at(2000)), (Phase::Completed, at(2600))]);
    }

    #[test]
    fn randomized_start_is_deterministic() {
        let mut ev = event("ev-rand-1", 1);
        ev.window.randomize_start_s = 900;
        let mut a = EventBook::new();
        let mut b = EventBook::new();
        upsert(&mut a, ev.clone(), 10_000.0, at(-1000));
        upsert(&mut b, ev.clone(), 10_000.0, at(-1000));
        let ea = a.get("ev-rand-1").unwrap().effective_start;
        assert_eq!(ea, b.get("ev-rand-1").unwrap().effective_start);
        let offset = ea.signed_duration_since(t0()).num_seconds();
        assert!((0..=900).contains(&offset));
        assert_eq!(offset as u64, randomize_offset_s("ev-rand-1", 900));
        // A modification keeps the same delay; the intervals move with it.
        let mut rev2 = ev;
        rev2.revision = 2;
        upsert(&mut a, rev2, 10_000.0, at(-900));
        assert_eq!(a.get("ev-rand-1").unwrap().effective_start, ea);
        assert_eq!(a.effective_ceiling(ea).unwrap().ceiling_kw, 10_000.0);
        // Different ids spread out; no randomization means no delay.
        let offsets: std::collections::BTreeSet<u64> =
            (0..50).map(|i| randomize_offset_s(&format!("ev-{i}"), 3600)).collect();
        assert!(offsets.len() > 40);
        assert!(offsets.iter().all(|o| *o <= 3600));
        assert_eq!(randomize_offset_s("anything", 0), 0);
    }

    #[test]
    fn snapshot_round_trip_and_replay() {
        let ops = |book: &mut EventBook| {
            upsert(book, event("a", 1), 10_000.0, at(-100));
            let mut b = event("b", 3);
            b.window.randomize_start_s = 300;
            b.window.duration_s = None;
            upsert(book, b, 9_500.0, at(-90));
            book.advance(at(700));
            upsert(book, cancel_of("a", 2), 9_000.0, at(800));
        };
        let mut book = EventBook::new();
        ops(&mut book);
        let json = serde_json::to_string(&book).unwrap();
        let back: EventBook = serde_json::from_str(&json).unwrap();
        assert_eq!(back, book);
        let mut replayed = EventBook::new();
        ops(&mut replayed);
        assert_eq!(replayed, book);
        // Restored and original behave identically from here on.
        let mut restored = back;
        assert_eq!(restored.advance(at(5000)), book.advance(at(5000)));
        assert_eq!(restored, book);
        assert_eq!(restored.next_wakeup(at(5000)), book.next_wakeup(at(5000)));
    }

    #[test]
    fn step_arithmetic() {
        assert_eq!(steps(0), 1);
        assert_eq!(steps(1), 1);
        assert_eq!(steps(60), 1);
        assert_eq!(steps(61), 2);
        assert_eq!(steps(600), 10);
        assert_eq!(step_index(t0(), 600, at(0)), (0, 10));
        assert_eq!(step_index(t0(), 600, at(59)), (0, 10));
        assert_eq!(step_index(t0(), 600, at(60)), (1, 10));
        assert_eq!(step_index(t0(), 600, at(599)), (9, 10));
        assert_eq!(step_index(t0(), 600, at(10_000)), (9, 10));
        assert_eq!(next_step_after(t0(), 600, at(-5)), Some(at(0)));
        assert_eq!(next_step_after(t0(), 600, at(0)), Some(at(60)));
        assert_eq!(next_step_after(t0(), 600, at(599)), Some(at(600)));
        assert_eq!(next_step_after(t0(), 600, at(600)), None);
        // Sub-second instants round to the right step.
        let mid = at(59) + TimeDelta::milliseconds(999);
        assert_eq!(next_step_after(t0(), 600, mid), Some(at(60)));
    }

    // ---------------------------------------------------------------------------------------
    // Properties.

    /// A random event: contiguous or gapped intervals, optional test flag.
    fn arb_event(id: &'static str) -> impl Strategy<Value = (GridEvent, f64)> {
        (
            0u64..400,
            prop_oneof![3 => (60u64..3000).prop_map(Some), 1 => Just(None)],
            0u64..400,
            0u64..120,
            prop::collection::vec(
                (
                    0u64..300,
                    30u64..1500,
                    prop_oneof![4 => (10u32..90).prop_map(Some), 1 => Just(None)],
                ),
                1..4,
            ),
            -600i64..600,
            (70u32..120),
            prop::bool::weighted(0.2),
        )
            .prop_map(move |(ramp, duration, recovery, randomize, ivs, start, pre, test)| {
                let mut intervals = Vec::new();
                let mut cursor = 0u64;
                for (gap, len, kw) in ivs {
                    let offset = cursor + gap;
                    if duration.is_some_and(|d| offset >= d) {
                        break;
                    }
                    let mut len = Some(len);
                    if let (Some(d), Some(l)) = (duration, len) {
                        len = Some(l.min(d - offset));
                    }
                    let target = match kw {
                        Some(k) => ceiling(f64::from(k) * 100.0),
                        None => Target::Price { per_mwh: 10.0 },
                    };
                    intervals.push(Interval {
                        offset_s: offset,
                        duration_s: len,
                        target,
                    });
                    cursor = offset + len.unwrap_or(0);
                }
                if intervals.is_empty() {
                    intervals.push(Interval {
                        offset_s: 0,
                        duration_s: None,
                        target: ceiling(5000.0),
                    });
                }
                let mut ev = event(id, 1);
                ev.test = test;
                ev.window = Window {
                    start: at(start),
                    ramp_s: ramp,
                    duration_s: duration,
                    recovery_s: recovery,
                    randomize_start_s: randomize,
                };
                ev.intervals = intervals;
                (ev, f64::from(pre) * 100.0)
            })
    }

    type State = (Option<(u64, EventId, Phase)>, Vec<(Phase, Option<u64>)>);

    fn state(book: &EventBook, now: DateTime<Utc>) -> State {
        (
            book.effective_ceiling(now)
                .map(|c| (c.ceiling_kw.to_bits(), c.binding_event, c.phase)),
            book.events()
                .map(|e| (e.phase_at(now), e.ceiling_at(now).map(f64::to_bits)))
                .collect(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Sleeping until `next_wakeup` never misses a change of any phase or ceiling, per-second
        /// and one-jump `advance` agree, and the effective ceiling is the minimum of the
        /// non-test events in force.
        #[test]
        fn wakeups_cover_every_change(
            a in arb_event("a"), b in arb_event("b"), c in arb_event("c"),
            cancel_b in prop_oneof![4 => (-700i64..3500).prop_map(Some), 1 => Just(None)],
        ) {
            let start = -1000i64;
            let end = 9000i64;
            let mut book = EventBook::new();
            for (ev, pre) in [a, b, c] {
                let cs = ceilings(&ev);
                let out = book.upsert(ev, cs, pre, at(start));
                prop_assert!(!matches!(out, UpsertOutcome::Rejected { .. }), "{:?}", out);
            }
            let mut jumper = book.clone();
            let mut stepped = Vec::new();
            let mut prev = state(&book, at(start));
            let mut wake = book.next_wakeup(at(start));
            for s in start + 1..=end {
                let now = at(s);
                let mut upserted = false;
                if cancel_b == Some(s) {
                    let pre = book.get("b").unwrap().pre_event_meter_kw;
                    let out = book.upsert(cancel_of("b", 2), vec![], pre, now);
                    prop_assert_eq!(out.clone(), UpsertOutcome::Cancelled { new: false });
                    prop_assert_eq!(jumper.upsert(cancel_of("b", 2), vec![], pre, now), out);
                    upserted = true;
                }
                let st = state(&book, now);
                if st != prev && !upserted {
                    prop_assert_eq!(wake, Some(now), "change at {} s not announced", s);
                }
                if upserted || wake.is_some_and(|w| w <= now) {
                    wake = book.next_wakeup(now);
                }
                prop_assert!(wake.is_none_or(|w| w > now));
                // The effective ceiling is the minimum over non-test events in force.
                let want = book
                    .events()
                    .filter(|e| !e.event.test && e.phase_at(now).in_force())
                    .filter_map(|e| e.ceiling_at(now))
                    .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.min(c))));
                prop_assert_eq!(book.effective_ceiling(now).map(|c| c.ceiling_kw), want);
                if let Some(c) = want {
                    prop_assert!(c.is_finite() && c >= 0.0);
                }
                stepped.extend(book.advance(now));
                prev = st;
            }
            let jumped = jumper.advance(at(end));
            let key = |t: &Transition| (t.at, t.event_id.clone());
            let mut stepped_sorted = stepped;
            stepped_sorted.sort_by_key(key);
            let mut jumped_sorted = jumped;
            jumped_sorted.sort_by_key(key);
            prop_assert_eq!(stepped_sorted, jumped_sorted);
            prop_assert_eq!(&jumper, &book);
            let json = serde_json::to_string(&book).unwrap();
            let back: EventBook = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back, book);
        }

        /// Ramps start at the pre-event meter, fall monotonically in steps at most 60 s apart and
        /// reach the target at the end of the ramp; recoveries rise monotonically in steps at most
        /// 60 s apart and end at the pre-event meter.
        #[test]
        fn ramps_and_recoveries_are_gradual(
            ramp in 1u64..1000, recovery in 1u64..1000, pre in 5000u32..20000, target in 0u32..5000,
            duration in 1000u64..3000,
        ) {
            let mut ev = event("r", 1);
            ev.window.ramp_s = ramp;
            ev.window.recovery_s = recovery;
            ev.window.duration_s = Some(duration);
            ev.intervals[0].target = ceiling(f64::from(target));
            let mut book = EventBook::new();
            upsert(&mut book, ev, f64::from(pre), at(-10));
            let ramp_end = i64::try_from(ramp.min(duration)).unwrap();
            let d = i64::try_from(duration).unwrap();
            let r = i64::try_from(recovery).unwrap();

            let down = changes(&book, 0, ramp_end - 1);
            prop_assert_eq!(down[0], (0, Some(f64::from(pre))));
            prop_assert_eq!(down.len() as u64, steps(ramp.min(duration)));
            for w in down.windows(2) {
                prop_assert!(w[1].0 - w[0].0 <= 60);
                prop_assert!(w[1].1.unwrap() < w[0].1.unwrap());
            }
            if ramp < duration {
                prop_assert_eq!(ceil_at(&book, ramp_end), Some(f64::from(target)));
                prop_assert!(ramp_end - down.last().unwrap().0 <= 60);
            }

            let up = changes(&book, d, d + r - 1);
            prop_assert_eq!(up.len() as u64, steps(recovery));
            prop_assert!(up[0].1.unwrap() > ceil_at(&book, d - 1).unwrap());
            if steps(recovery) > 1 {
                prop_assert!(up[0].1.unwrap() < f64::from(pre), "no jump straight back");
            }
            for w in up.windows(2) {
                prop_assert!(w[1].0 - w[0].0 <= 60);
                prop_assert!(w[1].1.unwrap() > w[0].1.unwrap());
            }
            prop_assert_eq!(up.last().unwrap().1, Some(f64::from(pre)));
            prop_assert!(d + r - up.last().unwrap().0 <= 60);
            prop_assert_eq!(ceil_at(&book, d + r), None);
        }
    }
}
