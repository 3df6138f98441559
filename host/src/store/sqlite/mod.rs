//! The SQLite backend: one database file, the embedded default.
//!
//! The file is in WAL mode with `synchronous=FULL`: every commit is fsynced before the
//! caller hears about it, and readers never block the writer. Writes go through one writer
//! thread with group commit (see `writer.rs`); microsecond point reads run inline on a few
//! plain read connections (`points.rs`), longer reads on a small sqlx pool. sqlx also owns
//! the migrations.

mod executor;
mod points;
mod profile;
mod read;
mod tx;
mod writer;

pub use writer::Hold;

use super::plan;
use super::rows;
use super::{StoreError, StoreResult};
use crate::intent::{Millis, NewEvent, StepState, WorkflowId};
use rusqlite::{Connection, params};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection as _, SqlitePool};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;
use writer::Writer;

/// The SQLite store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    read: SqlitePool,
    points: std::sync::Arc<points::PointReads>,
    writer: Writer,
    /// Test failpoint: how many lease renewals still to fail as a busy database would.
    failing_renewals: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// How this host's claims are shared between subjects.
    fair: std::sync::Arc<crate::store::fairness::FairShare>,
}

impl SqliteStore {
    /// Test failpoint: the next `n` write transactions commit, but their callers are never
    /// told (as when a host fails between the commit and its acknowledgement).
    #[doc(hidden)]
    pub fn lose_next_acknowledgements(&self, n: u32) {
        self.writer.lose_acknowledgements(n);
    }

    /// Test failpoint: the next `n` lease renewals fail as a busy database would (nothing
    /// written, safe to retry).
    #[doc(hidden)]
    pub fn fail_next_renewals(&self, n: u32) {
        self.failing_renewals
            .store(n, std::sync::atomic::Ordering::Release);
    }

    /// Test control: stops the writer until the returned guard is dropped, and fills its
    /// queue, so that the next admission finds it saturated.
    #[doc(hidden)]
    pub async fn saturate_writer(&self) -> writer::Hold {
        self.writer.saturate().await
    }

    /// Writes a consistent copy of the database, as committed now, to the new file `path`
    /// (`VACUUM INTO`): a simulation starts each run from one prepared store.
    pub async fn copy_into(&self, path: &Path) -> StoreResult<()> {
        sqlx::query("VACUUM INTO ?1")
            .bind(path.display().to_string())
            .execute(&self.read)
            .await
            .map_err(|e| {
                StoreError::safe(format!("copying the database to `{}`: {e}", path.display()))
            })?;
        Ok(())
    }

    /// Opens (creating if needed) the database at `path` and applies migrations.
    pub async fn open(path: &Path) -> StoreResult<Self> {
        // A path, not a URL: `?`, `#` or `%` in it are part of the name.
        let options = SqliteConnectOptions::new().filename(path);
        Self::open_with(options, &path.display().to_string()).await
    }

    /// Opens a `sqlite://` URL.
    pub async fn open_url(url: &str) -> StoreResult<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::never(format!("bad SQLite URL `{url}`: {e}")))?;
        Self::open_with(options, url).await
    }

    async fn open_with(options: SqliteConnectOptions, url: &str) -> StoreResult<Self> {
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk (fsynced) before it returns — nothing acknowledged is lost.
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let mut setup = options
            .connect()
            .await
            .map_err(|e| StoreError::safe(format!("cannot open `{url}`: {e}")))?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&mut setup)
            .await
            .map_err(|e| StoreError::never(format!("migrating `{url}`: {e}")))?;
        setup
            .close()
            .await
            .map_err(|e| StoreError::safe(format!("closing `{url}` after migrating: {e}")))?;
        let path = options.get_filename().to_path_buf();
        let write_conn = writer::open_write_connection(&path)?;
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.read_only(true))
            .await
            .map_err(|e| StoreError::safe(format!("cannot open `{url}` for reading: {e}")))?;
        Ok(Self {
            read,
            points: std::sync::Arc::new(points::PointReads::new(&path)),
            writer: Writer::start_checkpointed(write_conn, &path, writer::QUEUE)?,
            failing_renewals: Default::default(),
            fair: Default::default(),
        })
    }
}

/// Appends events to a workflow's timeline, numbering them from its counter.
pub(crate) fn append_events(
    conn: &Connection,
    workflow_id: &WorkflowId,
    now: Millis,
    events: &[NewEvent],
) -> StoreResult<()> {
    // Nothing to number leaves the counter alone.
    let Ok(count @ 1..) = i64::try_from(events.len()) else {
        return Ok(());
    };
    // Read, then counted: an `UPDATE … RETURNING` gathers its row in a temporary table.
    let first: i64 = conn
        .prepare_cached("SELECT next_seq FROM workflows WHERE workflow_id = ?1")?
        .query_row([workflow_id.as_str()], |r| r.get(0))?;
    conn.prepare_cached("UPDATE workflows SET next_seq = next_seq + ?1 WHERE workflow_id = ?2")?
        .execute(params![count, workflow_id.as_str()])?;
    insert_events(conn, workflow_id, first as u64, now, events)
}

/// A workflow's timeline entries, each row `workflow_id, seq, at, kind, step, attempt_id,
/// text, data`.
pub(crate) static TIMELINE: std::sync::LazyLock<MultiRow> = std::sync::LazyLock::new(|| {
    MultiRow::new(
        "INSERT INTO timeline (workflow_id, seq, at, kind, step, attempt_id, text, data) VALUES",
        8,
    )
});

