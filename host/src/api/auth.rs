//! The authenticated caller of an API request (see [`crate::access`] for tokens and
//! roles): an unknown or missing token is `401 unauthorized`.

use super::Context;
use super::error::{ApiError, ErrorCode};
use crate::access::Principal;
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
        ctx.auth
            .authenticate(&parts.headers)
            .map(Caller)
            .map_err(|e| ApiError::new(ErrorCode::Unauthorized, e.0))
    }
}
