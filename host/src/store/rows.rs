//! Stored rows to records, written once for both backends: each driver's row type (sqlx's
//! SQLite and PostgreSQL rows, rusqlite's row in the SQLite writer) offers the few typed
//! column reads of [`Columns`], and every mapping below uses only those, by column name.

use super::records::verdicts_from;
use super::{
    ActionAnswer, ActionRecord, ActiveComponent, AttemptRecord, Claimed, ComponentEvent,
    ConsoleSession, ExpiredLease, Fence, KeyRecord, StepContext, StepRecord, StoreError,
    StoreResult, StoredComponent, StoredDefinition, StoredRefusal, Verification, WorkflowRecord,
};
use crate::intent::{
    AttemptId, CompensationTrigger, EvidenceKind, Millis, Provenance, Receipt, ReceiptId, Subject,
    TimelineEvent, WorkflowId,
};
use sqlx::Row as _;

/// Typed reads of one column by name; a missing column or a value of the wrong type is
/// [`StoreError::Corrupt`].
pub(crate) trait Columns {
    fn text(&self, col: &str) -> StoreResult<String>;
    fn opt_text(&self, col: &str) -> StoreResult<Option<String>>;
    fn int(&self, col: &str) -> StoreResult<i64>;
    fn opt_int(&self, col: &str) -> StoreResult<Option<i64>>;
    fn flag(&self, col: &str) -> StoreResult<bool>;
    fn bytes(&self, col: &str) -> StoreResult<Vec<u8>>;

    /// A count or time stored as a signed integer, as the unsigned value it stands for; a
    /// negative one is [`StoreError::Corrupt`], never a wrapped huge number.
    fn uint(&self, col: &str) -> StoreResult<u64> {
        unsigned(col, self.int(col)?)
    }

    fn opt_uint(&self, col: &str) -> StoreResult<Option<u64>> {
        self.opt_int(col)?.map(|v| unsigned(col, v)).transpose()
    }

    /// A small count (a version, an attempt number, a checkpoint) that must fit `T`.
    fn small<T: TryFrom<i64>>(&self, col: &str) -> StoreResult<T> {
        fits(col, self.int(col)?)
    }

    /// A stored enumeration.
    fn parsed<T: std::str::FromStr>(&self, col: &str) -> StoreResult<T>
    where
        T::Err: std::fmt::Display,
    {
        parse(&self.text(col)?)
    }

    /// A stored JSON document.
    fn json(&self, col: &str) -> StoreResult<serde_json::Value> {
        json(&self.text(col)?)
    }
}

/// A stored integer as the unsigned value it stands for; negative is corrupt.
pub(crate) fn unsigned(col: &str, v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("`{col}` is {v}, which is negative")))
}

/// A stored integer that must fit `T` (e.g. a `u32` version, a `u8` checkpoint).
pub(crate) fn fits<T: TryFrom<i64>>(col: &str, v: i64) -> StoreResult<T> {
    T::try_from(v).map_err(|_| {
        StoreError::Corrupt(format!(
            "`{col}` is {v}, outside the range of {}",
            std::any::type_name::<T>()
        ))
    })
}

/// Parses a stored enumeration, turning a bad value into [`StoreError::Corrupt`].
pub(crate) fn parse<T: std::str::FromStr>(text: &str) -> StoreResult<T>
where
    T::Err: std::fmt::Display,
{
    text.parse::<T>()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// Parses a stored JSON document, turning bad JSON into [`StoreError::Corrupt`].
pub(crate) fn json(text: &str) -> StoreResult<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored JSON: {e}")))
}

fn corrupt(col: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("column `{col}`: {e}"))
}

macro_rules! sqlx_columns {
    ($row:ty) => {
        impl Columns for $row {
            fn text(&self, col: &str) -> StoreResult<String> {
                self.try_get(col).map_err(|e| corrupt(col, e))
            }
            fn opt_text(&self, col: &str) -> StoreResult<Option<String>> {
                self.try_get(col).map_err(|e| corrupt(col, e))
            }
            fn int(&self, col: &str) -> StoreResult<i64> {
                self.try_get(col).map_err(|e| corrupt(col, e))
            }
            fn opt_int(&self, col: &str) -> StoreResult<Option<i64>> {
                self.try_get(col).map_err(|e| corrupt(col, e))
            }
            fn flag(&self, col: &str) -> StoreResult<bool> {
                self.try_get(col).map_err(|e| corrupt(col, e))
            }
            fn bytes(&self, col: &str) -> StoreResult<Vec<u8>> {
                self.try_get(col).map_err(|e| corrupt(col, e))
            }
        }
    };
}

