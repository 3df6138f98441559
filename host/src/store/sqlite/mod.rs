//! The SQLite backend: one database file, the embedded default.
//!
//! The file is in WAL mode with `synchronous=FULL`: every commit is fsynced before the
//! caller hears about it, and readers never block the writer. Writes go through one writer
//! task with group commit (see `writer.rs`); reads use a small pool of read connections.

mod executor;
mod read;
mod writer;

use super::{
    AdmissionStore, AdmitOutcome, AdmitRequest, DefinitionStore, DeployOutcome, KeyRecord,
    KeyScope, NewDefinition, StoreError, StoreResult, StoredDefinition, WorkflowRecord,
};
use crate::intent::{Millis, NewEvent, StepState, WorkflowId, WorkflowState};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Row, SqliteConnection, SqlitePool};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;
use writer::Writer;

/// The SQLite store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    read: SqlitePool,
    writer: Writer,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and applies migrations.
    pub async fn open(path: &Path) -> StoreResult<Self> {
        Self::open_url(&format!("sqlite://{}", path.display())).await
    }

    /// Opens a `sqlite://` URL.
    pub async fn open_url(url: &str) -> StoreResult<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Backend(format!("bad SQLite URL `{url}`: {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk (fsynced) before it returns — nothing acknowledged is lost.
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let mut write_conn = options
            .connect()
            .await
            .map_err(|e| StoreError::Backend(format!("cannot open `{url}`: {e}")))?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&mut write_conn)
            .await
            .map_err(|e| StoreError::Backend(format!("migrating `{url}`: {e}")))?;
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.read_only(true))
            .await
            .map_err(|e| StoreError::Backend(format!("cannot open `{url}` for reading: {e}")))?;
        Ok(Self {
            read,
            writer: Writer::start(write_conn),
        })
    }
}

/// Appends events to a workflow's timeline, numbering them from its counter.
pub(crate) async fn append_events(
    conn: &mut SqliteConnection,
    workflow_id: &WorkflowId,
    now: Millis,
    events: &[NewEvent],
) -> StoreResult<()> {
    if events.is_empty() {
        return Ok(());
    }
    let n = events.len() as i64;
    let first: i64 = sqlx::query_scalar(
        "UPDATE workflows SET next_seq = next_seq + ?1 WHERE workflow_id = ?2 RETURNING next_seq - ?1",
    )
    .bind(n)
    .bind(workflow_id.as_str())
    .fetch_one(&mut *conn)
    .await?;
    insert_events(conn, workflow_id, first as u64, now, events).await
}

/// Inserts events numbered from `first` in one statement (each statement is a round trip
/// to the connection's thread, so rows are batched).
pub(crate) async fn insert_events(
    conn: &mut SqliteConnection,
    workflow_id: &WorkflowId,
    first: u64,
    now: Millis,
    events: &[NewEvent],
) -> StoreResult<()> {
    let rows = vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; events.len()].join(", ");
    let sql = format!(
        "INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data) VALUES {rows}"
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (i, e) in events.iter().enumerate() {
        q = q
            .bind(workflow_id.as_str())
            .bind((first + i as u64) as i64)
            .bind(now as i64)
            .bind(e.kind.as_str())
            .bind(e.step.as_deref())
            .bind(e.attempt_id.as_deref())
            .bind(&e.text)
            .bind(e.data.to_string());
    }
    q.execute(&mut *conn).await?;
    Ok(())
}

impl DefinitionStore for SqliteStore {
    async fn deploy_definition(&self, def: NewDefinition) -> StoreResult<DeployOutcome> {
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    let existing: Option<String> =
                        sqlx::query_scalar("SELECT digest FROM definitions WHERE name = ? AND version = ?")
                            .bind(&def.name)
                            .bind(def.version as i64)
                            .fetch_optional(&mut *conn)
                            .await?;
                    match existing {
                        Some(d) if d == def.digest => Ok(DeployOutcome::Unchanged),
                        Some(d) => Err(StoreError::DefinitionChanged {
                            name: def.name,
                            version: def.version,
                            existing: d,
                            new: def.digest,
                        }),
                        None => {
                            sqlx::query(
                                "INSERT INTO definitions (name, version, digest, source, deployed_at) VALUES (?, ?, ?, ?, ?)",
                            )
                            .bind(&def.name)
                            .bind(def.version as i64)
                            .bind(&def.digest)
                            .bind(&def.source)
                            .bind(def.deployed_at as i64)
                            .execute(&mut *conn)
                            .await?;
                            Ok(DeployOutcome::Deployed)
                        }
                    }
                })
            })
            .await
    }

    async fn definition(&self, name: &str, version: u32) -> StoreResult<Option<StoredDefinition>> {
        let row = sqlx::query("SELECT name, version, digest, source, deployed_at FROM definitions WHERE name = ? AND version = ?")
            .bind(name)
            .bind(version as i64)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| definition_from_row(&r)))
    }

    async fn latest_definition(&self, name: &str) -> StoreResult<Option<StoredDefinition>> {
        let row = sqlx::query(
            "SELECT name, version, digest, source, deployed_at FROM definitions WHERE name = ? ORDER BY version DESC LIMIT 1",
        )
        .bind(name)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.map(|r| definition_from_row(&r)))
    }
}

fn definition_from_row(r: &sqlx::sqlite::SqliteRow) -> StoredDefinition {
    StoredDefinition {
        name: r.get("name"),
        version: r.get::<i64, _>("version") as u32,
        digest: r.get("digest"),
        source: r.get("source"),
        deployed_at: r.get::<i64, _>("deployed_at") as u64,
    }
}

