//! An HTTP/1.1 accept loop for an axum [`Router`], with the deadlines and bounds a server on a
//! control network needs, over plain TCP or TLS. The gateway's API and the node agent both
//! serve through it, so a fix to one edge is a fix to both.
//!
//! `axum::serve` sets no timer on hyper, so a client that connects and says nothing, stops in
//! the middle of its headers, or keeps an idle keep-alive connection, holds a task and a file
//! handle forever; enough of them and the server can no longer accept anyone. Here:
//!
//! - hyper's header-read timeout ([`Limits::header_timeout`]) covers the request line and
//!   headers *and* the wait for the next request on a keep-alive connection (hyper starts it
//!   whenever the connection waits for a request head): the connection is closed when it fires.
//!   A deadline for the body is the handlers' business (they know which routes read one);
//! - with TLS, the handshake has its own deadline ([`Tls::handshake_timeout`]); a failed one
//!   closes that connection only, and a refused client certificate is logged as a warning;
//! - at most [`Limits::max_connections`] connections at once, and at most
//!   [`Limits::max_per_peer`] from one address: beyond either, a plain connection gets a `503`
//!   with `Retry-After` and is closed at once (an answer, not a hang in the accept queue), a TLS
//!   connection is closed before its handshake; [`Counters`] counts both;
//! - accept errors (out of file handles, …) are logged and retried after a pause, so that they
//!   never stop the server;
//! - at shutdown the listener is closed, pending handshakes are dropped, and requests in flight
//!   get [`Server::shutdown_grace`] to finish.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Deadlines and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time to send a request's headers, and the longest idle wait between requests.
    pub header_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one peer address.
    pub max_per_peer: usize,
}

/// File handles kept back from connections for everything else a process opens (its files,
/// outgoing connections, logs).
pub const HANDLES_RESERVED: u64 = 64;

impl Limits {
    /// These limits, with the connection limit lowered where the process's file-handle limit
    /// (`ulimit -n`) could not hold it plus [`HANDLES_RESERVED`]: otherwise `accept` fails with
    /// "too many open files" before the limit is reached, and the process can open nothing else
    /// while the idle connections last. `open_files` is the soft limit, if known
    /// ([`open_files_limit`]). `setting` names the configuration key in the warning.
    #[must_use]
    pub fn within_handle_limit(mut self, open_files: Option<u64>, setting: &str) -> Self {
        if let Some(limit) = open_files {
            let room = usize::try_from(limit.saturating_sub(HANDLES_RESERVED).max(1)).unwrap_or(usize::MAX);
            if self.max_connections > room {
                tracing::warn!(
                    configured = self.max_connections,
                    open_files_limit = limit,
                    effective = room,
                    "{setting} is above what the file-handle limit allows; using the lower figure \
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

/// TLS for [`Server`].
#[derive(Clone)]
pub struct Tls {
    /// The server configuration (certificate, key, and a client CA where clients must present
    /// a certificate).
    pub config: Arc<rustls::ServerConfig>,
    /// How long a client may take to complete the handshake.
    pub handshake_timeout: Duration,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

/// Connection counts since start, for a `/metrics` page.
#[derive(Debug, Default)]
pub struct Counters {
    open: AtomicU64,
    refused: AtomicU64,
}

impl Counters {
    /// Connections open now.
    #[must_use]
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections refused because a limit was reached.
    #[must_use]
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// What to serve and how. Build with [`Server::new`], adjust the public fields, then
/// [`Server::serve`].
#[derive(Debug)]
pub struct Server {
    /// Names the server in logs ("HTTP API", "agent").
    pub name: &'static str,
    /// Deadlines and bounds.
    pub limits: Limits,
    /// TLS, or plain HTTP when `None`.
    pub tls: Option<Tls>,
    /// How long requests in flight may finish after shutdown begins.
    pub shutdown_grace: Duration,
    /// The pause after an accept error that is not one connection's own.
    pub accept_retry: Duration,
    /// Where connections are counted.
    pub counters: Arc<Counters>,
    /// The JSON body of the `503` a plain connection over a limit gets, from the reason.
    pub refusal_body: fn(&str) -> String,
}

/// How long the 503 answer to a refused connection may take to write.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// `{"error": {"field": null, "message": …}}`, the gateway API's error shape.
fn default_refusal_body(message: &str) -> String {
    serde_json::json!({"error": {"field": null, "message": message}}).to_string()
}

impl Server {
    /// Plain HTTP within `limits`, 5 s of grace at shutdown, 100 ms between accept retries.
    #[must_use]
    pub fn new(name: &'static str, limits: Limits) -> Self {
        Self {
            name,
            limits,
            tls: None,
            shutdown_grace: Duration::from_secs(5),
            accept_retry: Duration::from_millis(100),
            counters: Arc::default(),
            refusal_body: default_refusal_body,
        }
    }

    /// Serve `router` on `listener` until `shutdown` resolves (see the module docs). Handlers
    /// find the peer address in `ConnectInfo<SocketAddr>`.
    pub async fn serve(
        self,
        listener: TcpListener,
        router: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let name = self.name;
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let (stop_tx, stop_rx) = watch::channel(false);
        let slots = Arc::new(Mutex::new(Slots::default()));
        let acceptor = self
            .tls
            .as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(t.config.clone()));
        let handshake_timeout = self.tls.as_ref().map_or(Duration::ZERO, |t| t.handshake_timeout);
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
                        tracing::error!(server = name, error = %e, retry_ms = self.accept_retry.as_millis(),
                            "cannot accept connections; retrying");
                        tokio::time::sleep(self.accept_retry).await;
                        continue;
                    }
                },
            };
            let slot = match take_slot(&slots, &self.counters, peer.ip(), &self.limits) {
                Ok(slot) => {
                    saturated = false;
                    slot
                }
                Err(full) => {
                    self.counters.refused.fetch_add(1, Ordering::Relaxed);
                    if !saturated {
                        saturated = true;
                        tracing::warn!(server = name, %peer, ?full, "connection limit reached; new connections are refused");
                    }
                    if acceptor.is_none() {
                        tasks.spawn(refuse(tcp, full, self.refusal_body));
                    }
                    // TLS: no answer can be written before a handshake; closing is the answer.
                    continue;
                }
            };
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
            }
            let connection = Connection {
                name,
                peer,
                router: router.clone(),
                header_timeout: self.limits.header_timeout,
                watcher: graceful.watcher(),
                _slot: slot,
            };
            match &acceptor {
                None => {
                    tasks.spawn(connection.serve(tcp));
                }
                Some(acceptor) => {
                    tasks.spawn(connection.serve_tls(tcp, acceptor.clone(), handshake_timeout, stop_rx.clone()));
                }
            }
        }
        drop(listener);
        let _ = stop_tx.send(true);
        if tokio::time::timeout(self.shutdown_grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                server = name,
                grace_s = self.shutdown_grace.as_secs(),
                "connections still open after the shutdown grace period; closing them"
            );
        }
        tasks.shutdown().await;
    }
}