sqlx_columns!(sqlx::sqlite::SqliteRow);
sqlx_columns!(sqlx::postgres::PgRow);

/// The index of column `col`. A lookup by name compares the statement's column names from
/// the first (each fetched from SQLite: ~3 % of the writer's time); the mappings read
/// columns mostly in the order they were selected, so the column after the last one found
/// is tried first. Always checked by name, so a wrong guess costs one comparison.
fn index_of(row: &rusqlite::Row<'_>, col: &str) -> rusqlite::Result<usize> {
    thread_local!(static NEXT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });
    let stmt: &rusqlite::Statement<'_> = row.as_ref();
    let guess = NEXT.get();
    let i = match stmt.column_name(guess) {
        Ok(name) if name.eq_ignore_ascii_case(col) => guess,
        _ => stmt.column_index(col)?,
    };
    NEXT.set(i + 1);
    Ok(i)
}

fn get<T: rusqlite::types::FromSql>(row: &rusqlite::Row<'_>, col: &str) -> StoreResult<T> {
    index_of(row, col)
        .and_then(|i| row.get(i))
        .map_err(|e| corrupt(col, e))
}

impl Columns for rusqlite::Row<'_> {
    fn text(&self, col: &str) -> StoreResult<String> {
        get(self, col)
    }
    fn opt_text(&self, col: &str) -> StoreResult<Option<String>> {
        get(self, col)
    }
    fn int(&self, col: &str) -> StoreResult<i64> {
        get(self, col)
    }
    fn opt_int(&self, col: &str) -> StoreResult<Option<i64>> {
        get(self, col)
    }
    fn flag(&self, col: &str) -> StoreResult<bool> {
        get(self, col)
    }
    fn bytes(&self, col: &str) -> StoreResult<Vec<u8>> {
        get(self, col)
    }
}

/// The columns [`workflow`] reads, for a `SELECT` from `workflows` (not aliased: the input
/// is read from its own table by the workflow's id).
pub(crate) const WORKFLOW_COLUMNS: &str =
    "workflow_id, workflow, definition_version, subject, idempotency_key,
     (SELECT i.input FROM workflow_inputs i WHERE i.workflow_id = workflows.workflow_id) AS input,
     input_digest,
     state, created_at, ended_at, deadline_at, attempts_used, external_calls_used, runtime_used_ms,
     cost_used, recovery_queries_used, budget_added, deadline_warned_at, next_seq, input_revision, replaces, replaced_by, cancel_on, policy_at_admission,
     policy_current, migrated_from";

pub(crate) fn workflow(r: &impl Columns) -> StoreResult<WorkflowRecord> {
    Ok(WorkflowRecord {
        workflow_id: WorkflowId(r.text("workflow_id")?),
        workflow: r.text("workflow")?,
        definition_version: r.small::<u32>("definition_version")?,
        subject: Subject(r.text("subject")?),
        idempotency_key: r.text("idempotency_key")?,
        input: r.text("input")?,
        input_digest: r.text("input_digest")?,
        state: r.parsed("state")?,
        created_at: r.uint("created_at")?,
        ended_at: r.opt_uint("ended_at")?,
        deadline_at: r.uint("deadline_at")?,
        attempts_used: r.small::<u32>("attempts_used")?,
        external_calls_used: r.small::<u32>("external_calls_used")?,
        runtime_used_ms: r.uint("runtime_used_ms")?,
        cost_used: r.uint("cost_used")?,
        recovery_queries_used: r.small::<u32>("recovery_queries_used")?,
        budget_added: budget_added(r.opt_text("budget_added")?)?,
        revision: r.uint("next_seq")?.saturating_sub(1),
        input_revision: r.small::<u32>("input_revision")?,
        replaces: r.opt_text("replaces")?.map(WorkflowId),
        replaced_by: r.opt_text("replaced_by")?.map(WorkflowId),
        cancelled: r.opt_text("cancel_on")?.is_some(),
        policy_at_admission: r.small::<u32>("policy_at_admission")?,
        policy_current: r.small::<u32>("policy_current")?,
        deadline_warned_at: r.opt_uint("deadline_warned_at")?,
        migrated_from: r.opt_uint("migrated_from")?.map(|v| v as u32),
    })
}

