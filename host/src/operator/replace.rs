//! A replacement: a correction after a consequential effect is a new request. It creates a
//! new workflow of the same definition for the original's subject, under the key
//! `replacement:<original id>`, linked both ways (`replaces` / `replaced_by`), and, when
//! asked, cancels the original as a cancellation would. A workflow has at most one
//! replacement: another request answers with it.

use super::{CancelOrder, CancelResult, DeskError, InvalidOrder, cancel, required};
use crate::access::Principal;
use crate::context::Context;
use crate::intake::{IntakeRefusal, new_workflow};
use crate::intent::{CanonicalInput, Millis, WorkflowId, canonicalize};
use crate::store::{
    ActionAnswer, ActionScope, AdmitOutcome, AdmitRequest, KeyScope, StoreError, WorkflowRecord,
};
use crate::view::{CancellationView, IntentView};
use serde_json::{Value, json};
use std::sync::Arc;

/// The prefix of the key the host admits a replacement under (and cancels its original
/// with): reserved, so no client can take it first (see [`crate::intent::RESERVED_KEY_PREFIXES`]).
pub const REPLACEMENT_KEY_PREFIX: &str = crate::intent::RESERVED_KEY_PREFIXES[0];

/// The action name a replacement's key is scoped by.
pub const REPLACE: &str = "replace";

/// A replacement request's body.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplaceOrder {
    pub input: Value,
    pub reason: String,
    pub cancel_original: bool,
}

impl ReplaceOrder {
    /// The input must be a JSON object; the reason is required.
    pub fn new(
        input: Option<Value>,
        reason: Option<&str>,
        cancel_original: bool,
    ) -> Result<Self, InvalidOrder> {
        let input = super::input_object(input)?;
        Ok(Self {
            input,
            reason: required("reason", reason, "say why the request is replaced")?,
            cancel_original,
        })
    }
}

/// What a replacement request came to: the new workflow (`created`), or the one there
/// already is, as the intent it is (`IntentView` with `replaces` and, when the original was
/// cancelled, its `cancellation`).
#[derive(Debug, Clone, PartialEq)]
pub struct Replacement {
    pub created: bool,
    pub workflow_id: WorkflowId,
    pub body: Value,
}

/// Replaces workflow `workflow_id` for `caller` (its owner or an operator) under `key`.
pub async fn replace<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::OperatorStore
        + crate::store::AdmissionStore
        + crate::store::CourseStore,
>(
    ctx: &Arc<Context<S>>,
    caller: &Principal,
    workflow_id: &str,
    order: ReplaceOrder,
    key: String,
) -> Result<Replacement, DeskError> {
    let original = super::desk::visible(ctx, caller, workflow_id).await?;
    let digest = canonicalize(&json!({
        "input": order.input,
        "reason": order.reason,
        "cancel_original": order.cancel_original,
    }))
    .map_err(|e| DeskError::Internal(e.to_string()))?
    .digest;
    let scope = ActionScope {
        subject: caller.subject.clone(),
        workflow_id: original.workflow_id.clone(),
        step: String::new(),
        action: REPLACE.into(),
        key,
    };
    // The same key and body answer as before; another body is a conflict.
    if let Some(known) = ctx.store.action(&scope).await? {
        if known.request_digest != digest {
            return Err(DeskError::KeyConflict(Box::new(scope)));
        }
        if let Some(ActionAnswer::Applied(text)) = known.answer {
            return stored(&text);
        }
    }
    let canonical = canonicalize(&order.input).map_err(|e| DeskError::InvalidInput {
        message: format!("{e}; send plain JSON values"),
        details: vec![json!({"pointer": "/input"})],
    })?;
    let derived = KeyScope {
        subject: original.subject.clone(),
        workflow: original.workflow.clone(),
        key: format!("{REPLACEMENT_KEY_PREFIX}{}", original.workflow_id),
    };
    let now = ctx.clock.now_ms();
    let (created, record) = match &original.replaced_by {
        // At most one replacement: another request answers with it.
        Some(existing) => (false, existing_workflow(ctx, existing).await?),
        None => admit_replacement(ctx, &original, &order.input, derived, canonical, now).await?,
    };
    let cancellation = if order.cancel_original {
        let cancel_order = CancelOrder::new(Some(&order.reason), false)
            .map_err(|e| DeskError::Internal(e.message))?;
        let key = format!("{REPLACEMENT_KEY_PREFIX}{}", original.workflow_id);
        Some(
            match cancel(ctx, caller, workflow_id, cancel_order, key).await {
                Ok(CancelResult::Created(c) | CancelResult::Existing(c)) => {
                    serde_json::to_value(CancellationView::new(&c))
                        .map_err(|e| DeskError::Internal(e.to_string()))?
                }
                Ok(CancelResult::Refused(r)) => json!({"refused": r.message}),
                // Another body under the derived key: the original's cancellation was asked
                // for with another reason before; it stands as it is.
                Err(DeskError::KeyConflict(_)) => Value::Null,
                Err(e) => return Err(e),
            },
        )
    } else {
        None
    };
    let mut body = serde_json::to_value(IntentView::new(&record, Some(!created)))
        .map_err(|e| DeskError::Internal(e.to_string()))?;
    body["replaces"] = json!(original.workflow_id);
    if let Some(c) = cancellation {
        body["cancellation"] = c;
    }
    let answer = json!({"created": created, "body": body});
    ctx.store
        .remember(
            scope,
            digest,
            ActionAnswer::Applied(answer.to_string()),
            now,
        )
        .await?;
    Ok(Replacement {
        created,
        workflow_id: record.workflow_id,
        body,
    })
}

