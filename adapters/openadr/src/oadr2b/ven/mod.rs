//! A sans-IO OpenADR 2.0b VEN: registration, polling, the event book with the 2.0b lifecycle
//! rules, opt-in/out answers and telemetry reports, with no I/O, no async and no clock.
//!
//! # Contract
//!
//! [`Ven`] never touches a socket, a timer or the system clock. Time is always an argument
//! (`now`), and every side effect is an [`Action`] that the caller executes:
//!
//! - [`Action::Send`]: POST this [`Outgoing`] message to the VTN (`{base}/OpenADR2/Simple/2.0b/`
//!   plus [`Outgoing::service`]). Execute sends **in the order given**. Feed the decoded reply to
//!   [`Ven::handle`] with `reply_to: Some(&sent)`; a transport error (connection, TLS, HTTP
//!   status, undecodable body) goes to [`Ven::request_failed`]. An empty HTTP body (openleadr
//!   answers an `oadrResponse` that way) needs no call.
//! - [`Action::Persist`]: store the [`Registration`] (or forget it, `None`). Give it to
//!   [`Ven::new`] after a restart to skip registration.
//! - [`Action::Events`]: apply [`DistributeOutcome::changes`] to your event book, decide opt-in
//!   or opt-out for each id in [`PendingDistribute::needs_decision`], and pass the pending part
//!   back to [`Ven::answer_distribute`], which builds the `oadrCreatedEvent` (or nothing, when
//!   no event needs a response). Decisions may come later; the VEN keeps working meanwhile.
//! - [`Action::Warn`]: something worth a log line; no reaction needed.
//! - [`Action::Abandoned`]: a message the VEN stopped retrying; record it.
//!
//! Call [`Ven::tick`] whenever `now >= ven.next_wakeup()`: it sends due polls, samples and sends
//! reports, and retries failed requests. Messages the VTN pushes (push mode) go to
//! [`Ven::handle`] with `reply_to: None`; answer the push's HTTP request with an empty 200 and
//! execute the returned sends.
//!
//! # Example
//!
//! A complete loop against a scripted VTN that registers the VEN and then has nothing pending:
//!
//! ```
//! use std::collections::VecDeque;
//! use chrono::{TimeDelta, TimeZone, Utc};
//! use flexgate_openadr::oadr2b::outgoing::Outgoing;
//! use flexgate_openadr::oadr2b::ven::{Action, Ven, VenConfig};
//! use flexgate_openadr::oadr2b::{CreatedPartyRegistration, EiResponse, Message, Response};
//!
//! // The transport: POST + decode. Here a fake VTN that answers in memory.
//! fn post(out: &Outgoing) -> Result<Option<Message>, String> {
//!     let ok = EiResponse { code: "200".into(), ..Default::default() };
//!     Ok(Some(match out {
//!         Outgoing::QueryRegistration { .. } | Outgoing::CreatePartyRegistration { .. } => {
//!             let registered = matches!(out, Outgoing::CreatePartyRegistration { .. });
//!             Message::CreatedPartyRegistration(CreatedPartyRegistration {
//!                 response: ok,
//!                 registration_id: registered.then(|| "REG-1".to_string()),
//!                 ven_id: registered.then(|| "VEN-1".to_string()),
//!                 vtn_id: Some("VTN-1".into()),
//!                 profiles: vec!["2.0b".into()],
//!                 poll_freq: Some(TimeDelta::seconds(10)),
//!             })
//!         }
//!         _ => Message::Response(Response { response: ok, ven_id: None }),
//!     }))
//! }
//!
//! let mut ven = Ven::new(VenConfig::new("site-a"), None)?;
//! let mut now = Utc.with_ymd_and_hms(2026, 7, 1, 12, 0, 0).unwrap();
//! let end = now + TimeDelta::seconds(60);
//! let mut saved = None;
//! let mut polls = 0;
//! let mut queue: VecDeque<Action> = ven.start(now).into();
//! loop {
//!     while let Some(action) = queue.pop_front() {
//!         match action {
//!             Action::Send(out) => {
//!                 polls += matches!(out, Outgoing::Poll { .. }) as u32;
//!                 match post(&out) {
//!                     Ok(Some(reply)) => queue.extend(ven.handle(now, Some(&out), reply)),
//!                     Ok(None) => {}
//!                     Err(e) => queue.extend(ven.request_failed(now, &out, &e)),
//!                 }
//!             }
//!             Action::Persist(registration) => saved = registration,
//!             Action::Events(outcome) => {
//!                 // apply outcome.changes to the event book, decide, then:
//!                 if let Some(pending) = outcome.pending {
//!                     queue.extend(ven.answer_distribute(pending, Vec::new()));
//!                 }
//!             }
//!             Action::Warn(w) => eprintln!("{w}"),
//!             // Record what will never be delivered (the gateway writes it to its ledger).
//!             Action::Abandoned { out, attempts, .. } => eprintln!("gave up on {} after {attempts}", out.name()),
//!         }
//!     }
//!     now = ven.next_wakeup(); // a real loop sleeps until then (or until a push arrives)
//!     if now > end {
//!         break;
//!     }
//!     queue.extend(ven.tick(now));
//! }
//! assert_eq!(saved.map(|r| r.ven_id), Some("VEN-1".to_string()));
//! assert_eq!(polls, 7); // at 0 s, 10 s, ..., 60 s
//! # Ok::<(), flexgate_openadr::oadr2b::ven::VenError>(())
//! ```
//!
//! # Behaviour
//!
//! - **Registration.** oadrQueryRegistration → oadrCreatePartyRegistration (2.0b, simpleHttp,
//!   pull or push) → [`Action::Persist`] → own oadrRegisterReport (METADATA_TELEMETRY_USAGE with
//!   meter and GPU-board kW, METADATA_TELEMETRY_STATUS with one status point) →
//!   oadrRequestEvent → oadrPoll at once and then every poll period (the VTN's
//!   `oadrRequestedOadrPollFreq` unless overridden, clamped to 1 s ..= 24 h). With a saved
//!   registration, [`Ven::start`] skips straight to RegisterReport (so the VTN can ask for
//!   reports again) and RequestEvent.
//! - **Re-registration** on oadrRequestReregistration (answered with oadrResponse first) and on
//!   an oadrResponse 463, or 452 to a request whose only id is our venID (Poll, RequestEvent,
//!   RegisterReport): oadrCreatePartyRegistration with the current venID and registrationID;
//!   events and report requests are kept. If the VTN refuses the renewal, the VEN forgets the
//!   registration and registers afresh. Repeated re-registrations back off exponentially.
//! - **Cancellation.** A VTN oadrCancelPartyRegistration for our registrationID is answered with
//!   oadrCanceledPartyRegistration; the VEN forgets the registration (`Persist(None)`), drops
//!   report requests, cancels every live event ([`CancelReason::RegistrationEnded`]) and
//!   registers afresh. [`Ven::cancel_registration`] does the same from our side and then stops.
//! - **Draining.** When a poll returns a message (not an oadrResponse), the VEN polls again
//!   right away (at most [`VenConfig::max_drain_polls`] times in a row), as 2.0b asks, without
//!   moving the regular poll grid.
//! - **Timers** never drift or pile up: the next due time is the previous one plus the period;
//!   missed slots are skipped with a warning.
//! - **Failures.** Each failed request is retried after a capped exponential backoff
//!   ([`RetryConfig`]); registration messages are retried forever, others up to
//!   [`RetryConfig::max_attempts`]. A failed poll is not retried; instead polls pause for the
//!   backoff delay, staying on their grid.
//! - **Events**: see [`DistributeOutcome`] and [`EventChange`] for the lifecycle rules.
//! - **Reports**: see [`TelemetrySample`] and [`ReportConfig`].

