//! Failures and retries: what happens when a request cannot be delivered, the capped
//! exponential backoff, and re-sending what is due.
//!
//! Separate from the state machine because every message kind shares it; a failed poll pauses
//! polling (staying on its grid), registration is retried forever, anything else up to
//! [`RetryConfig::max_attempts`](super::RetryConfig::max_attempts).

use chrono::{DateTime, TimeDelta, Utc};

use super::{Action, Phase, Ven};
use crate::oadr2b::Message;
use crate::oadr2b::outgoing::Outgoing;

/// A message waiting to be sent again at `due`.
#[derive(Debug, Clone)]
pub(super) struct Retry {
    pub(super) due: DateTime<Utc>,
    pub(super) out: Outgoing,
    pub(super) attempts: u32,
}

impl Ven {
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
                actions.push(Action::Abandoned {
                    out: out.clone(),
                    attempts,
                    error: error.to_string(),
                });
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

    /// Sends the retries that are due at `now` and still wanted in the current phase.
    pub(super) fn send_due_retries(&mut self, now: DateTime<Utc>, actions: &mut Vec<Action>) {
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
    }

    pub(super) fn backoff(&self, failures: u32) -> TimeDelta {
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
pub(super) fn resets_backoff(msg: &Message) -> bool {
    match msg {
        Message::CreatedPartyRegistration(_) => false,
        Message::Response(r) => r.response.code.trim() == "200",
        _ => true,
    }
}
