//! A running workflow moved to another version of its definition by an operator's explicit
//! plan (`POST /v1/workflows/{id}/migration`, `docket migrate`): which step becomes which,
//! judged by the course ([`crate::course::plan_migration`]) from the workflow's rows and
//! the adapter versions that ran them; the store applies the plan only if the workflow is
//! still as the plan saw it, and the desk plans again if not. A dry run answers the same
//! judgement and changes nothing.

use super::{DeskError, InvalidOrder, required};
use crate::access::{Principal, Role};
use crate::context::Context;
use crate::course::{MigrationPlan, MigrationRefusal, MigrationStep, plan_migration};
use crate::intent::canonicalize;
use crate::store::{
    ActionAnswer, ActionScope, MigrateAnswer, MigrateRequest, MigrationChange, MigrationRecord,
    MigrationSnapshot, StoreError, StoredRefusal,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The action name a migration's key is scoped by.
pub const MIGRATE: &str = "migrate";

/// The refusal code of a migration the plan or the workflow does not allow.
pub const MIGRATION_REFUSED: &str = "migration_refused";

/// How often a migration is planned again when the workflow moved under it.
const ATTEMPTS: usize = 5;

/// A migration request's body.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrateOrder {
    pub to_version: u32,
    /// Old step id → new step id, `None` to drop it; an old step not named keeps its id.
    pub steps: BTreeMap<String, Option<String>>,
    pub reason: String,
    /// Judge only: nothing is written.
    pub dry_run: bool,
}

impl MigrateOrder {
    /// `to_version` must be a version number; the reason is required.
    pub fn new(
        to_version: Option<u64>,
        steps: BTreeMap<String, Option<String>>,
        reason: Option<&str>,
        dry_run: bool,
    ) -> Result<Self, InvalidOrder> {
        let to_version = to_version
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| *v > 0)
            .ok_or_else(|| InvalidOrder {
                field: "to_version",
                message: "`to_version` is required: the definition version to move to, e.g. 2"
                    .into(),
            })?;
        Ok(Self {
            to_version,
            steps,
            reason: required("reason", reason, "say why the workflow moves")?,
            dry_run,
        })
    }

    fn digest(&self) -> Result<String, DeskError> {
        canonicalize(&json!({
            "to_version": self.to_version,
            "steps": self.steps,
            "reason": self.reason,
        }))
        .map(|c| c.digest)
        .map_err(|e| DeskError::Internal(e.to_string()))
    }
}

/// What a migration request came to.
#[derive(Debug, Clone, PartialEq)]
pub enum MigrateResult {
    Applied(MigrationRecord),
    /// A dry run that would move the workflow so; nothing was changed.
    WouldApply(MigrationPlan),
    /// Refused, nothing changed: `migration_refused` (details name each reason).
    Refused(StoredRefusal),
}

fn refused(message: String, reasons: &[MigrationRefusal]) -> StoredRefusal {
    StoredRefusal {
        code: MIGRATION_REFUSED.into(),
        message,
        details: reasons
            .iter()
            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
            .collect(),
    }
}

/// Moves workflow `workflow_id` for `caller` as `order` plans, under `key` (none for a dry
/// run).
pub async fn migrate<
    S: crate::store::DefinitionStore
        + crate::store::ReadStore
        + crate::store::OperatorStore
        + crate::store::CourseStore
        + crate::store::ComponentStore,
