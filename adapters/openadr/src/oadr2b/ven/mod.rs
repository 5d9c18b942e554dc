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
//! # Behaviour (PROTOCOLS.md §1, §4, §6)
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

mod events;
mod reports;

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

pub use events::{
    CancelReason, DistributeOutcome, EventChange, EventSchedule, EventState, EventUpdate, KnownEvent, OptDecision,
    PendingDistribute, SignalTargets,
};
pub use reports::{ReportConfig, TelemetrySample};

use super::Message;
use super::outgoing::{OptType, Outgoing, ResponseOut};
use reports::ActiveReport;

/// How the VEN identifies itself, what it accepts, and how it paces itself.
#[derive(Debug, Clone, PartialEq)]
pub struct VenConfig {
    /// `oadrVenName` sent at registration.
    pub ven_name: String,
    /// A venID assigned out of band (some VTNs require it at registration); the VTN's answer
    /// wins if it differs.
    pub ven_id: Option<String>,
    /// The vtnID we expect. A distribute or registration from another vtnID is refused (452).
    /// When `None`, the vtnID learned at registration is enforced instead.
    pub expected_vtn_id: Option<String>,
    /// Market contexts we are enrolled in. An event in another context is opted out of. Empty =
    /// accept every context.
    pub market_contexts: Vec<String>,
    /// Our groupIDs, for eiTarget matching.
    pub group_ids: Vec<String>,
    /// Our resourceIDs, for eiTarget matching.
    pub resource_ids: Vec<String>,
    /// Our partyIDs, for eiTarget matching.
    pub party_ids: Vec<String>,
    /// Poll at this period whatever the VTN asks.
    pub poll_override: Option<TimeDelta>,
    /// Poll period when the VTN names none (10 s, like openleadr).
    pub default_poll: TimeDelta,
    /// Pull (`true`, the VEN polls) or push (`false`, the VTN posts to `transport_address`).
    pub http_pull: bool,
    /// Where the VTN pushes to (push mode only).
    pub transport_address: Option<String>,
    /// The telemetry reports offered to the VTN.
    pub reports: ReportConfig,
    /// Backoff after transport failures.
    pub retry: RetryConfig,
    /// Most consecutive immediate re-polls after a poll that returned a message.
    pub max_drain_polls: u32,
}

impl VenConfig {
    /// Defaults: pull mode, 10 s default poll, every market context, no target identities
    /// besides the venID, default reports and backoff.
    pub fn new(ven_name: impl Into<String>) -> Self {
        VenConfig {
            ven_name: ven_name.into(),
            ven_id: None,
            expected_vtn_id: None,
            market_contexts: Vec::new(),
            group_ids: Vec::new(),
            resource_ids: Vec::new(),
            party_ids: Vec::new(),
            poll_override: None,
            default_poll: TimeDelta::seconds(10),
            http_pull: true,
            transport_address: None,
            reports: ReportConfig::default(),
            retry: RetryConfig::default(),
            max_drain_polls: 10,
        }
    }
}

/// Capped exponential backoff: the n-th consecutive failure waits `min(base × 2^(n-1), max)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryConfig {
    /// First delay (2 s).
    pub base: TimeDelta,
    /// Cap (5 min; at most one day).
    pub max: TimeDelta,
    /// Attempts (the first send included) before a non-registration message is dropped (5).
    pub max_attempts: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            base: TimeDelta::seconds(2),
            max: TimeDelta::minutes(5),
            max_attempts: 5,
        }
    }
}

/// What the VTN assigned at registration. Persist it: a restart with it skips registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// `ei:venID`: put in every message.
    pub ven_id: String,
    /// `ei:registrationID`: needed to re-register or cancel.
    pub registration_id: String,
    /// `ei:vtnID`: distributes from another VTN are refused.
    pub vtn_id: Option<String>,
    /// `oadrRequestedOadrPollFreq`, when the VTN gave one.
    #[serde(rename = "poll_freq_ms", with = "opt_millis", default)]
    pub poll_freq: Option<TimeDelta>,
}

mod opt_millis {
    use chrono::TimeDelta;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<TimeDelta>, s: S) -> Result<S::Ok, S::Error> {
        v.map(|d| d.num_milliseconds()).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TimeDelta>, D::Error> {
        Ok(Option::<i64>::deserialize(d)?.and_then(TimeDelta::try_milliseconds))
    }
}

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

#[derive(Debug, Clone)]
struct Retry {
    due: DateTime<Utc>,
    out: Outgoing,
    attempts: u32,
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
    reports: Vec<ActiveReport>,
    latest: Option<(DateTime<Utc>, TelemetrySample)>,
}

