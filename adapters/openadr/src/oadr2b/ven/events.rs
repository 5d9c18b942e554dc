//! The event book and the oadrDistributeEvent rules: identity by eventID and
//! modificationNumber, implied cancellation, responseRequired (see [`DistributeOutcome`]).

use std::collections::{BTreeSet, HashSet};

use chrono::{DateTime, TimeDelta, Utc};

use super::{Action, Ven};
use crate::oadr2b::outgoing::{EventResponseOut, OptType, Outgoing};
use crate::oadr2b::signal::{SignalMeaning, map_signal};
use crate::oadr2b::{CreatedEvent, DistributeEvent, Event, EventStatus, ResponseRequired, Targets};

/// What became of one oadrDistributeEvent (or of a registration ending): changes for the
/// caller's event book and, for a distribute, the answer still to be given.
///
/// The rules, per event of a distribute (identity = eventID + modificationNumber):
///
/// - a **lower** modificationNumber than the one known is stale: ignored (warning), answered
///   with code 450;
/// - an **equal** one is unchanged: no change, answered with the opt already given, unless
///   the VTN has accepted our answer with that opt to that version already (a VTN may list an
///   event both in its answer to oadrRequestEvent and in the next poll): then it gets no second
///   answer;
/// - a **higher** one (or a new eventID) replaces the whole event;
/// - status `cancelled` cancels it ([`CancelReason::Explicit`]) and `completed` drops it
///   ([`CancelReason::Completed`]), whatever the modificationNumber (status alone never bumps
///   it in openleadr); a cancellation of an unknown event is acknowledged, never an error;
/// - a known live event missing from the distribute is cancelled ([`CancelReason::Implied`]),
///   unless its window has already ended (then it is dropped silently); an empty distribute
///   therefore clears everything;
/// - the VEN opts out by itself, without asking the caller, when the event-level eiTarget
///   does not name us (code 200), when the market context is not one we are enrolled in
///   (code 200), when a signal is refused by [`map_signal`] (its code: 460 unsupported, 454
///   out of range or bad units), or when the decoder found the event itself unusable
///   ([`Event::invalid`], e.g. a duration `PT`: 454 with the reason, never an open end). Such an event is reported as [`EventChange::Refused`], never
///   as an actionable upsert. A signal with its own eiTarget that does not name us is left out;
/// - a test event (`testEvent` anything but `false`) is upserted with `test: true`, opted into
///   by the VEN itself (it is acknowledged), and must never be acted on.
#[derive(Debug, Clone, PartialEq)]
pub struct DistributeOutcome {
    /// The distribute's `pyld:requestID` (empty for changes not caused by a distribute).
    pub request_id: String,
    /// Changes to apply, in the order of the distribute, implied cancellations last.
    pub changes: Vec<EventChange>,
    /// The answer still to be given; pass it to [`Ven::answer_distribute`]. `None` when there
    /// is nothing to answer (the changes came from a registration ending or a bare
    /// oadrResponse to oadrRequestEvent).
    pub pending: Option<PendingDistribute>,
}

/// A change to the caller's event book.
#[derive(Debug, Clone, PartialEq)]
pub enum EventChange {
    /// A new event, or a new version replacing the old one entirely (boxed: it is large).
    Upsert(Box<EventUpdate>),
    /// Stop the event now (ramping back over `recovery` if given).
    Cancel {
        /// `ei:eventID`.
        event_id: String,
        /// The modificationNumber of the version cancelled.
        modification_number: u32,
        /// Why.
        reason: CancelReason,
        /// `x-eiRecovery` of the event, if any: how long the ramp back may take.
        recovery: Option<TimeDelta>,
    },
    /// The VEN opted out of this event version by itself. Never act on it; if you hold an
    /// older version of it, drop that too.
    Refused {
        /// `ei:eventID`.
        event_id: String,
        /// The modificationNumber refused.
        modification_number: u32,
        /// The eventResponse code sent (200, 454 or 460).
        code: u16,
        /// The reason sent.
        reason: String,
    },
}

/// Why an event stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// eventStatus `cancelled`.
    Explicit,
    /// Missing from a later distribute (or an oadrResponse to oadrRequestEvent).
    Implied,
    /// eventStatus `completed`.
    Completed,
    /// Our registration ended (VTN or VEN cancelled it).
    RegistrationEnded,
}

