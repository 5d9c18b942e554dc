//! The gateway's HTTP server: the shared accept loop of `flexgate-httpserve` (deadlines, a
//! bounded number of connections, `503` beyond it, graceful shutdown), with the limits of
//! `[gateway] http_*` and counters for `/metrics`.
//!
//! The body deadline ([`HttpLimits::body_timeout`]) is enforced where handlers read a body
//! (`body.rs`), answered 408.

use axum::Router;
use flexgate_httpserve::{Counters, Limits, Server};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Deadlines and bounds of the HTTP server (`[gateway] http_*` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Time to send a request's headers, and the longest idle wait between requests.
    pub header_timeout: Duration,
    /// Time to send a request's body (enforced by the handlers that read one).
    pub body_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one peer address.
    pub max_per_peer: usize,
}

impl HttpLimits {
    /// The limits of a gateway configuration.
    #[must_use]
    pub fn from_config(gateway: &crate::config::GatewayConfig) -> Self {
        Self {
            header_timeout: Duration::from_secs(gateway.http_header_timeout_s),
            body_timeout: Duration::from_secs(gateway.http_body_timeout_s),
            max_connections: gateway.http_max_connections,
            max_per_peer: gateway.http_max_connections_per_peer,
        }
    }

    /// These limits, with the connection limit lowered where the process's file-handle limit
    /// (`ulimit -n`, `open_files`) could not hold it plus 64 handles kept back for the ledger,
    /// agent and VTN connections, the MQTT link and logs (see
    /// [`flexgate_httpserve::Limits::within_handle_limit`]).
    #[must_use]
    pub fn within_handle_limit(self, open_files: Option<u64>) -> Self {
        let lowered = self
            .connections()
            .within_handle_limit(open_files, "gateway.http_max_connections");
        Self {
            max_connections: lowered.max_connections,
            max_per_peer: lowered.max_per_peer,
            ..self
        }
    }

    fn connections(self) -> Limits {
        Limits {
            header_timeout: self.header_timeout,
            max_connections: self.max_connections,
            max_per_peer: self.max_per_peer,
        }
    }
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self::from_config(&crate::config::GatewayConfig::default())
    }
}

pub use flexgate_httpserve::open_files_limit;

/// Serve `router` on `listener` until `shutdown` resolves, within `limits`, counting its
/// connections in `counters` (the gateway's, read for `/metrics`). Requests in flight get 5 s
/// to finish. Accept errors (out of file handles, …) are logged and retried after a short
/// pause, so that they never stop the gateway.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    counters: Arc<Counters>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut server = Server::new("HTTP API", limits.connections());
    server.counters = counters;
    server.serve(listener, router, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_limits_are_lowered_to_fit_the_file_handle_limit() {
        let limits = HttpLimits::default();
        assert_eq!((limits.max_connections, limits.max_per_peer), (512, 64));
        let lowered = limits.within_handle_limit(Some(256));
        assert_eq!((lowered.max_connections, lowered.max_per_peer), (192, 64));
        assert_eq!(lowered.header_timeout, limits.header_timeout);
        assert_eq!(lowered.body_timeout, limits.body_timeout);
        assert_eq!(limits.within_handle_limit(None), limits);
    }
}
