//! A cancellation, asked by the workflow's owner or an operator: an intent of its own with
//! its id, author, reason and time, recorded under its idempotency key. What it does to the
//! steps is the course's ([`crate::course`]), applied by the store in the same transaction.

use super::{DeskError, InvalidOrder, required};
use crate::access::Principal;
use crate::context::Context;
use crate::intent::{CancellationId, canonicalize};
use crate::store::{
    ActionAnswer, ActionScope, CancelAnswer, CancelRequest, CancellationRecord, StoreError,
    StoredCancel, StoredRefusal,
};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

/// The action name a cancellation's key is scoped by.
pub const CANCEL: &str = "cancel";

/// A cancel request's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelOrder {
    pub reason: String,
    /// On a completed workflow: reverse its effects (a withdrawal).
    pub withdraw: bool,
}

impl CancelOrder {
    /// The reason is required: a cancellation says why.
    pub fn new(reason: Option<&str>, withdraw: bool) -> Result<Self, InvalidOrder> {
        Ok(Self {
            reason: required("reason", reason, "say why the request is cancelled")?,
            withdraw,
        })
    }

    fn to_json(&self) -> serde_json::Value {
        json!({"reason": self.reason, "withdraw": self.withdraw})
    }
}

/// What a cancel request came to; the API and the console render it.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelResult {
    /// This request created the cancellation.
    Created(CancellationRecord),
    /// The workflow already had one (pressing twice acts once).
    Existing(CancellationRecord),
    /// Refused; nothing changed.
    Refused(StoredRefusal),
}

/// Cancels the workflow `workflow_id` for `caller` (its owner or an operator) under `key`.
pub async fn cancel<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::CourseStore,
>(
    ctx: &Arc<Context<S>>,
    caller: &Principal,
    workflow_id: &str,
    order: CancelOrder,
    key: String,
) -> Result<CancelResult, DeskError> {
    let record = super::desk::visible(ctx, caller, workflow_id).await?;
    let digest = canonicalize(&order.to_json())
        .map_err(|e| DeskError::Internal(e.to_string()))?
        .digest;
    let scope = ActionScope {
        subject: caller.subject.clone(),
        workflow_id: record.workflow_id.clone(),
        step: String::new(),
        action: CANCEL.to_string(),
        key,
    };
    let def = super::desk::definition_of(ctx, &record).await?;
    let labels: HashMap<String, String> = def
        .iter()
        .flat_map(|d| d.def.steps.iter())
        .map(|s| (s.id.to_string(), s.label.clone()))
        .collect();
    let now = ctx.clock.now_ms();
    let request = CancelRequest {
        scope: scope.clone(),
        request_digest: digest,
        cancellation_id: CancellationId::new(now),
        reason: order.reason,
        withdraw: order.withdraw,
        labels,
        now,
    };
    let answer = ctx.store.cancel(request).await?;
    // Steps were cancelled and compensations may be ready: wake the scheduler and anyone
    // waiting on the projection.
    ctx.wake.notify_one();
    ctx.progress.advance_workflow(workflow_id);
    match answer {
        CancelAnswer::Created(c) => Ok(CancelResult::Created(c)),
        CancelAnswer::Existing(c) => Ok(CancelResult::Existing(c)),
        CancelAnswer::Refused(r) => Ok(CancelResult::Refused(r)),
        CancelAnswer::KeyConflict => Err(DeskError::KeyConflict(Box::new(scope))),
        CancelAnswer::Replayed(stored) => match stored.answer {
            Some(ActionAnswer::Refused(r)) => Ok(CancelResult::Refused(r)),
            Some(ActionAnswer::Applied(text)) => {
                let stored: StoredCancel = serde_json::from_str(&text).map_err(|e| {
                    DeskError::Store(StoreError::Corrupt(format!(
                        "stored cancellation answer: {e}"
                    )))
                })?;
                Ok(if stored.created {
                    CancelResult::Created(stored.cancellation)
                } else {
                    CancelResult::Existing(stored.cancellation)
                })
            }
            None => Err(DeskError::Store(StoreError::Corrupt(
                "a cancellation key without its answer".into(),
            ))),
        },
    }
}
