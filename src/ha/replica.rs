//! The replica's supervisor: follow while another leads, campaign, lead while the term holds,
//! and stop acting the moment it may not.
//!
//! - **Standby**: take in the committed batches and fold them (the read side serves them),
//!   campaign every third of a term; writes are refused, naming the leader.
//! - **Taking over** (a campaign won): take in everything committed, upload a ledger that etcd
//!   has never seen (the first leader of a site that ran as a single gateway), lead the ledger's
//!   writer, take charge of the cluster (fence every agent, re-lease every cap of the plan in
//!   force under the new epoch), then start the leader's tasks (control loop, OpenADR, MQTT).
//! - **Leading**: renew the term every third of its TTL. The term ends when a renewal says so,
//!   when the last successful renewal is older than the TTL less a margin (the leader stops
//!   before etcd can have let its lease lapse), or when the ledger's writer halts or follows
//!   (a batch not made durable, or a newer term's head). Then the leader's tasks are aborted,
//!   the backend stops sending, the ledger follows, and the controller is rebuilt from what is
//!   durable: whatever was decided and not recorded never counted.

use super::config::HaConfig;
use super::follow::catch_up;
use super::keys::Keys;
use super::quorum::EtcdQuorum;
use crate::ledger::replica::WriterMode;
use crate::runtime::{Gateway, LeaderInfo, Role};
use flexgate_etcd::{Campaign, Client, Election, Term};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// What a replica starts when it begins to lead, and aborts when its term ends.
pub type LeaderTasks =
    Box<dyn Fn(&Arc<Gateway>, tokio::sync::watch::Receiver<bool>) -> Vec<JoinHandle<()>> + Send + Sync>;

/// How often a leader deletes from etcd the batches every replica holds (`super::retention`).
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// A leader stops acting this long before its term could have lapsed at etcd.
pub const TERM_MARGIN: Duration = Duration::from_secs(1);

/// The supervisor of one replica.
pub struct Supervisor {
    gateway: Arc<Gateway>,
    client: Arc<Client>,
    keys: Keys,
    config: HaConfig,
    leader_tasks: LeaderTasks,
}

impl Supervisor {
    /// A supervisor for `gateway`, a standby built by [`Gateway::start_standby`].
    #[must_use]
    pub fn new(
        gateway: Arc<Gateway>,
        client: Arc<Client>,
        keys: Keys,
        config: HaConfig,
        leader_tasks: LeaderTasks,
    ) -> Self {
        Self {
            gateway,
            client,
            keys,
            config,
            leader_tasks,
        }
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(self.config.term_ttl_s)
    }

    fn standby(&self, leader: Option<LeaderInfo>, reason: Option<String>) {
        self.gateway.set_role(Role::Standby {
            replica: self.config.replica.clone(),
            leader,
            reason,
        });
    }

    /// Read the replicas and the chain's head from etcd and publish them for the read side
    /// (`GET /v1/status`, `/metrics`).
    async fn publish_view(&self) {
        let head = self
            .client
            .get(&self.keys.head())
            .await
            .ok()
            .and_then(|(_, kv)| kv)
            .and_then(|kv| serde_json::from_slice::<super::keys::Head>(&kv.value).ok())
            .map(|h| h.seq);
        let prefix = self.keys.replicas();
        let registered = self
            .client
            .range(&prefix, &flexgate_etcd::wire::prefix_end(&prefix), 0)
            .await
            .map(|r| r.kvs)
            .unwrap_or_default();
        let committed = head.unwrap_or(0);
        let replicas = registered
            .into_iter()
            .filter_map(|kv| {
                let name = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
                let r: super::register::Registration = serde_json::from_slice(&kv.value).ok()?;
                Some(crate::runtime::ReplicaView {
                    name,
                    url: r.url,
                    applied_seq: r.applied_seq,
                    lag_records: committed.saturating_sub(r.applied_seq),
                })
            })
            .collect();
        self.gateway
            .read()
            .publish_replication(crate::runtime::ReplicationView {
                replica: self.config.replica.clone(),
                role: String::new(),
                epoch: None,
                leader: None,
                leader_url: None,
                reason: None,
                committed_seq: head,
                replicas,
                updated_at: Some(crate::clock::wall_now()),
            });
    }

