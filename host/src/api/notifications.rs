//! `GET /v1/notifications?workflow_id=&state=` (operators): the outbox, oldest first,
//! with each notification's state and delivery attempts.

use super::Ctx;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode};
use super::pagination::{Cursor, Page, page_request};
use super::workflows::{Params, params};
use crate::access::Role;
use crate::intent::WorkflowId;
use crate::store::NotificationFilter;
use crate::view::NotificationView;
use axum::Json;
use axum::extract::State;

const STATES: [&str; 4] = ["pending", "delivered", "suppressed", "failed"];

pub(super) async fn list<S: crate::store::NotificationStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    query: Params,
) -> ApiResult<Json<Page<NotificationView>>> {
    if !caller.has(Role::Operator) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "notifications are read by operators; use an operator token",
        ));
    }
    let params = params(query)?;
    let page = page_request(
        params.get("limit").map(String::as_str),
        params.get("cursor").map(String::as_str),
        |c| match c {
            Cursor::Notification(seq) => Some(seq),
            _ => None,
        },
    )?;
    let state = match params.get("state").filter(|s| !s.is_empty()) {
        None => None,
        Some(s) if STATES.contains(&s.as_str()) => Some(s.clone()),
        Some(s) => {
            return Err(ApiError::invalid_parameter(
                "state",
                s,
                &format!("it must be one of {}", STATES.join(", ")),
            ));
        }
    };
    let rows = ctx
        .store
        .notifications(NotificationFilter {
            workflow_id: params
                .get("workflow_id")
                .filter(|w| !w.is_empty())
                .map(|w| WorkflowId(w.clone())),
            state,
            after: page.after,
            limit: page.limit + 1,
        })
        .await?;
    Ok(Json(Page::from_probe(
        rows,
        page.limit,
        |n| Cursor::Notification(n.seq),
        NotificationView::from,
    )))
}
