//! HTTP: the axum [`Router`] for an [`Agent`], its error answers, bearer-token checks, and
//! [`serve`], which runs the router and the watchdog until a shutdown future resolves.
//!
//! Handlers parse bodies themselves (not with axum's `Json` extractor) so that every refusal is
//! a JSON [`ErrorBody`] with status 400, and so that nothing reaches the lease book before the
//! token check and the body check have passed: a refused request changes nothing.

use crate::agent::Agent;
use crate::api::{self, ErrorBody, ErrorKind, JobRequest, LeaseRequest, RenewRequest};
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
    let req: LeaseRequest = parse_json(body)?;
    let resp = blocking(move || agent.put_lease(&id, &req)).await??;
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
}
