//! A notification as operators see it: what was told, when, to whom, and what became of it.

use super::time::{rfc3339, rfc3339_opt};
use crate::store::NotificationRecord;
use serde::Serialize;
use serde_json::Value;

/// One outbox row, for `GET /v1/notifications` and the console.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct NotificationView {
    /// The `webhook-id`.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub workflow_id: String,
    pub revision: u64,
    /// `pending`, `delivered`, `suppressed` or `failed`.
    pub state: String,
    /// Delivery attempts made (a hold or a suppression makes none).
    pub attempts: u32,
    pub created_at: String,
    /// When a pending notification is tried next.
    pub next_attempt_at: Option<String>,
    pub finished_at: Option<String>,
    /// The endpoints that answered 2xx.
    pub delivered_to: Vec<String>,
    /// Why the last attempt failed, or why it was suppressed or held.
    pub last_error: Option<String>,
    /// The body as sent.
    pub body: Value,
}

impl From<NotificationRecord> for NotificationView {
    fn from(n: NotificationRecord) -> Self {
        Self {
            id: n.id,
            kind: n.kind,
            workflow_id: n.workflow_id.0,
            revision: n.revision,
            next_attempt_at: (n.state == "pending").then(|| rfc3339(n.next_at)),
            state: n.state,
            attempts: n.attempts,
            created_at: rfc3339(n.created_at),
            finished_at: rfc3339_opt(n.finished_at),
            delivered_to: n.delivered_to,
            last_error: n.last_error,
            body: serde_json::from_str(&n.body).unwrap_or(Value::String(n.body)),
        }
    }
}