/// The triggers stored comma-separated in `col` (none when NULL or empty).
pub(crate) fn triggers(r: &impl Columns, col: &str) -> StoreResult<Vec<CompensationTrigger>> {
    r.opt_text(col)?
        .unwrap_or_default()
        .split(',')
        .filter(|t| !t.is_empty())
        .map(parse::<CompensationTrigger>)
        .collect()
}

/// Triggers as stored: comma-separated, `None` when there are none.
pub(crate) fn triggers_text(triggers: &[CompensationTrigger]) -> Option<String> {
    (!triggers.is_empty()).then(|| {
        triggers
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// A row of [`super::plan::COURSE_SELECT`].
pub(crate) fn course_step(r: &impl Columns) -> StoreResult<crate::course::CourseStep> {
    let receipt = r
        .opt_text("receipt_id")?
        .map(|_| r.opt_text("external_reference"))
        .transpose()?;
    Ok(crate::course::CourseStep {
        id: r.text("step")?,
        role: r.opt_text("role")?.map(|t| parse(&t)).transpose()?,
        state: r.parsed("state")?,
        uncertain: r.opt_int("uncertain_since")?.is_some(),
        receipt,
        compensate_on: triggers(r, "compensate_on")?,
        checkpoint: None,
        batch: r.opt_int("items")?.is_some(),
    })
}

pub(crate) fn revision(r: &impl Columns) -> StoreResult<super::RevisionRecord> {
    let list = |col: &str| -> StoreResult<Vec<String>> {
        serde_json::from_str(&r.text(col)?)
            .map_err(|e| StoreError::Corrupt(format!("revision {col}: {e}")))
    };
    Ok(super::RevisionRecord {
        workflow_id: WorkflowId(r.text("workflow_id")?),
        input_revision: r.small::<u32>("input_revision")?,
        prior_digest: r.opt_text("prior_digest")?,
        input_digest: r.text("input_digest")?,
        input: r.opt_text("input")?,
        author: r.text("author")?,
        reason: r.text("reason")?,
        at: r.uint("at")?,
        invalidated_steps: list("invalidated_steps")?,
        kept_receipts: list("kept_receipts")?,
    })
}

pub(crate) fn cancellation(r: &impl Columns) -> StoreResult<super::CancellationRecord> {
    let consequences = r.text("consequences")?;
    Ok(super::CancellationRecord {
        cancellation_id: crate::intent::CancellationId(r.text("cancellation_id")?),
        workflow_id: WorkflowId(r.text("workflow_id")?),
        requested_by: r.text("requested_by")?,
        requested_at: r.uint("requested_at")?,
        reason: r.text("reason")?,
        withdraw: r.int("withdraw")? != 0,
        outcome: serde_json::from_value(serde_json::Value::String(r.text("outcome")?))
            .map_err(|e| StoreError::Corrupt(format!("cancellation outcome: {e}")))?,
        message: r.text("message")?,
        consequences: serde_json::from_str(&consequences)
            .map_err(|e| StoreError::Corrupt(format!("cancellation consequences: {e}")))?,
    })
}

pub(crate) fn step(r: &impl Columns) -> StoreResult<StepRecord> {
    Ok(StepRecord {
        workflow_id: WorkflowId(r.text("workflow_id")?),
        step: r.text("step")?,
        role: r.opt_text("role")?.map(|t| parse(&t)).transpose()?,
        state: r.parsed("state")?,
        uncertain: r.opt_int("uncertain_since")?.is_some(),
        compensate_on: triggers(r, "compensate_on")?,
        blocked: r
            .opt_text("blocked")?
            .map(|t| {
                serde_json::from_str(&t)
                    .map_err(|e| StoreError::Corrupt(format!("step blocked: {e}")))
            })
            .transpose()?,
        attempts: r.small::<u32>("attempts")?,
        ready_at: r.opt_uint("ready_at")?,
        lease_owner: r.opt_text("lease_owner")?,
        lease_expires_at: r.opt_uint("lease_expires_at")?,
        receipt_id: r.opt_text("receipt_id")?.map(ReceiptId),
        note: r.opt_text("note")?,
        escalated: r.opt_text("escalated")?.map(|s| json(&s)).transpose()?,
        key_remembered_until: r.opt_uint("key_remembered_until")?,
        retention_warned_at: r.opt_uint("retention_warned_at")?,
        key_step: r.opt_text("key_step")?,
        batch_of: r.opt_text("batch_of")?,
        item_key: r.opt_text("item_key")?,
        item_index: r.opt_uint("item_index")?,
        items: r.opt_uint("items")?,
    })
}

/// The columns [`receipt`] reads, for a `SELECT`.
pub(crate) const RECEIPT_COLUMNS: &str =
    "receipt_id, workflow_id, step, attempt_id, evidence_kind, component, component_version,
     component_digest, input_digest, external_reference, output, recorded_at, author, reason,
     evidence, superseded_by";

pub(crate) fn receipt(r: &impl Columns) -> StoreResult<Receipt> {
    Ok(Receipt {
        receipt_id: ReceiptId(r.text("receipt_id")?),
        workflow_id: WorkflowId(r.text("workflow_id")?),
        step: r.text("step")?,
        attempt_id: r.opt_text("attempt_id")?.map(AttemptId),
        evidence_kind: r.parsed::<EvidenceKind>("evidence_kind")?,
        provenance: Provenance {
            component: r.text("component")?,
            component_version: r.text("component_version")?,
            component_digest: r.text("component_digest")?,
            input_digest: r.text("input_digest")?,
        },
        external_reference: r.opt_text("external_reference")?,
        output: r.json("output")?,
        recorded_at: r.uint("recorded_at")?,
        author: r.opt_text("author")?,
        reason: r.opt_text("reason")?,
        evidence: r.opt_text("evidence")?,
        superseded_by: r
            .opt_int("superseded_by")?
            .map(|v| fits("superseded_by", v))
            .transpose()?,
    })
}

pub(crate) fn attempt(r: &impl Columns) -> StoreResult<AttemptRecord> {
    Ok(AttemptRecord {
        attempt_id: AttemptId(r.text("attempt_id")?),
        workflow_id: WorkflowId(r.text("workflow_id")?),
        step: r.text("step")?,
        number: r.small::<u32>("number")?,
        trigger: r.parsed("trigger")?,
        lease_owner: r.text("lease_owner")?,
        provenance: provenance(r)?,
        request_identity: r.opt_text("request_identity")?,
        checkpoint: r.small::<u8>("checkpoint")?,
        observation: r.opt_text("observation")?,
        outcome: r.parsed("outcome")?,
        started_at: r.uint("started_at")?,
        finished_at: r.opt_uint("finished_at")?,
        log: r.json("log")?,
        superseded_by: r
            .opt_int("superseded_by")?
            .map(|v| fits("superseded_by", v))
            .transpose()?,
        input_revision: r.small::<u32>("input_revision")?,
        policy: r
            .opt_text("policy")?
            .map(|t| {
                serde_json::from_str(&t)
                    .map_err(|e| StoreError::Corrupt(format!("attempt policy: {e}")))
            })
            .transpose()?,
    })
}

/// An attempt's provenance: all four columns, or none (before checkpoint 2).
fn provenance(r: &impl Columns) -> StoreResult<Option<Provenance>> {
    let Some(component) = r.opt_text("component")? else {
        return Ok(None);
    };
    let part = |col: &str| -> StoreResult<String> {
        r.opt_text(col)?.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "an attempt names its component but not its `{col}`"
            ))
        })
    };
    Ok(Some(Provenance {
        component,
        component_version: part("component_version")?,
        component_digest: part("component_digest")?,
        input_digest: part("input_digest")?,
    }))
}

