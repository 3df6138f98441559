//! A new intent's record as admitted, and whether a key is still live.

use crate::intent::{Millis, WorkflowState};
use crate::store::{AdmitRequest, KeyRecord, NewWorkflow, WorkflowRecord};

/// The record of a workflow just admitted.
pub(crate) fn created(req: &AdmitRequest, new: &NewWorkflow) -> WorkflowRecord {
    WorkflowRecord {
        workflow_id: new.workflow_id.clone(),
        workflow: req.scope.workflow.clone(),
        definition_version: new.definition_version,
        subject: req.scope.subject.clone(),
        idempotency_key: req.scope.key.clone(),
        input: req.input.text.clone(),
        input_digest: req.input.digest.clone(),
        state: WorkflowState::Running,
        created_at: req.now,
        ended_at: None,
        deadline_at: new.deadline_at,
        attempts_used: 0,
        external_calls_used: 0,
        runtime_used_ms: 0,
        cost_used: 0,
        recovery_queries_used: 0,
        budget_added: Default::default(),
        revision: new.events.len() as u64,
        input_revision: 1,
        replaces: new.replaces.clone(),
        replaced_by: None,
        cancelled: false,
        policy_at_admission: new.policy_version,
        policy_current: new.policy_version,
        deadline_warned_at: None,
        migrated_from: None,
    }
}

/// A key that still reserves its scope at `now` (it has not expired).
pub(crate) fn live(key: Option<KeyRecord>, now: Millis) -> Option<KeyRecord> {
    key.filter(|k| k.expires_at.is_none_or(|e| e > now))
}
