//! What an event of a scenario does to a run: the clock, a provider's script, a submission,
//! an operator's or a deployer's action through the API.

use serde_json::{Value, json};

use super::Run;
use crate::clock::Clock;
use crate::intent::WorkflowId;
use crate::scenario::file::{Event, EventAction};

impl Run {
    pub(super) async fn fire(&mut self, event: &Event) -> Result<(), String> {
        let id = self.workflows.first().cloned();
        let line = event.line;
        let text = match &event.action {
            EventAction::Advance(d) => {
                self.clock.advance(d.as_millis() as u64);
                format!("the clock moved {}", humantime::format_duration(*d))
            }
            EventAction::Pause(_) => {
                return Err(format!(
                    "event at line {line}: a pause needs an attempt standing at its `at`"
                ));
            }
            EventAction::Act {
                action,
                step,
                body,
                status: want,
            } => {
                let Some(id) = id else {
                    return Err(format!("event at line {line}: no workflow to act on"));
                };
                let path = match (action.as_str(), step) {
                    ("cancel" | "withdraw", _) => format!("/v1/workflows/{id}/cancel"),
                    ("revise", _) => format!("/v1/workflows/{id}/revisions"),
                    ("replace", _) => format!("/v1/workflows/{id}/replacement"),
                    ("budget", _) => format!("/v1/workflows/{id}/budget"),
                    (_, Some(step)) => format!("/v1/workflows/{id}/steps/{step}/{action}"),
                    (_, None) => unreachable!("checked at parse"),
                };
                let mut body = body.clone();
                if let Value::Object(m) = &mut body {
                    if action == "withdraw" {
                        m.insert("withdraw".into(), Value::Bool(true));
                    }
                    if matches!(
                        action.as_str(),
                        "cancel"
                            | "withdraw"
                            | "resolve"
                            | "compensate"
                            | "exception"
                            | "revise"
                            | "replace"
                            | "budget"
                    ) && !m.contains_key("reason")
                    {
                        m.insert("reason".into(), Value::String("scenario".into()));
                    }
                }
                // An approval decides the consequence the projection shows, unless the
                // scenario names another digest (to rehearse a stale one).
                if action == "approve"
                    && let (Value::Object(m), Some(step)) = (&mut body, step)
                    && !m.contains_key("digest")
                {
                    let (_, wf) = self
                        .call("GET", &format!("/v1/workflows/{id}"), None, None)
                        .await;
                    let digest = wf["steps"]
                        .as_array()
                        .and_then(|s| s.iter().find(|s| s["id"] == step.as_str()))
                        .and_then(|s| s["approval"]["digest"].as_str())
                        .unwrap_or_default()
                        .to_string();
                    m.insert("digest".into(), Value::String(digest));
                }
                let key = format!("scenario-event-{line}");
                let (status, answer) = if matches!(action.as_str(), "query" | "retry") {
                    self.call_while_hosts_work(&path, &key, body).await?
                } else {
                    self.call("POST", &path, Some(&key), Some(body)).await
                };
                let expected = match want {
                    Some(want) => status == *want,
                    None => status < 400,
                };
                if !expected && !self.lenient {
                    let wanted = want.map_or("a success".to_string(), |w| w.to_string());
                    return Err(format!(
                        "event at line {line}: {action} was answered {status} where {wanted} was expected: {answer}"
                    ));
                }
                // A replacement is a workflow of its own: the run waits for it and the
                // expectations hold for it too.
                if action == "replace"
                    && let Some(new) = answer["workflow_id"].as_str()
                    && !self.workflows.iter().any(|w| w.0 == new)
                {
                    self.workflows.push(WorkflowId(new.to_string()));
                }
                format!("{action} → {status}")
            }
            EventAction::Script {
                adapter,
                route,
                script,
            } => {
                let host = self
                    .adapters_hosts
                    .get(adapter)
                    .cloned()
                    .unwrap_or_default();
                if !self.providers.rescript(&host, route, script.clone()) {
                    return Err(format!(
                        "event at line {line}: the provider of `{adapter}` has no route `{route}`"
                    ));
                }
                format!("the provider of {adapter} rescripted its `{route}` route")
            }
            EventAction::Activate { adapter, version } => {
                let (status, answer) = self
                    .call(
                        "POST",
                        &format!("/v1/adapters/{adapter}/activate"),
                        Some(&format!("scenario-event-{line}")),
                        Some(json!({"version": version})),
                    )
                    .await;
                if status >= 400 {
                    return Err(format!(
                        "event at line {line}: activating {adapter} {version} was answered {status}: {answer}"
                    ));
                }
                // A host takes the change over at its next registry refresh (within a
                // second); here at once.
                if let Err(e) = self.components.sync(&self.store).await {
                    return Err(format!(
                        "event at line {line}: taking over {adapter} {version}: {e}"
                    ));
                }
                format!("{adapter} {version} activated")
            }
            EventAction::TruthfulOperator(draw) => self.truthful_operator(*draw, line).await?,
            EventAction::Submit(intent) => {
                let id = self.submit(&intent.key, &intent.input).await?;
                let earlier = self
                    .submitted
                    .iter()
                    .find(|(k, _)| *k == intent.key)
                    .and_then(|(_, id)| id.clone());
                self.submitted.push((intent.key.clone(), Some(id.clone())));
                match earlier {
                    Some(first) if first == id => {
                        format!("intent `{}` submitted again: the same workflow", intent.key)
                    }
                    Some(first) => {
                        return Err(format!(
                            "intent `{}` submitted again made a second workflow ({id} beside {first})",
                            intent.key
                        ));
                    }
                    None => {
                        self.workflows.push(id);
                        format!("intent `{}` submitted", intent.key)
                    }
                }
            }
        };
        self.note(format!(
            "{} line {line}: {text}",
            crate::intent::rfc3339(self.clock.now_ms())
        ));
        Ok(())
    }
}
