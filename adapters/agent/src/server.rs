//! HTTP: the axum [`Router`] for an [`Agent`], its error answers, bearer-token checks, and
//! [`serve`] (plain HTTP) or [`serve_tls`] (HTTPS, optionally mutual TLS), which run the router
//! and the watchdog until a shutdown future resolves.
//!
//! Handlers parse bodies themselves (not with axum's `Json` extractor) so that every refusal is
//! a JSON [`ErrorBody`] with status 400, and so that nothing reaches the lease book before the
//! token check and the body check have passed: a refused request changes nothing.

use crate::agent::Agent;
use crate::api::{self, ErrorBody, ErrorKind, JobRequest, RenewRequest, ThroughputAccepted, ThroughputReport};
use crate::auth::{Access, AuthFailure};
use crate::lease::LeaseError;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

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
                fence_epoch: None,
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
            LeaseError::Fenced { highest, .. } => {
                let mut err = Self::new(StatusCode::CONFLICT, ErrorKind::Fenced, detail);
                err.body.fence_epoch = Some(highest);
                err
            }
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
        // A retryable refusal (the lease book could not be persisted) says when to retry.
        if self.status == StatusCode::SERVICE_UNAVAILABLE || self.status == StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
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

/// `GET /healthz`: liveness, without a token (systemd, Kubernetes and load balancers probe
/// without credentials). It says only that the agent answers, nothing about leases or GPUs.
async fn liveness() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: readiness, without a token: 200 when the start-up self-test passed (caps
/// work), 503 with the reason otherwise. Leases, host name and GPUs stay behind the token in
/// `GET /v1/health`.
async fn readiness(State(agent): State<Agent>) -> Response {
    match &agent.readiness() {
        Ok(()) => (StatusCode::OK, Json(serde_json::json!({"ready": true}))).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"ready": false, "not_ready_reason": reason})),
        )
            .into_response(),
    }
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
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "lease")?;
    let epoch = epoch(&headers)?;
    let bytes = body_bytes(body)?;
    let resp = blocking(move || agent.put_lease_json(&id, &bytes, epoch)).await??;
    Ok(Json(resp).into_response())
}

async fn renew_lease(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "lease")?;
    let epoch = epoch(&headers)?;
    let req: RenewRequest = parse_json(body)?;
    let resp = blocking(move || agent.renew_lease(&id, &req, epoch)).await??;
    Ok(Json(resp).into_response())
}

async fn delete_lease(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = path_id(path, "lease")?;
    let epoch = epoch(&headers)?;
    let resp = blocking(move || agent.delete_lease(&id, epoch)).await??;
    Ok(Json(resp).into_response())
}

async fn fence(State(agent): State<Agent>, headers: HeaderMap) -> Result<Response, ApiError> {
    let epoch = epoch(&headers)?;
    let resp = blocking(move || agent.fence(epoch)).await??;
    Ok(Json(resp).into_response())
}

async fn job_start(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "job")?;
    let epoch = epoch(&headers)?;
    let req: JobRequest = parse_json(body)?;
    let resp = blocking(move || agent.job_start(&id, &req, epoch)).await??;
    Ok(Json(resp).into_response())
}

async fn job_end(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "job")?;
    let epoch = epoch(&headers)?;
    let req: JobRequest = parse_json(body)?;
    let resp = blocking(move || agent.job_end(&id, &req, epoch)).await??;
    Ok(Json(resp).into_response())
}

/// `POST /v1/jobs/{job_id}/throughput`. Authorised here, not by [`authorize`], because the token
/// is checked against the job id *as decoded* from the path: a job token is good for one job.
async fn job_throughput_report(
    State(agent): State<Agent>,
    path: Result<Path<String>, PathRejection>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = path_id(path, "job")?;
    let header = headers.get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
    if let Err(failure) = agent.config().auth.check_job(header, &id) {
        tracing::warn!(job = %id, reason = %failure, "throughput report refused: token");
        return Err(refused(failure));
    }
    let report: ThroughputReport = parse_json(body)?;
    match agent.report_throughput(&id, &report) {
        Ok(tokens_per_s) => Ok(Json(ThroughputAccepted {
            job_id: id,
            tokens_per_s,
        })
        .into_response()),
        Err(refusal) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::ImplausibleThroughput,
            format!("{}: {refusal}", refusal.code()),
        )),
    }
}

async fn job_throughput(State(agent): State<Agent>) -> Result<Response, ApiError> {
    Ok(Json(agent.job_throughput()).into_response())
}

/// The answer to a refused token.
fn refused(failure: AuthFailure) -> ApiError {
    let (status, kind) = match failure {
        AuthFailure::Missing | AuthFailure::Invalid => (StatusCode::UNAUTHORIZED, ErrorKind::Unauthorized),
        AuthFailure::ReadOnly | AuthFailure::WrongJob => (StatusCode::FORBIDDEN, ErrorKind::Forbidden),
    };
    let detail = match failure {
        AuthFailure::Missing => "send Authorization: Bearer <token>",
        AuthFailure::Invalid => "the token is not valid for this agent",
        AuthFailure::ReadOnly => "the read-only token may only GET; use the control token to change caps",
        AuthFailure::WrongJob => {
            "a job token may only POST its own job's throughput (/v1/jobs/{job_id}/throughput); get yours with `flexgate-agent job-token JOB_ID`"
        }
    };
    ApiError::new(status, kind, detail)
}

