//! The operator an explored schedule brings in once the run is at rest: a person who acts on
//! the step the projection's next action names and, when resolving, tells the truth the world
//! holds — the invariants assume honest people, not infallible hosts.

use serde_json::{Value, json};

use super::Run;

impl Run {
    /// Acts on the first workflow's step in review: `draw` picks asking the provider,
    /// retrying, escalating or resolving with what the world holds (a compensation step is
    /// never resolved by hand here). Returns what happened, in words; an error only when the run
    /// itself failed.
    pub(super) async fn truthful_operator(
        &mut self,
        draw: u32,
        line: usize,
    ) -> Result<String, String> {
        let Some(id) = self.workflows.first().cloned() else {
            return Ok("the operator found no workflow".into());
        };
        let (_, wf) = self
            .call("GET", &format!("/v1/workflows/{id}"), None, None)
            .await;
        let (Some("review"), Some(step)) = (
            wf["next_action"]["kind"].as_str(),
            wf["next_action"]["step"].as_str(),
        ) else {
            return Ok(format!(
                "the operator found nothing for a person (workflow {})",
                wf["state"].as_str().unwrap_or("?")
            ));
        };
        let step = step.to_string();
        let compensation = step.ends_with(".compensate");
        let choices: &[&str] = if compensation {
            &["query", "retry", "escalate"]
        } else {
            &["query", "retry", "escalate", "resolve"]
        };
        let action = choices[draw as usize % choices.len()];
        let body = match action {
            "escalate" => json!({"note": "explored: another person looks"}),
            "resolve" => self.the_truth(&id, &step).await,
            _ => json!({}),
        };
        let path = format!("/v1/workflows/{id}/steps/{step}/{action}");
        let key = format!("scenario-operator-{line}-{draw}");
        let (status, answer) = if matches!(action, "query" | "retry") {
            self.call_while_hosts_work(&path, &key, body.clone())
                .await?
        } else {
            self.call("POST", &path, Some(&key), Some(body.clone()))
                .await
        };
        let what = match body["outcome"].as_str() {
            Some(outcome) => format!("resolve `{step}` as {outcome}"),
            None => format!("{action} `{step}`"),
        };
        Ok(if status >= 400 {
            let code = answer["error"]["code"].as_str().unwrap_or("");
            format!("the operator asked to {what} → {status} {code}")
        } else {
            format!("the operator chose to {what} → {status}")
        })
    }

    /// A resolution of `step` saying what the world holds of the requests it sent: the
    /// resource in force, one since cancelled, or nothing.
    async fn the_truth(&self, id: &crate::intent::WorkflowId, step: &str) -> Value {
        let identities = self.identities(id, &[step.to_string()]).await;
        let resources = self.providers.resources();
        let mine: Vec<_> = resources
            .iter()
            .filter(|r| r.caused_by(&identities))
            .collect();
        let reason = "explored: the operator checked with the provider";
        match mine.iter().find(|r| r.status == "accepted") {
            Some(r) => json!({
                "outcome": "succeeded",
                "external_reference": r.id,
                "evidence": format!("the provider holds {} in force", r.id),
                "reason": reason,
            }),
            None if mine.is_empty() => json!({
                "outcome": "not_happened",
                "evidence": "the provider holds nothing under this step's identity",
                "reason": reason,
            }),
            None => json!({
                "outcome": "abandon",
                "evidence": format!("the provider cancelled {}", mine[0].id),
                "reason": reason,
            }),
        }
    }
}