/// Open connections, in total and per peer address.
#[derive(Default)]
struct Slots {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// One connection's place in [`Slots`]; given back when dropped.
struct Slot {
    slots: Arc<Mutex<Slots>>,
    counters: Arc<Counters>,
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
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    Total(usize),
    Peer(usize),
}

fn take_slot(slots: &Arc<Mutex<Slots>>, counters: &Arc<Counters>, peer: IpAddr, limits: &Limits) -> Result<Slot, Full> {
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
    counters.open.fetch_add(1, Ordering::Relaxed);
    Ok(Slot {
        slots: slots.clone(),
        counters: counters.clone(),
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

/// True when a failed handshake was a refused client certificate (a security event worth a
/// warning), false for noise such as plain HTTP or port scanners.
fn is_certificate_refusal(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        })
}

/// One accepted connection and what serving it needs.
struct Connection {
    name: &'static str,
    peer: SocketAddr,
    router: Router,
    header_timeout: Duration,
    watcher: hyper_util::server::graceful::Watcher,
    _slot: Slot,
}

impl Connection {
    /// TLS handshake (bounded by `timeout`, abandoned at shutdown), then HTTP/1.1.
    async fn serve_tls(
        self,
        tcp: TcpStream,
        acceptor: tokio_rustls::TlsAcceptor,
        timeout: Duration,
        mut stop: watch::Receiver<bool>,
    ) {
        let peer = self.peer;
        let handshake = tokio::time::timeout(timeout, acceptor.accept(tcp));
        let stream = tokio::select! {
            result = handshake => match result {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) if is_certificate_refusal(&e) => {
                    tracing::warn!(server = self.name, %peer, error = %e, "TLS handshake failed: client certificate refused");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(server = self.name, %peer, error = %e, "TLS handshake failed (plain HTTP to the HTTPS port, or a probe?)");
                    return;
                }
                Err(_) => {
                    tracing::debug!(server = self.name, %peer, timeout_s = timeout.as_secs(), "TLS handshake timed out");
                    return;
                }
            },
            _ = stop.wait_for(|stopping| *stopping) => return,
        };
        self.serve(stream).await;
    }

    /// HTTP/1.1 until the client closes, a deadline passes, or shutdown ends it.
    async fn serve<S>(self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let peer = self.peer;
        let service = tower::ServiceExt::map_request(self.router, move |mut request: axum::http::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .serve_connection(
                hyper_util::rt::TokioIo::new(stream),
                hyper_util::service::TowerToHyperService::new(service),
            );
        if let Err(e) = self.watcher.watch(connection).await {
            tracing::debug!(server = self.name, %peer, error = %e, "connection ended with an error");
        }
    }
}

/// The answer to a plain connection over a limit: `503` with `Retry-After`, then close.
async fn refuse(mut tcp: TcpStream, full: Full, body: fn(&str) -> String) {
    let message = match full {
        Full::Total(n) => format!("the server has {n} connections open, its limit; retry shortly"),
        Full::Peer(n) => format!("this address has {n} connections open, the limit per peer; close idle ones"),
    };
    let body = body(&message);
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
mod tests;
