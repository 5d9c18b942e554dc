//! Leader election with a fencing epoch, on one key.
//!
//! A replica campaigns by granting itself a lease of `ttl` seconds and creating the election
//! key, attached to that lease, in a transaction that succeeds only if the key does not exist.
//! The replica whose transaction succeeds leads; its **epoch** is the revision that created the
//! key. etcd's revisions only grow, so every term's epoch is higher than every earlier term's:
//! that is what agents and the ledger fence on. The leader keeps its lease alive; if it cannot
//! (it is cut off, paused, or etcd has lost its quorum), the lease expires, etcd deletes the key,
//! and another replica's campaign succeeds with a higher epoch.
//!
//! A leader must stop acting before etcd can have let its lease expire. The lease's time to live
//! counts on the server from when it handled the last keep-alive, which is no earlier than when
//! the leader sent it; so a leader that sent its last successful keep-alive at `t` holds its
//! term until `t + ttl` at the earliest, and [`Term::holds_at`] answers on that conservative
//! bound, with the margin the caller keeps for its own clock and scheduling.

use crate::client::{Client, EtcdError};
use crate::wire::{Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};
use std::time::{Duration, Instant};

/// One election: the key the leader holds, and who this replica is.
#[derive(Debug)]
pub struct Election<'a> {
    client: &'a Client,
    key: Vec<u8>,
    name: String,
    ttl: Duration,
}

/// A term this replica won.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The revision that created the election key: strictly higher than every earlier term's.
    pub epoch: i64,
    /// The lease the key is attached to.
    pub lease: i64,
    /// When the last keep-alive that succeeded was sent (or the campaign, for a new term).
    pub renewed_at: Instant,
    /// The lease's time to live.
    pub ttl: Duration,
}

impl Term {
    /// Whether this replica may still act at `now`, keeping `margin` for clock rate and
    /// scheduling: etcd cannot have expired the lease before `renewed_at + ttl`.
    #[must_use]
    pub fn holds_at(&self, now: Instant, margin: Duration) -> bool {
        now + margin < self.renewed_at + self.ttl
    }
}

/// The outcome of a campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Campaign {
    /// This replica leads.
    Won(Term),
    /// Another replica leads.
    Lost(Leader),
}

/// Who leads, as the election key says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leading replica's name.
    pub name: String,
    /// Its term's epoch.
    pub epoch: i64,
}

impl<'a> Election<'a> {
    /// The election on `key` for the replica `name`, whose terms last `ttl` without renewal
    /// (whole seconds, at least one: etcd's lease granularity).
    #[must_use]
    pub fn new(client: &'a Client, key: impl Into<Vec<u8>>, name: impl Into<String>, ttl: Duration) -> Self {
        Self {
            client,
            key: key.into(),
            name: name.into(),
            ttl: Duration::from_secs(ttl.as_secs().max(1)),
        }
    }

    /// The election key.
    #[must_use]
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Campaign once: lead if nobody does. A replica that already leads (its name under a live
    /// key, e.g. after a restart within the TTL) does not win again: it waits for its old term to
    /// lapse like anyone else, so that the old process cannot act beside the new one.
    pub async fn campaign(&self) -> Result<Campaign, EtcdError> {
        let sent = Instant::now();
        let lease = self
            .client
            .grant(i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX))
            .await?;
        let txn = TxnRequest {
            compare: vec![Compare::created_at(self.key.clone(), 0)],
            success: vec![RequestOp::RequestPut(PutRequest {
                key: self.key.clone(),
                value: self.name.clone().into_bytes(),
                lease: lease.id,
            })],
            failure: vec![RequestOp::RequestRange(RangeRequest {
                key: self.key.clone(),
                ..RangeRequest::default()
            })],
        };
        let answer = match self.client.txn(&txn).await {
            Ok(answer) => answer,
            Err(e) => {
                // The lease would only hold the key if the put was applied; if it was, our term
                // began and the lease lapsing ends it. Revoke it now either way: a term we did
                // not hear we won must not last.
                let _ = self.client.revoke(lease.id).await;
                return Err(e);
            }
        };
        if answer.succeeded {
            return Ok(Campaign::Won(Term {
                epoch: answer.header.revision,
                lease: lease.id,
                renewed_at: sent,
                ttl: self.ttl,
            }));
        }
        let _ = self.client.revoke(lease.id).await;
        let holder = answer.ranges().first().and_then(|r| r.kvs.first()).map(|kv| Leader {
            name: String::from_utf8_lossy(&kv.value).into_owned(),
            epoch: kv.create_revision,
        });
        match holder {
            Some(leader) => Ok(Campaign::Lost(leader)),
            // The key was deleted between the compare and the read: campaign again.
            None => Box::pin(self.campaign()).await,
        }
    }

    /// Who leads now, if anyone.
    pub async fn leader(&self) -> Result<Option<Leader>, EtcdError> {
        let (_, kv) = self.client.get(&self.key).await?;
        Ok(kv.map(|kv| Leader {
            name: String::from_utf8_lossy(&kv.value).into_owned(),
            epoch: kv.create_revision,
        }))
    }

    /// Renew `term` once. `Ok(true)`: the lease was kept alive and the key is still this term's;
    /// `term.renewed_at` moves to when the keep-alive was sent. `Ok(false)`: the term is over
    /// (the lease expired, or the key belongs to a newer term); stop acting.
    pub async fn renew(&self, term: &mut Term) -> Result<bool, EtcdError> {
        let sent = Instant::now();
        let ttl = self.client.keep_alive(term.lease).await?;
        if ttl <= 0 {
            return Ok(false);
        }
        let (_, kv) = self.client.get(&self.key).await?;
        if kv.is_none_or(|kv| kv.create_revision != term.epoch) {
            return Ok(false);
        }
        term.renewed_at = sent;
        Ok(true)
    }

    /// End `term` now, so that another replica can lead at once (a clean shutdown).
    pub async fn resign(&self, term: &Term) -> Result<(), EtcdError> {
        self.client.revoke(term.lease).await
    }

    /// A transaction's guard that holds only while `term` is the election's current term: every
    /// write a leader makes carries it, so that a deposed leader's write is refused by etcd.
    #[must_use]
    pub fn guard(&self, term: &Term) -> Compare {
        Compare::created_at(self.key.clone(), term.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_holds_until_its_ttl_after_the_last_renewal_less_the_margin() {
        let t0 = Instant::now();
        let term = Term {
            epoch: 7,
            lease: 1,
            renewed_at: t0,
            ttl: Duration::from_secs(10),
        };
        assert!(term.holds_at(t0 + Duration::from_secs(7), Duration::from_secs(2)));
        assert!(!term.holds_at(t0 + Duration::from_secs(8), Duration::from_secs(2)));
        assert!(!term.holds_at(t0 + Duration::from_secs(11), Duration::ZERO));
    }
}
