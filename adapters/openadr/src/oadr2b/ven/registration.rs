//! Registration: oadrQueryRegistration → oadrCreatePartyRegistration → [`Registration`]
//! (persisted), re-registration when the VTN asks for it or no longer knows us, cancellation
//! from either side, and the backoff when registration keeps being restarted.
//!
//! Separate from the state machine in `mod.rs`, which only decides *when* to register (start,
//! a 463, an oadrRequestReregistration) and hands the answers here.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::retry::Retry;
use super::{Action, CancelReason, DistributeOutcome, Phase, Ven, describe};
use crate::oadr2b::outgoing::{Outgoing, ResponseOut};
use crate::oadr2b::{CancelPartyRegistration, CreatedPartyRegistration, Message, RequestReregistration};

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

impl Ven {
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

    /// Replies that end a registration or cancellation exchange whatever they are. Returns
    /// `true` when `msg` was consumed here.
    pub(super) fn unexpected_reply(
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

    pub(super) fn on_request_reregistration(
        &mut self,
        now: DateTime<Utc>,
        r: RequestReregistration,
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

    pub(super) fn begin_query(&mut self, now: DateTime<Utc>, actions: &mut Vec<Action>) {
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

    pub(super) fn begin_reregistration(&mut self, now: DateTime<Utc>, why: &str, actions: &mut Vec<Action>) {
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

    pub(super) fn on_created_party_registration(
        &mut self,
        now: DateTime<Utc>,
        reply_to: Option<&Outgoing>,
        c: CreatedPartyRegistration,
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
        // A new registration may be a VTN that forgot us: our earlier answers are answered
        // again when it lists their events.
        if self
            .reg
            .as_ref()
            .is_none_or(|old| old.registration_id != reg.registration_id)
        {
            self.answered.clear();
        }
        self.reg = Some(reg.clone());
        actions.push(Action::Persist(Some(reg)));
        self.after_registered(now, actions);
    }

    pub(super) fn after_registered(&mut self, now: DateTime<Utc>, actions: &mut Vec<Action>) {
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

    pub(super) fn on_vtn_cancel_registration(
        &mut self,
        now: DateTime<Utc>,
        c: CancelPartyRegistration,
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

    pub(super) fn finish_cancel(&mut self, actions: &mut Vec<Action>) {
        self.forget_registration(actions);
        self.phase = Phase::Stopped;
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
