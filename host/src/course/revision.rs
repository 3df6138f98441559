//! Corrections: which steps a new input revision invalidates, and whether the correction is
//! still a revision or, after a consequential effect, must be a new request (a
//! replacement).
//!
//! A step is invalidated when its mapped input would change (an approval step's: the
//! consequence it asks about) or a step it depends on is invalidated (transitively, so a corrected title reaches a delivery through the step
//! that renders it). A revision is allowed only while no invalidated adapter step has
//! reached checkpoint 3 (its request may have left under its key) and none is running.

use crate::intent::{Receipt, StepState, canonicalize};
use crate::workflow::{ReceiptView, StepKind, WorkflowDef};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The reason revision 1 gives: it is the command as the client sent it.
pub const ADMITTED: &str = "the command as admitted";

/// A step as a revision judges it.
#[derive(Debug, Clone, PartialEq)]
pub struct RevisionStep<'a> {
    pub id: &'a str,
    pub state: StepState,
    pub attempts: u32,
    /// An attempt of it reached checkpoint 3: its request may have left.
    pub sent: bool,
    /// Its standing receipt.
    pub receipt: Option<&'a Receipt>,
    /// The mapped-input digest its latest attempt ran with.
    pub ran_with: Option<&'a str>,
}

/// A step that stops a revision: the correction must be a new request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocker {
    pub step: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_reference: Option<String>,
}

/// What an allowed revision does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RevisionPlan {
    /// Every invalidated step, in definition order.
    pub invalidated: Vec<String>,
    /// Invalidated steps that ran or were ready to, with the state they go back to (`ready`
    /// when their dependencies stand, else `pending`).
    pub rerun: Vec<(String, StepState)>,
    /// Receipts that stand (of steps not invalidated).
    pub kept_receipts: Vec<String>,
}

