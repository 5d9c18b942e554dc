//! The gateway's HTTP server: hyper's HTTP/1.1 connection driver under our own accept loop, so
//! that every connection has deadlines and the number of connections is bounded.
//!
//! `axum::serve` sets no timer on hyper, so a client that connects and says nothing, stops in
//! the middle of its headers, or keeps an idle keep-alive connection, holds a task and a file
//! handle forever; enough of them (a few hundred under a 256-handle limit) and the gateway can
//! no longer accept the utility's events. Here:
//!
//! - hyper's header-read timeout ([`HttpLimits::header_timeout`]) covers the request line and
//!   headers *and* the wait for the next request on a keep-alive connection (hyper starts it
//!   whenever the connection waits for a request head): the connection is closed when it fires;
//! - the body has its own deadline, enforced where handlers read it (`body.rs`), answered 408;
//! - at most [`HttpLimits::max_connections`] connections at once, and at most
//!   [`HttpLimits::max_per_peer`] from one address: beyond either, the new connection gets a
//!   `503` with `Retry-After` and is closed at once (an answer, not a hang in the accept queue),
//!   and `flexgate_http_connections_refused_total` counts it.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

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
}

/// File handles kept back from HTTP connections for everything else the gateway opens (the
/// ledger's files, agent and VTN connections, the MQTT link, logs).
const HANDLES_RESERVED: u64 = 64;

impl HttpLimits {
    /// These limits, with the connection limit lowered where the process's file-handle limit
    /// (`ulimit -n`) could not hold it plus 64 handles kept back for everything else: otherwise `accept` fails with
    /// "too many open files" before the limit is reached, and the gateway can open nothing else
    /// (not even its ledger) while the idle connections last. `open_files` is the soft limit, if
    /// known.
    #[must_use]
    pub fn within_handle_limit(mut self, open_files: Option<u64>) -> Self {
        if let Some(limit) = open_files {
            let room = usize::try_from(limit.saturating_sub(HANDLES_RESERVED).max(1)).unwrap_or(usize::MAX);
            if self.max_connections > room {
                tracing::warn!(
                    configured = self.max_connections,
                    open_files_limit = limit,
                    effective = room,
                    "gateway.http_max_connections is above what the file-handle limit allows; using the lower figure \
                     (raise `ulimit -n` or LimitNOFILE= to allow more)"
                );
                self.max_connections = room;
                self.max_per_peer = self.max_per_peer.min(room);
            }
        }
        self
    }
}

/// The soft `Max open files` limit of this process, from `/proc/self/limits` (Linux); `None`
/// where it cannot be read or is unlimited.
#[must_use]
pub fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_files_limit(&text)
}

fn parse_open_files_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self::from_config(&crate::config::GatewayConfig::default())
    }
}

/// How long requests in flight may finish after shutdown begins.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long the 503 answer to a refused connection may take to write.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Connections refused because a limit was reached, since start (for `/metrics`).
pub(crate) static CONNECTIONS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Connections open now (for `/metrics`).
pub(crate) static CONNECTIONS_OPEN: AtomicU64 = AtomicU64::new(0);

/// Open connections, in total and per peer address.
#[derive(Default)]
struct Slots {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// One connection's place in [`Slots`]; given back when dropped.
struct Slot {
    slots: Arc<Mutex<Slots>>,
    peer: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.total = slots.total.saturating_sub(1);
        if let Some(n) = slots.per_peer.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                // Keep the map as small as the set of peers connected now.
                slots.per_peer.remove(&self.peer);
            }
        }
        CONNECTIONS_OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    Total(usize),
    Peer(usize),
}

fn take_slot(slots: &Arc<Mutex<Slots>>, peer: IpAddr, limits: &HttpLimits) -> Result<Slot, Full> {
    let mut guard = slots.lock().unwrap_or_else(PoisonError::into_inner);
    if guard.total >= limits.max_connections {
        return Err(Full::Total(limits.max_connections));
    }
    let from_peer = guard.per_peer.get(&peer).copied().unwrap_or(0);
    if from_peer >= limits.max_per_peer {
        return Err(Full::Peer(limits.max_per_peer));
    }
    guard.total += 1;
    *guard.per_peer.entry(peer).or_insert(0) += 1;
    CONNECTIONS_OPEN.fetch_add(1, Ordering::Relaxed);
    Ok(Slot {
        slots: slots.clone(),
        peer,
    })
}

