//! Turning repeated polls (and notifications) into New / Modified / Cancelled / Unchanged.
//!
//! OpenADR 3 has no modificationNumber and no eventStatus (a change shows only in
//! `modificationDateTime`, and a deleted event just stops being listed), so the tracker derives
//! them, sans I/O:
//!
//! - **New**: an id not seen before (or seen, deleted, and back again).
//! - **Modified**: `modificationDateTime` changed, *or* the content changed while the VTN did not
//!   bump it (some VTNs don't). An older `modificationDateTime` than the one stored is a stale
//!   copy (a lagging replica) and is ignored: reported `Unchanged`, nothing updated.
//! - **Cancelled**: the event was deleted (absent from a *complete* poll, or a DELETE
//!   notification), or its window is empty ([`zero_window`]: no intervals, event `duration`
//!   PT0S, or every interval's duration PT0S — e.g. start `0001-01-01` with `PT0S`). An event
//!   first seen with an empty window is reported `Cancelled` at revision 1, so a consumer that
//!   never knew it can ignore it. A zero-window event later given a real window is `Modified`.
//! - **Unchanged**: everything else.
//!
//! Every change bumps a per-id **revision** (monotone, starting at 1 and kept across deletion),
//! so a consumer with an `(id, revision)` book can dedupe exactly as with 2.0b's
//! `(eventID, modificationNumber)`. (The last 10,000 deleted ids are remembered; one deleted
//! longer ago that comes back starts again at revision 1.)
//!
//! One tracker per poll scope: a poll for program P and targets T is complete only for that
//! scope, and an event missing from it is taken as deleted.

use std::collections::{BTreeMap, HashSet, VecDeque};

use chrono::{DateTime, Utc};

use super::model::{Event, Notification, NotifiedObject, Operation};
use super::timing::{ZeroWindow, zero_window};

/// Most deleted ids remembered (for revision continuity if they come back).
const MAX_TOMBSTONES: usize = 10_000;

/// Why an event is cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// Deleted on the VTN (absent from a complete poll, or a DELETE notification).
    Deleted,
    /// Its window is empty.
    ZeroWindow(ZeroWindow),
}

/// What happened to an event since the tracker last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// First seen.
    New,
    /// Changed.
    Modified,
    /// Cancelled; stop acting on it.
    Cancelled(CancelReason),
    /// As before.
    Unchanged,
}

/// One event's change.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The event id.
    pub id: String,
    /// The tracker's revision for this id after the change (unchanged for `Unchanged`).
    pub revision: u32,
    /// What happened.
    pub kind: ChangeKind,
    /// The event as now known (for `Deleted`, the last version seen).
    pub event: Event,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Live,
    Zero,
    Deleted,
}

#[derive(Debug, Clone)]
struct Entry {
    revision: u32,
    last: Event,
    state: State,
}

/// Change tracking for one poll scope. Feed it every complete poll result with
/// [`EventTracker::observe_poll`], and notifications with [`EventTracker::observe_notification`].
#[derive(Debug, Clone, Default)]
pub struct EventTracker {
    entries: BTreeMap<String, Entry>,
    tombstones: VecDeque<String>,
}

/// Content equality, ignoring the VTN's bookkeeping timestamps.
fn same_content(a: &Event, b: &Event) -> bool {
    let strip = |e: &Event| Event {
        created_date_time: None,
        modification_date_time: None,
        ..e.clone()
    };
    strip(a) == strip(b)
}

impl EventTracker {
    /// An empty tracker.
    pub fn new() -> EventTracker {
        EventTracker::default()
    }

    /// The current revision of `id`, if ever seen.
    pub fn revision(&self, id: &str) -> Option<u32> {
        self.entries.get(id).map(|e| e.revision)
    }

