//! The authenticated caller of an API request (see [`crate::access`] for tokens and
//! roles): an unknown or missing token is `401 unauthorized`.

use super::Context;
use super::error::{ApiError, ErrorCode};
use crate::access::{AuthFailure, Principal, Role};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::sync::Arc;

/// The authenticated caller of a request, as a handler argument. It runs first, so an
/// unauthenticated request is refused before anything else is looked at.
#[derive(Debug, Clone)]
pub struct Caller(pub Principal);

impl<S: Send + Sync> FromRequestParts<Arc<Context<S>>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        ctx: &Arc<Context<S>>,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<crate::access::ClientAddr>>()
            .map(|c| c.0.0.ip());
        // Authentication first: a valid token is answered whatever others sent from the
        // same address; only failures count, and only they are throttled.
        ctx.auth
            .authenticate_from(&parts.headers, peer)
            .map(Caller)
            .map_err(|failure| match failure {
                AuthFailure::Refused(e) => ApiError::new(ErrorCode::Unauthorized, e.0),
                AuthFailure::Throttled(wait) => ApiError::new(
                    ErrorCode::TooManyRequests,
                    format!(
                        "too many failed authentications from this client; try again in {} s with a valid token",
                        wait.as_secs().max(1)
                    ),
                ),
            })
    }
}

/// `403` unless the caller holds one of `any_of`; `what` names the request.
pub(super) fn require(caller: &Principal, any_of: &[Role], what: &str) -> Result<(), ApiError> {
    if any_of.iter().any(|r| caller.has(*r)) {
        return Ok(());
    }
    let names: Vec<&str> = any_of.iter().map(|r| r.as_str()).collect();
    Err(ApiError::new(
        ErrorCode::Forbidden,
        format!(
            "{what} needs the {} role; use a token that holds it",
            names.join(" or ")
        ),
    ))
}
