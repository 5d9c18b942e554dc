//! Who this gateway is among its replicas: what the driver may do, and what the read side shows.

use serde::Serialize;

/// This gateway's role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// The only gateway of its site (no `[ha]`): it decides.
    Single,
    /// The replica that leads, under `epoch`: it decides.
    Leader {
        /// This replica's name.
        replica: String,
        /// The term's epoch.
        epoch: u64,
    },
    /// A replica that does not lead: it serves reads and refuses writes, naming the leader.
    Standby {
        /// This replica's name.
        replica: String,
        /// Who leads, when known.
        leader: Option<LeaderInfo>,
        /// Why this replica does not lead when nobody does (etcd unreachable, no quorum), for
        /// people.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// The leading replica, as a standby names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaderInfo {
    /// Its name.
    pub replica: String,
    /// Its term's epoch.
    pub epoch: u64,
    /// Its API's URL (from its `[ha] advertise_url`), where writes go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl Role {
    /// Whether this gateway may decide (and so write to its ledger).
    #[must_use]
    pub fn may_decide(&self) -> bool {
        matches!(self, Role::Single | Role::Leader { .. })
    }
}