pub(crate) fn timeline_event(r: &impl Columns) -> StoreResult<TimelineEvent> {
    Ok(TimelineEvent {
        seq: r.uint("seq")?,
        at: r.uint("at")?,
        kind: r.parsed("kind")?,
        step: r.opt_text("step")?,
        attempt_id: r.opt_text("attempt_id")?,
        text: r.text("text")?,
        data: r.json("data")?,
    })
}

pub(crate) fn definition(r: &impl Columns) -> StoreResult<StoredDefinition> {
    Ok(StoredDefinition {
        name: r.text("name")?,
        version: r.small::<u32>("version")?,
        digest: r.text("digest")?,
        source: r.text("source")?,
        deployed_at: r.uint("deployed_at")?,
    })
}

pub(crate) fn stored_component(r: &impl Columns) -> StoreResult<StoredComponent> {
    Ok(StoredComponent {
        digest: r.text("digest")?,
        name: r.text("name")?,
        version: r.text("version")?,
        kind: r.text("kind")?,
        size_bytes: r.uint("size_bytes")?,
        registered_at: r.uint("registered_at")?,
    })
}

pub(crate) fn active_component(r: &impl Columns) -> StoreResult<ActiveComponent> {
    Ok(ActiveComponent {
        name: r.text("name")?,
        version: r.text("version")?,
        digest: r.text("digest")?,
        since: r.uint("since")?,
    })
}

