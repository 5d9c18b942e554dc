//! HTTP: the axum [`Router`] for an [`Agent`], its error answers, bearer-token checks, and
//! [`serve`] (plain HTTP) or [`serve_tls`] (HTTPS, optionally mutual TLS), which run the router
//! and the watchdog until a shutdown future resolves.
//!
//! Handlers parse bodies themselves (not with axum's `Json` extractor) so that every refusal is
//! a JSON [`ErrorBody`] with status 400, and so that nothing reaches the lease book before the
//! token check and the body check have passed: a refused request changes nothing.

use crate::agent::Agent;
use crate::api::{self, ErrorBody, ErrorKind, JobRequest, RenewRequest};
use crate::auth::{Access, AuthFailure};
use crate::lease::LeaseError;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

/// Largest request body accepted (a lease for 64 GPUs is about 5 KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// An error answer: status plus [`ErrorBody`].
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// JSON body.
    pub body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, error: ErrorKind, detail: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorBody {
                error,
                detail: detail.into(),
                held_generation: None,
            },
        }
    }

    fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorKind::BadRequest, detail)
    }

    fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorKind::Internal, detail)
    }
}

impl From<LeaseError> for ApiError {
    fn from(e: LeaseError) -> Self {
        let detail = e.to_string();
        match e {
            LeaseError::Invalid(_) => Self::bad_request(detail),
            LeaseError::StaleGeneration { held, .. } | LeaseError::Deleted { deleted: held, .. } => {
                let mut err = Self::new(StatusCode::CONFLICT, ErrorKind::StaleGeneration, detail);
                err.body.held_generation = Some(held);
                err
            }
            LeaseError::GenerationConflict { generation, .. } => {
                let mut err = Self::new(StatusCode::CONFLICT, ErrorKind::GenerationConflict, detail);
                err.body.held_generation = Some(generation);
                err
            }
            LeaseError::NotFound(_) => Self::new(StatusCode::NOT_FOUND, ErrorKind::NotFound, detail),
            LeaseError::TooManyLeases(_) => Self::new(StatusCode::CONFLICT, ErrorKind::Conflict, detail),
            LeaseError::Persist(_) => Self::new(StatusCode::SERVICE_UNAVAILABLE, ErrorKind::Unavailable, detail),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"flexgate-agent\""),
            );
        }
        resp
    }
}

fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorKind::PayloadTooLarge,
                format!("body larger than {MAX_BODY_BYTES} bytes"),
            )
        } else {
            ApiError::bad_request(format!("could not read the body: {e}"))
        }
    })
}

fn parse_json<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body_bytes(body)?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

fn path_id(path: Result<Path<String>, PathRejection>, kind: &str) -> Result<String, ApiError> {
    let Path(id) = path.map_err(|e| ApiError::bad_request(format!("invalid path: {e}")))?;
    api::validate_id(kind, &id).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(id)
}

/// Run a blocking agent call on tokio's blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        tracing::error!(error = %e, "agent call panicked");
        ApiError::internal("internal error; see the agent log")
    })
}

async fn gpus(State(agent): State<Agent>) -> Result<Response, ApiError> {
    Ok(Json(blocking(move || agent.gpu_status()).await?).into_response())
}

async fn health(State(agent): State<Agent>) -> Result<Response, ApiError> {
    Ok(Json(blocking(move || agent.health()).await?).into_response())
}

async fn metrics(State(agent): State<Agent>) -> Result<Response, ApiError> {
    let text = blocking(move || agent.metrics_text()).await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response())
}

async fn put_lease(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "lease")?;
    let bytes = body_bytes(body)?;
    let resp = blocking(move || agent.put_lease_json(&id, &bytes)).await??;
    Ok(Json(resp).into_response())
}

async fn renew_lease(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "lease")?;
    let req: RenewRequest = parse_json(body)?;
    let resp = blocking(move || agent.renew_lease(&id, &req)).await??;
    Ok(Json(resp).into_response())
}

async fn delete_lease(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "lease")?;
    let resp = blocking(move || agent.delete_lease(&id)).await??;
    Ok(Json(resp).into_response())
}

async fn job_start(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "job")?;
    let req: JobRequest = parse_json(body)?;
    let resp = blocking(move || agent.job_start(&id, &req)).await??;
    Ok(Json(resp).into_response())
}

