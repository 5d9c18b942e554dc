//! The 2.0b push endpoint: a VTN that pushes POSTs its messages to
//! `/OpenADR2/Simple/2.0b/{service}`; they are decoded here and handed to the VEN task.
//!
//! The route needs a bearer token (`openadr2b.push_token`). OpenADR's own authentication of a
//! pushing VTN is its TLS client certificate; the gateway's listener is plain HTTP, so
//! deployments terminate mutual TLS at a reverse proxy that adds the token.

use super::ven2b::Pushed;
use crate::grid::http::problem::Problem;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flexgate_openadr::oadr2b::{Message, decode};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

/// Largest pushed message accepted.
pub const MAX_PUSH_BYTES: usize = 4 * 1024 * 1024;

#[derive(Clone)]
struct Push {
    token_digest: [u8; 32],
    to_ven: mpsc::Sender<Pushed>,
}

/// The push routes, for merging into the API router.
pub fn router(token: &str, to_ven: mpsc::Sender<Pushed>) -> Router {
    let push = Push {
        token_digest: Sha256::digest(token.as_bytes()).into(),
        to_ven,
    };
    Router::new()
        .route("/OpenADR2/Simple/2.0b/{service}", axum::routing::post(receive))
        .layer(DefaultBodyLimit::max(MAX_PUSH_BYTES))
        .with_state(push)
}

fn authorized(push: &Push, headers: &HeaderMap) -> bool {
    let Some(presented) = crate::grid::http::bearer_token(headers) else {
        return false;
    };
    let digest: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
    digest
        .iter()
        .zip(push.token_digest.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// The services a VTN pushes to (OpenADR 2.0b profile, §8: the VEN's endpoints for messages
/// the VTN initiates).
pub const PUSH_SERVICES: [&str; 3] = ["EiEvent", "EiReport", "EiRegisterParty"];

/// The service a message a VTN initiates belongs to; `None` for messages that are not pushed
/// by a VTN (answers, VEN → VTN messages).
fn pushed_service(message: &Message) -> Option<&'static str> {
    match message {
        Message::DistributeEvent(_) => Some("EiEvent"),
        Message::RegisterReport(_) | Message::CreateReport(_) | Message::CancelReport(_) => Some("EiReport"),
        Message::RequestReregistration(_) | Message::CancelPartyRegistration(_) => Some("EiRegisterParty"),
        _ => None,
    }
}

async fn receive(State(push): State<Push>, Path(service): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    if !PUSH_SERVICES.contains(&service.as_str()) {
        return Problem::new(
            StatusCode::NOT_FOUND,
            format!(
                "no OpenADR 2.0b push service {:?}: a VTN pushes to {}",
                service.chars().take(64).collect::<String>(),
                PUSH_SERVICES.join(", ")
            ),
        )
        .into_response();
    }
    if !authorized(&push, &headers) {
        return (
            [(header::WWW_AUTHENTICATE, "Bearer")],
            Problem::new(
                StatusCode::UNAUTHORIZED,
                "push needs Authorization: Bearer <openadr2b.push_token>",
            ),
        )
            .into_response();
    }
    let message = match decode(&body) {
        Ok(m) => m,
        Err(e) => {
            return Problem::new(StatusCode::BAD_REQUEST, format!("not an OpenADR 2.0b message: {e}")).into_response();
        }
    };
    match pushed_service(&message) {
        Some(belongs) if belongs == service => {}
        Some(belongs) => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("{} belongs to the {belongs} service, not {service}", message.name()),
            )
            .into_response();
        }
        None => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("{} is not a message a VTN pushes to a VEN", message.name()),
            )
            .into_response();
        }
    }
    // Accepted for processing only once the VEN task has it; a full queue is back-pressure.
    match push.to_ven.try_send(Pushed {
        message,
        raw: body.to_vec(),
    }) {
        Ok(()) => StatusCode::OK.into_response(),
        Err(mpsc::error::TrySendError::Full(_)) => {
            Problem::new(StatusCode::SERVICE_UNAVAILABLE, "VEN busy; retry").into_response()
        }
        Err(mpsc::error::TrySendError::Closed(_)) => {
            Problem::new(StatusCode::SERVICE_UNAVAILABLE, "VEN stopped").into_response()
        }
    }
}
