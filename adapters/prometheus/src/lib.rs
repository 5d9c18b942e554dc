//! `flexgate-prometheus`: one power figure from a Prometheus server, for sites that already
//! meter their PDUs, UPSes or feeds into Prometheus.
//!
//! - [`answer`] (pure): what an instant query's answer must be to count as a figure (one
//!   sample, finite, with its evaluation time), and why not otherwise;
//! - [`client`]: [`InstantQuery`], the request under a deadline (also passed to Prometheus as
//!   its own `timeout`), with errors that say which server and what happened.
//!
//! Reusable alone: nothing here knows about the gateway.

pub mod answer;
pub mod client;

pub use answer::{AnswerError, Sample};
pub use client::{InstantQuery, QueryError};
