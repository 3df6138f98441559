//! The authenticated caller of an API request (see [`crate::access`] for tokens and
//! roles): an unknown or missing token is `401 unauthorized`.

use super::Context;
use super::error::{ApiError, ErrorCode};
use crate::access::{Principal, Role};
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
        let client = parts
            .extensions
            .get::<axum::extract::ConnectInfo<crate::access::ClientAddr>>()
            .map(|c| c.0.0.ip());
        if let Some(client) = client
            && let Err(wait) = ctx.auth.throttle.check(client)
        {
            return Err(ApiError::new(
                ErrorCode::TooManyRequests,
                format!(
                    "too many failed authentications from this client; try again in {} s with a valid token",
                    wait.as_secs().max(1)
                ),
            ));
        }
        ctx.auth
            .authenticate(&parts.headers)
            .map(Caller)
            .map_err(|e| {
                if let Some(client) = client {
                    ctx.auth.throttle.failed(client);
                }
                ApiError::new(ErrorCode::Unauthorized, e.0)
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