/// Inserts events numbered from `first`, in one statement.
pub(crate) fn insert_events(
    conn: &Connection,
    workflow_id: &WorkflowId,
    first: u64,
    now: Millis,
    events: &[NewEvent],
) -> StoreResult<()> {
    let data: Vec<String> = events.iter().map(|e| e.data.to_string()).collect();
    let seqs: Vec<i64> = (0..events.len())
        .map(|i| (first + i as u64) as i64)
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let (id, at) = (workflow_id.as_str(), now as i64);
    let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(8 * events.len());
    for (i, e) in events.iter().enumerate() {
        values.extend([
            &id as &dyn rusqlite::ToSql,
            &seqs[i],
            &at,
            &kinds[i],
            &e.step,
            &e.attempt_id,
            &e.text,
            &data[i],
        ]);
    }
    TIMELINE.insert(conn, &values)
}

/// A multi-row `INSERT … VALUES (?, ?), (?, ?)`: rows go in chunks of up to
/// [`MultiRow::CHUNK`], one statement each, whose texts are made once — a few statements
/// serve every write (the writer keeps each prepared).
pub(crate) struct MultiRow {
    width: usize,
    texts: Vec<String>,
}

impl MultiRow {
    const CHUNK: usize = 16;

    pub(crate) fn new(head: &'static str, width: usize) -> Self {
        Self::with_tail(head, width, "")
    }

    /// [`MultiRow::new`] with `tail` after the rows (an upsert's `ON CONFLICT`).
    pub(crate) fn with_tail(head: &'static str, width: usize, tail: &'static str) -> Self {
        let row = format!("({})", vec!["?"; width].join(", "));
        let texts = (1..=Self::CHUNK)
            .map(|n| format!("{head} {}{tail}", vec![row.as_str(); n].join(", ")))
            .collect();
        Self { width, texts }
    }

    /// Inserts the rows whose values, row after row, are `values`.
    pub(crate) fn insert(
        &self,
        conn: &Connection,
        values: &[&dyn rusqlite::ToSql],
    ) -> StoreResult<()> {
        if !values.len().is_multiple_of(self.width) {
            return Err(StoreError::never(format!(
                "{} values do not make rows of {}",
                values.len(),
                self.width
            )));
        }
        for chunk in values.chunks(self.width * Self::CHUNK) {
            conn.prepare_cached(&self.texts[chunk.len() / self.width - 1])?
                .execute(chunk)?;
        }
        Ok(())
    }
}

/// Every row `stmt` returns for `params`, mapped by `decode`.
pub(crate) fn each_row<T>(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
    mut decode: impl FnMut(&rusqlite::Row<'_>) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let mut found = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(r) = found.next()? {
        out.push(decode(r)?);
    }
    Ok(out)
}

/// The rows of a new workflow's steps and their dependencies, one statement each.
pub(crate) fn insert_steps(
    conn: &Connection,
    new: &crate::store::NewWorkflow,
    subject: &str,
    now: Millis,
) -> StoreResult<()> {
    static STEPS: std::sync::LazyLock<MultiRow> = std::sync::LazyLock::new(|| {
        MultiRow::new(
            "INSERT INTO steps (workflow_id, step, state, ready_at, role, compensate_on, reads,
                 subject, adapter) VALUES",
            9,
        )
    });
    static DEPS: std::sync::LazyLock<MultiRow> = std::sync::LazyLock::new(|| {
        MultiRow::new(
            "INSERT INTO step_deps (workflow_id, step, depends_on) VALUES",
            3,
        )
    });
    let id = new.workflow_id.as_str();
    let now = now as i64;
    let mut columns = Vec::with_capacity(new.steps.len());
    for step in &new.steps {
        let ready = step.depends_on.is_empty();
        let state = if ready {
            StepState::Ready
        } else {
            StepState::Pending
        };
        columns.push((
            state.as_str(),
            ready.then_some(now),
            step.role.as_str(),
            rows::triggers_text(&step.compensate_on),
            plan::reads_text(step.reads.as_deref())?,
        ));
    }
    let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(9 * new.steps.len());
    for (step, (state, ready_at, role, triggers, reads)) in new.steps.iter().zip(&columns) {
        values.extend([
            &id as &dyn rusqlite::ToSql,
            &step.id,
            state,
            ready_at,
            role,
            triggers,
            reads,
            &subject,
            &step.adapter,
        ]);
    }
    STEPS.insert(conn, &values)?;
    let mut deps: Vec<&dyn rusqlite::ToSql> = Vec::new();
    for step in &new.steps {
        for d in &step.depends_on {
            deps.extend([&id as &dyn rusqlite::ToSql, &step.id, d]);
        }
    }
    DEPS.insert(conn, &deps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_row_inserts_write_every_row_in_order_in_chunks() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER, s TEXT)")
            .unwrap();
        let insert = MultiRow::new("INSERT INTO t (n, s) VALUES", 2);
        // 40 rows: two full chunks and a part.
        let rows: Vec<(i64, String)> = (0..40).map(|n| (n, format!("row {n}"))).collect();
        let values: Vec<&dyn rusqlite::ToSql> = rows
            .iter()
            .flat_map(|(n, s)| [n as &dyn rusqlite::ToSql, s])
            .collect();
        insert.insert(&conn, &values).unwrap();
        let read: Vec<(i64, String)> = conn
            .prepare("SELECT n, s FROM t ORDER BY rowid")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(read, rows);
        // Nothing to write writes nothing; a partial row is refused before anything runs.
        insert.insert(&conn, &[]).unwrap();
        let refused = insert.insert(&conn, &values[..3]).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("3 values do not make rows of 2"),
            "{refused}"
        );
        let count: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 40);
    }
}
