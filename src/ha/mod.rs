//! Gateway replicas on etcd: one leader decides and writes, the others follow, and a deposed
//! leader can do no harm.
//!
//! - `anchors.rs`: a replica's ledger checked against the hashes the quorum committed.
//! - `config.rs`: `[ha]`, checked against the agents' lease margin.
//! - `keys.rs`: where everything lives in etcd, under `{prefix}/{site}/` (pure).
//! - `quorum.rs`: the leader's ledger writer makes each batch durable in etcd, guarded by its
//!   term, before it is written locally and answered ([`crate::ledger::replica::Quorum`]).
//! - `replica.rs`: the supervisor: follow, campaign, take over, lead while the term holds, stop
//!   acting the moment it may not.
//! - `register.rs`: a replica's name and URL, one replica per name.
//! - `seed.rs`: the first leader's existing ledger becomes the site's chain.
//! - `follow.rs`: a replica that does not lead takes in the committed batches, in order, into its
//!   own ledger.
//!
//! The ledger's batches are committed **through etcd** (rather than streamed to the standbys with
//! etcd only arbitrating who may write) because then one store decides both who leads and what
//! the chain is: a batch is durable exactly when etcd's Raft has it on a majority, a deposed
//! leader's write fails its guard in the same transaction, and a standby catches up from etcd
//! alone, whichever replica wrote. The limits this brings, and how they are met, are in
//! ARCHITECTURE.md ("High availability").

pub mod anchors;
pub mod config;
pub mod follow;
pub mod keys;
pub mod quorum;
pub mod register;
pub mod replica;
pub mod retention;
pub mod seed;