/// Judges a revision of `def`'s workflow from `old` to `new` (the new input already
/// validated): the plan, or the steps that make it a new request.
pub fn plan_revision(
    def: &WorkflowDef,
    old: &Value,
    new: &Value,
    steps: &[RevisionStep<'_>],
) -> Result<RevisionPlan, Vec<Blocker>> {
    let row = |id: &str| steps.iter().find(|s| s.id == id);
    // Receipts of steps not invalidated are what a mapping may read.
    let mut invalidated: Vec<String> = Vec::new();
    for step in &def.steps {
        let id = step.id.as_str();
        let after_invalidated = step
            .after
            .iter()
            .any(|d| invalidated.iter().any(|i| i == d.as_str()));
        let standing = |sid: &str| -> Option<ReceiptView> {
            if invalidated.iter().any(|i| i == sid) {
                return None;
            }
            row(sid).and_then(|r| r.receipt).map(|r| ReceiptView {
                output: r.output.clone(),
                external_reference: r.external_reference.clone(),
            })
        };
        // An approval step's input is the consequence it asks about: a revision that
        // changes what an approved step would send asks the approval again.
        let digest = |input: &Value| {
            if step.kind == StepKind::Approval {
                return def.consequence(id, input, standing).ok().map(|c| c.digest);
            }
            step.would_send(input, standing)
                .ok()
                .and_then(|v| canonicalize(&v).ok())
                .map(|c| c.digest)
        };
        let before = row(id)
            .and_then(|r| r.receipt.map(|r| r.provenance.input_digest.clone()))
            .or_else(|| row(id).and_then(|r| r.ran_with.map(str::to_string)))
            .or_else(|| digest(old));
        let changed = match (before, digest(new)) {
            (Some(b), Some(n)) => b != n,
            _ => false,
        };
        if after_invalidated || changed {
            invalidated.push(id.to_string());
        }
    }
    let blockers: Vec<Blocker> = invalidated
        .iter()
        .filter_map(|id| {
            let r = row(id)?;
            let adapter = def.step(id).is_some_and(|s| s.kind == StepKind::Adapter);
            (r.state == StepState::Running || (adapter && r.sent)).then(|| Blocker {
                step: id.clone(),
                external_reference: r.receipt.and_then(|r| r.external_reference.clone()),
            })
        })
        .collect();
    if !blockers.is_empty() {
        return Err(blockers);
    }
    let stands = |d: &str| {
        !invalidated.iter().any(|i| i == d)
            && row(d).is_some_and(|r| r.state == StepState::Succeeded)
    };
    let rerun = def
        .steps
        .iter()
        .filter(|s| invalidated.iter().any(|i| i == s.id.as_str()))
        .filter_map(|s| {
            let r = row(s.id.as_str())?;
            // A step that never ran and waits for its dependencies picks up the new input
            // when it starts; any other must start again from its dependencies.
            let ran = r.attempts > 0 || r.receipt.is_some() || r.state != StepState::Pending;
            ran.then(|| {
                let ready = s.after.iter().all(|d| stands(d.as_str()));
                let state = if ready {
                    StepState::Ready
                } else {
                    StepState::Pending
                };
                (s.id.to_string(), state)
            })
        })
        .collect();
    let kept_receipts = steps
        .iter()
        .filter(|s| !invalidated.iter().any(|i| i == s.id))
        .filter_map(|s| s.receipt.map(|r| r.receipt_id.to_string()))
        .collect();
    Ok(RevisionPlan {
        invalidated,
        rerun,
        kept_receipts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{EvidenceKind, Provenance, ReceiptId, WorkflowId};
    use serde_json::json;

    fn shipped() -> WorkflowDef {
        let text = include_str!("../../../workflows/document-delivery.toml");
        crate::workflow::parse("document-delivery.toml", text)
            .expect("the shipped definition parses")
    }

    fn receipt(step: &str, input: &Value, output: Value) -> Receipt {
        Receipt {
            receipt_id: ReceiptId(format!("rcp_{step}")),
            workflow_id: WorkflowId("wf_1".into()),
            step: step.into(),
            attempt_id: None,
            evidence_kind: EvidenceKind::Response,
            provenance: Provenance {
                component: "c".into(),
                component_version: "1.0.0".into(),
                component_digest: "sha256:0".into(),
                input_digest: canonicalize(input).unwrap().digest,
            },
            external_reference: None,
            output,
            recorded_at: 1,
            author: None,
            reason: None,
            evidence: None,
            superseded_by: None,
        }
    }

    fn step<'a>(id: &'a str, state: StepState, receipt: Option<&'a Receipt>) -> RevisionStep<'a> {
        RevisionStep {
            id,
            state,
            attempts: u32::from(receipt.is_some()),
            sent: false,
            receipt,
            ran_with: None,
        }
    }

    #[test]
    fn a_corrected_title_reaches_the_delivery_through_render() {
        let def = shipped();
        let old = json!({"title": "Qaurterly", "recipient": "a@example.com", "body": "Hi"});
        let new = json!({"title": "Quarterly", "recipient": "a@example.com", "body": "Hi"});
        let validated = receipt(
            "validate",
            &old,
            json!({"title": "Qaurterly", "recipient": "a@example.com", "body": "Hi", "valid": true}),
        );
        let steps = [
            step("validate", StepState::Succeeded, Some(&validated)),
            step("render", StepState::Running, None),
            step("deliver", StepState::Pending, None),
        ];
        // Render is running on the old title: a revision now would race it.
        let blocked = plan_revision(&def, &old, &new, &steps).unwrap_err();
        assert_eq!(
            blocked,
            [Blocker {
                step: "render".into(),
                external_reference: None
            }]
        );
        let steps = [
            step("validate", StepState::Succeeded, Some(&validated)),
            step("render", StepState::Ready, None),
            step("deliver", StepState::Pending, None),
        ];
        let plan = plan_revision(&def, &old, &new, &steps).unwrap();
        assert_eq!(plan.invalidated, ["validate", "render", "deliver"]);
        // Render was ready on the old title's validation: it waits for the new one.
        assert_eq!(
            plan.rerun,
            [
                ("validate".to_string(), StepState::Ready),
                ("render".to_string(), StepState::Pending)
            ]
        );
        assert!(plan.kept_receipts.is_empty());
    }

    #[test]
    fn an_unchanged_mapping_keeps_its_receipt_and_a_sent_request_refuses() {
        let def = shipped();
        let old = json!({"title": "T", "recipient": "a@example.com", "body": "Hi"});
        let validated = receipt(
            "validate",
            &old,
            json!({"title": "T", "recipient": "a@example.com", "body": "Hi", "valid": true}),
        );
        let steps = [step("validate", StepState::Succeeded, Some(&validated))];
        let plan = plan_revision(&def, &old, &old, &steps).unwrap();
        assert!(plan.invalidated.is_empty());
        assert_eq!(plan.kept_receipts, ["rcp_validate"]);

        let new = json!({"title": "T2", "recipient": "a@example.com", "body": "Hi"});
        let mut delivered = receipt("deliver", &json!({}), json!({}));
        delivered.external_reference = Some("dlv_7".into());
        let mut deliver = step("deliver", StepState::Succeeded, Some(&delivered));
        deliver.sent = true;
        let steps = [
            step("validate", StepState::Succeeded, Some(&validated)),
            step("render", StepState::Succeeded, None),
            deliver,
        ];
        let blocked = plan_revision(&def, &old, &new, &steps).unwrap_err();
        assert_eq!(
            blocked,
            [Blocker {
                step: "deliver".into(),
                external_reference: Some("dlv_7".into())
            }]
        );
    }
}