pub(crate) fn component_event(r: &impl Columns) -> StoreResult<ComponentEvent> {
    Ok(ComponentEvent {
        seq: r.uint("seq")?,
        name: r.text("name")?,
        version: r.text("version")?,
        digest: r.text("digest")?,
        action: r.text("action")?,
        author: r.text("author")?,
        at: r.uint("at")?,
    })
}

pub(crate) fn verification(r: &impl Columns) -> StoreResult<Verification> {
    Ok(Verification {
        digest: r.text("digest")?,
        name: r.text("name")?,
        version: r.text("version")?,
        passed: r.flag("passed")?,
        verdicts: verdicts_from(&r.text("verdicts")?)?,
        author: r.text("author")?,
        verified_at: r.uint("verified_at")?,
    })
}

/// The columns [`expired_lease`] reads: the step (`s`), its latest attempt (`a`) and the
/// workflow (`w`).
pub(crate) const EXPIRED_LEASE_COLUMNS: &str =
    "s.workflow_id, s.step, s.lease_owner, s.lease_token, s.lease_expires_at, s.uncertain_since,
     s.key_remembered_until, s.attempts, s.next_trigger, a.attempt_id, a.checkpoint, a.started_at, a.trigger,
     a.component, a.component_version, a.result, w.workflow, w.definition_version";

pub(crate) fn expired_lease(r: &impl Columns) -> StoreResult<ExpiredLease> {
    Ok(ExpiredLease {
        fence: Fence {
            workflow_id: WorkflowId(r.text("workflow_id")?),
            step: r.text("step")?,
            lease_token: r.opt_text("lease_token")?.unwrap_or_default(),
        },
        lease_owner: r.opt_text("lease_owner")?.unwrap_or_default(),
        lease_expires_at: r.opt_uint("lease_expires_at")?.unwrap_or(0),
        attempt_id: r.opt_text("attempt_id")?.map(AttemptId),
        checkpoint: r
            .opt_int("checkpoint")?
            .map(|v| fits::<u8>("checkpoint", v))
            .transpose()?
            .unwrap_or(0),
        attempt_number: r.small::<u32>("attempts")?,
        attempt_started_at: r.opt_uint("started_at")?.unwrap_or(0),
        trigger: parse(r.opt_text("trigger")?.as_deref().unwrap_or("initial"))?,
        component: r.opt_text("component")?,
        component_version: r.opt_text("component_version")?,
        workflow: r.text("workflow")?,
        definition_version: r.small::<u32>("definition_version")?,
        uncertain_since: r.opt_uint("uncertain_since")?,
        key_remembered_until: r.opt_uint("key_remembered_until")?,
        result: r
            .opt_text("result")?
            .map(|t| {
                serde_json::from_str(&t)
                    .map_err(|e| StoreError::Corrupt(format!("stored attempt result: {e}")))
            })
            .transpose()?,
    })
}