/// One actionable (or test) event version.
#[derive(Debug, Clone, PartialEq)]
pub struct EventUpdate {
    /// `ei:eventID`.
    pub event_id: String,
    /// `ei:modificationNumber`.
    pub modification_number: u32,
    /// A test event: acknowledged, never acted on.
    pub test: bool,
    /// 2.0b priority (lower = more important, 0 = none).
    pub priority: Option<u32>,
    /// `emix:marketContext`.
    pub market_context: Option<String>,
    /// When it runs.
    pub schedule: EventSchedule,
    /// What each of our signals asks, in event order.
    pub signals: Vec<SignalTargets>,
    /// The decoded event, for anything else.
    pub event: Event,
}

/// An event's timing, for scheduling. The VEN does not randomise: a consumer that honours
/// `start_after` picks a uniform delay in `[0, start_after]` and shifts every interval by it.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSchedule {
    /// `xcal:dtstart`.
    pub start: DateTime<Utc>,
    /// `start + duration`; `None` for an open-ended event (PT0S).
    pub end: Option<DateTime<Utc>>,
    /// `xcal:tolerance/tolerate/startafter`: the randomisation window.
    pub start_after: Option<TimeDelta>,
    /// `x-eiNotification`.
    pub notification: Option<TimeDelta>,
    /// `x-eiRampUp`: how long before `start` the ramp may begin.
    pub ramp_up: Option<TimeDelta>,
    /// `x-eiRecovery`: how long after the end (or a cancellation) the ramp back may take.
    pub recovery: Option<TimeDelta>,
}

/// One signal of an event and what it asks.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalTargets {
    /// `ei:signalName`.
    pub name: String,
    /// `ei:signalType`.
    pub signal_type: String,
    /// `ei:signalID`.
    pub id: String,
    /// Load targets, price targets, or acknowledged only.
    pub meaning: SignalMeaning,
}

/// How the VEN sees an event the VTN lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventState {
    /// Ours and actionable.
    Accepted,
    /// A test event: acknowledged, never acted on.
    Test,
    /// Opted out of by the VEN.
    Refused {
        /// The eventResponse code sent.
        code: u16,
        /// The reason sent.
        reason: String,
    },
    /// Cancelled (explicitly).
    Cancelled,
    /// Completed (by status).
    Completed,
}

/// An event the VEN knows.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownEvent {
    /// The current version as received.
    pub event: Event,
    /// How the VEN treats it.
    pub state: EventState,
    /// Our opt for this version; `None` while the caller has not decided.
    pub opt: Option<OptType>,
}

/// The part of a distribute that still needs answering. Opaque; inspect it with
/// [`PendingDistribute::needs_decision`].
#[derive(Debug, Clone, PartialEq)]
pub struct PendingDistribute {
    request_id: String,
    entries: Vec<PendingEntry>,
}

#[derive(Debug, Clone, PartialEq)]
struct PendingEntry {
    event_id: String,
    modification_number: u32,
    respond: bool,
    answer: Answer,
}

#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Fixed {
        code: u16,
        opt: OptType,
        description: String,
    },
    Decide,
    /// The VTN has accepted our answer to this version already (this run's, or an earlier
    /// run's through [`Ven::resume`]): nothing is sent again.
    Answered,
}

/// What an earlier run of this VEN exchanged, for [`Ven::resume`], in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Resumed {
    /// An oadrDistributeEvent it received (polled or pushed).
    Received(DistributeEvent),
    /// An oadrCreatedEvent it sent and the VTN accepted.
    Answered(CreatedEvent),
}

impl PendingDistribute {
    /// The distribute's requestID (echoed in every eventResponse).
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// EventIDs the caller must decide on: new or modified actionable events (and unchanged
    /// ones it has not decided on yet). Events with responseRequired `never` are listed too
    /// (the decision is recorded, nothing is sent).
    pub fn needs_decision(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|e| e.answer == Answer::Decide)
            .map(|e| e.event_id.as_str())
            .collect()
    }

    /// Leave `event_id` unanswered: the caller could not take it now and will take it when
    /// the VTN sends it again (with [`Ven::forget_event`], a repeat is seen as new). The VTN,
    /// still without an answer, holds the event for us (2.0b has no retryable refusal; no
    /// answer is the one a VTN re-sends on).
    pub fn withhold(&mut self, event_id: &str) {
        self.entries.retain(|e| e.event_id != event_id);
    }

    /// Whether answering will send an oadrCreatedEvent at all (some event has
    /// responseRequired `always`).
    pub fn responds(&self) -> bool {
        self.entries.iter().any(|e| e.respond)
    }
}