async fn existing_workflow<S: crate::store::ReadStore>(
    ctx: &Context<S>,
    id: &WorkflowId,
) -> Result<crate::store::WorkflowRecord, DeskError> {
    ctx.store
        .workflow(id)
        .await?
        .ok_or_else(|| DeskError::Internal(format!("replacement {id} is missing")))
}

fn stored(text: &str) -> Result<Replacement, DeskError> {
    let stored: Value = serde_json::from_str(text).map_err(|e| {
        DeskError::Store(StoreError::Corrupt(format!(
            "stored replacement answer: {e}"
        )))
    })?;
    let body = stored["body"].clone();
    Ok(Replacement {
        created: stored["created"].as_bool().unwrap_or(false),
        workflow_id: WorkflowId(body["workflow_id"].as_str().unwrap_or_default().to_string()),
        body,
    })
}

/// How often a replacement is built again because its definition version was outdated.
const OUTDATED_TRIES: usize = 4;

/// Admits the replacement of `original` under the derived key `scope`; answers whether it
/// was created here and the replacement's record.
async fn admit_replacement<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::AdmissionStore,
>(
    ctx: &Context<S>,
    original: &WorkflowRecord,
    input: &Value,
    scope: KeyScope,
    canonical: CanonicalInput,
    now: Millis,
) -> Result<(bool, WorkflowRecord), DeskError> {
    for _ in 0..OUTDATED_TRIES {
        let new = new_workflow(
            ctx,
            &scope,
            input,
            &canonical,
            now,
            Some(original.workflow_id.clone()),
        )
        .await?
        .map_err(|r| match r {
            IntakeRefusal::UnknownDefinition(m) => DeskError::NotFound(m),
            IntakeRefusal::InvalidInput { message, details } => {
                DeskError::InvalidInput { message, details }
            }
        })?;
        let request = AdmitRequest {
            scope: scope.clone(),
            input: canonical.clone(),
            now,
            create: Some(new),
        };
        return Ok(match ctx.store.admit(request).await? {
            AdmitOutcome::Created(record) => {
                ctx.wake.notify_one();
                (true, record)
            }
            AdmitOutcome::Replayed(record) => (false, record),
            AdmitOutcome::Conflict { workflow_id } => {
                (false, existing_workflow(ctx, &workflow_id).await?)
            }
            AdmitOutcome::KeyFree => {
                return Err(DeskError::Internal(
                    "the store created nothing although an intent was given".into(),
                ));
            }
            // Another host deployed a newer version: build the replacement again on it.
            AdmitOutcome::Outdated => {
                ctx.deployments.forget_newest(&scope.workflow);
                continue;
            }
        });
    }
    Err(StoreError::safe(format!(
        "the definition `{}` kept being redeployed while the replacement was admitted; \
         nothing was created, retry",
        scope.workflow
    ))
    .into())
}