/// Columns `request_digest`, `refusal`, `answer`, `refusal_details`: a refusal's code beside
/// its message (and details), or the applied action's answer alone.
pub(crate) fn action_record(r: &impl Columns) -> StoreResult<ActionRecord> {
    let answer = match (r.opt_text("refusal")?, r.opt_text("answer")?) {
        (Some(code), Some(message)) => {
            let details = match r.opt_text("refusal_details")? {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| StoreError::Corrupt(format!("refusal details: {e}")))?,
                None => Vec::new(),
            };
            Some(ActionAnswer::Refused(StoredRefusal {
                code,
                message,
                details,
            }))
        }
        (None, Some(applied)) => Some(ActionAnswer::Applied(applied)),
        (Some(_), None) => {
            return Err(StoreError::Corrupt(
                "an action's refusal without its message".into(),
            ));
        }
        (None, None) => None,
    };
    Ok(ActionRecord {
        request_digest: r.text("request_digest")?,
        answer,
    })
}

/// The `(refusal, answer, refusal_details)` columns of an answer.
pub(crate) fn answer_columns(answer: &ActionAnswer) -> (Option<&str>, &str, Option<String>) {
    match answer {
        ActionAnswer::Applied(body) => (None, body, None),
        ActionAnswer::Refused(r) => (
            Some(&r.code),
            &r.message,
            (!r.details.is_empty())
                .then(|| serde_json::Value::Array(r.details.clone()).to_string()),
        ),
    }
}

/// A step just claimed, from columns `workflow_id`, `step`, `lease_token`, `attempts`,
/// `next_trigger`, `uncertain_since`; its workflow's part is filled in afterwards.
pub(crate) fn claimed(
    r: &impl Columns,
    now: Millis,
    lease_expires_at: Millis,
) -> StoreResult<Claimed> {
    Ok(Claimed {
        fence: Fence {
            workflow_id: WorkflowId(r.text("workflow_id")?),
            step: r.text("step")?,
            lease_token: r.text("lease_token")?,
        },
        attempt_id: AttemptId::new(now),
        attempt_number: r.small("attempts")?,
        trigger: r.parsed("next_trigger")?,
        workflow: String::new(),
        subject: Subject(String::new()),
        definition_version: 0,
        lease_expires_at,
        deadline_at: 0,
        attempts_used: 0,
        external_calls_used: 0,
        runtime_used_ms: 0,
        cost_used: 0,
        recovery_queries_used: 0,
        budget_added: Default::default(),
        uncertain_since: r.opt_uint("uncertain_since")?,
        key_remembered_until: r.opt_uint("key_remembered_until")?,
        policy_exception: r
            .opt_text("policy_exception")?
            .map(|t| {
                serde_json::from_str(&t)
                    .map_err(|e| StoreError::Corrupt(format!("policy exception: {e}")))
            })
            .transpose()?,
        context: StepContext::default(),
        trace_parent: None,
        environment: None,
        key_step: r.opt_text("key_step")?,
        adapter: r.opt_text("adapter")?,
        item: r
            .opt_text("item")?
            .map(|t| {
                serde_json::from_str(&t)
                    .map_err(|e| StoreError::Corrupt(format!("batch item: {e}")))
            })
            .transpose()?,
    })
}

/// Columns `workflow_id`, `input_digest`, `expires_at` of an idempotency key.
pub(crate) fn key_record(r: &impl Columns) -> StoreResult<KeyRecord> {
    Ok(KeyRecord {
        workflow_id: WorkflowId(r.text("workflow_id")?),
        input_digest: r.text("input_digest")?,
        expires_at: r.opt_uint("expires_at")?,
    })
}

pub(crate) fn console_session(r: &impl Columns) -> StoreResult<ConsoleSession> {
    Ok(ConsoleSession {
        id_digest: r.text("id_digest")?,
        subject: r.text("subject")?,
        role: r.text("role")?,
        csrf: r.text("csrf")?,
        started_at: r.uint("started_at")?,
        expires_at: r.uint("expires_at")?,
    })
}

/// `budget_added` as stored: JSON amounts, NULL until the first extension.
pub(crate) fn budget_added(text: Option<String>) -> StoreResult<crate::budget::Amounts> {
    text.map_or(Ok(Default::default()), |t| {
        serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(format!("budget_added: {e}")))
    })
}