async fn key_in_scope(
    conn: &mut SqliteConnection,
    scope: &KeyScope,
) -> StoreResult<Option<KeyRecord>> {
    let row = sqlx::query(
        "SELECT workflow_id, input_digest, expires_at FROM intent_keys WHERE subject = ? AND workflow = ? AND key = ?",
    )
    .bind(&scope.subject.0)
    .bind(&scope.workflow)
    .bind(&scope.key)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|r| KeyRecord {
        workflow_id: WorkflowId(r.get("workflow_id")),
        input_digest: r.get("input_digest"),
        expires_at: r.get::<Option<i64>, _>("expires_at").map(|v| v as u64),
    }))
}

fn live(key: Option<KeyRecord>, now: Millis) -> Option<KeyRecord> {
    key.filter(|k| k.expires_at.is_none_or(|e| e > now))
}

impl AdmissionStore for SqliteStore {
    async fn lookup_key(&self, scope: &KeyScope, now: Millis) -> StoreResult<Option<KeyRecord>> {
        let mut conn = self.read.acquire().await?;
        Ok(live(key_in_scope(&mut conn, scope).await?, now))
    }

    async fn admit(&self, req: AdmitRequest) -> StoreResult<AdmitOutcome> {
        self.writer
            .write(move |conn| {
                Box::pin(async move {
                    let existing = key_in_scope(conn, &req.scope).await?;
                    if let Some(k) = live(existing.clone(), req.now) {
                        if k.input_digest != req.input.digest {
                            return Ok(AdmitOutcome::Conflict {
                                workflow_id: k.workflow_id,
                            });
                        }
                        let record = read::workflow_on(conn, &k.workflow_id)
                            .await?
                            .ok_or_else(|| StoreError::Corrupt(format!("key points at missing {}", k.workflow_id)))?;
                        return Ok(AdmitOutcome::Replayed(record));
                    }
                    if existing.is_some() {
                        // Past its retention: the key is free again.
                        sqlx::query("DELETE FROM intent_keys WHERE subject = ? AND workflow = ? AND key = ?")
                            .bind(&req.scope.subject.0)
                            .bind(&req.scope.workflow)
                            .bind(&req.scope.key)
                            .execute(&mut *conn)
                            .await?;
                    }
                    let id = req.workflow_id.as_str();
                    sqlx::query(
                        "INSERT INTO workflows (workflow_id, workflow, definition_version, subject, idempotency_key,
                             input, input_digest, state, created_at, deadline_at, key_retention_ms, next_seq)
                         VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                    )
                    .bind(id)
                    .bind(&req.scope.workflow)
                    .bind(req.definition_version as i64)
                    .bind(&req.scope.subject.0)
                    .bind(&req.scope.key)
                    .bind(&req.input.text)
                    .bind(&req.input.digest)
                    .bind(req.now as i64)
                    .bind(req.deadline_at as i64)
                    .bind(req.key_retention_ms as i64)
                    .bind(req.events.len() as i64 + 1)
                    .execute(&mut *conn)
                    .await?;
                    sqlx::query(
                        "INSERT INTO intent_keys (subject, workflow, key, workflow_id, input_digest) VALUES (?, ?, ?, ?, ?)",
                    )
                    .bind(&req.scope.subject.0)
                    .bind(&req.scope.workflow)
                    .bind(&req.scope.key)
                    .bind(id)
                    .bind(&req.input.digest)
                    .execute(&mut *conn)
                    .await?;
                    if !req.steps.is_empty() {
                        let rows = vec!["(?, ?, ?, ?)"; req.steps.len()].join(", ");
                        let sql = format!("INSERT INTO steps (workflow_id, step, state, ready_at) VALUES {rows}");
                        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                        for step in &req.steps {
                            let ready = step.depends_on.is_empty();
                            q = q
                                .bind(id)
                                .bind(&step.id)
                                .bind(if ready { StepState::Ready } else { StepState::Pending }.as_str())
                                .bind(ready.then_some(req.now as i64));
                        }
                        q.execute(&mut *conn).await?;
                    }
                    let deps: Vec<(&String, &String)> =
                        req.steps.iter().flat_map(|s| s.depends_on.iter().map(move |d| (&s.id, d))).collect();
                    if !deps.is_empty() {
                        let rows = vec!["(?, ?, ?)"; deps.len()].join(", ");
                        let sql = format!("INSERT INTO step_deps (workflow_id, step, depends_on) VALUES {rows}");
                        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                        for (step, dep) in deps {
                            q = q.bind(id).bind(step).bind(dep);
                        }
                        q.execute(&mut *conn).await?;
                    }
                    if !req.events.is_empty() {
                        insert_events(conn, &req.workflow_id, 1, req.now, &req.events).await?;
                    }
                    executor::outbox(conn, &req.workflow_id, "recorded", req.now).await?;
                    let record = WorkflowRecord {
                        workflow_id: req.workflow_id.clone(),
                        workflow: req.scope.workflow.clone(),
                        definition_version: req.definition_version,
                        subject: req.scope.subject.clone(),
                        idempotency_key: req.scope.key.clone(),
                        input: req.input.text.clone(),
                        input_digest: req.input.digest.clone(),
                        state: WorkflowState::Running,
                        created_at: req.now,
                        ended_at: None,
                        deadline_at: req.deadline_at,
                        attempts_used: 0,
                        external_calls_used: 0,
                        runtime_used_ms: 0,
                    };
                    Ok(AdmitOutcome::Created(record))
                })
            })
            .await
    }
}