mod config;
mod events;
mod registration;
mod reports;
mod retry;

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};

pub use config::{RetryConfig, VenConfig};
pub use events::{
    CancelReason, DistributeOutcome, EventChange, EventSchedule, EventState, EventUpdate, KnownEvent, OptDecision,
    PendingDistribute, Resumed, SignalTargets,
};
pub use registration::Registration;
pub use reports::{ReportConfig, TelemetrySample};

use super::Message;
use super::outgoing::{OptType, Outgoing, ResponseOut};
use reports::ActiveReport;
use retry::{Retry, resets_backoff};

/// One side effect for the caller to execute, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// POST this message to the VTN and feed the reply back.
    Send(Outgoing),
    /// Store (or, with `None`, delete) the registration.
    Persist(Option<Registration>),
    /// Apply these event changes and answer [`DistributeOutcome::pending`].
    Events(DistributeOutcome),
    /// Worth logging; nothing to do.
    Warn(String),
    /// A message the VEN stopped retrying: it was not delivered and will not be. The caller
    /// records it, so that what never reached the VTN (report data, an opt) is visible to an
    /// auditor, not only in a log line.
    Abandoned {
        /// The message.
        out: Outgoing,
        /// How often it was tried.
        attempts: u32,
        /// The last failure.
        error: String,
    },
}

