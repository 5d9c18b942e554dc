//! The VEN's configuration: identity, enrolment (market contexts, target ids), polling, push
//! or pull, reports and retry backoff, and the checks [`Ven::new`](super::Ven::new) runs on it.
//!
//! Separate from the state machine because it is plain data the caller fills in once; the
//! state machine only reads it.

use chrono::TimeDelta;

use super::{ReportConfig, VenError};

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

impl VenConfig {
    /// Refuses a configuration that cannot work; the error names the field.
    pub(super) fn validate(&self) -> Result<(), VenError> {
        if self.ven_name.trim().is_empty() {
            return Err(VenError::Config("ven_name is empty".into()));
        }
        if self.default_poll <= TimeDelta::zero() {
            return Err(VenError::Config("default_poll must be positive".into()));
        }
        if self.poll_override.is_some_and(|p| p <= TimeDelta::zero()) {
            return Err(VenError::Config("poll_override must be positive".into()));
        }
        let retry = &self.retry;
        if retry.base <= TimeDelta::zero()
            || retry.max < retry.base
            || retry.max > TimeDelta::days(1)
            || retry.max_attempts == 0
        {
            return Err(VenError::Config(
                "retry needs 0 < base <= max <= 1 day and max_attempts >= 1".into(),
            ));
        }
        if !self.http_pull && self.transport_address.is_none() {
            return Err(VenError::Config(
                "push mode (http_pull = false) needs a transport_address".into(),
            ));
        }
        self.reports.validate()?;
        Ok(())
    }
}
