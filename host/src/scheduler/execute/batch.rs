//! A claimed batch step: its items, read from the workflow as it stands, become rows of
//! their own ([`crate::store::ExecutorStore::expand_batch`]), each an effect intent with its
//! own key, attempts and receipt. The step itself calls nothing.

use super::{Ending, transient};
use crate::intent::{
    AttemptOutcome, EvidenceKind, NewEvent, Provenance, ReceiptId, StepState, canonicalize,
};
use crate::scheduler::Scheduler;
use crate::store::{
    AttemptFacts, Claimed, DefinitionStore, ExecutorStore, ExpandBatch, NewReceipt, StepTransition,
    StoreError,
};
use crate::workflow::{BatchDef, ReceiptView, StepDef, WorkflowDef};

impl<S> Scheduler<S>
where
    S: ExecutorStore + DefinitionStore + crate::store::ComponentStore + Clone + 'static,
{
    /// Expands a claimed batch step into its items. `Some` ends the claim's attempt on the
    /// step itself (its items could not be read, or there are none); `None` when the items
    /// were written (or the lease is gone).
    pub(super) async fn expand_batch(
        &self,
        claimed: &Claimed,
        step: &StepDef,
        batch: &BatchDef,
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
        // Nothing was sent: a batch whose items cannot be told apart, or whose set cannot
        // be read, fails at once.
        let read = batch.items(&context.input, receipts).and_then(|items| {
            let sent = step.would_send(&context.input, receipts)?;
            Ok((items, sent))
        });
        let (items, sent) = match read {
            Ok(read) => read,
            Err(e) => {
                return Some(Ending::cannot_start(
                    claimed,
                    step,
                    StepState::FailedTerminal,
                    e,
                ));
            }
        };
        // The digest of the whole item set, each item with what it would send: what an
        // approval of this step bound, and what the step's receipt records.
        let digest = match canonicalize(&sent) {
            Ok(c) => c.digest,
            Err(e) => {
                return Some(Ending::cannot_start(
                    claimed,
                    step,
                    StepState::FailedTerminal,
                    e,
                ));
            }
        };
        // An approved batch starts only with the item set approved; no item is written, so
        // none is sent.
        if let Some(approval) = def.approval_of(step.id.as_str())
            && let Some(ending) = self.approval_mismatch(claimed, step, approval, &digest)
        {
            return Some(ending);
        }
        let now = self.clock.now_ms();
        if items.is_empty() {
            return Some(empty_batch(claimed, step, digest, now));
        }
        let mut texts = Vec::with_capacity(items.len());
        for item in items {
            match canonicalize(&item.value) {
                Ok(c) => texts.push((item.key, c.text)),
                Err(e) => {
                    return Some(Ending::cannot_start(
                        claimed,
                        step,
                        StepState::FailedTerminal,
                        e,
                    ));
                }
            }
        }
        let request = ExpandBatch {
            fence: claimed.fence.clone(),
            attempt_id: claimed.attempt_id.clone(),
            items: texts,
            max_parallel: batch.max_parallel,
            digest,
            now,
        };
        match self.store.expand_batch(request).await {
            Ok(_) => {
                self.wake.notify_one();
                self.progress.advance_workflow(&claimed.fence.workflow_id.0);
            }
            Err(StoreError::LeaseLost { .. }) => {
                tracing::warn!(workflow = %claimed.fence.workflow_id, step = %claimed.fence.step, "lease lost before the batch's items were written; recovery owns the step now");
            }
            Err(e) => {
                transient(claimed, &e);
            }
        }
        None
    }
}

/// A batch of no items succeeds at once, with an empty list.
fn empty_batch(claimed: &Claimed, step: &StepDef, digest: String, now: u64) -> Ending {
    let receipt = NewReceipt {
        receipt_id: ReceiptId::new(now),
        evidence_kind: EvidenceKind::Items,
        provenance: Provenance {
            component: step.component.clone(),
            component_version: String::new(),
            component_digest: String::new(),
            input_digest: digest,
        },
        external_reference: None,
        output: serde_json::json!({ "items": [] }),
        author: None,
        reason: None,
        evidence: None,
    };
    let event = NewEvent::step(
        crate::intent::EventKind::Conclusion,
        step.id.as_str(),
        Some(&claimed.attempt_id),
        format!("{}: the batch has no items", step.label),
    );
    Ending::settled(
        2,
        AttemptFacts::default(),
        AttemptOutcome::Accepted,
        StepTransition::Succeeded(Box::new(receipt)),
        Some("the batch has no items".into()),
        serde_json::Value::Array(vec![]),
        vec![event],
    )
}