    /// Ids of events currently live (seen, not cancelled).
    pub fn live_ids(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(_, e)| e.state == State::Live)
            .map(|(id, _)| id.as_str())
            .collect()
    }

    /// Feeds one *complete* poll result for this tracker's scope. Returns one change per event
    /// in the poll (in poll order; events without an id, and repeated ids, are skipped), then
    /// one `Cancelled(Deleted)` per previously known event that is missing, in id order.
    pub fn observe_poll(&mut self, events: &[Event]) -> Vec<Change> {
        let mut seen = HashSet::new();
        let mut changes = Vec::with_capacity(events.len());
        for event in events {
            let Some(id) = event.id.as_deref() else { continue };
            if !seen.insert(id.to_string()) {
                continue;
            }
            changes.push(self.observe_event(event).unwrap_or_else(|| Change {
                id: id.to_string(),
                revision: 0,
                kind: ChangeKind::Unchanged,
                event: event.clone(),
            }));
        }
        let missing: Vec<String> = self
            .entries
            .iter()
            .filter(|(id, e)| e.state != State::Deleted && !seen.contains(id.as_str()))
            .map(|(id, _)| id.clone())
            .collect();
        for id in missing {
            if let Some(change) = self.observe_deleted(&id) {
                changes.push(change);
            }
        }
        changes
    }

    /// Feeds one event seen on its own (a notification, `GET /events/{id}`); absence of others
    /// says nothing. `None` only for an event without an id.
    pub fn observe_event(&mut self, event: &Event) -> Option<Change> {
        let id = event.id.clone()?;
        let zero = zero_window(event);
        let new_state = if zero.is_some() { State::Zero } else { State::Live };
        let changed_kind = |zero: Option<ZeroWindow>, fresh: bool| match zero {
            Some(z) => ChangeKind::Cancelled(CancelReason::ZeroWindow(z)),
            None if fresh => ChangeKind::New,
            None => ChangeKind::Modified,
        };
        let Some(entry) = self.entries.get_mut(&id) else {
            let kind = changed_kind(zero, true);
            self.entries.insert(
                id.clone(),
                Entry {
                    revision: 1,
                    last: event.clone(),
                    state: new_state,
                },
            );
            return Some(Change {
                id,
                revision: 1,
                kind,
                event: event.clone(),
            });
        };
        if entry.state == State::Deleted {
            self.tombstones.retain(|t| t != &id);
            entry.revision += 1;
            entry.last = event.clone();
            entry.state = new_state;
            return Some(Change {
                id,
                revision: entry.revision,
                kind: changed_kind(zero, true),
                event: event.clone(),
            });
        }
        let stale = matches!(
            (entry.last.modification_date_time, event.modification_date_time),
            (Some(old), Some(new)) if new < old
        );
        let changed =
            entry.last.modification_date_time != event.modification_date_time || !same_content(&entry.last, event);
        if stale || !changed {
            return Some(Change {
                id,
                revision: entry.revision,
                kind: ChangeKind::Unchanged,
                event: entry.last.clone(),
            });
        }
        entry.revision += 1;
        entry.last = event.clone();
        entry.state = new_state;
        Some(Change {
            id,
            revision: entry.revision,
            kind: changed_kind(zero, false),
            event: event.clone(),
        })
    }

    /// Records that `id` was deleted. `None` if it is unknown or already deleted.
    pub fn observe_deleted(&mut self, id: &str) -> Option<Change> {
        let entry = self.entries.get_mut(id)?;
        if entry.state == State::Deleted {
            return None;
        }
        entry.revision += 1;
        entry.state = State::Deleted;
        let change = Change {
            id: id.to_string(),
            revision: entry.revision,
            kind: ChangeKind::Cancelled(CancelReason::Deleted),
            event: entry.last.clone(),
        };
        self.tombstones.push_back(id.to_string());
        while self.tombstones.len() > MAX_TOMBSTONES {
            if let Some(old) = self.tombstones.pop_front() {
                self.entries.remove(&old);
            }
        }
        Some(change)
    }

    /// Feeds a notification: an event CREATE/READ/UPDATE is [`Self::observe_event`]; a DELETE is
    /// [`Self::observe_deleted`]. `None` for non-event objects and unknown deletions.
    pub fn observe_notification(&mut self, notification: &Notification) -> Option<Change> {
        let NotifiedObject::Event(event) = &notification.object else {
            return None;
        };
        match notification.operation {
            Operation::Delete => self.observe_deleted(event.id.as_deref()?),
            Operation::Create | Operation::Read | Operation::Update => self.observe_event(event),
        }
    }

    /// The last modificationDateTime seen for `id`.
    pub fn modification_date_time(&self, id: &str) -> Option<DateTime<Utc>> {
        self.entries.get(id).and_then(|e| e.last.modification_date_time)
    }
}