/// Where the VEN is in its registration lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not started, or stopped after [`Ven::cancel_registration`].
    Stopped,
    /// oadrQueryRegistration sent.
    Querying,
    /// oadrCreatePartyRegistration sent (first time or renewal).
    Registering,
    /// Registered: polling, answering, reporting.
    Registered,
    /// Our oadrCancelPartyRegistration is in flight.
    Cancelling,
}

/// Errors from configuration and caller input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VenError {
    /// The configuration cannot work (the message says which field).
    #[error("invalid VEN configuration: {0}")]
    Config(String),
    /// A telemetry value is NaN or infinite; the sample is not recorded.
    #[error("telemetry sample has a non-finite {field}: {value}")]
    NonFinite {
        /// Which field.
        field: &'static str,
        /// The value.
        value: f64,
    },
}

/// The VEN state machine. See the [module documentation](self) for the contract.
#[derive(Debug, Clone)]
pub struct Ven {
    cfg: VenConfig,
    reg: Option<Registration>,
    phase: Phase,
    /// The vtnID from the oadrQueryRegistration answer.
    queried_vtn_id: Option<String>,
    id_prefix: String,
    seq: u64,
    next_poll: Option<DateTime<Utc>>,
    poll_hold: Option<DateTime<Utc>>,
    drain_at: Option<DateTime<Utc>>,
    drains: u32,
    failures: u32,
    reg_restarts: u32,
    retries: Vec<Retry>,
    /// Messages re-sent from `retries`, with their attempt count, until they succeed or fail.
    resent: Vec<(Outgoing, u32)>,
    events: BTreeMap<String, KnownEvent>,
    /// Event versions the VTN has our answer to, with the opt it carried (an oadrCreatedEvent
    /// it accepted, from this run or, through [`Ven::resume`], an earlier one): a distribute
    /// that repeats one is not answered again while our opt is the same, so the VTN gets one
    /// answer per version and opt.
    answered: BTreeMap<(String, u32), OptType>,
    /// When to ask the VTN for every event again ([`Ven::request_events_at`]): the caller
    /// could not take one it was sent, and the VTN sends it only on request.
    resync_at: Option<DateTime<Utc>>,
    reports: Vec<ActiveReport>,
    latest: Option<(DateTime<Utc>, TelemetrySample)>,
}

const MIN_POLL: TimeDelta = TimeDelta::seconds(1);
const MAX_POLL: TimeDelta = TimeDelta::hours(24);

impl Ven {
    /// A VEN with `cfg`, resuming `saved` (from an earlier [`Action::Persist`]) if given.
    /// Nothing happens until [`Ven::start`].
    pub fn new(cfg: VenConfig, saved: Option<Registration>) -> Result<Ven, VenError> {
        cfg.validate()?;
        Ok(Ven {
            cfg,
            reg: saved,
            phase: Phase::Stopped,
            queried_vtn_id: None,
            id_prefix: "0".into(),
            seq: 0,
            next_poll: None,
            poll_hold: None,
            drain_at: None,
            drains: 0,
            failures: 0,
            reg_restarts: 0,
            retries: Vec::new(),
            resent: Vec::new(),
            events: BTreeMap::new(),
            answered: BTreeMap::new(),
            resync_at: None,
            reports: Vec::new(),
            latest: None,
        })
    }

