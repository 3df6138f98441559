//! What a new intent is created with: the latest deployed version of its definition, its
//! input checked against that version's schema, its steps and its first timeline events.
//! Admission (`POST /v1/intents`) and a replacement (a corrected request linked to the
//! workflow it replaces) both take an intent in this way.

use crate::context::Context;
use crate::intent::{CanonicalInput, EventKind, Millis, NewEvent, WorkflowId};
use crate::store::{KeyScope, NewStep, NewWorkflow, StoreResult};
use crate::workflow::WorkflowDef;
use serde_json::{Value, json};

/// Why no intent may be created for a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IntakeRefusal {
    /// No definition of that name is deployed.
    #[error("{0}")]
    UnknownDefinition(String),
    /// The input does not satisfy the definition's schema; `details` name the fields.
    #[error("{message}")]
    InvalidInput {
        message: String,
        details: Vec<Value>,
    },
}

/// The intent to create for `scope` with `input`, or why none may be created.
pub async fn new_workflow<S: crate::store::DefinitionStore>(
    ctx: &Context<S>,
    scope: &KeyScope,
    input: &Value,
    canonical: &CanonicalInput,
    now: Millis,
    replaces: Option<WorkflowId>,
) -> StoreResult<Result<NewWorkflow, IntakeRefusal>> {
    let deployed = match ctx.deployments.latest(&scope.workflow).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            return Ok(Err(IntakeRefusal::UnknownDefinition(format!(
                "no workflow definition named `{}` is deployed; check the `workflow` field, or deploy the definition first",
                scope.workflow.escape_debug()
            ))));
        }
        Err(crate::catalog::DeployError::Store(e)) => return Err(e),
        Err(e) => {
            return Err(crate::store::StoreError::Corrupt(format!(
                "the deployed definition `{}` cannot be read: {e}",
                scope.workflow
            )));
        }
    };
    let def = &deployed.def;
    if let Err(errors) = deployed.validator.validate(input) {
        let listed: Vec<String> = errors
            .iter()
            .map(|e| format!("`{}`: {}", e.pointer, e.message))
            .collect();
        return Ok(Err(IntakeRefusal::InvalidInput {
            message: format!(
                "the input does not satisfy the input schema of `{}` v{}: {}; fix the fields listed in `details`",
                def.name,
                def.version,
                listed.join("; ")
            ),
            details: errors
                .iter()
                .map(|e| json!({"pointer": e.pointer, "message": e.message}))
                .collect(),
        }));
    }
    if let Some(refusal) = over_budget(def, input) {
        return Ok(Err(refusal));
    }
    Ok(Ok(NewWorkflow {
        workflow_id: WorkflowId::new(now),
        definition_version: def.version,
        steps: new_steps(def),
        deadline_at: now.saturating_add(millis(def.deadline)),
        key_retention_ms: millis(ctx.limits.key_retention),
        events: admission_events(def, scope, canonical),
        replaces,
        policy_version: ctx
            .components
            .as_ref()
            .map_or(0, |c| c.governance().in_force().version),
        trace_parent: None,
    }))
}

/// A batch whose items cannot all be sent within the budget's external calls, refused
/// before anything runs: each item's request is a call of its own. Only batches whose list
/// the input holds are counted here (a list from a receipt is known once it exists).
fn over_budget(def: &WorkflowDef, input: &Value) -> Option<IntakeRefusal> {
    let mut calls: u64 = 0;
    let mut batches = Vec::new();
    for step in def
        .steps
        .iter()
        .filter(|s| s.kind == crate::workflow::StepKind::Adapter)
    {
        match &step.batch {
            None => calls += 1,
            Some(batch) => match batch.items(input, |_| None) {
                Ok(items) => {
                    calls += items.len() as u64;
                    batches.push(format!("`{}` has {} items", step.id, items.len()));
                }
                // Read from a receipt, or not a list: the step itself says so when it runs.
                Err(_) => calls += 1,
            },
        }
    }
    let limit = u64::from(def.budget.max_external_calls);
    if batches.is_empty() || calls <= limit {
        return None;
    }
    Some(IntakeRefusal::InvalidInput {
        message: format!(
            "the batch step{} {} and each item is an external call of its own, so `{}` v{} needs {calls} external calls, but its budget allows max_external_calls = {limit}; send fewer items, or raise [budget] max_external_calls in the definition",
            if batches.len() == 1 { "" } else { "s" },
            batches.join(", "),
            def.name,
            def.version
        ),
        details: vec![json!({"limit": "max_external_calls", "allowed": limit, "needed": calls})],
    })
}

/// The step rows of a new workflow of `def`.
pub fn new_steps(def: &WorkflowDef) -> Vec<NewStep> {
    def.steps
        .iter()
        .map(|s| NewStep {
            id: s.id.to_string(),
            depends_on: s.after.iter().map(ToString::to_string).collect(),
            role: s.kind.role(),
            compensate_on: s.compensation.iter().map(|c| c.on).collect(),
            reads: Some(def.reads(s.id.as_str()).into_iter().collect()),
            adapter: (s.kind == crate::workflow::StepKind::Adapter).then(|| s.component.clone()),
        })
        .collect()
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The timeline's first entries: the request, then what was scheduled.
fn admission_events(def: &WorkflowDef, scope: &KeyScope, input: &CanonicalInput) -> Vec<NewEvent> {
    let recorded = NewEvent::workflow(
        EventKind::Observation,
        format!(
            "Request recorded: {} v{} for {} (input {})",
            def.name, def.version, scope.subject.0, input.digest
        ),
    )
    .with_data(json!({
        "subject": scope.subject.0,
        "idempotency_key": scope.key,
        "definition_version": def.version,
        "input_digest": input.digest,
    }));
    let first: Vec<_> = def.initial_steps().collect();
    let mut events = vec![recorded];
    if !first.is_empty() {
        let labels: Vec<&str> = first.iter().map(|s| s.label.as_str()).collect();
        let ids: Vec<&str> = first.iter().map(|s| s.id.as_str()).collect();
        events.push(
            NewEvent::workflow(
                EventKind::Action,
                format!("Scheduled {}", labels.join(", ")),
            )
            .with_data(json!({"steps": ids})),
        );
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_reads_the_receipts_its_input_refers_to() {
        let def = crate::workflow::parse(
            "reads.toml",
            r#"
name = "reads"
version = 1
deadline = "1h"
[input_schema]
type = "object"
[[steps]]
id = "first"
label = "First"
kind = "handler"
component = "validate-document"
version = "^1"
outputs = ["title"]
[steps.input]
title = "$input.title"
[[steps]]
id = "second"
label = "Second"
kind = "handler"
component = "render-document"
version = "^1"
after = ["first"]
outputs = ["document"]
[steps.input]
title = "$steps.first.output.title"
[[steps]]
id = "third"
label = "Third"
kind = "handler"
component = "render-document"
version = "^1"
after = ["second"]
[steps.input]
title = "$steps.first.output.title"
body = { text = "$steps.second.output.document", again = ["$steps.first.output.title"] }
"#,
        )
        .unwrap();
        let reads: Vec<(String, Option<Vec<String>>)> = new_steps(&def)
            .into_iter()
            .map(|s| (s.id, s.reads))
            .collect();
        assert_eq!(
            reads,
            vec![
                ("first".into(), Some(vec![])),
                ("second".into(), Some(vec!["first".into()])),
                ("third".into(), Some(vec!["first".into(), "second".into()])),
            ]
        );
    }
}