async fn job_end(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "job")?;
    let req: JobRequest = parse_json(body)?;
    let resp = blocking(move || agent.job_end(&id, &req)).await??;
    Ok(Json(resp).into_response())
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorKind::NotFound,
        "no such endpoint; see GET /v1/health, /v1/gpus, /metrics",
    )
}

/// Token check for every routed request, before any body is read. GET/HEAD need read access,
/// everything else control access; `/metrics` is open when configured so.
async fn authorize(State(agent): State<Agent>, req: Request, next: Next) -> Response {
    let need = if req.method() == Method::GET || req.method() == Method::HEAD {
        Access::Read
    } else {
        Access::Control
    };
    if req.uri().path() == api::METRICS_PATH && agent.config().metrics_open {
        return next.run(req).await;
    }
    let header = req.headers().get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
    match agent.config().auth.check(header, need) {
        Ok(()) => next.run(req).await,
        Err(failure) => {
            let peer = req
                .extensions()
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|c| c.0);
            tracing::warn!(method = %req.method(), path = %req.uri().path(), ?peer, reason = %failure, "request refused");
            let (status, kind) = match failure {
                AuthFailure::Missing | AuthFailure::Invalid => (StatusCode::UNAUTHORIZED, ErrorKind::Unauthorized),
                AuthFailure::ReadOnly => (StatusCode::FORBIDDEN, ErrorKind::Forbidden),
            };
            let detail = match failure {
                AuthFailure::Missing => "send Authorization: Bearer <token>",
                AuthFailure::Invalid => "the token is not valid for this agent",
                AuthFailure::ReadOnly => "the read-only token may only GET; use the control token to change caps",
            };
            ApiError::new(status, kind, detail).into_response()
        }
    }
}

/// The agent's routes, token-checked. Serve it with [`serve`], or call it in tests through
/// `tower::ServiceExt::oneshot`.
pub fn router(agent: &Agent) -> Router {
    Router::new()
        .route("/v1/gpus", get(gpus))
        .route("/v1/health", get(health))
        .route("/v1/leases/{id}", put(put_lease).delete(delete_lease))
        .route("/v1/leases/{id}/renew", post(renew_lease))
        .route("/v1/jobs/{job_id}/start", post(job_start))
        .route("/v1/jobs/{job_id}/end", post(job_end))
        .route(api::METRICS_PATH, get(metrics))
        .route_layer(middleware::from_fn_with_state(agent.clone(), authorize))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(agent.clone())
}

/// Start the watchdog: every `watchdog_period` it expires leases (the dead-man switch),
/// retries failed restores and corrects drift. A tokio task, no OS thread; it skips its pass
/// while the agent holds nothing. Abort the handle to stop it.
pub fn spawn_watchdog(agent: &Agent) -> JoinHandle<()> {
    let agent = agent.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(agent.config().watchdog_period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if agent.is_idle() {
                continue;
            }
            let a = agent.clone();
            match tokio::task::spawn_blocking(move || a.tick()).await {
                Ok(report) if !report.failed.is_empty() => {
                    tracing::warn!(failed = ?report.failed, "watchdog could not set some GPUs; retrying next tick");
                }
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "watchdog pass panicked"),
            }
        }
    })
}

/// Serve `agent` on `listener` until `shutdown` resolves, with its watchdog running.
///
/// Shutdown does **not** restore caps: a restarted agent must find them in force (it re-applies
/// them from the state file anyway), and only a lease's expiry or deletion ends a cap.
pub async fn serve(
    agent: Agent,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let watchdog = spawn_watchdog(&agent);
    let app = router(&agent).into_make_service_with_connect_info::<SocketAddr>();
    let result = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
    watchdog.abort();
    result
}

/// How long a client may take to complete the TLS handshake. Without a limit a client that
/// connects and stays silent would hold a task and a connection slot forever.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most connections [`serve_tls`] handles at once (handshaking or serving). Beyond it, new
/// connections wait in the kernel's accept queue instead of exhausting memory or file handles.
pub const MAX_TLS_CONNECTIONS: usize = 1024;

/// How long [`serve_tls`] lets in-flight requests finish after `shutdown` resolves before it
/// drops the remaining connections, so that a stuck client cannot delay a restart.
pub const TLS_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

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