    /// Starts (or restarts after [`Ven::cancel_registration`]): registers, or with a saved
    /// registration goes straight to RegisterReport + RequestEvent and polling.
    pub fn start(&mut self, now: DateTime<Utc>) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.phase != Phase::Stopped {
            actions.push(Action::Warn("start: the VEN is already running".into()));
            return actions;
        }
        self.id_prefix = format!("{:x}", now.timestamp_millis());
        if self.reg.is_some() {
            self.after_registered(now, &mut actions);
        } else {
            self.begin_query(now, &mut actions);
        }
        actions
    }

    /// Handles `msg`: the reply to `reply_to` (a message we sent), or with `None` a message the
    /// VTN pushed. Replies that come back from a poll are VTN-initiated messages and are
    /// answered like pushes.
    pub fn handle(&mut self, now: DateTime<Utc>, reply_to: Option<&Outgoing>, msg: Message) -> Vec<Action> {
        let mut actions = Vec::new();
        if let Some(out) = reply_to {
            self.resent.retain(|(o, _)| o != out);
            if resets_backoff(&msg) {
                self.failures = 0;
            }
        }
        let from_poll = matches!(reply_to, Some(Outgoing::Poll { .. }));
        let is_response = matches!(msg, Message::Response(_));
        if self.unexpected_reply(now, reply_to, &msg, &mut actions) {
            return actions;
        }
        match msg {
            Message::CreatedPartyRegistration(c) => self.on_created_party_registration(now, reply_to, c, &mut actions),
            Message::DistributeEvent(d) => self.on_distribute(now, d, &mut actions),
            Message::RequestReregistration(r) => self.on_request_reregistration(now, r, &mut actions),
            Message::CancelPartyRegistration(c) => self.on_vtn_cancel_registration(now, c, &mut actions),
            Message::Response(r) => self.on_response(now, reply_to, r, &mut actions),
            Message::RegisterReport(r) => self.on_vtn_register_report(r, &mut actions),
            Message::RegisteredReport(r) => {
                if r.response.code.trim() != "200" {
                    self.warn(&mut actions, format!("oadrRegisteredReport: {}", describe(&r.response)));
                }
                if !r.report_requests.is_empty() || !r.report_request_ids.is_empty() {
                    let request_id = r.response.request_id.clone().unwrap_or_default();
                    self.create_reports(now, &r.report_requests, &r.report_request_ids, request_id, &mut actions);
                }
            }
            Message::CreateReport(c) => {
                if let Some(v) = c.ven_id.as_deref().filter(|v| self.ven_id_mismatch(v)) {
                    let response = ResponseOut {
                        code: 452,
                        description: format!("venID {v:?} is not ours"),
                        request_id: c.request_id,
                    };
                    let pending_report_request_ids = self.report_request_ids();
                    let ven_id = self.ven_id();
                    self.send(
                        &mut actions,
                        Outgoing::CreatedReport {
                            response,
                            ven_id,
                            pending_report_request_ids,
                        },
                    );
                } else {
                    self.create_reports(
                        now,
                        &c.report_requests,
                        &c.report_request_ids,
                        c.request_id,
                        &mut actions,
                    );
                }
            }
            Message::CancelReport(c) => self.on_cancel_report(now, c, &mut actions),
            Message::UpdatedReport(u) => {
                if u.response.code.trim() != "200" {
                    self.warn(&mut actions, format!("oadrUpdatedReport: {}", describe(&u.response)));
                }
                if let Some(cancel) = u.cancel_report {
                    self.on_cancel_report(now, cancel, &mut actions);
                }
            }
            Message::CreatedOpt(c) => {
                if c.response.code.trim() != "200" {
                    let why = format!("oadrCreatedOpt for opt {}: {}", c.opt_id, describe(&c.response));
                    self.warn(&mut actions, why);
                }
            }
            other => {
                let why = format!("unexpected {} from the VTN; ignored", other.name());
                self.warn(&mut actions, why);
            }
        }
        if from_poll && !is_response && self.phase == Phase::Registered {
            if self.drains < self.cfg.max_drain_polls {
                self.drains += 1;
                self.drain_at = Some(now);
            } else {
                let why = format!(
                    "the VTN returned a message to {} polls in a row; waiting for the next regular poll",
                    self.drains
                );
                self.warn(&mut actions, why);
                self.drains = 0;
            }
        }
        actions
    }

    /// Runs what is due at `now`: retries, polls (regular and draining), report samples and
    /// report sends. Call it whenever `now >= next_wakeup()`; calling it early is harmless.
    pub fn tick(&mut self, now: DateTime<Utc>) -> Vec<Action> {
        let mut actions = Vec::new();
        // Retries first: they are older than anything produced now.
        self.send_due_retries(now, &mut actions);
        if self.phase == Phase::Registered {
            let mut polled = false;
            if let Some(due) = self.next_poll.filter(|d| *d <= now) {
                let period = self.poll_period();
                let (slot, skipped) = catch_up(due, period, now);
                if skipped > 0 && self.poll_hold.is_none() {
                    self.warn(
                        &mut actions,
                        format!("missed {skipped} poll(s); polling on the next slot"),
                    );
                }
                self.next_poll = Some(slot + period);
                if self.poll_hold.is_none_or(|h| h <= now) {
                    self.poll_hold = None;
                    self.send(&mut actions, Outgoing::Poll { ven_id: self.ven_id() });
                    polled = true;
                }
            }
            if self.drain_at.is_some_and(|d| d <= now) {
                self.drain_at = None;
                if !polled && self.poll_hold.is_none_or(|h| h <= now) {
                    self.send(&mut actions, Outgoing::Poll { ven_id: self.ven_id() });
                }
            }
            if self.resync_at.is_some_and(|r| r <= now) {
                self.resync_at = None;
                let out = Outgoing::RequestEvent {
                    request_id: self.next_id("req"),
                    ven_id: self.ven_id(),
                };
                self.send(&mut actions, out);
            }
            self.tick_reports(now, &mut actions);
        }
        actions
    }

    /// When [`Ven::tick`] next has something to do; `DateTime::<Utc>::MAX_UTC` when nothing is
    /// scheduled (stopped, or waiting for a reply).
    pub fn next_wakeup(&self) -> DateTime<Utc> {
        let mut at = DateTime::<Utc>::MAX_UTC;
        for r in &self.retries {
            at = at.min(r.due);
        }
        if self.phase == Phase::Registered {
            if let Some(p) = self.next_poll {
                let period = self.poll_period();
                let p = match self.poll_hold {
                    Some(h) if h > p => p + period * ceil_div(h - p, period),
                    _ => p,
                };
                at = at.min(p);
            }
            if let Some(d) = self.drain_at {
                at = at.min(d.max(self.poll_hold.unwrap_or(d)));
            }
            if let Some(r) = self.resync_at {
                at = at.min(r);
            }
            for r in &self.reports {
                at = at.min(r.next_due());
            }
        }
        at
    }

    /// Ask the VTN for every event again at `at` (oadrRequestEvent), once: after the caller
    /// left an event unanswered because it could not take it then
    /// ([`PendingDistribute::withhold`]), so that the VTN sends it again. The earliest of
    /// several requests stands.
    pub fn request_events_at(&mut self, at: DateTime<Utc>) {
        self.resync_at = Some(self.resync_at.map_or(at, |r| r.min(at)));
    }

    /// The registration in force, if any.
    pub fn registration(&self) -> Option<&Registration> {
        self.reg.as_ref()
    }

    /// Where the VEN is in its lifecycle.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The configuration.
    pub fn config(&self) -> &VenConfig {
        &self.cfg
    }

    /// The poll period in force: the override, else the VTN's, else the default, clamped to
    /// 1 s ..= 24 h.
    pub fn poll_period(&self) -> TimeDelta {
        let p = self
            .cfg
            .poll_override
            .or_else(|| self.reg.as_ref().and_then(|r| r.poll_freq))
            .filter(|p| *p > TimeDelta::zero())
            .unwrap_or(self.cfg.default_poll);
        p.clamp(MIN_POLL, MAX_POLL)
    }

    /// Every event the VEN knows (the VTN's current list, including refused, cancelled and
    /// completed ones until the VTN stops listing them), by eventID.
    pub fn events(&self) -> impl Iterator<Item = &KnownEvent> {
        self.events.values()
    }

    /// One known event.
    pub fn event(&self, event_id: &str) -> Option<&KnownEvent> {
        self.events.get(event_id)
    }

    /// Sends an oadrCreateOpt changing our opt for a known event (e.g. an operator's must-run
    /// override). `reason` is an `oadrOptReason` (`mustRun`, `participating`,
    /// `notParticipating`, `emergency`, `economic`, `outageRunStatus`, `overrideStatus`,
    /// `x-schedule`). Later re-sends of the same event version are answered with this opt.
    pub fn create_opt(&mut self, now: DateTime<Utc>, event_id: &str, opt: OptType, reason: &str) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.phase != Phase::Registered {
            self.warn(
                &mut actions,
                format!("{} for event {event_id}: not registered; not sent", opt.as_str()),
            );
            return actions;
        }
        let Some(known) = self.events.get_mut(event_id) else {
            self.warn(
                &mut actions,
                format!("{} for unknown event {event_id}; not sent", opt.as_str()),
            );
            return actions;
        };
        known.opt = Some(opt);
        let modification_number = known.event.modification_number;
        let out = Outgoing::CreateOpt {
            request_id: self.next_id("req"),
            ven_id: self.ven_id(),
            opt_id: self.next_id("opt"),
            opt,
            reason: reason.to_string(),
            created: now,
            event_id: event_id.to_string(),
            modification_number,
        };
        self.send(&mut actions, out);
        actions
    }

    /// [`Ven::create_opt`] with optOut: tell the VTN we will not (or no longer) take part.
    pub fn opt_out(&mut self, now: DateTime<Utc>, event_id: &str, reason: &str) -> Vec<Action> {
        self.create_opt(now, event_id, OptType::OptOut, reason)
    }

    // ----- dispatch helpers -----

    fn on_vtn_register_report(&mut self, r: super::RegisterReport, actions: &mut Vec<Action>) {
        // We take no reports from the VTN; acknowledging its metadata is all 2.0b asks.
        let response = if let Some(v) = r.ven_id.as_deref().filter(|v| self.ven_id_mismatch(v)) {
            ResponseOut {
                code: 452,
                description: format!("venID {v:?} is not ours"),
                request_id: r.request_id,
            }
        } else {
            ResponseOut::ok(r.request_id)
        };
        let ven_id = self.ven_id();
        self.send(actions, Outgoing::RegisteredReport { response, ven_id });
    }

    fn on_response(
        &mut self,
        now: DateTime<Utc>,
        reply_to: Option<&Outgoing>,
        r: super::Response,
        actions: &mut Vec<Action>,
    ) {
        let code = r.response.code.trim().to_string();
        if code == "200" {
            match reply_to {
                Some(Outgoing::Poll { .. }) => {
                    self.drains = 0;
                    self.reg_restarts = 0;
                }
                Some(Outgoing::CreatedEvent { responses, .. }) => {
                    for r in responses {
                        self.answered.insert((r.event_id.clone(), r.modification_number), r.opt);
                    }
                }
                Some(Outgoing::RequestEvent { .. }) => {
                    // openleadr answers RequestEvent with a bare oadrResponse when it has no
                    // events for us: the same as an empty distribute.
                    let changes = self.implied_cancellations(now, &Default::default());
                    if !changes.is_empty() {
                        actions.push(Action::Events(DistributeOutcome {
                            request_id: String::new(),
                            changes,
                            pending: None,
                        }));
                    }
                }
                _ => {}
            }
            return;
        }
        let name = reply_to.map_or("a pushed message", Outgoing::name);
        let unknown_ven = code == "463"
            || (code == "452"
                && matches!(
                    reply_to,
                    None | Some(
                        Outgoing::Poll { .. } | Outgoing::RequestEvent { .. } | Outgoing::RegisterReport { .. }
                    )
                ));
        if unknown_ven {
            let why = format!("the VTN answered {name} with {}", describe(&r.response));
            self.begin_reregistration(now, &why, actions);
        } else {
            self.warn(
                actions,
                format!("the VTN answered {name} with {}", describe(&r.response)),
            );
        }
    }

    // ----- helpers -----

    /// Our venID: the registration's, else the configured one, else empty.
    fn ven_id(&self) -> String {
        self.reg
            .as_ref()
            .map(|r| r.ven_id.clone())
            .or_else(|| self.cfg.ven_id.clone())
            .unwrap_or_default()
    }

    fn ven_id_mismatch(&self, v: &str) -> bool {
        let mine = self.ven_id();
        !mine.is_empty() && !v.trim().is_empty() && v.trim() != mine
    }

    fn next_id(&mut self, kind: &str) -> String {
        self.seq += 1;
        format!("{}-{kind}-{}", self.id_prefix, self.seq)
    }

    fn send(&mut self, actions: &mut Vec<Action>, out: Outgoing) {
        actions.push(Action::Send(out));
    }

    fn warn(&self, actions: &mut Vec<Action>, w: String) {
        actions.push(Action::Warn(w));
    }
}

fn describe(r: &super::EiResponse) -> String {
    match r.description.as_deref().filter(|d| !d.trim().is_empty()) {
        Some(d) => format!("{} {}", r.code.trim(), d.trim()),
        None => r.code.trim().to_string(),
    }
}

/// `ceil(a / b)` for positive durations, in whole periods (at least 0).
fn ceil_div(a: TimeDelta, b: TimeDelta) -> i32 {
    let (a, b) = (a.num_milliseconds(), b.num_milliseconds().max(1));
    if a <= 0 {
        0
    } else {
        ((a + b - 1) / b).min(i64::from(i32::MAX)) as i32
    }
}

/// The latest grid slot `due + k·period <= now`, and how many slots were skipped to reach it.
fn catch_up(due: DateTime<Utc>, period: TimeDelta, now: DateTime<Utc>) -> (DateTime<Utc>, u64) {
    let p = period.num_milliseconds().max(1);
    let behind = (now - due).num_milliseconds();
    if behind < p {
        return (due, 0);
    }
    let k = behind / p;
    (due + TimeDelta::milliseconds(k * p), k as u64)
}
