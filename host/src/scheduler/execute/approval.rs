//! The approval path of an attempt: an approval step's attempt computes the consequence
//! the steps it approves would send (from the workflow input and the receipts that stand)
//! and asks a person for consent; the step then waits, holding no lease, until a person
//! decides or the approval expires. And the check at checkpoint 2 of an approved adapter
//! step: what it is about to send must be what was approved.

use super::*;
use crate::store::AskApproval;
use crate::workflow::WorkflowDef;

/// Why an approved step is blocked when its input is not the one approved.
pub const APPROVAL_MISMATCH: &str = "approval_mismatch";

/// What a person sees an approval step ask about before it is asked (its summary's
/// references are read only then): "Needs your approval: Deliver document". Once asked,
/// the step's note says it with the references read.
pub fn approval_note(def: &WorkflowDef, approval: &StepDef, asked: Option<&str>) -> String {
    if let Some(note) = asked.filter(|n| n.starts_with("Needs your approval")) {
        return note.to_string();
    }
    let labels: Vec<&str> = approval
        .approval
        .iter()
        .flat_map(|a| &a.approves)
        .filter_map(|id| def.step(id.as_str()).map(|s| s.label.as_str()))
        .collect();
    format!("Needs your approval: {}", labels.join(", "))
}

impl<S> Scheduler<S>
where
    S: ExecutorStore + DefinitionStore + crate::store::ComponentStore + Clone + 'static,
{
    /// Asks for the approval of `step`'s consequence, recorded under the claim's lease.
    /// Returns an ending only when the question cannot be asked (the consequence cannot be
    /// built: the step fails, as a handler whose input cannot be mapped does); `None` once
    /// the question is recorded, or when the lease was lost.
    pub(super) async fn ask_approval(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        def: &WorkflowDef,
    ) -> Option<Ending> {
        let context = &claimed.context;
        let receipts = |id: &str| {
            context
                .receipts
                .iter()
                .find(|r| r.step == id)
                .map(|r| ReceiptView {
                    output: r.output.clone(),
                    external_reference: r.external_reference.clone(),
                })
        };
        let consequence = def.consequence(step.id.as_str(), &context.input, receipts);
        let consequence = match consequence {
            Ok(c) => c,
            Err(e) => {
                return Some(Ending::cannot_start(
                    claimed,
                    step,
                    StepState::FailedTerminal,
                    e,
                ));
            }
        };
        let now = self.clock.now_ms();
        let waits = step
            .approval
            .as_ref()
            .and_then(|a| a.expires)
            .map_or(Millis::MAX, |d| now.saturating_add(d.as_millis() as u64));
        let expires_at = waits.min(claimed.deadline_at);
        let note = format!(
            "Needs your approval: {}",
            def.approval_summary(step.id.as_str(), &context.input, receipts)
        );
        let event = NewEvent::step(
            EventKind::Action,
            step.id.as_str(),
            Some(&claimed.attempt_id),
            format!(
                "{note} (consequence {}; expires at {})",
                consequence.digest,
                crate::intent::rfc3339(expires_at)
            ),
        )
        .with_data(serde_json::json!({
            "approval": {
                "digest": consequence.digest,
                "expires_at": crate::intent::rfc3339(expires_at),
                "inputs": consequence.inputs,
            }
        }));
        let request = AskApproval {
            fence: claimed.fence.clone(),
            attempt_id: claimed.attempt_id.clone(),
            digest: consequence.digest,
            consequence: consequence.document,
            expires_at,
            note,
            events: vec![event],
            now,
        };
        match self.store.ask_approval(request).await {
            Ok(()) => {}
            Err(StoreError::LeaseLost { .. }) => {
                tracing::warn!(workflow = %claimed.fence.workflow_id, step = %claimed.fence.step, "lease lost before the approval could be asked; recovery asks again");
            }
            Err(e) => {
                tracing::error!(workflow = %claimed.fence.workflow_id, step = %claimed.fence.step, "recording the approval's question failed; it is asked again once the lease lapses: {e}");
            }
        }
        self.progress.advance_workflow(&claimed.fence.workflow_id.0);
        None
    }

    /// Checkpoint 2 of an adapter step that `approval` approves: the input digest it is
    /// about to send must be the one the approval receipt recorded for it; else the step
    /// is blocked `approval_mismatch` and nothing is sent.
    pub(super) fn approval_mismatch(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        approval: &StepDef,
        digest: &str,
    ) -> Option<Ending> {
        let receipt = claimed
            .context
            .receipts
            .iter()
            .find(|r| r.step == approval.id.as_str());
        let approved = receipt
            .and_then(|r| r.output.get("inputs"))
            .and_then(|inputs| inputs.get(step.id.as_str()))
            .and_then(serde_json::Value::as_str);
        if approved == Some(digest) {
            return None;
        }
        let message = match (receipt, approved) {
            (None, _) => format!(
                "there is no approval receipt of `{}`, so nothing approved what {} would send; nothing was sent",
                approval.id, step.label
            ),
            (Some(r), approved) => format!(
                "the input {} would send ({}) is not the one approved in receipt {} ({}); nothing was sent. Revise the workflow so the consequence is asked again, or resolve the step",
                step.label,
                digest,
                r.receipt_id,
                approved.unwrap_or("none for this step")
            ),
        };
        Some(self.blocked_for(claimed, step, APPROVAL_MISMATCH, message))
    }
}
