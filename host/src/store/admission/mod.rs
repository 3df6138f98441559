//! Admission, written once for every backend: the key in scope answers a known intent (a
//! replay, or a conflict when the input differs), a key past its retention is free again,
//! an intent built on a definition version since superseded is refused, and a new intent's
//! rows — its workflow, its key, its steps, its first timeline entries, its notification —
//! are written in one transaction. PostgreSQL writes the new intents of many admissions in
//! one statement instead ([`Backend::admit`]), and answers known keys with the same rules.

pub(crate) mod plan;
pub(crate) mod postgres;
use super::plan::values;
use super::reads;
use super::rows;
use super::tx::{Backend, Tx, Write};
use super::{
    AdmissionStore, AdmitOutcome, AdmitRequest, ClaimRequest, Claimed, KeyRecord, KeyScope,
    StoreError, StoreResult,
};
use crate::intent::{Millis, WorkflowId};

/// The statements of admission. Parameters, in order:
/// - `hold_key` (held to the commit, so that two admissions under one key run one after
///   the other), `key` (the key in scope, expired or not), `free_key`: subject, workflow,
///   key;
/// - `outdated` (whether a newer version is deployed): definition name, version;
/// - `insert_workflow`: workflow id, workflow, definition version, subject, key, input
///   digest, created at, deadline, key retention, next sequence number, replaced workflow,
///   policy version, trace parent;
/// - `insert_input`: workflow id, input;
/// - `replace`: new workflow id, replaced workflow id;
/// - `insert_key`: subject, workflow, key, workflow id, input digest.
pub(crate) struct Sql {
    pub hold_key: &'static str,
    pub key: &'static str,
    pub free_key: &'static str,
    pub outdated: &'static str,
    pub insert_workflow: &'static str,
    pub insert_input: &'static str,
    pub replace: &'static str,
    pub insert_key: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders).
pub(crate) const SQL: Sql = Sql {
    // One writer at a time: the key is held by the transaction itself.
    hold_key: "SELECT $1 AS subject, $2 AS workflow, $3 AS key",
    key: "SELECT workflow_id, input_digest, expires_at FROM intent_keys
          WHERE subject = $1 AND workflow = $2 AND key = $3",
    free_key: "DELETE FROM intent_keys WHERE subject = $1 AND workflow = $2 AND key = $3",
    outdated: "SELECT 1 AS newer FROM definitions WHERE name = $1 AND version > $2 LIMIT 1",
    insert_workflow: "INSERT INTO workflows (workflow_id, workflow, definition_version, subject,
                          idempotency_key, input_digest, state, created_at, deadline_at,
                          key_retention_ms, next_seq, replaces, policy_at_admission,
                          policy_current, trace_parent, environment)
                      VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8, $9, $10, $11,
                          $12, $12, $13,
                          (SELECT value FROM store_settings WHERE name = 'environment'))",
    insert_input: "INSERT INTO workflow_inputs (workflow_id, input) VALUES ($1, $2)",
    replace: "UPDATE workflows SET replaced_by = $1 WHERE workflow_id = $2 AND replaced_by IS NULL",
    insert_key: "INSERT INTO intent_keys (subject, workflow, key, workflow_id, input_digest)
                 VALUES ($1, $2, $3, $4, $5)",
};

/// The key's columns as statements take them: subject, workflow, key.
fn key_values(scope: &KeyScope) -> [super::plan::Param<'_>; 3] {
    values![
        scope.subject.0.as_str(),
        scope.workflow.as_str(),
        scope.key.as_str()
    ]
}

/// The key in scope, expired or not.
pub(crate) async fn key_in_scope<T: Tx>(
    tx: &mut T,
    scope: &KeyScope,
) -> StoreResult<Option<KeyRecord>> {
    let sql = tx.sql().admission.key;
    tx.row(sql, &key_values(scope), |r| rows::key_record(r))
        .await
}

/// Answers an admission from the live key `key` in its scope: the workflow it points at (a
/// replay, or a conflict when the input differs); with no live key, `KeyFree` when nothing
/// may be created, `None` when the intent may take the key.
pub(crate) async fn answer_from_key<T: Tx>(
    tx: &mut T,
    req: &AdmitRequest,
    key: Option<KeyRecord>,
) -> StoreResult<Option<AdmitOutcome>> {
    let Some(k) = plan::live(key, req.now) else {
        return Ok(req.create.is_none().then_some(AdmitOutcome::KeyFree));
    };
    if k.input_digest != req.input.digest {
        return Ok(Some(AdmitOutcome::Conflict {
            workflow_id: k.workflow_id,
        }));
    }
    let record = reads::workflow(tx, &k.workflow_id)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("key points at missing {}", k.workflow_id)))?;
    Ok(Some(AdmitOutcome::Replayed(record)))
}