    /// The leading replica's URL, from its registration.
    async fn url_of(&self, replica: &str) -> Option<String> {
        let (_, kv) = self.client.get(&self.keys.replica(replica)).await.ok()?;
        let kv = kv?;
        serde_json::from_slice::<serde_json::Value>(&kv.value)
            .ok()?
            .get("url")?
            .as_str()
            .map(str::to_string)
    }

    /// Run until `stop` resolves; on the way out, a leader resigns its term so that another
    /// replica leads at once.
    pub async fn run(self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let election = Election::new(
            &self.client,
            self.keys.leader(),
            self.config.replica.clone(),
            self.ttl(),
        );
        let every = self.ttl() / 3;
        loop {
            // Standby: take in what is committed, then campaign.
            let mut stuck = None;
            match catch_up(&self.client, &self.keys, self.gateway.ledger()).await {
                Ok(_) => {
                    if let Err(e) = self.gateway.driver().absorb().await {
                        tracing::error!("folding the leader's records: {e}");
                    }
                }
                Err(e) => {
                    tracing::warn!("taking in the leader's records: {e}");
                    // What only an operator can mend is said in /v1/status.
                    if matches!(
                        e,
                        super::follow::FollowError::Pruned { .. }
                            | super::follow::FollowError::Ledger(crate::ledger::LedgerError::Diverged { .. })
                    ) {
                        stuck = Some(e.to_string());
                    }
                }
            }
            self.publish_view().await;
            let campaign = tokio::select! {
                c = election.campaign() => c,
                () = &mut stop => return,
            };
            match campaign {
                Ok(Campaign::Won(term)) => {
                    let resign = self.lead(&election, term, &mut stop).await;
                    if resign {
                        return;
                    }
                }
                Ok(Campaign::Lost(leader)) => {
                    // Another replica leads: the agents are its to drive (caps this replica held
                    // on after its own term are the new leader's to re-lease).
                    self.gateway.driver().backend().set_term(None);
                    self.gateway.read().note_epoch(u64::try_from(leader.epoch).unwrap_or(0));
                    let url = self.url_of(&leader.name).await;
                    self.standby(
                        Some(LeaderInfo {
                            replica: leader.name,
                            epoch: u64::try_from(leader.epoch).unwrap_or(0),
                            url,
                        }),
                        stuck,
                    );
                }
                Err(e) => self.standby(None, Some(format!("etcd: {e}"))),
            }
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = &mut stop => return,
            }
        }
    }

    /// Lead for one term. Returns true when the replica is stopping (the term was resigned).
    async fn lead(
        &self,
        election: &Election<'_>,
        mut term: Term,
        stop: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> bool {
        let epoch = u64::try_from(term.epoch).unwrap_or(0);
        self.gateway.read().note_epoch(epoch);
        let margin = TERM_MARGIN.min(self.ttl() / 2);
        self.gateway
            .driver()
            .set_term_deadline(Some(term.renewed_at + self.ttl() - margin));
        tracing::info!(epoch, replica = %self.config.replica, "won the election: taking over");
        let took = Instant::now();
        if let Err(e) = self.take_over(&term).await {
            tracing::error!(epoch, "could not take over: {e}; resigning the term");
            let _ = election.resign(&term).await;
            self.end_term(false).await;
            return false;
        }
        let (term_stop, term_stopped) = tokio::sync::watch::channel(false);
        let mut tasks = AbortOnDrop((self.leader_tasks)(&self.gateway, term_stopped));
        tasks.0.push(tokio::spawn(super::retention::run(
            self.client.clone(),
            self.keys.clone(),
            self.config.retain_records,
            PRUNE_EVERY,
        )));
        tracing::info!(epoch, took_ms = took.elapsed().as_millis() as u64, "leading");
        let mut writer = self.gateway.ledger().writer_mode();
        let every = self.ttl() / 3;
        let mut next_renewal = Instant::now() + every;
        let stopping = loop {
            let deadline = term.renewed_at + self.ttl() - TERM_MARGIN.min(self.ttl() / 2);
            let wake = next_renewal.min(deadline);
            tokio::select! {
                () = tokio::time::sleep_until(wake.into()) => {}
                changed = writer.changed() => {
                    if changed.is_err() {
                        break false;
                    }
                    let mode = writer.borrow().clone();
                    if matches!(mode, WriterMode::Halted { .. } | WriterMode::Follower) {
                        tracing::warn!(epoch, ?mode, "the ledger's writer stopped leading: the term ends here");
                        break false;
                    }
                    continue;
                }
                () = &mut *stop => break true,
            }
            if !term.holds_at(Instant::now(), TERM_MARGIN.min(self.ttl() / 2)) {
                tracing::warn!(
                    epoch,
                    "the term could not be renewed in time: stopping before it can lapse"
                );
                break false;
            }
            if Instant::now() >= next_renewal {
                next_renewal = Instant::now() + every;
                match election.renew(&mut term).await {
                    Ok(true) => {
                        self.gateway
                            .driver()
                            .set_term_deadline(Some(term.renewed_at + self.ttl() - margin));
                        self.publish_view().await;
                    }
                    Ok(false) => {
                        tracing::warn!(epoch, "the term is over (its lease lapsed or a newer term leads)");
                        break false;
                    }
                    // Keep acting while the term provably holds; renew again soon.
                    Err(e) => {
                        tracing::warn!(epoch, "renewing the term: {e}");
                        next_renewal = Instant::now() + Duration::from_millis(200);
                    }
                }
            }
        };
        // Stop acting first, then tidy up.
        let _ = term_stop.send(true);
        for task in &tasks.0 {
            task.abort();
        }
        for task in tasks.0.drain(..) {
            let _ = task.await;
        }
        if stopping {
            let _ = election.resign(&term).await;
        }
        // A term that ended without a successor in sight (etcd unreachable or without quorum):
        // keep the caps in force by renewals alone until another replica leads or the events
        // end. Safe: a successor fences every agent as it takes over, after which they refuse
        // these renewals.
        self.end_term(!stopping).await;
        stopping
    }

    /// Everything between winning and acting (see the module docs).
    async fn take_over(&self, term: &Term) -> Result<(), String> {
        let ledger = self.gateway.ledger();
        catch_up(&self.client, &self.keys, ledger)
            .await
            .map_err(|e| e.to_string())?;
        let epoch = u64::try_from(term.epoch).unwrap_or(0);
        let quorum = EtcdQuorum::new(
            self.client.clone(),
            self.keys.clone(),
            term.epoch,
            tokio::runtime::Handle::current(),
            self.ttl() / 2,
        )
        .await
        .map_err(|e| e.to_string())?;
        let (_, head) = self.client.get(&self.keys.head()).await.map_err(|e| e.to_string())?;
        let etcd_seq = match head {
            Some(kv) => {
                serde_json::from_slice::<super::keys::Head>(&kv.value)
                    .map_err(|e| format!("the head in etcd does not read: {e}"))?
                    .seq
            }
            None => 0,
        };
        let local = ledger.head().0;
        if local < etcd_seq {
            return Err(format!("took in records to {local}, but etcd's head is {etcd_seq}"));
        }
        let mut quorum = quorum;
        if local > etcd_seq {
            if etcd_seq > 0 {
                return Err(format!(
                    "this replica's ledger holds records ({local}) beyond etcd's head ({etcd_seq}) that no leader committed: it has diverged; move its data directory aside"
                ));
            }
            // The site's first leader: its ledger (as a single gateway) becomes the chain.
            super::seed::upload(&mut quorum, ledger).await?;
        }
        ledger.lead(Box::new(quorum)).await.map_err(|e| e.to_string())?;
        self.gateway.set_role(Role::Leader {
            replica: self.config.replica.clone(),
            epoch,
        });
        self.gateway.driver().take_charge().await.map_err(|e| e.to_string())
    }

    /// After a term: decide nothing, follow, and rebuild the state from what is durable. With
    /// `hold`, the backend keeps renewing the caps in force (and sends nothing else) until a
    /// successor is seen ([`Supervisor::run`] stops it then).
    async fn end_term(&self, hold: bool) {
        self.gateway.driver().set_term_deadline(Some(Instant::now()));
        if hold {
            tracing::warn!(
                "holding the caps in force by lease renewals alone until another replica leads or the events end"
            );
        } else {
            self.gateway.driver().backend().set_term(None);
        }
        self.standby(
            None,
            Some("the last term of this replica ended; an election follows".into()),
        );
        if let Err(e) = self.gateway.ledger().follow().await {
            tracing::error!("the ledger could not follow: {e}");
        }
        if let Err(e) = self.gateway.driver().rebuild().await {
            tracing::error!("rebuilding the state from the ledger: {e}");
        }
    }
}

/// The leader's tasks, aborted if the supervisor itself goes away (its task aborted, the
/// process stopping): a term's tasks never outlive the one that runs them.
struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}
