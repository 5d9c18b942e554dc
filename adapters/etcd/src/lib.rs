//! etcd v3 for flexgate's gateway replicas: leader election with a fencing epoch, and the few
//! key-value, lease, transaction and watch calls around it.
//!
//! It speaks etcd's **JSON gateway** (`POST /v3/kv/range`, `/v3/kv/txn`, `/v3/lease/grant`,
//! `/v3/lease/keepalive`, `/v3/watch`, …: the same v3 API and semantics as gRPC, served by every
//! etcd member on its client port) over the HTTP client the rest of the workspace uses. The
//! maintained gRPC client crate (`etcd-client`) generates its code at build time and so needs
//! `protoc` on every machine that builds flexgate, including a fresh one that only wants to run
//! the demo; these calls are few and their JSON is small, so this crate decodes it itself
//! ([`wire`], with tests on etcd's own answers) and the tests run it against a real three-member
//! etcd cluster.
//!
//! ```no_run
//! # async fn demo(http: reqwest::Client) -> Result<(), flexgate_etcd::EtcdError> {
//! use flexgate_etcd::{Campaign, Client, Election};
//! use std::time::Duration;
//! let endpoints = ["http://127.0.0.1:2379".to_string()];
//! let client = Client::new(http, &endpoints, Duration::from_secs(2))?;
//! let election = Election::new(&client, "/flexgate/site-a/leader", "gw-1", Duration::from_secs(10));
//! match election.campaign().await? {
//!     Campaign::Won(term) => println!("leading under epoch {}", term.epoch),
//!     Campaign::Lost(leader) => println!("{} leads under epoch {}", leader.name, leader.epoch),
//! }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod client;
pub mod election;
#[cfg(feature = "testing")]
pub mod testing;
pub mod wire;

pub use client::{Client, Credentials, EtcdError, Watch, check_endpoint};
pub use election::{Campaign, Election, Leader, Term};
