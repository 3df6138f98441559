//! The single SQLite writer, with group commit.
//!
//! SQLite allows one writer at a time, and every commit costs an fsync. All writes go
//! through one thread that owns the write connection: it takes the first queued job, then
//! every job that queued up behind it (up to a bound), and runs them in one `BEGIN
//! IMMEDIATE` transaction. Nobody hears "done" before the commit: results are sent only
//! after `COMMIT` returns, and if the commit fails every job in the batch fails.
//!
//! Jobs check before they write (a fence, a key), so an expected refusal — a lost lease,
//! say — leaves nothing behind and the batch goes on. A job that fails after writing
//! (an I/O error, a bug) would leave half its writes in the transaction, so the whole batch
//! is rolled back and every job in it fails with a backend error: nothing was acknowledged,
//! and callers retry. That rule spares a savepoint per job, whose page copies cost more
//! than the job itself.
//!
//! The writer is the one serial resource of the embedded store, so it runs its statements
//! on its own thread against a plain SQLite handle with cached prepared statements (a few
//! microseconds each) rather than through an async driver that hands every statement to
//! another thread.

use crate::store::{StoreError, StoreResult};
use rusqlite::Connection;
use std::path::Path;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Most jobs in one transaction; bounds the latency one commit adds to the first job.
const MAX_BATCH: usize = 1024;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e {
            rusqlite::Error::QueryReturnedNoRows => StoreError::NotFound("row".into()),
            other => StoreError::Backend(other.to_string()),
        }
    }
}

trait Job: Send {
    /// Runs the job's statements; keeps its result until the commit is known.
    fn run(&mut self, conn: &Connection) -> bool;
    /// Reports the result (or the commit's failure) to the caller.
    fn finish(self: Box<Self>, commit: StoreResult<()>);
}

struct TypedJob<T, F> {
    f: Option<F>,
    result: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let Some(f) = self.f.take() else {
            self.result = Some(Err(StoreError::Backend("a write job ran twice".into())));
            return false;
        };
        // A panic in one job fails that job (and, if it wrote, its batch), never the
        // writer thread that every later write needs.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn)))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(StoreError::Backend(format!("a write panicked: {what}")))
            });
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, commit: StoreResult<()>) {
        let result = match (commit, self.result) {
            (Ok(()), Some(result)) => result,
            (Err(e), Some(Ok(_))) => Err(e),
            (_, Some(Err(e))) => Err(e),
            (_, None) => Err(StoreError::Backend("write job did not run".into())),
        };
        let _ = self.reply.send(result);
    }
}

/// A handle for submitting write jobs.
#[derive(Clone)]
pub(crate) struct Writer {
    tx: mpsc::UnboundedSender<Box<dyn Job>>,
}

/// Opens the write connection: WAL, and `synchronous=FULL` so every commit is fsynced
/// before it returns — nothing acknowledged is lost.
pub(crate) fn open_write_connection(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open(path)
        .map_err(|e| StoreError::Backend(format!("cannot open `{}`: {e}", path.display())))?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
    )?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

impl Writer {
    /// Starts the writer thread on `conn`.
    pub(crate) fn start(conn: Connection) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("docket-sqlite-writer".into())
            .spawn(move || run_writer(conn, rx))
            .expect("spawning the database writer thread");
        Self { tx }
    }

    /// Runs `f` inside a write transaction shared with other jobs; resolves after commit.
    pub(crate) async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job = Box::new(TypedJob {
            f: Some(f),
            result: None,
            reply,
        });
        self.tx
            .send(job)
            .map_err(|_| StoreError::Backend("the database writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Backend("the database writer has stopped".into()))?
    }
}

fn run_writer(conn: Connection, mut rx: mpsc::UnboundedReceiver<Box<dyn Job>>) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let t0 = std::time::Instant::now();
        let commit = run_batch(&conn, &mut batch);
        tracing::trace!(jobs = batch.len(), elapsed = ?t0.elapsed(), "write batch committed");
        if let Err(e) = &commit {
            tracing::error!("a write transaction of {} jobs failed: {e}", batch.len());
            // A failed COMMIT may leave the transaction open; make sure it is gone.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
        for job in batch.drain(..) {
            job.finish(commit.clone());
        }
    }
}

fn run_batch(conn: &Connection, batch: &mut [Box<dyn Job>]) -> StoreResult<()> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    for job in batch.iter_mut() {
        let before = conn.total_changes();
        if !job.run(conn) && conn.total_changes() != before {
            return Err(StoreError::Backend(
                "a write failed part-way, so its whole transaction was rolled back; retry".into(),
            ));
        }
    }
    // With synchronous=FULL this commit is fsynced before it returns.
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_job_fails_alone_and_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_write_connection(&dir.path().join("w.db")).unwrap();
        let writer = Writer::start(conn);
        writer
            .write(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?))
            .await
            .unwrap();
        let failed = writer
            .write(|c| -> StoreResult<()> {
                c.execute("INSERT INTO t VALUES (1)", [])?;
                panic!("a bug in a write");
            })
            .await
            .unwrap_err();
        assert!(
            failed
                .to_string()
                .contains("a write panicked: a bug in a write"),
            "{failed}"
        );
        // The writer still runs, and the panicking job's row was rolled back.
        let count: i64 = writer
            .write(|c| {
                c.execute("INSERT INTO t VALUES (2)", [])?;
                Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?)
            })
            .await
            .unwrap();
        assert_eq!(count, 1);
    }
}