/// The gateway epoch a command is sent under ([`api::EPOCH_HEADER`]; 0 when absent, as from a
/// single gateway). A header that is not a non-negative integer is refused, not read as 0.
fn epoch(headers: &HeaderMap) -> Result<u64, ApiError> {
    let Some(value) = headers.get(api::EPOCH_HEADER) else {
        return Ok(0);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "header {} must be the gateway's epoch, a non-negative integer",
                api::EPOCH_HEADER
            ))
        })
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorKind::NotFound,
        "no such endpoint; see GET /v1/health, /v1/gpus, /v1/jobs/throughput, /metrics, /healthz, /readyz",
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
            refused(failure).into_response()
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
        .route(api::FENCE_PATH, post(fence))
        .route("/v1/jobs/{job_id}/start", post(job_start))
        .route("/v1/jobs/{job_id}/end", post(job_end))
        .route(api::JOB_THROUGHPUT_PATH, get(job_throughput))
        .route(api::METRICS_PATH, get(metrics))
        .route_layer(middleware::from_fn_with_state(agent.clone(), authorize))
        // After the layer: a job's report is authorised by its own job token, in the handler;
        // the probes need none.
        .route("/v1/jobs/{job_id}/throughput", post(job_throughput_report))
        .route(api::LIVENESS_PATH, get(liveness))
        .route(api::READINESS_PATH, get(readiness))
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
        let mut last_check = tokio::time::Instant::now();
        loop {
            interval.tick().await;
            if last_check.elapsed() >= agent.config().readiness_every {
                last_check = tokio::time::Instant::now();
                let a = agent.clone();
                if let Err(e) = tokio::task::spawn_blocking(move || a.recheck()).await {
                    tracing::error!(error = %e, "readiness check panicked");
                }
            }
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

/// How long a client may take to send a request's headers, and the longest idle wait between
/// requests on a keep-alive connection. Longer than the gateway's telemetry and renewal periods,
/// so its pooled connections are reused rather than cut; short enough that a silent client does
/// not hold a connection slot for long.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a client may take to complete the TLS handshake. Without a limit a client that
/// connects and stays silent would hold a task and a connection slot forever.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most connections [`serve`] and [`serve_tls`] hold at once (handshaking or serving), lowered
/// to fit the process's file-handle limit. Beyond it a new plain connection is answered `503`
/// and an HTTPS one is closed before its handshake, instead of exhausting memory or file
/// handles.
pub const MAX_CONNECTIONS: usize = 1024;

/// How long [`serve`] and [`serve_tls`] let in-flight requests finish after `shutdown`
/// resolves before they drop the remaining connections, so that a stuck client cannot delay a
/// restart.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The agent's accept loop (shared with the gateway's API, `flexgate-httpserve`).
fn server(tls: Option<Arc<rustls::ServerConfig>>) -> flexgate_httpserve::Server {
    let limits = flexgate_httpserve::Limits {
        header_timeout: HEADER_TIMEOUT,
        max_connections: MAX_CONNECTIONS,
        max_per_peer: MAX_CONNECTIONS,
    }
    .within_handle_limit(flexgate_httpserve::open_files_limit(), "the agent's connection limit");
    let mut server = flexgate_httpserve::Server::new("agent", limits);
    server.tls = tls.map(|config| flexgate_httpserve::Tls {
        config,
        handshake_timeout: TLS_HANDSHAKE_TIMEOUT,
    });
    server.shutdown_grace = SHUTDOWN_GRACE;
    server.accept_retry = Duration::from_secs(1);
    server.refusal_body = |message| {
        serde_json::to_string(&ErrorBody {
            error: ErrorKind::Unavailable,
            detail: message.to_string(),
            held_generation: None,
            fence_epoch: None,
        })
        .unwrap_or_default()
    };
    server
}

/// Serve `agent` on `listener` until `shutdown` resolves, with its watchdog running.
///
/// A connection that sends no complete request head within [`HEADER_TIMEOUT`] (or stays idle
/// that long between requests) is closed; at most [`MAX_CONNECTIONS`] are held at once. Accept
/// errors (out of file handles, …) are logged and retried after a second, so that they never
/// stop the agent while it may hold caps.
///
/// Shutdown does **not** restore caps: a restarted agent must find them in force (it re-applies
/// them from the state file anyway), and only a lease's expiry or deletion ends a cap. Returns
/// `Ok(())` once shut down.
pub async fn serve(
    agent: Agent,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let watchdog = spawn_watchdog(&agent);
    server(None).serve(listener, router(&agent), shutdown).await;
    watchdog.abort();
    Ok(())
}

/// Serve `agent` over TLS on `listener` until `shutdown` resolves, with its watchdog running:
/// [`serve`] for networks where a bearer token must not travel in clear text.
///
/// `tls` comes from [`crate::tls::server_config`]; with a client CA there, only clients with a
/// certificate from that CA get past the handshake, and the token is checked on top. A failed
/// or slow handshake (plain HTTP to this port, a refused client certificate, silence for
/// [`TLS_HANDSHAKE_TIMEOUT`]) is logged with the peer address and closes that connection only;
/// the server keeps serving. The limits and deadlines of [`serve`] apply.
///
/// When `shutdown` resolves the listener is closed, pending handshakes are dropped, and requests
/// in flight get up to [`SHUTDOWN_GRACE`] to finish. Like [`serve`], shutdown does **not**
/// restore caps.
pub async fn serve_tls(
    agent: Agent,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let watchdog = spawn_watchdog(&agent);
    server(Some(tls)).serve(listener, router(&agent), shutdown).await;
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

#[cfg(test)]
mod tests {
    use super::ApiError;
    use crate::lease::{JournalError, LeaseError};
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;

    #[test]
    fn a_refusal_to_retry_says_when_and_a_final_one_does_not() {
        let unavailable = ApiError::from(LeaseError::Persist(JournalError("disk full".into()))).into_response();
        assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(unavailable.headers()[header::RETRY_AFTER], "1");
        let bad = ApiError::bad_request("no").into_response();
        assert!(bad.headers().get(header::RETRY_AFTER).is_none());
    }
}
