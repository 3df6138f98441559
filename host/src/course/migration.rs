//! Moving a running workflow to another version of its definition by an explicit plan:
//! which of its steps becomes which step of the new version, which new steps start, which
//! steps that never began are dropped — or why it may not move at all.
//!
//! A step keeps everything that happened to it: its attempts, its receipt, and the identity
//! its requests were sent under. A renamed step's external key still derives from the id it
//! first had ([`MovedStep::key_step`]), so recovery and retries send the key the provider
//! saw. A move that would make the same identity carry another request is refused: a step
//! whose adapter namespace changes, or whose input under the new version differs from the
//! one recorded. Nothing is moved while a step runs, and only a step that never began may be
//! dropped.

use crate::intent::{Receipt, StepRole, StepState, canonicalize};
use crate::workflow::{ReceiptView, StepKind, WorkflowDef};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A step row as a migration judges it.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationStep<'a> {
    pub id: &'a str,
    pub role: Option<StepRole>,
    pub state: StepState,
    pub attempts: u32,
    /// An attempt of it reached checkpoint 3: its request may have left under its key.
    pub sent: bool,
    /// Its standing receipt.
    pub receipt: Option<&'a Receipt>,
    /// The mapped-input digest its latest attempt ran with.
    pub ran_with: Option<&'a str>,
    /// The idempotency namespace of the adapter version that last ran it, if known.
    pub namespace: Option<&'a str>,
    /// The id its external key derives from, when not its own (it was moved before).
    pub key_step: Option<&'a str>,
}

impl MigrationStep<'_> {
    /// Whether anything happened to it yet: an attempt, a receipt, a state past waiting.
    fn begun(&self) -> bool {
        self.attempts > 0
            || self.receipt.is_some()
            || !matches!(self.state, StepState::Pending | StepState::Ready)
    }
}

/// One step carried to the new version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedStep {
    pub from: String,
    pub to: String,
    /// Its state after the move: a step that never began waits for its new dependencies
    /// (`pending`), anything else keeps its state.
    pub state: StepState,
    /// The id its external key derives from when that is not `to`: the identity the
    /// provider may have seen stays the step's for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_step: Option<String>,
    /// The receipt it keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_id: Option<String>,
    /// A batch step's item rows, which move with it (`<from>[<key>]` becomes
    /// `<to>[<key>]`, each keeping its own identity, attempts and receipt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<u64>,
}

/// What an allowed migration does, in the new version's step order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationPlan {
    pub from_version: u32,
    pub to_version: u32,
    pub moved: Vec<MovedStep>,
    /// Steps of the new version no old step becomes: they start pending.
    pub added: Vec<String>,
    /// Old steps that never began, dropped.
    pub dropped: Vec<String>,
}

/// Why a migration may not happen; `step` names the old step when one is to blame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationRefusal {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub reason: String,
}

fn refusal(step: &str, reason: String) -> MigrationRefusal {
    MigrationRefusal {
        step: Some(step.to_string()),
        reason,
    }
}

fn with_article(role: StepRole) -> String {
    let name = role.as_str();
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {name}")
}

fn listed(ids: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let ids: Vec<String> = ids
        .into_iter()
        .map(|i| format!("`{}`", i.as_ref()))
        .collect();
    if ids.is_empty() {
        "none".into()
    } else {
        ids.join(", ")
    }
}