/// The columns [`policy`] reads.
pub(crate) fn policy(r: &impl Columns) -> StoreResult<crate::store::StoredPolicy> {
    Ok(crate::store::StoredPolicy {
        version: r.small::<u32>("version")?,
        digest: r.text("digest")?,
        document: r.text("document")?,
        author: r.text("author")?,
        deployed_at: r.uint("deployed_at")?,
    })
}

/// The columns [`notification`] reads.
pub(crate) fn notification(r: &impl Columns) -> StoreResult<crate::store::NotificationRecord> {
    Ok(crate::store::NotificationRecord {
        seq: r.uint("seq")?,
        id: r.text("id")?,
        workflow_id: WorkflowId(r.text("workflow_id")?),
        kind: r.text("type")?,
        revision: r.uint("revision")?,
        body: r.text("body")?,
        state: r.text("state")?,
        attempts: r.small::<u32>("attempts")?,
        created_at: r.uint("created_at")?,
        next_at: r.uint("next_at")?,
        delivered_to: serde_json::from_str(&r.text("delivered_to")?)
            .map_err(|e| StoreError::Corrupt(format!("outbox delivered_to: {e}")))?,
        last_error: r.opt_text("last_error")?,
        finished_at: r.opt_uint("finished_at")?,
    })
}

/// A migration as stored.
pub(crate) fn migration(r: &impl Columns) -> StoreResult<super::MigrationRecord> {
    let plan: crate::course::MigrationPlan = serde_json::from_str(&r.text("plan")?)
        .map_err(|e| StoreError::Corrupt(format!("migration plan: {e}")))?;
    Ok(super::MigrationRecord {
        workflow_id: WorkflowId(r.text("workflow_id")?),
        number: r.small::<u32>("number")?,
        plan,
        author: r.text("author")?,
        reason: r.text("reason")?,
        at: r.uint("at")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Columns read in the selected order, out of it, twice, in another statement, and one
    /// that is not there: each by its own name, whatever the lookup guessed.
    #[test]
    fn columns_are_found_by_name_in_any_order() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let mut first = conn
            .prepare("SELECT 'a' AS one, 2 AS two, 'c' AS three, NULL AS four")
            .unwrap();
        let mut rows = first.query([]).unwrap();
        let r = rows.next().unwrap().unwrap();
        assert_eq!(r.text("one").unwrap(), "a");
        assert_eq!(r.int("two").unwrap(), 2);
        assert_eq!(r.text("three").unwrap(), "c");
        assert_eq!(r.opt_text("four").unwrap(), None);
        assert_eq!(r.text("three").unwrap(), "c");
        assert_eq!(r.text("ONE").unwrap(), "a");
        assert_eq!(r.int("two").unwrap(), 2);
        let mut second = conn.prepare("SELECT 7 AS two, 'x' AS one").unwrap();
        let mut rows2 = second.query([]).unwrap();
        let r2 = rows2.next().unwrap().unwrap();
        assert_eq!(r2.text("one").unwrap(), "x");
        assert_eq!(r2.int("two").unwrap(), 7);
        assert!(matches!(r2.text("three"), Err(StoreError::Corrupt(_))));
        assert_eq!(r.text("four").ok(), None);
    }

    #[test]
    fn a_negative_or_oversized_stored_integer_is_corrupt_not_wrapped() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let mut statement = conn
            .prepare("SELECT -5 AS n, 300 AS c, NULL AS none, 7 AS ok")
            .unwrap();
        let mut found = statement.query([]).unwrap();
        let r = found.next().unwrap().unwrap();
        let negative = r.uint("n").unwrap_err();
        assert!(
            matches!(&negative, StoreError::Corrupt(m) if m.contains("`n` is -5")),
            "{negative:?}"
        );
        assert!(matches!(r.opt_uint("n"), Err(StoreError::Corrupt(_))));
        assert!(matches!(r.small::<u8>("c"), Err(StoreError::Corrupt(_))));
        assert_eq!(r.opt_uint("none").unwrap(), None);
        assert_eq!(r.small::<u32>("ok").unwrap(), 7);
        assert_eq!(r.uint("ok").unwrap(), 7);
    }
}