/// The caller's opt decision for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptDecision {
    /// `ei:eventID`.
    pub event_id: String,
    /// optIn or optOut.
    pub opt: OptType,
    /// Why (sent as the eventResponse description; an opt-out should say why).
    pub reason: Option<String>,
}

impl OptDecision {
    /// Take part.
    pub fn opt_in(event_id: impl Into<String>) -> Self {
        OptDecision {
            event_id: event_id.into(),
            opt: OptType::OptIn,
            reason: None,
        }
    }

    /// Do not take part, saying why.
    pub fn opt_out(event_id: impl Into<String>, reason: impl Into<String>) -> Self {
        OptDecision {
            event_id: event_id.into(),
            opt: OptType::OptOut,
            reason: Some(reason.into()),
        }
    }
}

impl Ven {
    /// Builds the oadrCreatedEvent for `pending` with the caller's `decisions` (one per id in
    /// [`PendingDistribute::needs_decision`]). An undecided event is opted out of ("no
    /// decision"), with a warning. Returns no send when no event has responseRequired
    /// `always`: the VTN must not get an oadrCreatedEvent then.
    pub fn answer_distribute(&mut self, pending: PendingDistribute, decisions: Vec<OptDecision>) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut responses = Vec::new();
        let mut used = HashSet::new();
        for entry in pending.entries {
            let (code, opt, description) = match entry.answer {
                Answer::Answered => continue,
                Answer::Fixed { code, opt, description } => (code, opt, description),
                Answer::Decide => {
                    let decision = decisions.iter().find(|d| d.event_id == entry.event_id);
                    let (opt, description) = match decision {
                        Some(d) => {
                            used.insert(d.event_id.as_str());
                            let description = match (&d.reason, d.opt) {
                                (Some(r), _) => r.clone(),
                                (None, OptType::OptIn) => "OK".to_string(),
                                (None, OptType::OptOut) => "opted out".to_string(),
                            };
                            (d.opt, description)
                        }
                        None => {
                            let why = format!("no opt decision for event {}; opting out", entry.event_id);
                            self.warn(&mut actions, why);
                            (OptType::OptOut, "no decision from the site".to_string())
                        }
                    };
                    if let Some(k) = self.events.get_mut(&entry.event_id)
                        && k.event.modification_number == entry.modification_number
                        && k.state == EventState::Accepted
                    {
                        k.opt = Some(opt);
                    }
                    (200, opt, description)
                }
            };
            if entry.respond {
                responses.push(EventResponseOut {
                    code,
                    description,
                    request_id: pending.request_id.clone(),
                    event_id: entry.event_id,
                    modification_number: entry.modification_number,
                    opt,
                });
            }
        }
        for d in &decisions {
            if !used.contains(d.event_id.as_str()) {
                self.warn(
                    &mut actions,
                    format!("opt decision for event {} was not asked for; ignored", d.event_id),
                );
            }
        }
        if !responses.is_empty() {
            self.send(
                &mut actions,
                Outgoing::CreatedEvent {
                    ven_id: self.ven_id(),
                    responses,
                },
            );
        }
        actions
    }

    /// Rebuild the event book from what an earlier run of this VEN received and answered (a
    /// restart, or a gateway replica that takes over its predecessor's VEN): each distribute
    /// is applied as it was then, its changes already acted on, and each answer the VTN
    /// accepted marks its event version answered. A later distribute that repeats such a
    /// version is not answered again, so the VTN sees one opt per version across the
    /// restart; a version nobody answered (the earlier run stopped between receiving and
    /// answering, or could not take it) is forgotten, so that it is decided and answered as
    /// new. Call before [`Ven::start`].
    pub fn resume(&mut self, now: DateTime<Utc>, history: impl IntoIterator<Item = Resumed>) {
        let mut scratch = Vec::new();
        for item in history {
            match item {
                Resumed::Received(d) => {
                    let expected = self
                        .cfg
                        .expected_vtn_id
                        .clone()
                        .or_else(|| self.reg.as_ref().and_then(|r| r.vtn_id.clone()));
                    if expected.is_some_and(|exp| d.vtn_id.trim() != exp) {
                        continue;
                    }
                    let mut seen = BTreeSet::new();
                    for ev in d.events {
                        if seen.insert(ev.id.clone()) {
                            let _ = self.apply_event(ev, &mut scratch);
                        }
                    }
                    let _ = self.implied_cancellations(now, &seen);
                }
                Resumed::Answered(created) => {
                    for r in created.event_responses {
                        let Some(known) = self.events.get_mut(&r.event_id) else {
                            continue;
                        };
                        if known.event.modification_number != r.modification_number {
                            continue;
                        }
                        if known.state == EventState::Accepted {
                            known.opt = Some(r.opt);
                        }
                        self.answered.insert((r.event_id, r.modification_number), r.opt);
                    }
                }
            }
            self.forget_replaced_answers();
        }
        // A version received and never answered may never have reached the caller either (the
        // earlier run stopped in between, or could not record it): it is decided afresh.
        let answered = &self.answered;
        self.events.retain(|id, k| {
            k.state != EventState::Accepted || answered.contains_key(&(id.clone(), k.event.modification_number))
        });
    }

    /// Forget `event_id` (the caller could not take it; see [`PendingDistribute::withhold`]):
    /// its next distribute is a new event, decided afresh.
    pub fn forget_event(&mut self, event_id: &str) {
        self.events.remove(event_id);
        self.forget_replaced_answers();
    }

    /// Answers to versions the book no longer holds are of no further use.
    fn forget_replaced_answers(&mut self) {
        let known = &self.events;
        self.answered
            .retain(|(id, m), _| known.get(id).is_some_and(|k| k.event.modification_number == *m));
    }

    pub(super) fn on_distribute(&mut self, now: DateTime<Utc>, d: DistributeEvent, actions: &mut Vec<Action>) {
        let expected = self
            .cfg
            .expected_vtn_id
            .clone()
            .or_else(|| self.reg.as_ref().and_then(|r| r.vtn_id.clone()));
        if let Some(exp) = expected
            && d.vtn_id.trim() != exp
        {
            let why = format!("vtnID {:?} is not the expected {exp:?}", d.vtn_id);
            self.warn(actions, format!("oadrDistributeEvent {} refused: {why}", d.request_id));
            let mut seen = HashSet::new();
            let responses: Vec<EventResponseOut> = d
                .events
                .iter()
                .filter(|e| seen.insert(e.id.clone()) && e.response_required != Some(ResponseRequired::Never))
                .map(|e| EventResponseOut {
                    code: 452,
                    description: why.clone(),
                    request_id: d.request_id.clone(),
                    event_id: e.id.clone(),
                    modification_number: e.modification_number,
                    opt: OptType::OptOut,
                })
                .collect();
            if !responses.is_empty() {
                self.send(
                    actions,
                    Outgoing::CreatedEvent {
                        ven_id: self.ven_id(),
                        responses,
                    },
                );
            }
            return;
        }
        for w in &d.warnings {
            self.warn(actions, format!("oadrDistributeEvent {}: {w}", d.request_id));
        }
        let mut seen = BTreeSet::new();
        let mut changes = Vec::new();
        let mut entries = Vec::new();
        for ev in d.events {
            if !seen.insert(ev.id.clone()) {
                self.warn(
                    actions,
                    format!("event {} is listed twice; the second copy is ignored", ev.id),
                );
                continue;
            }
            let respond = ev.response_required != Some(ResponseRequired::Never);
            let event_id = ev.id.clone();
            let modification_number = ev.modification_number;
            let (change, answer) = self.apply_event(ev, actions);
            changes.extend(change);
            entries.push(PendingEntry {
                event_id,
                modification_number,
                respond,
                answer,
            });
        }
        changes.extend(self.implied_cancellations(now, &seen));
        self.forget_replaced_answers();
        actions.push(Action::Events(DistributeOutcome {
            request_id: d.request_id.clone(),
            changes,
            pending: Some(PendingDistribute {
                request_id: d.request_id,
                entries,
            }),
        }));
    }

    /// Applies one event of a distribute to the book.
    fn apply_event(&mut self, ev: Event, actions: &mut Vec<Action>) -> (Option<EventChange>, Answer) {
        let id = ev.id.clone();
        let m = ev.modification_number;
        let known = self.events.get(&id);
        let prev_opt = known.and_then(|k| k.opt);
        let was_live = known.is_some_and(|k| matches!(k.state, EventState::Accepted | EventState::Test));
        let ack = |opt: Option<OptType>| Answer::Fixed {
            code: 200,
            opt: opt.unwrap_or(OptType::OptIn),
            description: "OK".to_string(),
        };
        if let Some(k) = known {
            let current = k.event.modification_number;
            if m < current {
                let why = format!("event {id}: modificationNumber {m} is older than the known {current}; ignored");
                self.warn(actions, why);
                let answer = Answer::Fixed {
                    code: 450,
                    opt: prev_opt.unwrap_or(OptType::OptOut),
                    description: format!("out of sequence: modificationNumber {m}, current is {current}"),
                };
                return (None, answer);
            }
            let terminal = matches!(ev.status, EventStatus::Cancelled | EventStatus::Completed);
            if m == current && !(terminal && was_live) {
                let answered = self
                    .answered
                    .get(&(id.clone(), m))
                    .is_some_and(|sent| Some(*sent) == k.opt);
                let answer = match &k.state {
                    _ if answered && !terminal => Answer::Answered,
                    EventState::Accepted => match k.opt {
                        Some(opt) => Answer::Fixed {
                            code: 200,
                            opt,
                            description: "OK".to_string(),
                        },
                        None => Answer::Decide,
                    },
                    EventState::Test => test_answer(),
                    EventState::Refused { code, reason } => Answer::Fixed {
                        code: *code,
                        opt: OptType::OptOut,
                        description: reason.clone(),
                    },
                    EventState::Cancelled | EventState::Completed => ack(prev_opt),
                };
                if terminal && !matches!(k.state, EventState::Cancelled | EventState::Completed) {
                    // A refused event that is now over: remember it as such.
                    let state = if ev.status == EventStatus::Cancelled {
                        EventState::Cancelled
                    } else {
                        EventState::Completed
                    };
                    self.events.insert(
                        id,
                        KnownEvent {
                            event: ev,
                            state,
                            opt: prev_opt,
                        },
                    );
                }
                return (None, answer);
            }
        }
        // A new event, or a new version of a known one.
        match ev.status {
            EventStatus::Cancelled | EventStatus::Completed => {
                let (state, reason) = if ev.status == EventStatus::Cancelled {
                    (EventState::Cancelled, CancelReason::Explicit)
                } else {
                    (EventState::Completed, CancelReason::Completed)
                };
                let change = was_live.then(|| EventChange::Cancel {
                    event_id: id.clone(),
                    modification_number: m,
                    reason,
                    recovery: ev.recovery,
                });
                self.events.insert(
                    id,
                    KnownEvent {
                        event: ev,
                        state,
                        opt: prev_opt,
                    },
                );
                (change, ack(prev_opt))
            }
            _ => match self.evaluate(&ev) {
                Err((code, reason)) => {
                    self.warn(
                        actions,
                        format!("opting out of event {id} (modification {m}): {reason}"),
                    );
                    let change = EventChange::Refused {
                        event_id: id.clone(),
                        modification_number: m,
                        code,
                        reason: reason.clone(),
                    };
                    let answer = Answer::Fixed {
                        code,
                        opt: OptType::OptOut,
                        description: reason.clone(),
                    };
                    self.events.insert(
                        id,
                        KnownEvent {
                            event: ev,
                            state: EventState::Refused { code, reason },
                            opt: Some(OptType::OptOut),
                        },
                    );
                    (Some(change), answer)
                }
                Ok(signals) => {
                    let test = ev.test;
                    let update = EventUpdate {
                        event_id: id.clone(),
                        modification_number: m,
                        test,
                        priority: ev.priority,
                        market_context: ev.market_context.clone(),
                        schedule: EventSchedule {
                            start: ev.dtstart,
                            end: event_end(&ev),
                            start_after: ev.start_after,
                            notification: ev.notification,
                            ramp_up: ev.ramp_up,
                            recovery: ev.recovery,
                        },
                        signals,
                        event: ev.clone(),
                    };
                    let (state, opt, answer) = if test {
                        (EventState::Test, Some(OptType::OptIn), test_answer())
                    } else {
                        (EventState::Accepted, None, Answer::Decide)
                    };
                    self.events.insert(id, KnownEvent { event: ev, state, opt });
                    (Some(EventChange::Upsert(Box::new(update))), answer)
                }
            },
        }
    }

    /// VEN-side checks: is the event ours, in our market, with signals we can honour?
    fn evaluate(&self, ev: &Event) -> Result<Vec<SignalTargets>, (u16, String)> {
        if !ev.invalid.is_empty() {
            return Err((454, ev.invalid.join("; ")));
        }
        if !self.targets_match(&ev.targets) {
            return Err((200, format!("eiTarget does not match this VEN ({})", self.identity())));
        }
        if let Some(mc) = ev.market_context.as_deref().map(str::trim)
            && !self.cfg.market_contexts.is_empty()
            && !self.cfg.market_contexts.iter().any(|c| c.trim() == mc)
        {
            return Err((200, format!("not enrolled in market context {mc}")));
        }
        let mut out = Vec::with_capacity(ev.signals.len());
        for s in &ev.signals {
            if s.targets.as_ref().is_some_and(|t| !self.targets_match(t)) {
                continue;
            }
            match map_signal(ev, s) {
                Ok(meaning) => out.push(SignalTargets {
                    name: s.name.clone(),
                    signal_type: s.signal_type.clone(),
                    id: s.id.clone(),
                    meaning,
                }),
                Err(refusal) => return Err((refusal.response_code(), format!("signal {:?}: {refusal}", s.id))),
            }
        }
        Ok(out)
    }

    /// No target = everyone; otherwise one of our identities must be named.
    fn targets_match(&self, t: &Targets) -> bool {
        if t.is_empty() {
            return true;
        }
        let ven_id = self.ven_id();
        let any = |listed: &[String], ours: &[String]| listed.iter().any(|l| ours.iter().any(|o| o == l.trim()));
        (!ven_id.is_empty() && t.ven_id.iter().any(|v| v.trim() == ven_id))
            || any(&t.group_id, &self.cfg.group_ids)
            || any(&t.resource_id, &self.cfg.resource_ids)
            || any(&t.party_id, &self.cfg.party_ids)
    }

    fn identity(&self) -> String {
        let mut parts = vec![format!("venID {:?}", self.ven_id())];
        for (kind, ids) in [
            ("groupID", &self.cfg.group_ids),
            ("resourceID", &self.cfg.resource_ids),
            ("partyID", &self.cfg.party_ids),
        ] {
            if !ids.is_empty() {
                parts.push(format!("{kind} {ids:?}"));
            }
        }
        parts.join(", ")
    }

    /// Removes known events not in `listed`; live ones that have not ended are cancelled.
    pub(super) fn implied_cancellations(&mut self, now: DateTime<Utc>, listed: &BTreeSet<String>) -> Vec<EventChange> {
        let gone: Vec<String> = self.events.keys().filter(|id| !listed.contains(*id)).cloned().collect();
        let mut changes = Vec::new();
        for id in gone {
            let Some(k) = self.events.remove(&id) else { continue };
            let live = matches!(k.state, EventState::Accepted | EventState::Test);
            let ended = event_end(&k.event)
                .and_then(|end| end.checked_add_signed(k.event.start_after.unwrap_or_default()))
                .is_some_and(|end| now >= end);
            if live && !ended {
                changes.push(EventChange::Cancel {
                    event_id: id,
                    modification_number: k.event.modification_number,
                    reason: CancelReason::Implied,
                    recovery: k.event.recovery,
                });
            }
        }
        changes
    }

    /// Forgets every event; live ones are cancelled with `reason`.
    pub(super) fn drop_all_events(&mut self, reason: CancelReason) -> Vec<EventChange> {
        std::mem::take(&mut self.events)
            .into_iter()
            .filter(|(_, k)| matches!(k.state, EventState::Accepted | EventState::Test))
            .map(|(id, k)| EventChange::Cancel {
                event_id: id,
                modification_number: k.event.modification_number,
                reason,
                recovery: k.event.recovery,
            })
            .collect()
    }
}

fn test_answer() -> Answer {
    Answer::Fixed {
        code: 200,
        opt: OptType::OptIn,
        description: "test event: acknowledged, not acted on".to_string(),
    }
}

fn event_end(ev: &Event) -> Option<DateTime<Utc>> {
    // An end past the calendar (a hostile duration) is treated as open-ended.
    ev.duration
        .filter(|d| *d > TimeDelta::zero())
        .and_then(|d| ev.dtstart.checked_add_signed(d))
}