const MIN_POLL: TimeDelta = TimeDelta::seconds(1);
const MAX_POLL: TimeDelta = TimeDelta::hours(24);

impl Ven {
    /// A VEN with `cfg`, resuming `saved` (from an earlier [`Action::Persist`]) if given.
    /// Nothing happens until [`Ven::start`].
    pub fn new(cfg: VenConfig, saved: Option<Registration>) -> Result<Ven, VenError> {
        if cfg.ven_name.trim().is_empty() {
            return Err(VenError::Config("ven_name is empty".into()));
        }
        if cfg.default_poll <= TimeDelta::zero() {
            return Err(VenError::Config("default_poll must be positive".into()));
        }
        if cfg.poll_override.is_some_and(|p| p <= TimeDelta::zero()) {
            return Err(VenError::Config("poll_override must be positive".into()));
        }
        let retry = &cfg.retry;
        if retry.base <= TimeDelta::zero()
            || retry.max < retry.base
            || retry.max > TimeDelta::days(1)
            || retry.max_attempts == 0
        {
            return Err(VenError::Config(
                "retry needs 0 < base <= max <= 1 day and max_attempts >= 1".into(),
            ));
        }
        if !cfg.http_pull && cfg.transport_address.is_none() {
            return Err(VenError::Config(
                "push mode (http_pull = false) needs a transport_address".into(),
            ));
        }
        cfg.reports.validate()?;
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

    /// Reports that `out` could not be delivered (connection, TLS, HTTP status, undecodable
    /// reply). The message is retried after a capped exponential backoff; polls pause instead.
    pub fn request_failed(&mut self, now: DateTime<Utc>, out: &Outgoing, error: impl std::fmt::Display) -> Vec<Action> {
        let mut actions = Vec::new();
        self.failures = self.failures.saturating_add(1);
        let attempts = self
            .resent
            .iter()
            .position(|(o, _)| o == out)
            .map(|i| self.resent.remove(i).1)
            .unwrap_or(1);
        let name = out.name();
        // Polls and registration back off on the run of failures; other messages on their own
        // attempts (a later successful poll must not make their retries hammer the VTN).
        let delay = match out {
            Outgoing::Poll { .. } | Outgoing::QueryRegistration { .. } | Outgoing::CreatePartyRegistration { .. } => {
                self.backoff(self.failures)
            }
            _ => self.backoff(attempts),
        };
        match out {
            Outgoing::Poll { .. } => {
                self.poll_hold = Some(now + delay);
                self.drain_at = None;
                self.warn(
                    &mut actions,
                    format!("{name} failed: {error}; polls pause for {}s", delay.num_seconds()),
                );
            }
            Outgoing::QueryRegistration { .. } | Outgoing::CreatePartyRegistration { .. } => {
                self.warn(
                    &mut actions,
                    format!("{name} failed: {error}; retry in {}s", delay.num_seconds()),
                );
                self.retries.push(Retry {
                    due: now + delay,
                    out: out.clone(),
                    attempts,
                });
            }
            _ if attempts >= self.cfg.retry.max_attempts => {
                let why = format!("{name} failed: {error}; dropped after {attempts} attempts");
                self.warn(&mut actions, why);
                if matches!(out, Outgoing::CancelPartyRegistration { .. }) && self.phase == Phase::Cancelling {
                    self.warn(
                        &mut actions,
                        "the VTN never confirmed our cancellation; forgetting the registration anyway".into(),
                    );
                    self.finish_cancel(&mut actions);
                }
            }
            _ => {
                self.warn(
                    &mut actions,
                    format!("{name} failed: {error}; retry in {}s", delay.num_seconds()),
                );
                self.retries.push(Retry {
                    due: now + delay,
                    out: out.clone(),
                    attempts,
                });
            }
        }
        actions
    }

    /// Runs what is due at `now`: retries, polls (regular and draining), report samples and
    /// report sends. Call it whenever `now >= next_wakeup()`; calling it early is harmless.
    pub fn tick(&mut self, now: DateTime<Utc>) -> Vec<Action> {
        let mut actions = Vec::new();
        // Retries first: they are older than anything produced now.
        let (due, later): (Vec<Retry>, Vec<Retry>) = std::mem::take(&mut self.retries)
            .into_iter()
            .partition(|r| r.due <= now);
        self.retries = later;
        for r in due {
            let still_wanted = match &r.out {
                Outgoing::QueryRegistration { .. } => self.phase == Phase::Querying,
                Outgoing::CreatePartyRegistration { .. } => self.phase == Phase::Registering,
                Outgoing::CancelPartyRegistration { .. } => self.phase == Phase::Cancelling,
                _ => self.phase == Phase::Registered,
            };
            if still_wanted {
                self.resent.push((r.out.clone(), r.attempts + 1));
                if self.resent.len() > 64 {
                    self.resent.remove(0);
                }
                actions.push(Action::Send(r.out));
            }
        }
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
            for r in &self.reports {
                at = at.min(r.next_due());
            }
        }
        at
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

    /// Leaves the program: sends oadrCancelPartyRegistration; when the VTN confirms (or the
    /// request finally fails) the registration is forgotten (`Persist(None)`), live events are
    /// cancelled and the VEN stops. Before registration completes, it just stops.
    pub fn cancel_registration(&mut self, _now: DateTime<Utc>) -> Vec<Action> {
        let mut actions = Vec::new();
        match (self.phase, self.reg.clone()) {
            (Phase::Registered, Some(reg)) => {
                self.phase = Phase::Cancelling;
                self.next_poll = None;
                self.drain_at = None;
                self.retries.clear();
                let out = Outgoing::CancelPartyRegistration {
                    request_id: self.next_id("req"),
                    registration_id: reg.registration_id,
                    ven_id: reg.ven_id,
                };
                self.send(&mut actions, out);
            }
            (Phase::Querying | Phase::Registering, _) => {
                self.warn(&mut actions, "registration abandoned before it completed".into());
                self.finish_cancel(&mut actions);
            }
            _ => self.warn(&mut actions, "cancel_registration: not registered".into()),
        }
        actions
    }

    // ----- dispatch helpers -----

    /// Replies that end a registration or cancellation exchange whatever they are. Returns
    /// `true` when `msg` was consumed here.
    fn unexpected_reply(
        &mut self,
        now: DateTime<Utc>,
        reply_to: Option<&Outgoing>,
        msg: &Message,
        actions: &mut Vec<Action>,
    ) -> bool {
        match reply_to {
            Some(out @ (Outgoing::QueryRegistration { .. } | Outgoing::CreatePartyRegistration { .. }))
                if !matches!(msg, Message::CreatedPartyRegistration(_))
                    && matches!(self.phase, Phase::Querying | Phase::Registering) =>
            {
                // e.g. openleadr's oadrRequestReregistration, or an oadrResponse with an error:
                // without this the VEN would wait for a registration answer forever.
                let why = format!("the VTN answered {} with {}", out.name(), summary(msg));
                self.registration_failed(now, why, actions);
                true
            }
            Some(Outgoing::CancelPartyRegistration { .. }) if self.phase == Phase::Cancelling => {
                let ok = match msg {
                    Message::CanceledPartyRegistration(c) => c.response.code.trim() == "200",
                    Message::Response(r) => r.response.code.trim() == "200",
                    _ => false,
                };
                if !ok {
                    let why = format!(
                        "the VTN answered our cancellation with {}; the registration is forgotten anyway",
                        summary(msg)
                    );
                    self.warn(actions, why);
                }
                self.finish_cancel(actions);
                true
            }
            _ => false,
        }
    }

    fn on_request_reregistration(
        &mut self,
        now: DateTime<Utc>,
        r: super::RequestReregistration,
        actions: &mut Vec<Action>,
    ) {
        let ven_id = self.ven_id();
        if let Some(v) = r.ven_id.as_deref().filter(|v| self.ven_id_mismatch(v)) {
            let why = format!("oadrRequestReregistration for venID {v:?}, which is not ours");
            self.warn(actions, why.clone());
            let response = ResponseOut {
                code: 452,
                description: why,
                request_id: String::new(),
            };
            self.send(actions, Outgoing::Response { response, ven_id });
        } else {
            let response = ResponseOut::ok("");
            self.send(actions, Outgoing::Response { response, ven_id });
            self.begin_reregistration(now, "the VTN requested re-registration", actions);
        }
    }

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

    // ----- registration -----

    fn begin_query(&mut self, now: DateTime<Utc>, actions: &mut Vec<Action>) {
        self.phase = Phase::Querying;
        self.next_poll = None;
        self.drain_at = None;
        let out = Outgoing::QueryRegistration {
            request_id: self.next_id("req"),
        };
        self.send_registration(now, out, actions);
    }

    /// Sends at once, or after a backoff when registration keeps being restarted.
    fn send_registration(&mut self, now: DateTime<Utc>, out: Outgoing, actions: &mut Vec<Action>) {
        if self.reg_restarts > 1 {
            let delay = self.backoff(self.reg_restarts - 1);
            self.retries.push(Retry {
                due: now + delay,
                out,
                attempts: 0,
            });
        } else {
            self.send(actions, out);
        }
    }

    fn create_party_registration(&mut self, renew: bool) -> Outgoing {
        let (registration_id, ven_id) = match (&self.reg, renew) {
            (Some(r), true) => (Some(r.registration_id.clone()), Some(r.ven_id.clone())),
            _ => (None, self.cfg.ven_id.clone()),
        };
        Outgoing::CreatePartyRegistration {
            request_id: self.next_id("req"),
            registration_id,
            ven_id,
            ven_name: self.cfg.ven_name.clone(),
            http_pull: self.cfg.http_pull,
            transport_address: self.cfg.transport_address.clone(),
            report_only: false,
            xml_signature: false,
        }
    }

    fn begin_reregistration(&mut self, now: DateTime<Utc>, why: &str, actions: &mut Vec<Action>) {
        if self.phase != Phase::Registered {
            return;
        }
        self.warn(actions, format!("re-registering: {why}"));
        self.reg_restarts = self.reg_restarts.saturating_add(1);
        self.next_poll = None;
        self.drain_at = None;
        if self.reg.is_some() {
            self.phase = Phase::Registering;
            let out = self.create_party_registration(true);
            self.send_registration(now, out, actions);
        } else {
            self.begin_query(now, actions);
        }
    }

    fn registration_failed(&mut self, now: DateTime<Utc>, why: String, actions: &mut Vec<Action>) {
        self.failures = self.failures.saturating_add(1);
        let delay = self.backoff(self.failures);
        self.warn(
            actions,
            format!(
                "registration failed: {why}; registering afresh in {}s",
                delay.num_seconds()
            ),
        );
        if self.reg.take().is_some() {
            actions.push(Action::Persist(None));
        }
        self.phase = Phase::Querying;
        let out = Outgoing::QueryRegistration {
            request_id: self.next_id("req"),
        };
        self.retries.push(Retry {
            due: now + delay,
            out,
            attempts: 0,
        });
    }

    fn on_created_party_registration(
        &mut self,
        now: DateTime<Utc>,
        reply_to: Option<&Outgoing>,
        c: super::CreatedPartyRegistration,
        actions: &mut Vec<Action>,
    ) {
        let to_query = match reply_to {
            Some(Outgoing::QueryRegistration { .. }) => true,
            Some(Outgoing::CreatePartyRegistration { .. }) => false,
            Some(other) => {
                let why = format!("oadrCreatedPartyRegistration in reply to {}; ignored", other.name());
                self.warn(actions, why);
                return;
            }
            None => self.phase == Phase::Querying,
        };
        let expected_phase = if to_query { Phase::Querying } else { Phase::Registering };
        if self.phase != expected_phase {
            self.warn(
                actions,
                "oadrCreatedPartyRegistration arrived out of sequence; ignored".into(),
            );
            return;
        }
        if c.response.code.trim() != "200" {
            self.registration_failed(now, format!("the VTN answered {}", describe(&c.response)), actions);
            return;
        }
        let expected_vtn = self.cfg.expected_vtn_id.as_deref();
        if let (Some(exp), Some(got)) = (expected_vtn, c.vtn_id.as_deref())
            && exp != got.trim()
        {
            self.registration_failed(now, format!("vtnID {got:?} is not the expected {exp:?}"), actions);
            return;
        }
        if to_query {
            if !c.profiles.is_empty() && !c.profiles.iter().any(|p| p.trim() == "2.0b") {
                self.warn(
                    actions,
                    format!(
                        "the VTN lists profiles {:?} without 2.0b; registering anyway",
                        c.profiles
                    ),
                );
            }
            self.queried_vtn_id = c.vtn_id;
            self.phase = Phase::Registering;
            let out = self.create_party_registration(false);
            self.send(actions, out);
            return;
        }
        let Some(registration_id) = c.registration_id.filter(|r| !r.trim().is_empty()) else {
            self.registration_failed(
                now,
                "the VTN gave no registrationID (registration refused)".into(),
                actions,
            );
            return;
        };
        let sent_ven_id = match reply_to {
            Some(Outgoing::CreatePartyRegistration { ven_id, .. }) => ven_id.clone(),
            _ => None,
        };
        let Some(ven_id) = c.ven_id.filter(|v| !v.trim().is_empty()).or(sent_ven_id) else {
            self.registration_failed(now, "the VTN gave no venID".into(), actions);
            return;
        };
        if let Some(mine) = self.cfg.ven_id.as_deref().filter(|m| *m != ven_id) {
            self.warn(
                actions,
                format!("the VTN assigned venID {ven_id:?} instead of the configured {mine:?}; using it"),
            );
        }
        let reg = Registration {
            ven_id,
            registration_id,
            vtn_id: c.vtn_id.or_else(|| self.queried_vtn_id.clone()),
            poll_freq: c.poll_freq,
        };
        self.failures = 0;
        self.reg = Some(reg.clone());
        actions.push(Action::Persist(Some(reg)));
        self.after_registered(now, actions);
    }

    fn after_registered(&mut self, now: DateTime<Utc>, actions: &mut Vec<Action>) {
        self.phase = Phase::Registered;
        let out = Outgoing::RegisterReport {
            request_id: self.next_id("req"),
            ven_id: self.ven_id(),
            reports: self.cfg.reports.metadata(now),
        };
        self.send(actions, out);
        let out = Outgoing::RequestEvent {
            request_id: self.next_id("req"),
            ven_id: self.ven_id(),
        };
        self.send(actions, out);
        self.drains = 0;
        self.drain_at = None;
        self.poll_hold = None;
        self.next_poll = self.cfg.http_pull.then_some(now);
    }

    fn on_vtn_cancel_registration(
        &mut self,
        now: DateTime<Utc>,
        c: super::CancelPartyRegistration,
        actions: &mut Vec<Action>,
    ) {
        let ours = self.reg.as_ref().map(|r| r.registration_id.clone());
        let wrong_reg = ours.as_deref().is_some_and(|r| r != c.registration_id.trim());
        let wrong_ven = c.ven_id.as_deref().is_some_and(|v| self.ven_id_mismatch(v));
        if wrong_reg || wrong_ven {
            let why = format!(
                "oadrCancelPartyRegistration for registrationID {:?} / venID {:?}, which is not ours",
                c.registration_id, c.ven_id
            );
            self.warn(actions, why.clone());
            let out = Outgoing::CanceledPartyRegistration {
                response: ResponseOut {
                    code: 452,
                    description: why,
                    request_id: c.request_id,
                },
                registration_id: ours,
                ven_id: self.ven_id(),
            };
            self.send(actions, out);
            return;
        }
        let out = Outgoing::CanceledPartyRegistration {
            response: ResponseOut::ok(c.request_id),
            registration_id: Some(c.registration_id),
            ven_id: self.ven_id(),
        };
        self.send(actions, out);
        if ours.is_none() {
            return;
        }
        self.warn(actions, "the VTN cancelled our registration; registering afresh".into());
        self.forget_registration(actions);
        self.reg_restarts = self.reg_restarts.saturating_add(1);
        self.begin_query(now, actions);
    }

    /// Drops the registration and everything bound to it; live events are cancelled.
    fn forget_registration(&mut self, actions: &mut Vec<Action>) {
        if self.reg.take().is_some() {
            actions.push(Action::Persist(None));
        }
        self.reports.clear();
        self.retries.clear();
        self.resent.clear();
        self.next_poll = None;
        self.drain_at = None;
        let changes = self.drop_all_events(CancelReason::RegistrationEnded);
        if !changes.is_empty() {
            actions.push(Action::Events(DistributeOutcome {
                request_id: String::new(),
                changes,
                pending: None,
            }));
        }
    }

    fn finish_cancel(&mut self, actions: &mut Vec<Action>) {
        self.forget_registration(actions);
        self.phase = Phase::Stopped;
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

    fn backoff(&self, failures: u32) -> TimeDelta {
        let mut d = self.cfg.retry.base;
        for _ in 1..failures.min(40) {
            d = d * 2;
            if d >= self.cfg.retry.max {
                return self.cfg.retry.max;
            }
        }
        d.min(self.cfg.retry.max)
    }
}

/// Whether a reply shows the VTN is reachable and accepting us, so the backoff starts over.
/// Registration replies never do: only a completed registration resets it (otherwise a VTN
/// that refuses every registration would be asked again every `base`).
fn resets_backoff(msg: &Message) -> bool {
    match msg {
        Message::CreatedPartyRegistration(_) => false,
        Message::Response(r) => r.response.code.trim() == "200",
        _ => true,
    }
}

/// A message for a log line: its name, plus the response code when it carries one.
fn summary(msg: &Message) -> String {
    let response = match msg {
        Message::Response(r) => Some(&r.response),
        Message::CanceledPartyRegistration(c) => Some(&c.response),
        Message::CreatedPartyRegistration(c) => Some(&c.response),
        _ => None,
    };
    match response {
        Some(r) => format!("{} {}", msg.name(), describe(r)),
        None => msg.name().to_string(),
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
