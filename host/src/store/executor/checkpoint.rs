//! A checkpoint: an attempt's progress recorded under its lease, judged before anything is
//! written — fenced by the lease, by a cancellation where one stops the attempt, and at
//! checkpoint 3 by the first request's input digest.

use super::{note_policy, record_facts};
use crate::course;
use crate::store::plan::values;
use crate::store::rows::Columns;
use crate::store::tx::{Tx, Write};
use crate::store::{CheckpointRequest, StoreError, StoreResult};

/// What a checkpoint's fence found: the step's and the attempt's input digests and whether
/// the workflow is being cancelled.
#[derive(Debug, Clone, Default, PartialEq)]
struct Held {
    step_digest: Option<String>,
    attempt_digest: Option<String>,
    cancelled: bool,
}

/// Judges a checkpoint against what its fence found: refused when a cancellation fences
/// it, or when the attempt's input differs from the first request's (checkpoint 3);
/// otherwise the digest to keep as the step's, if it has none yet. Decided before anything
/// is written, so a refusal leaves nothing behind.
fn judge(req: &CheckpointRequest, held: Held) -> StoreResult<Option<String>> {
    if held.cancelled && course::fenced_by_cancellation(req.checkpoint, &req.fence.step) {
        return Err(StoreError::Cancelled {
            workflow_id: req.fence.workflow_id.clone(),
        });
    }
    if req.checkpoint != 3 {
        return Ok(None);
    }
    // The attempt's digest as recorded at checkpoint 2, or as this checkpoint records it.
    let attempt = req
        .facts
        .provenance
        .as_ref()
        .map(|p| p.input_digest.clone())
        .or(held.attempt_digest);
    match (held.step_digest, attempt) {
        (Some(step), Some(attempt)) if step != attempt => {
            Err(StoreError::InputChanged { step, attempt })
        }
        (None, Some(attempt)) => Ok(Some(attempt)),
        _ => Ok(None),
    }
}

/// Records that an attempt reached a checkpoint, under its lease.
pub(crate) async fn checkpoint<T: Tx>(tx: &mut T, req: &CheckpointRequest) -> StoreResult<()> {
    let sql = &tx.sql().executor;
    let f = &req.fence;
    let id = f.workflow_id.as_str();
    let hold =
        if req.external_call.is_some() || course::fenced_by_cancellation(req.checkpoint, &f.step) {
            sql.hold_with_workflow
        } else {
            sql.hold
        };
    let held = tx
        .row(
            hold,
            &values![
                id,
                f.step.as_str(),
                f.lease_token.as_str(),
                req.attempt_id.as_str()
            ],
            |r| {
                Ok(Held {
                    step_digest: r.opt_text("step_digest")?,
                    attempt_digest: r.opt_text("attempt_digest")?,
                    cancelled: r.opt_text("cancel_on")?.is_some(),
                })
            },
        )
        .await?
        .ok_or_else(|| f.lost())?;
    let keep = judge(req, held)?;
    if let Some(digest) = keep {
        tx.exec(
            sql.keep_input_digest,
            &values![
                digest.as_str(),
                id,
                f.step.as_str(),
                req.remembered_until.map(|_| req.now as i64),
                req.remembered_until.map(|t| t as i64)
            ],
        )
        .await?;
    }
    record_facts(tx, &req.attempt_id, req.checkpoint, &req.facts, None, None).await?;
    note_policy(tx, f, &req.facts).await?;
    if let Some(cost) = req.external_call {
        tx.exec(sql.count_call, &values![id, i64::from(cost)])
            .await?;
    }
    tx.apply(Write::AppendEvents {
        workflow: &f.workflow_id,
        now: req.now,
        events: &req.events,
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{AttemptId, WorkflowId};
    use crate::store::{AttemptFacts, Fence};

    fn request(checkpoint: u8, step: &str, digest: Option<&str>) -> CheckpointRequest {
        CheckpointRequest {
            fence: Fence {
                workflow_id: WorkflowId("wf".into()),
                step: step.into(),
                lease_token: "t".into(),
            },
            attempt_id: AttemptId("a".into()),
            checkpoint,
            facts: AttemptFacts {
                provenance: digest.map(|d| crate::intent::Provenance {
                    input_digest: d.into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            external_call: None,
            remembered_until: None,
            events: vec![],
            now: 0,
        }
    }

    fn held(step: Option<&str>, attempt: Option<&str>, cancelled: bool) -> Held {
        Held {
            step_digest: step.map(String::from),
            attempt_digest: attempt.map(String::from),
            cancelled,
        }
    }

    #[test]
    fn the_first_requests_digest_is_kept_and_another_refused() {
        let keep = judge(&request(3, "send", None), held(None, Some("d1"), false));
        assert_eq!(keep.unwrap(), Some("d1".to_string()));
        let same = judge(
            &request(3, "send", None),
            held(Some("d1"), Some("d1"), false),
        );
        assert_eq!(same.unwrap(), None);
        let other = judge(
            &request(3, "send", None),
            held(Some("d1"), Some("d2"), false),
        );
        assert!(matches!(other, Err(StoreError::InputChanged { .. })));
        // What this checkpoint records counts, as its write would make it the attempt's.
        let now = judge(
            &request(3, "send", Some("d2")),
            held(Some("d1"), None, false),
        );
        assert!(matches!(now, Err(StoreError::InputChanged { .. })));
        // Other checkpoints keep nothing.
        assert_eq!(
            judge(&request(2, "send", None), held(None, Some("d1"), false)).unwrap(),
            None
        );
    }

    #[test]
    fn a_cancellation_fences_only_the_checkpoints_it_stops() {
        for cp in 2..=5u8 {
            let judged = judge(&request(cp, "send", None), held(None, None, true));
            assert_eq!(
                judged.is_err(),
                course::fenced_by_cancellation(cp, "send"),
                "checkpoint {cp}"
            );
        }
        assert!(judge(&request(2, "send", None), held(None, None, false)).is_ok());
    }
}