/// Judges moving a workflow of `old` (its rows `steps`, its input `input`) to `new` under
/// the plan `mapping` (old step id → new step id, `None` to drop it; an old step not named
/// keeps its id). `namespace_of` answers the idempotency namespace the new version's step
/// would send under (`None`: no loaded adapter version satisfies it).
pub fn plan_migration(
    old: &WorkflowDef,
    new: &WorkflowDef,
    input: &Value,
    steps: &[MigrationStep<'_>],
    mapping: &BTreeMap<String, Option<String>>,
    namespace_of: impl Fn(&str) -> Option<String>,
) -> Result<MigrationPlan, Vec<MigrationRefusal>> {
    let mut refusals = Vec::new();
    let new_ids: Vec<&str> = new.steps.iter().map(|s| s.id.as_str()).collect();
    if let Some(c) = steps
        .iter()
        .find(|s| crate::course::compensated_step(s.id).is_some())
    {
        refusals.push(refusal(
            c.id,
            "a compensation is under way: a workflow moves only while its course is its definition's".into(),
        ));
    }
    // A batch step's items move with it: judged here, each row carried by the store.
    let all = steps;
    let (items, steps): (Vec<MigrationStep<'_>>, Vec<MigrationStep<'_>>) = all
        .iter()
        .cloned()
        .partition(|s| crate::workflow::item_of(s.id).is_some());
    let old_ids: Vec<&str> = steps.iter().map(|s| s.id).collect();
    for (from, to) in mapping {
        if !old_ids.contains(&from.as_str()) {
            refusals.push(refusal(
                from,
                format!(
                    "the plan names `{from}`, which is not a step of this workflow (v{} has {})",
                    old.version,
                    listed(&old_ids)
                ),
            ));
        }
        if let Some(to) = to
            && !new_ids.contains(&to.as_str())
        {
            refusals.push(refusal(
                from,
                format!(
                    "the plan moves `{from}` to `{to}`, which v{} does not have (it has {})",
                    new.version,
                    listed(&new_ids)
                ),
            ));
        }
    }
    // Where each old step goes: its named target, else its own id if the new version has it.
    let mut targets: Vec<(&MigrationStep<'_>, Option<&str>)> = Vec::new();
    for s in &steps {
        if crate::course::compensated_step(s.id).is_some() {
            continue;
        }
        let target = match mapping.get(s.id) {
            Some(Some(to)) => Some(to.as_str()),
            Some(None) => None,
            None if new_ids.contains(&s.id) => Some(s.id),
            None => {
                refusals.push(refusal(
                    s.id,
                    format!(
                        "v{} has no step `{}`: name it in the plan's `steps`, with the step it becomes or null to drop it",
                        new.version, s.id
                    ),
                ));
                continue;
            }
        };
        targets.push((s, target));
    }
    for to in &new_ids {
        let from: Vec<&str> = targets
            .iter()
            .filter(|(_, t)| t == &Some(*to))
            .map(|(s, _)| s.id)
            .collect();
        if from.len() > 1 {
            refusals.push(MigrationRefusal {
                step: None,
                reason: format!(
                    "{} would all become `{to}`: one step of v{} holds one effect",
                    listed(&from),
                    new.version
                ),
            });
        }
    }
    let running: Vec<&str> = all
        .iter()
        .filter(|s| s.state == StepState::Running)
        .map(|s| s.id)
        .collect();
    for id in &running {
        refusals.push(refusal(
            id,
            format!("`{id}` is running: migrate once its attempt has ended"),
        ));
    }
    // The receipts a new step's input may read: its dependencies' receipts, by new id.
    let receipt_of = |new_id: &str| -> Option<ReceiptView> {
        targets
            .iter()
            .find(|(_, t)| *t == Some(new_id))
            .and_then(|(s, _)| s.receipt)
            .map(|r| ReceiptView {
                output: r.output.clone(),
                external_reference: r.external_reference.clone(),
            })
    };
    let mut moved = Vec::new();
    let mut dropped = Vec::new();
    for (s, target) in &targets {
        let Some(to) = target else {
            if s.begun() {
                refusals.push(refusal(
                    s.id,
                    format!(
                        "`{}` is {}{}: only a step that has not begun can be dropped",
                        s.id,
                        s.state,
                        if s.attempts > 0 {
                            format!(" after {} attempt(s)", s.attempts)
                        } else {
                            String::new()
                        }
                    ),
                ));
            } else {
                dropped.push(s.id.to_string());
            }
            continue;
        };
        let Some(def) = new.step(to) else { continue };
        if s.begun() {
            if let Some(role) = s.role
                && role != def.kind.role()
            {
                refusals.push(refusal(
                    s.id,
                    format!(
                        "`{}` ran as {} step; v{}'s `{to}` is {} step",
                        s.id,
                        with_article(role),
                        new.version,
                        with_article(def.kind.role())
                    ),
                ));
                continue;
            }
            // The identity the provider may have seen must keep meaning the same request.
            refusals.extend(namespace_moved(s, def, to, new.version, &namespace_of));
            let recorded = s
                .receipt
                .map(|r| r.provenance.input_digest.as_str())
                .or(s.ran_with);
            if let Some(recorded) = recorded
                && !recorded.is_empty()
            {
                let under_new = if def.kind == StepKind::Approval {
                    new.consequence(to, input, receipt_of)
                        .map(|c| c.digest)
                        .map_err(|e| e.to_string())
                } else {
                    // A batch step's: its whole item set, each item's key and input.
                    def.would_send(input, receipt_of)
                        .map_err(|e| e.to_string())
                        .and_then(|v| canonicalize(&v).map_err(|e| e.to_string()))
                        .map(|c| c.digest)
                };
                match under_new {
                    Ok(digest) if digest == recorded => {}
                    Ok(digest) => refusals.push(refusal(
                        s.id,
                        format!(
                            "under v{} the input of `{to}` would be {digest}, not the {recorded} `{}` ran with: a changed input under a kept identity is a new request",
                            new.version, s.id
                        ),
                    )),
                    Err(e) => refusals.push(refusal(
                        s.id,
                        format!(
                            "under v{} the input of `{to}` cannot be computed ({e}); `{}` ran with {recorded}",
                            new.version, s.id
                        ),
                    )),
                }
            }
        }
        let carried = items
            .iter()
            .filter(|i| crate::workflow::item_of(i.id).is_some_and(|(b, _)| b == s.id))
            .collect::<Vec<_>>();
        if !carried.is_empty() {
            if def.batch.is_none() {
                refusals.push(refusal(
                    s.id,
                    format!(
                        "`{}` has {} items; v{}'s `{to}` is not a batch step (no `for_each`), so they would belong to no step",
                        s.id,
                        carried.len(),
                        new.version
                    ),
                ));
            }
            // Each item sent is an identity the provider may have seen; one refusal says it.
            if let Some(r) = carried
                .iter()
                .find_map(|i| namespace_moved(i, def, to, new.version, &namespace_of))
            {
                refusals.push(r);
            }
        }
        let key_step = s.key_step.unwrap_or(s.id);
        moved.push(MovedStep {
            from: s.id.to_string(),
            to: to.to_string(),
            state: if s.begun() {
                s.state
            } else {
                StepState::Pending
            },
            key_step: (key_step != *to).then(|| key_step.to_string()),
            receipt_id: s.receipt.map(|r| r.receipt_id.0.clone()),
            items: (!carried.is_empty()).then_some(carried.len() as u64),
        });
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    // The new version's order.
    moved.sort_by_key(|m| new_ids.iter().position(|n| *n == m.to));
    let added = new_ids
        .iter()
        .filter(|n| !moved.iter().any(|m| m.to == **n))
        .map(|n| n.to_string())
        .collect();
    Ok(MigrationPlan {
        from_version: old.version,
        to_version: new.version,
        moved,
        added,
        dropped,
    })
}

/// Why step row `s` (a step or an item), sent or with a receipt, may not become v`version`'s
/// `to` (`def`): no loaded adapter version satisfies it, or it would send in another
/// idempotency namespace, whose key the provider would take for a new request.
fn namespace_moved(
    s: &MigrationStep<'_>,
    def: &crate::workflow::StepDef,
    to: &str,
    version: u32,
    namespace_of: impl Fn(&str) -> Option<String>,
) -> Option<MigrationRefusal> {
    if def.kind != StepKind::Adapter || !(s.sent || s.receipt.is_some()) {
        return None;
    }
    match (s.namespace, namespace_of(to)) {
        (_, None) => Some(refusal(
            s.id,
            format!(
                "no loaded version of `{}` satisfies v{version}'s `{to}` ({}): load or activate one first",
                def.component, def.version_req
            ),
        )),
        (Some(was), Some(now)) if was != now => Some(refusal(
            s.id,
            format!(
                "`{}` was sent under idempotency namespace `{was}`; v{version}'s `{to}` runs `{}` in namespace `{now}`, whose key the provider would take for a new request",
                s.id, def.component
            ),
        )),
        _ => None,
    }
}

#[cfg(test)]
#[path = "migration/tests.rs"]
mod tests;
