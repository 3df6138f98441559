//! What a finished run is judged by: a scenario's expectations, and the invariants every
//! explored schedule must keep.

use serde_json::Value;

use super::Run;
use crate::intent::WorkflowId;
use crate::scenario::file::Scenario;
use crate::store::{NotificationFilter, NotificationStore, ReadStore};

impl Run {
    /// The request identities the workflow's attempts sent.
    pub(super) async fn identities(&self, id: &WorkflowId, steps: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for step in steps {
            for s in [step.clone(), format!("{step}.compensate")] {
                if let Ok(attempts) = self.store.attempts(id, &s, 0, 10_000).await {
                    out.extend(attempts.into_iter().filter_map(|a| a.request_identity));
                }
            }
        }
        out
    }

    /// Each expectation of `scenario` that did not hold, in words.
    pub(super) async fn check(
        &self,
        scenario: &Scenario,
        projections: &[Value],
        timelines: &[String],
    ) -> Vec<String> {
        let mut failures = Vec::new();
        let expect = &scenario.expect;
        let resources = self.providers.resources();
        for ((id, wf), timeline) in self.workflows.iter().zip(projections).zip(timelines) {
            let who = format!("workflow {id}");
            // Whatever a scenario expects, the record it leaves must be one `docket check`
            // accepts.
            failures.extend(self.docket_check(id).await);
            if let Some(state) = &expect.state
                && wf["state"] != state.as_str()
            {
                failures.push(format!("{who}: state is {}, expected {state}", wf["state"]));
            }
            let steps = step_ids(wf);
            for (step_id, want) in &expect.steps {
                let Some(step) = wf["steps"]
                    .as_array()
                    .and_then(|s| s.iter().find(|s| s["id"] == step_id.as_str()))
                else {
                    failures.push(format!("{who}: no step `{step_id}` in the projection"));
                    continue;
                };
                if let Some(state) = &want.state
                    && step["state"] != state.as_str()
                {
                    failures.push(format!(
                        "{who}: step `{step_id}` is {}, expected {state}",
                        step["state"]
                    ));
                }
                if let Some(evidence) = &want.evidence {
                    let got = step["receipt"]["evidence_kind"].as_str().unwrap_or("none");
                    if got != evidence {
                        failures.push(format!(
                            "{who}: step `{step_id}`'s evidence is {got}, expected {evidence}"
                        ));
                    }
                }
                if let Some(version) = &want.version {
                    let got = step["contract"]["version"].as_str().unwrap_or("none");
                    if got != version {
                        failures.push(format!(
                            "{who}: step `{step_id}` last ran under version {got}, expected {version}"
                        ));
                    }
                }
                if let Some(n) = want.attempts
                    && step["attempts"] != n
                {
                    failures.push(format!(
                        "{who}: step `{step_id}` has {} attempts, expected {n}",
                        step["attempts"]
                    ));
                }
            }
            if let Some(n) = expect.effects {
                let identities = self.identities(id, &steps).await;
                let effects = resources
                    .iter()
                    .filter(|r| r.caused_by(&identities))
                    .count() as u64;
                if effects != n {
                    failures.push(format!(
                        "{who}: the world holds {effects} effects of this intent, expected {n}"
                    ));
                }
            }
            if let Some(actions) = &expect.actions {
                let got: Vec<String> = wf["actions"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|a| a["action"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                if &got != actions {
                    failures.push(format!(
                        "{who}: the projection offers {got:?}, expected {actions:?}"
                    ));
                }
            }
            if let Some(next) = &expect.next_action {
                let got = match (
                    wf["next_action"]["kind"].as_str(),
                    wf["next_action"]["step"].as_str(),
                ) {
                    (Some(kind), Some(step)) => format!("{kind}:{step}"),
                    _ => "none".to_string(),
                };
                if &got != next {
                    failures.push(format!("{who}: the next action is {got}, expected {next}"));
                }
            }
            for text in &expect.timeline {
                if !timeline.contains(text.as_str()) {
                    failures.push(format!("{who}: the timeline does not say \"{text}\""));
                }
            }
            if let Some(want) = &expect.notifications {
                let told = self
                    .store
                    .notifications(NotificationFilter {
                        workflow_id: Some(id.clone()),
                        limit: 1_000,
                        ..NotificationFilter::default()
                    })
                    .await;
                match told {
                    Ok(rows) => {
                        let got: Vec<String> = rows.into_iter().map(|n| n.kind).collect();
                        if &got != want {
                            failures.push(format!(
                                "{who}: the transitions told are {got:?}, expected {want:?}"
                            ));
                        }
                    }
                    Err(e) => {
                        failures.push(format!("{who}: reading its notifications failed: {e}"))
                    }
                }
            }
            for text in &expect.timeline_lacks {
                if timeline.contains(text.as_str()) {
                    failures.push(format!(
                        "{who}: the timeline says \"{text}\", which it must not"
                    ));
                }
            }
        }
        failures
    }

    /// What `docket check` finds wrong with the workflow's records, in words.
    async fn docket_check(&self, id: &WorkflowId) -> Vec<String> {
        let record = match self.store.workflow(id).await {
            Ok(Some(record)) => record,
            Ok(None) => return vec![format!("workflow {id} is not in the store")],
            Err(e) => return vec![format!("workflow {id}: reading it failed: {e}")],
        };
        match crate::check::records_of(&self.store, record, None).await {
            Ok(records) => crate::check::check(&records)
                .into_iter()
                .map(|v| {
                    format!(
                        "workflow {id}: docket check: {:?} at {:?}: {}",
                        v.invariant, v.step, v.detail
                    )
                })
                .collect(),
            Err(e) => vec![format!("workflow {id}: reading its records failed: {e}")],
        }
    }

    /// The invariants every run keeps, whatever was injected.
    pub(super) async fn invariants(&self, projections: &[Value]) -> Vec<String> {
        let mut identities = Vec::new();
        let mut checked = Vec::new();
        for (id, wf) in self.workflows.iter().zip(projections) {
            let steps = step_ids(wf);
            identities.push(self.identities(id, &steps).await);
            checked.extend(self.docket_check(id).await);
        }
        // An admitted intent's workflow is never lost (its key may be released once the
        // workflow has ended and the key's retention passed: that is not a loss).
        let mut submitted = Vec::new();
        for (key, id) in &self.submitted {
            let found = match id {
                Some(id) => {
                    let (status, _) = self
                        .call("GET", &format!("/v1/workflows/{id}"), None, None)
                        .await;
                    (status == 200).then(|| id.to_string())
                }
                None => None,
            };
            submitted.push((key.clone(), found));
        }
        crate::scenario::explore::violations(
            &submitted,
            projections,
            &self.providers.resources(),
            &identities,
            &checked,
        )
    }
}

/// The step ids of a projection, in order.
pub(super) fn step_ids(wf: &Value) -> Vec<String> {
    wf["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|s| s["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
