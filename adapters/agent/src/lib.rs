//! Per-node GPU power-cap agent for flexgate: the protocol, the lease logic, GPU control through
//! NVML or simulated GPUs, and DCGM-style metrics.
//!
//! The gateway caps GPUs through one agent per node. Caps must land on the right GPUs, stay
//! exactly as long as the event needs, and come back off even if the gateway dies. Hence:
//!
//! - **Leases** ([`lease`]): every cap belongs to a lease with a deadline (`expires_at`). The
//!   gateway renews it while the event lasts; if the gateway dies, the lease expires and the
//!   agent's watchdog (every second) restores the GPUs' **pre-event** limits: a dead-man switch.
//!   Leases are declarative and numbered (generation), so retries are harmless and stale
//!   requests are refused.
//! - **Persistence** ([`state`]): leases and pre-event limits survive an agent restart; valid
//!   leases are re-applied, expired ones restored, and ones the API would refuse (a deadline
//!   beyond the maximum lease lifetime, say) dropped and restored too.
//! - **GPU control** ([`gpu`]): a small trait with an NVML implementation and a simulated one.
//! - **Protocol** ([`api`]): the JSON types, shared with the gateway's client.
//! - **HTTP** ([`server`]): axum, bearer tokens ([`auth`]), dcgm-exporter-style `/metrics`
//!   ([`metrics`], which also parses that format for the gateway).
//! - **Job throughput** ([`throughput`]): each job reports its own tokens/s with its own job
//!   token; the agent keeps the paper's aggregate (top 10 % of training samples in a window)
//!   for the gateway, which learns the job's power curve from it.
//! - **TLS** ([`tls`]): HTTPS through rustls (ring) so tokens never cross the network in clear
//!   text, and optional mutual TLS (client certificates from a given CA, token still required).
//!
//! # Running many agents in one process
//!
//! ```no_run
//! use flexgate_agent::{Agent, AgentConfig, auth::Auth, gpu::sim::{SimGpus, SimOptions}};
//! use std::sync::Arc;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = Arc::new(flexgate_agent::clock::SystemClock);
//! let auth = Auth::from_secrets("a-long-control-token", None)?;
//! for node in 0..1000 {
//!     let host = format!("node{node:04}");
//!     let gpus = SimGpus::new(&SimOptions::h200(&host, 8), clock.clone())?;
//!     let agent = Agent::with_clock(AgentConfig::new(host, auth.clone()), Box::new(gpus), clock.clone())?;
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//!     tokio::spawn(agent.serve(listener, std::future::pending()));
//! }
//! # Ok(()) }
//! ```

pub mod agent;
pub mod api;
pub mod auth;
pub mod clock;
pub mod config;
pub mod gpu;
pub mod lease;
pub mod metrics;
pub mod server;
pub mod state;
pub mod throughput;
pub mod tls;

pub use agent::{Agent, AgentConfig, AgentError};
pub use gpu::GpuControl;