>(
    ctx: &Arc<Context<S>>,
    caller: &Principal,
    workflow_id: &str,
    order: MigrateOrder,
    key: Option<String>,
) -> Result<MigrateResult, DeskError> {
    let first = super::desk::visible(ctx, caller, workflow_id).await?;
    if !caller.has(Role::Operator) {
        return Err(DeskError::Forbidden);
    }
    let id = first.workflow_id.clone();
    let digest = order.digest()?;
    let scope = key.map(|key| ActionScope {
        subject: caller.subject.clone(),
        workflow_id: id.clone(),
        step: String::new(),
        action: MIGRATE.into(),
        key,
    });
    // A known key answers before the plan is judged again.
    if let Some(scope) = &scope
        && let Some(existing) = ctx.store.action(scope).await?
    {
        if existing.request_digest != digest {
            return Err(DeskError::KeyConflict(Box::new(scope.clone())));
        }
        return replay(existing.answer);
    }
    let new = ctx
        .deployments
        .get(&first.workflow, order.to_version)
        .await
        .map_err(|e| match e {
            crate::catalog::DeployError::Store(e) => DeskError::Store(e),
            other => DeskError::Internal(other.to_string()),
        })?
        .ok_or_else(|| DeskError::InvalidInput {
            message: format!(
                "`{}` v{} is not deployed; deploy it first (`docket workflow deploy FILE`)",
                first.workflow, order.to_version
            ),
            details: vec![json!({"pointer": "/to_version"})],
        })?;
    for _ in 0..ATTEMPTS {
        let record = ctx
            .store
            .workflow(&id)
            .await?
            .ok_or_else(|| DeskError::Internal(format!("workflow {id} vanished")))?;
        if record.definition_version == order.to_version {
            return Err(DeskError::InvalidInput {
                message: format!(
                    "workflow {id} already runs v{} of `{}`; name another version",
                    order.to_version, record.workflow
                ),
                details: vec![json!({"pointer": "/to_version"})],
            });
        }
        let old = super::desk::required_definition(ctx, &record).await?;
        let steps = ctx.store.steps(&id).await?;
        let receipts = ctx.store.receipts(&id).await?;
        let mut attempts = Vec::with_capacity(steps.len());
        for s in &steps {
            attempts.push(ctx.store.attempts(&id, &s.step, 0, 10_000).await?);
        }
        // The namespace each step's latest request ran under, from the version that ran it.
        let histories: Vec<super::StepHistory<'_>> = steps
            .iter()
            .zip(&attempts)
            .map(|(s, tried)| super::StepHistory::of(s, tried, &receipts))
            .collect();
        let mut namespaces: Vec<Option<String>> = Vec::with_capacity(steps.len());
        for history in &histories {
            let mut namespace = None;
            if let (Some(p), Some(components)) = (history.ran, &ctx.components)
                && let Some(c) = components
                    .exact_or_stored(&ctx.store, &p.component, &p.component_version)
                    .await?
            {
                namespace = c.contract().map(|c| c.idempotency.namespace.clone());
            }
            namespaces.push(namespace);
        }
        let change = if record.state.is_ended() || record.cancelled {
            let why = if record.cancelled && !record.state.is_ended() {
                "it has a cancellation".to_string()
            } else {
                format!("it is {}", record.state)
            };
            Err(refused(
                format!("workflow {id} cannot move to another definition version: {why}"),
                &[],
            ))
        } else {
            let input: Value = serde_json::from_str(&record.input)
                .map_err(|e| DeskError::Store(StoreError::Corrupt(format!("stored input: {e}"))))?;
            let rows: Vec<MigrationStep<'_>> = steps
                .iter()
                .zip(&histories)
                .zip(&namespaces)
                .map(|((s, history), namespace)| MigrationStep {
                    id: s.step.as_str(),
                    role: s.role,
                    state: s.state,
                    attempts: s.attempts,
                    sent: history.sent,
                    receipt: history.receipt,
                    ran_with: history.ran.map(|p| p.input_digest.as_str()),
                    namespace: namespace.as_deref(),
                    key_step: s.key_step.as_deref(),
                })
                .collect();
            let namespace_of = |to: &str| -> Option<String> {
                let step = new.def.step(to)?;
                let loaded = ctx.components.as_ref()?.resolve(step).ok()?;
                loaded.contract().map(|c| c.idempotency.namespace.clone())
            };
            plan_migration(
                &old.def,
                &new.def,
                &input,
                &rows,
                &order.steps,
                namespace_of,
            )
            .map_err(|reasons| {
                refused(
                    format!(
                        "workflow {id} cannot move from v{} to v{}: {}",
                        record.definition_version,
                        order.to_version,
                        reasons
                            .iter()
                            .map(|r| r.reason.as_str())
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                    &reasons,
                )
            })
        };
        let Some(scope) = &scope else {
            // A dry run: the judgement, nothing written.
            return Ok(match change {
                Ok(plan) => MigrateResult::WouldApply(plan),
                Err(r) => MigrateResult::Refused(r),
            });
        };
        let request = MigrateRequest {
            scope: scope.clone(),
            request_digest: digest.clone(),
            reason: order.reason.clone(),
            seen: MigrationSnapshot {
                state: record.state,
                definition_version: record.definition_version,
                steps: steps
                    .iter()
                    .map(|s| (s.step.clone(), s.state, s.attempts))
                    .collect(),
            },
            change: change.map(|plan| MigrationChange {
                plan,
                steps: crate::intake::new_steps(&new.def),
            }),
            now: ctx.clock.now_ms(),
        };
        match ctx.store.migrate(request).await? {
            MigrateAnswer::Applied(r) => {
                ctx.wake.notify_one();
                ctx.progress.advance_workflow(workflow_id);
                return Ok(MigrateResult::Applied(r));
            }
            MigrateAnswer::Refused(r) => return Ok(MigrateResult::Refused(r)),
            MigrateAnswer::KeyConflict => {
                return Err(DeskError::KeyConflict(Box::new(scope.clone())));
            }
            MigrateAnswer::Replayed(stored) => return replay(stored.answer),
            MigrateAnswer::Moved => continue,
        }
    }
    Err(DeskError::Store(StoreError::safe(format!(
        "workflow {id} kept moving while the migration was planned ({ATTEMPTS} tries); nothing was changed"
    ))))
}

fn replay(answer: Option<ActionAnswer>) -> Result<MigrateResult, DeskError> {
    super::replayed(
        answer,
        "migration",
        MigrateResult::Applied,
        MigrateResult::Refused,
    )
}
