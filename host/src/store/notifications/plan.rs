//! A notification's outbox row, its body fixed when the transition happens.

use crate::intent::Millis;
use crate::store::WorkflowRecord;

/// A notification's outbox row for `record` (as it stands after the transition): its
/// `webhook-id` and its body, fixed now, `{"id", "type", "workflow_id", "revision",
/// "occurred_at", "workflow": <summary>}`.
pub(crate) fn notification(
    record: &WorkflowRecord,
    event: crate::notify::EventType,
    now: Millis,
) -> NewNotification {
    notification_with(record, event, now, None)
}

/// [`notification`], the body also holding `approval` (an approval's notifications:
/// its step, the consequence's digest, until when it waits, how it was decided).
pub(crate) fn notification_with(
    record: &WorkflowRecord,
    event: crate::notify::EventType,
    now: Millis,
    approval: Option<&serde_json::Value>,
) -> NewNotification {
    let id = crate::intent::NotificationId::new(now);
    // Written straight from borrowed fields (keys in the order a JSON object sorts them,
    // as the body has always been written): no tree of values on the writer's path.
    #[derive(serde::Serialize)]
    struct Body<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        approval: Option<&'a serde_json::Value>,
        id: &'a str,
        occurred_at: String,
        revision: u64,
        #[serde(rename = "type")]
        kind: &'a str,
        workflow: Summary<'a>,
        workflow_id: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Summary<'a> {
        created_at: String,
        definition_version: u32,
        ended_at: Option<String>,
        state: &'a str,
        subject: &'a str,
        workflow: &'a str,
        workflow_id: &'a str,
    }
    let body = serde_json::to_string(&Body {
        approval,
        id: &id.0,
        occurred_at: crate::intent::rfc3339(now),
        revision: record.revision,
        kind: event.as_str(),
        workflow: Summary {
            created_at: crate::intent::rfc3339(record.created_at),
            definition_version: record.definition_version,
            ended_at: record.ended_at.map(crate::intent::rfc3339),
            state: record.state.as_str(),
            subject: &record.subject.0,
            workflow: &record.workflow,
            workflow_id: &record.workflow_id.0,
        },
        workflow_id: &record.workflow_id.0,
    })
    .expect("a notification body serializes");
    NewNotification {
        id: id.0,
        workflow_id: record.workflow_id.0.clone(),
        event: event.as_str(),
        revision: record.revision as i64,
        body,
        at: now as i64,
    }
}

/// An outbox row to insert.
pub(crate) struct NewNotification {
    pub id: String,
    pub workflow_id: String,
    pub event: &'static str,
    pub revision: i64,
    pub body: String,
    pub at: i64,
}

/// The columns an outbox insert writes, in [`NewNotification`]'s order.
pub(crate) const OUTBOX_INSERT: &str =
    "INSERT INTO outbox (id, workflow_id, type, revision, body, created_at, next_at)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::NewEvent;
    use crate::intent::WorkflowState;
    use crate::store::admission::plan::created;
    use crate::store::{AdmitRequest, NewWorkflow};

    /// The body's bytes are what receivers verify the signature over: keys sorted, as a
    /// JSON object has always written them, and an open end as `null`.
    #[test]
    fn a_notification_body_is_written_with_sorted_keys() {
        let new = NewWorkflow {
            workflow_id: crate::intent::WorkflowId("wf_1".into()),
            definition_version: 2,
            steps: Vec::new(),
            deadline_at: 9_000,
            key_retention_ms: 1_000,
            replaces: None,
            policy_version: 0,
            trace_parent: None,
            events: vec![NewEvent::workflow(
                crate::intent::EventKind::Observation,
                "x",
            )],
        };
        let req = AdmitRequest {
            scope: crate::store::KeyScope {
                subject: crate::intent::Subject("team".into()),
                workflow: "delivery".into(),
                key: "k".into(),
            },
            input: crate::intent::canonicalize(&serde_json::json!({})).unwrap(),
            now: 1_000,
            create: None,
        };
        let mut record = created(&req, &new);
        let n = notification(&record, crate::notify::EventType::Recorded, 2_000);
        assert_eq!(
            n.body,
            format!(
                "{{\"id\":\"{}\",\"occurred_at\":\"1970-01-01T00:00:02.000Z\",\"revision\":1,\
                 \"type\":\"workflow.recorded\",\"workflow\":{{\"created_at\":\"1970-01-01T00:00:01.000Z\",\
                 \"definition_version\":2,\"ended_at\":null,\"state\":\"running\",\"subject\":\"team\",\
                 \"workflow\":\"delivery\",\"workflow_id\":\"wf_1\"}},\"workflow_id\":\"wf_1\"}}",
                n.id
            )
        );
        record.state = WorkflowState::Completed;
        record.ended_at = Some(3_000);
        let n = notification(&record, crate::notify::EventType::Completed, 3_000);
        assert!(
            n.body
                .contains("\"ended_at\":\"1970-01-01T00:00:03.000Z\",\"state\":\"completed\""),
            "{}",
            n.body
        );
    }
}