/// One accepted TCP connection: TLS handshake (bounded by [`TLS_HANDSHAKE_TIMEOUT`], abandoned
/// at shutdown), then HTTP/1.1 until the client closes or a graceful shutdown ends it.
async fn serve_tls_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    app: Router,
    watcher: hyper_util::server::graceful::Watcher,
    mut stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
    let stream = tokio::select! {
        result = handshake => match result {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) if is_certificate_refusal(&e) => {
                tracing::warn!(%peer, error = %e, "TLS handshake failed: client certificate refused");
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed (plain HTTP to the HTTPS port, or a probe?)");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, timeout_s = TLS_HANDSHAKE_TIMEOUT.as_secs(), "TLS handshake timed out");
                return;
            }
        },
        _ = stop.wait_for(|stopping| *stopping) => return,
    };
    // Handlers read the peer address (refusal logs) from `ConnectInfo`, as under `serve`.
    let service = tower::ServiceExt::map_request(app, move |mut req: Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        req
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .serve_connection(
            hyper_util::rt::TokioIo::new(stream),
            hyper_util::service::TowerToHyperService::new(service),
        );
    if let Err(e) = watcher.watch(connection).await {
        tracing::debug!(%peer, error = %e, "HTTPS connection ended with an error");
    }
}

/// Serve `agent` over TLS on `listener` until `shutdown` resolves, with its watchdog running:
/// [`serve`] for networks where a bearer token must not travel in clear text.
///
/// `tls` comes from [`crate::tls::server_config`]; with a client CA there, only clients with a
/// certificate from that CA get past the handshake, and the token is checked on top. A failed
/// or slow handshake (plain HTTP to this port, a refused client certificate, silence for
/// [`TLS_HANDSHAKE_TIMEOUT`]) is logged with the peer address and closes that connection only;
/// the server keeps serving. At most [`MAX_TLS_CONNECTIONS`] connections are handled at once.
///
/// When `shutdown` resolves the listener is closed, pending handshakes are dropped, and requests
/// in flight get up to [`TLS_SHUTDOWN_GRACE`] to finish. Like [`serve`], shutdown does **not**
/// restore caps. It returns `Ok(())` once shut down; the `Result` mirrors [`serve`]. Accept
/// errors (out of file handles, …) are logged and retried after a second, and per-connection
/// errors are logged, so that neither stops the agent while it may hold caps.
pub async fn serve_tls(
    agent: Agent,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let watchdog = spawn_watchdog(&agent);
    let app = router(&agent);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(MAX_TLS_CONNECTIONS));
    let mut tasks = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    // Warn once per episode of saturation, not once per waiting connection.
    let mut saturated = false;
    loop {
        // Reap finished connection tasks so the set only holds live ones.
        while tasks.try_join_next().is_some() {}
        let permit = match Arc::clone(&slots).try_acquire_owned() {
            Ok(p) => {
                saturated = false;
                p
            }
            Err(_) => {
                if !saturated {
                    saturated = true;
                    tracing::warn!(
                        limit = MAX_TLS_CONNECTIONS,
                        "connection limit reached; new connections wait"
                    );
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    p = Arc::clone(&slots).acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break, // never closed; be safe
                    },
                }
            }
        };
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // E.g. out of file handles: wait instead of spinning; the server recovers.
                    tracing::error!(error = %e, "cannot accept connections; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        tasks.spawn(serve_tls_connection(
            tcp,
            peer,
            acceptor.clone(),
            app.clone(),
            graceful.watcher(),
            stop_rx.clone(),
            permit,
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    if tokio::time::timeout(TLS_SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_s = TLS_SHUTDOWN_GRACE.as_secs(),
            "connections still open after the shutdown grace period; closing them"
        );
    }
    tasks.shutdown().await;
    watchdog.abort();
    Ok(())
}

impl Agent {
    /// The agent's [`Router`] (see [`router`]).
    pub fn router(&self) -> Router {
        router(self)
    }

    /// Serve until `shutdown` resolves (see [`serve`]).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        serve(self, listener, shutdown).await
    }

    /// Serve over TLS until `shutdown` resolves (see [`serve_tls`]); build `tls` with
    /// [`crate::tls::server_config`].
    pub async fn serve_tls(
        self,
        listener: TcpListener,
        tls: Arc<rustls::ServerConfig>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        serve_tls(self, listener, tls, shutdown).await
    }
}