/// Accept errors that concern one connection only (the peer gave up before `accept`).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Serve `router` on `listener` until `shutdown` resolves, within `limits`. Requests in flight
/// get 5 s to finish. Accept errors (out of file handles, …) are logged and
/// retried after a short pause, so that they never stop the gateway.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(Mutex::new(Slots::default()));
    let mut tasks = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    // Warn once per episode of saturation, not once per refused connection.
    let mut saturated = false;
    loop {
        // Reap finished connection tasks so the set holds live ones only.
        while tasks.try_join_next().is_some() {}
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "cannot accept HTTP connections; retrying in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let slot = match take_slot(&slots, peer.ip(), &limits) {
            Ok(slot) => {
                saturated = false;
                slot
            }
            Err(full) => {
                CONNECTIONS_REFUSED.fetch_add(1, Ordering::Relaxed);
                if !saturated {
                    saturated = true;
                    tracing::warn!(%peer, ?full, "HTTP connection limit reached; new connections get 503");
                }
                tasks.spawn(refuse(tcp, full));
                continue;
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        tasks.spawn(serve_connection(
            tcp,
            peer,
            router.clone(),
            limits,
            graceful.watcher(),
            slot,
        ));
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::warn!(
            grace_s = SHUTDOWN_GRACE.as_secs(),
            "HTTP connections still open after the shutdown grace period; closing them"
        );
    }
    tasks.shutdown().await;
}

/// One connection: HTTP/1.1 until the client closes, a deadline passes, or shutdown ends it.
async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: HttpLimits,
    watcher: hyper_util::server::graceful::Watcher,
    _slot: Slot,
) {
    // Handlers read the peer address (transport records, refusal logs) from `ConnectInfo`.
    let service = tower::ServiceExt::map_request(router, move |mut request: axum::http::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        request
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(
            hyper_util::rt::TokioIo::new(tcp),
            hyper_util::service::TowerToHyperService::new(service),
        );
    if let Err(e) = watcher.watch(connection).await {
        tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
    }
}

/// The answer to a connection over a limit: `503` with `Retry-After`, then close.
async fn refuse(mut tcp: TcpStream, full: Full) {
    let message = match full {
        Full::Total(n) => format!("the gateway has {n} HTTP connections open, its limit; retry shortly"),
        Full::Peer(n) => format!("this address has {n} HTTP connections open, the limit per peer; close idle ones"),
    };
    let body = serde_json::json!({"error": {"field": null, "message": message}}).to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
        tcp.write_all(answer.as_bytes()).await?;
        tcp.shutdown().await
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_limit_stays_within_the_file_handle_limit() {
        let limits = HttpLimits::default();
        assert_eq!(limits.max_connections, 512);
        let lowered = limits.within_handle_limit(Some(256));
        assert_eq!((lowered.max_connections, lowered.max_per_peer), (192, 64));
        assert_eq!(limits.within_handle_limit(Some(20_000)), limits);
        assert_eq!(limits.within_handle_limit(None), limits);
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max open files            256                  4096                 files\n";
        assert_eq!(parse_open_files_limit(text), Some(256));
        assert_eq!(
            parse_open_files_limit("Max open files  unlimited unlimited files"),
            None
        );
    }

    #[test]
    fn slots_are_bounded_in_total_and_per_peer_and_given_back() {
        let limits = HttpLimits {
            max_connections: 3,
            max_per_peer: 2,
            ..HttpLimits::default()
        };
        let slots = Arc::new(Mutex::new(Slots::default()));
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let a1 = take_slot(&slots, a, &limits).expect("a1");
        let _a2 = take_slot(&slots, a, &limits).expect("a2");
        assert_eq!(take_slot(&slots, a, &limits).err(), Some(Full::Peer(2)));
        let _b1 = take_slot(&slots, b, &limits).expect("b1");
        assert_eq!(take_slot(&slots, b, &limits).err(), Some(Full::Total(3)));
        drop(a1);
        let _b2 = take_slot(&slots, b, &limits).expect("a slot came back");
        let guard = slots.lock().expect("lock");
        assert_eq!((guard.total, guard.per_peer.len()), (3, 2));
    }
}