/// Admits one intent in the caller's transaction (see [`AdmissionStore::admit`]).
pub(crate) async fn admit<T: Tx>(tx: &mut T, req: &AdmitRequest) -> StoreResult<AdmitOutcome> {
    let scope = &req.scope;
    let hold = tx.sql().admission.hold_key;
    tx.rows(hold, &key_values(scope), |_| Ok(())).await?;
    let existing = key_in_scope(tx, scope).await?;
    let expired = existing.is_some();
    if let Some(answer) = answer_from_key(tx, req, existing).await? {
        return Ok(answer);
    }
    // `answer_from_key` answers an admission with nothing to create.
    let Some(new) = &req.create else {
        return Ok(AdmitOutcome::KeyFree);
    };
    let sql = &tx.sql().admission;
    let key = key_values(scope);
    // Built on a version since superseded (deployed by another process): built again.
    let newer = tx
        .row(
            sql.outdated,
            &values![scope.workflow.as_str(), i64::from(new.definition_version)],
            |_| Ok(()),
        )
        .await?;
    if newer.is_some() {
        return Ok(AdmitOutcome::Outdated);
    }
    if expired {
        // Past its retention: the key is free again.
        tx.exec(sql.free_key, &key).await?;
    }
    let id = new.workflow_id.as_str();
    tx.exec(
        sql.insert_workflow,
        &values![
            id,
            scope.workflow.as_str(),
            i64::from(new.definition_version),
            scope.subject.0.as_str(),
            scope.key.as_str(),
            req.input.digest.as_str(),
            req.now as i64,
            new.deadline_at as i64,
            new.key_retention_ms as i64,
            new.events.len() as i64 + 1,
            new.replaces.as_ref().map(WorkflowId::as_str),
            i64::from(new.policy_version),
            new.trace_parent.as_deref(),
        ],
    )
    .await?;
    tx.exec(sql.insert_input, &values![id, req.input.text.as_str()])
        .await?;
    if let Some(original) = &new.replaces {
        tx.exec(sql.replace, &values![id, original.as_str()])
            .await?;
    }
    tx.exec(
        sql.insert_key,
        &values![
            scope.subject.0.as_str(),
            scope.workflow.as_str(),
            scope.key.as_str(),
            id,
            req.input.digest.as_str(),
        ],
    )
    .await?;
    tx.apply(Write::InsertSteps {
        new,
        subject: scope.subject.0.as_str(),
        now: req.now,
    })
    .await?;
    if !new.events.is_empty() {
        tx.apply(Write::InsertEvents {
            workflow: &new.workflow_id,
            first: 1,
            now: req.now,
            events: &new.events,
        })
        .await?;
    }
    let created = plan::created(req, new);
    super::notifications::outbox_for(tx, &created, crate::notify::EventType::Recorded, req.now)
        .await?;
    Ok(AdmitOutcome::Created(created))
}

/// The live key in scope, read on its own.
async fn lookup<T: Tx>(tx: &mut T, a: &(KeyScope, Millis)) -> StoreResult<Option<KeyRecord>> {
    Ok(plan::live(key_in_scope(tx, &a.0).await?, a.1))
}

impl<B: Backend> AdmissionStore for B {
    fn key_read_first(&self) -> bool {
        Backend::key_read_first(self)
    }

    async fn lookup_key(&self, scope: &KeyScope, now: Millis) -> StoreResult<Option<KeyRecord>> {
        self.read((scope.clone(), now), |tx, a| Box::pin(lookup(tx, a)))
            .await
    }

    async fn admit(&self, req: AdmitRequest) -> StoreResult<AdmitOutcome> {
        Backend::admit(self, req).await
    }

    async fn admit_and_claim(
        &self,
        req: AdmitRequest,
        next: ClaimRequest,
    ) -> StoreResult<(AdmitOutcome, Option<Claimed>)> {
        Backend::admit_and_claim(self, req, next).await
    }
}
