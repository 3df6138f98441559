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
//!
//! Its queue is bounded: a write waits for room ([`Writer::write`]), except an admission,
//! which is refused at once when the queue is full ([`Writer::try_write`]) so that a flood
//! of new work meets a clear "try again" instead of growing memory without bound, while
//! the attempts already running still record their ends.
//!
//! A write may be urgent ([`Writer::write_urgent`]): a quiet subject's finish beside
//! another's burst. The next transaction takes the urgent writes first, with only a few of
//! the queued ones, so it commits in a few milliseconds rather than after a thousand jobs.
//!
//! Failures say what is known of the write ([`Retry`]): a job refused or rolled back wrote
//! nothing (`Safe`); a failed `COMMIT`, or a writer that took the job and never answered,
//! may have committed it (`Unknown`).

use crate::store::{Retry, StoreError, StoreResult};
use rusqlite::Connection;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Most jobs in one transaction; bounds the latency one commit adds to the first job.
const MAX_BATCH: usize = 1024;

/// Most jobs waiting for the writer: a few batches' worth.
pub(crate) const QUEUE: usize = 4 * MAX_BATCH;

/// Queued jobs a transaction with urgent ones takes besides them: few, so that it commits
/// soon, and some, so that a steady trickle of urgent writes cannot stall the queue.
const BESIDE_URGENT: usize = 32;

/// What the queue carries: a job, or (`None`) a wake-up for a writer idle while an urgent
/// job waits in its own queue.
type Queued = Option<Box<dyn Job>>;

impl From<rusqlite::Error> for StoreError {
    /// A statement that failed inside the writer's transaction wrote nothing that will be
    /// committed; only the kind of failure decides whether repeating may help.
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode as C;
        match e {
            rusqlite::Error::QueryReturnedNoRows => StoreError::NotFound("row".into()),
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidColumnName(_) => StoreError::Corrupt(e.to_string()),
            rusqlite::Error::SqliteFailure(ref f, _)
                if matches!(
                    f.code,
                    C::DatabaseBusy
                        | C::DatabaseLocked
                        | C::SystemIoFailure
                        | C::DiskFull
                        | C::CannotOpen
                        | C::OutOfMemory
                ) =>
            {
                StoreError::safe(e.to_string())
            }
            other => StoreError::never(other.to_string()),
        }
    }
}

trait Job: Send {
    /// Runs the job's statements; keeps its result until the commit is known.
    fn run(&mut self, conn: &mut Connection) -> bool;
    /// Reports the result (or the commit's failure) to the caller.
    fn answer(self: Box<Self>, commit: StoreResult<()>);
}

struct TypedJob<T, F> {
    f: Option<F>,
    result: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
{
    fn run(&mut self, conn: &mut Connection) -> bool {
        let Some(f) = self.f.take() else {
            self.result = Some(Err(StoreError::never("a write job ran twice")));
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
                Err(StoreError::never(format!("a write panicked: {what}")))
            });
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn answer(self: Box<Self>, commit: StoreResult<()>) {
        let result = match (commit, self.result) {
            (Ok(()), Some(result)) => result,
            (Err(e), Some(Ok(_))) => Err(e),
            (_, Some(Err(e))) => Err(e),
            (_, None) => Err(StoreError::safe("the write job did not run")),
        };
        let _ = self.reply.send(result);
    }
}

/// A handle for submitting write jobs.
#[derive(Clone)]
pub(crate) struct Writer {
    tx: mpsc::Sender<Queued>,
    urgent: mpsc::Sender<Box<dyn Job>>,
    /// Test failpoint: how many committed batches to leave unacknowledged.
    lose_acks: Arc<AtomicU32>,
}

/// Opens the write connection: WAL, and `synchronous=FULL` so every commit is fsynced
/// before it returns — nothing acknowledged is lost.
pub(crate) fn open_write_connection(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open(path)
        .map_err(|e| StoreError::safe(format!("cannot open `{}`: {e}", path.display())))?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // Statement journals (a statement's own undo inside the batch's transaction) stay in
    // memory: they never outlive the transaction, and writing them to a temporary file cost
    // the writer ~3 % of its time in the end-to-end profile. An 8 MiB page cache (SQLite's
    // default is 2 MiB) keeps the pages of the workflows in flight in memory: with the
    // default, most statements read their pages back from the file (half of a step's
    // statement time in the writer's statement profile). A larger one ran no faster, even
    // beside a million ended workflows, and held 10 MiB more of the host's memory.
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
         PRAGMA temp_store = MEMORY; PRAGMA cache_size = -8192;",
    )?;
    // Every statement the writer runs stays prepared: batch-sized statements have a text per
    // size, and a cache smaller than their number re-prepared statements on every batch.
    conn.set_prepared_statement_cache_capacity(512);
    Ok(conn)
}

/// WAL pages after which the writer checkpoints itself: only when the checkpoint thread
/// has not kept up (its passive checkpoints cannot finish while commits keep coming, and
/// only a checkpoint between two of the writer's transactions lets the log start over).
const WRITER_CHECKPOINT_PAGES: u32 = 8192;

/// The least time between two of the checkpoint thread's checkpoints.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// Copies the write-ahead log into the database file on its own connection and thread, so
/// that a commit seldom waits for a checkpoint (the writer's automatic checkpoints, with
/// their fsync of the database file, used to run inside every thousandth page's commit).
/// Woken after commits; returns the handle the writer wakes it with.
fn start_checkpointer(path: &Path) -> StoreResult<std::sync::mpsc::SyncSender<()>> {
    let conn = Connection::open(path)
        .map_err(|e| StoreError::safe(format!("cannot open `{}`: {e}", path.display())))?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name("docket-sqlite-checkpoint".into())
        .spawn(move || {
            // Ends when the writer is gone.
            while woken.recv().is_ok() {
                let started = std::time::Instant::now();
                // PASSIVE never blocks the writer or readers; what it cannot copy now, the
                // next round copies.
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::warn!("checkpointing the write-ahead log failed: {e}");
                }
                std::thread::sleep(CHECKPOINT_EVERY.saturating_sub(started.elapsed()));
            }
        })
        .map_err(|e| StoreError::safe(format!("cannot start the checkpoint thread: {e}")))?;
    Ok(wake)
}

impl Writer {
    /// Starts the writer thread on `conn`, with room for `queue` waiting jobs (the log is
    /// checkpointed by the writer itself).
    #[cfg(test)]
    pub(crate) fn start(conn: Connection, queue: usize) -> StoreResult<Self> {
        Self::spawn(conn, queue, None)
    }

    /// [`Writer::start`], with the write-ahead log checkpointed by a thread of its own on
    /// another connection to the database at `path`.
    pub(crate) fn start_checkpointed(
        conn: Connection,
        path: &Path,
        queue: usize,
    ) -> StoreResult<Self> {
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
        let checkpoints = start_checkpointer(path)?;
        Self::spawn(conn, queue, Some(checkpoints))
    }

    fn spawn(
        conn: Connection,
        queue: usize,
        checkpoints: Option<std::sync::mpsc::SyncSender<()>>,
    ) -> StoreResult<Self> {
        let (tx, rx) = mpsc::channel(queue.max(1));
        let (urgent, urgent_rx) = mpsc::channel(queue.max(1));
        let lose_acks = Arc::new(AtomicU32::new(0));
        let lost = lose_acks.clone();
        std::thread::Builder::new()
            .name("docket-sqlite-writer".into())
            .spawn(move || run_writer(conn, rx, urgent_rx, lost, checkpoints))
            .map_err(|e| StoreError::safe(format!("cannot start the database writer: {e}")))?;
        Ok(Self {
            tx,
            urgent,
            lose_acks,
        })
    }

    fn job<T, F>(f: F) -> (Box<dyn Job>, oneshot::Receiver<StoreResult<T>>)
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job = Box::new(TypedJob {
            f: Some(f),
            result: None,
            reply,
        });
        (job, rx)
    }

    /// Runs `f` inside a write transaction shared with other jobs; resolves after commit.
    /// Waits for room when the queue is full.
    pub(crate) async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    {
        let (job, rx) = Self::job(f);
        if self.tx.send(Some(job)).await.is_err() {
            return Err(StoreError::safe("the database writer has stopped"));
        }
        answer(rx).await
    }

    /// [`Writer::write`] ahead of the queued writes: the next transaction takes it first.
    pub(crate) async fn write_urgent<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    {
        let (job, rx) = Self::job(f);
        if self.urgent.send(job).await.is_err() {
            return Err(StoreError::safe("the database writer has stopped"));
        }
        // An idle writer waits on the ordinary queue; a full one is busy and will look.
        let _ = self.tx.try_send(None);
        answer(rx).await
    }

    /// [`Writer::write`], refused at once (nothing written, safe to retry) when the queue
    /// is full or the writer has stopped.
    pub(crate) async fn try_write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    {
        let (job, rx) = Self::job(f);
        match self.tx.try_send(Some(job)) {
            Ok(()) => answer(rx).await,
            Err(mpsc::error::TrySendError::Full(_)) => Err(StoreError::safe(format!(
                "the database writer is busy ({} writes are waiting)",
                self.tx.max_capacity()
            ))),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                Err(StoreError::safe("the database writer has stopped"))
            }
        }
    }

    /// Test control: blocks the writer until the returned [`Hold`] is dropped, then fills
    /// its queue with jobs that do nothing.
    pub(crate) async fn saturate(&self) -> Hold {
        self.saturate_with(usize::MAX).await
    }

    /// Blocks the writer as [`Writer::saturate`] does, queueing at most `fillers` jobs.
    pub(crate) async fn saturate_with(&self, fillers: usize) -> Hold {
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let (started, running) = oneshot::channel();
        let (job, _) = Self::job(move |_| {
            let _ = started.send(());
            // Returns once every sender is dropped.
            let _ = blocked.recv();
            Ok(())
        });
        let _ = self.tx.send(Some(job)).await;
        let _ = running.await;
        let limit = fillers;
        let mut fillers = Vec::new();
        while fillers.len() < limit
            && let Ok(permit) = self.tx.try_reserve()
        {
            let (job, rx) = Self::job(|_| Ok(()));
            permit.send(Some(job));
            fillers.push(rx);
        }
        Hold { release, fillers }
    }

    /// Test failpoint: the next `n` batches commit but their callers never hear of it, as
    /// when the process or the connection fails between the commit and its acknowledgement.
    pub(crate) fn lose_acknowledgements(&self, n: u32) {
        self.lose_acks.store(n, Ordering::Release);
    }
}

/// A stopped, full writer (see [`Writer::saturate`]); dropping it lets the writer go on.
pub struct Hold {
    release: std::sync::mpsc::Sender<()>,
    fillers: Vec<oneshot::Receiver<StoreResult<()>>>,
}

impl Hold {
    /// Lets the writer go on and waits until the jobs that filled its queue are done, so
    /// the queue has room again.
    pub async fn release(self) {
        let Hold { release, fillers } = self;
        drop(release);
        for filler in fillers {
            let _ = filler.await;
        }
    }
}

/// The job's result; a writer that took the job and stopped before answering may have
/// committed it.
async fn answer<T>(rx: oneshot::Receiver<StoreResult<T>>) -> StoreResult<T> {
    rx.await.map_err(|_| StoreError::Backend {
        retry: Retry::Unknown,
        cause:
            "the database writer stopped before acknowledging the write; it may have been committed"
                .into(),
    })?
}

thread_local! {
    /// How many jobs the writer thread's current transaction holds.
    static BATCH_JOBS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether the job running now is the only one in its transaction, that is whether nothing
/// else was waiting for the writer: a job may then do extra work that saves a later commit
/// (see `finish_and_claim`) without delaying anyone.
pub(crate) fn alone() -> bool {
    BATCH_JOBS.with(|jobs| jobs.get() == 1)
}

fn run_writer(
    mut conn: Connection,
    mut rx: mpsc::Receiver<Queued>,
    mut urgent: mpsc::Receiver<Box<dyn Job>>,
    lose_acks: Arc<AtomicU32>,
    checkpoints: Option<std::sync::mpsc::SyncSender<()>>,
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    // Jobs taken off the queue and not yet run (a transaction with urgent jobs leaves
    // most of them for the next), in their order.
    let mut waiting: std::collections::VecDeque<Box<dyn Job>> = Default::default();
    let mut profile = super::profile::Profile::from_env(&conn);
    loop {
        if waiting.is_empty() && urgent.is_empty() {
            match rx.blocking_recv() {
                Some(Some(job)) => waiting.push_back(job),
                Some(None) => {}
                None => break,
            }
        }
        while waiting.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Some(job)) => waiting.push_back(job),
                Ok(None) => {}
                Err(_) => break,
            }
        }
        while batch.len() < MAX_BATCH {
            match urgent.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let beside = if batch.is_empty() {
            MAX_BATCH
        } else {
            BESIDE_URGENT
        };
        let take = beside.min(waiting.len()).min(MAX_BATCH - batch.len());
        batch.extend(waiting.drain(..take));
        if batch.is_empty() {
            continue;
        }
        let t0 = std::time::Instant::now();
        BATCH_JOBS.with(|jobs| jobs.set(batch.len()));
        let commit = run_batch(&mut conn, &mut batch);
        tracing::trace!(jobs = batch.len(), elapsed = ?t0.elapsed(), "write batch committed");
        if let Some(profile) = &mut profile {
            profile.committed(batch.len());
        }
        if let Err(e) = &commit {
            tracing::error!("a write transaction of {} jobs failed: {e}", batch.len());
            // A failed COMMIT may leave the transaction open; make sure it is gone.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
        if let (Ok(()), Some(checkpoints)) = (&commit, &checkpoints) {
            // Full means a checkpoint is already due.
            let _ = checkpoints.try_send(());
        }
        let lose = commit.is_ok()
            && lose_acks
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok();
        if lose {
            // Dropped unanswered: each caller learns only that the writer went quiet.
            batch.clear();
            continue;
        }
        for job in batch.drain(..) {
            job.answer(commit.clone());
        }
    }
}

fn run_batch(conn: &mut Connection, batch: &mut [Box<dyn Job>]) -> StoreResult<()> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    for job in batch.iter_mut() {
        let before = conn.total_changes();
        if !job.run(conn) && conn.total_changes() != before {
            return Err(StoreError::safe(
                "a write failed part-way, so its whole transaction was rolled back; retry",
            ));
        }
    }
    // With synchronous=FULL this commit is fsynced before it returns. A failed COMMIT may
    // still have reached the log (a sync that failed after the write), so it is not "safe".
    conn.prepare_cached("COMMIT")?.execute([]).map_err(|e| {
        StoreError::unknown(format!(
            "the commit failed ({e}); it may have been committed"
        ))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An urgent write queued behind a hundred others commits in the next transaction,
    /// first, beside only a few of them; the others keep their order and all commit.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_urgent_write_goes_ahead_of_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_write_connection(&dir.path().join("u.db")).unwrap();
        let writer = Writer::start(conn, QUEUE).unwrap();
        writer
            .write(|c| Ok(c.execute_batch("CREATE TABLE t (name TEXT, jobs INTEGER)")?))
            .await
            .unwrap();
        // The writer is held inside a transaction while the others queue.
        let hold = writer.saturate_with(0).await;
        let record = |name: String| {
            move |c: &mut Connection| -> StoreResult<()> {
                let jobs = BATCH_JOBS.with(|j| j.get()) as i64;
                c.execute(
                    "INSERT INTO t VALUES (?1, ?2)",
                    rusqlite::params![name, jobs],
                )?;
                Ok(())
            }
        };
        let mut queued = tokio::task::JoinSet::new();
        for i in 0..100 {
            let (w, f) = (writer.clone(), record(format!("queued-{i:03}")));
            queued.spawn(async move { w.write(f).await });
            // Queued in order.
            while writer.tx.max_capacity() - writer.tx.capacity() < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        let urgent = {
            let (w, f) = (writer.clone(), record("urgent".into()));
            tokio::spawn(async move { w.write_urgent(f).await })
        };
        while writer.urgent.capacity() == writer.urgent.max_capacity() {
            tokio::task::yield_now().await;
        }
        hold.release().await;
        urgent.await.unwrap().unwrap();
        while let Some(done) = queued.join_next().await {
            done.unwrap().unwrap();
        }
        let rows: Vec<(String, i64)> = writer
            .write(|c| {
                let mut stmt = c.prepare("SELECT name, jobs FROM t ORDER BY rowid")?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .unwrap();
        assert_eq!(rows.len(), 101);
        assert_eq!(rows[0], ("urgent".to_string(), 1 + BESIDE_URGENT as i64));
        let order: Vec<&str> = rows[1..].iter().map(|(n, _)| n.as_str()).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "the others keep their order");
    }

    #[tokio::test]
    async fn a_panicking_job_fails_alone_and_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_write_connection(&dir.path().join("w.db")).unwrap();
        let writer = Writer::start(conn, QUEUE).unwrap();
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

    /// On an analyzed store a cached statement runs with new values without being compiled
    /// again (SQLite's STAT4, which recompiles for each new value, is left out of the build
    /// by `.cargo/config.toml`).
    #[test]
    fn an_analyzed_store_does_not_recompile_statements_for_new_values() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_write_connection(&dir.path().join("a.db")).unwrap();
        let stat4: i64 = conn
            .query_row(
                "SELECT sqlite_compileoption_used('ENABLE_STAT4')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(stat4, 0, "SQLite was built with STAT4");
        conn.execute_batch(
            "CREATE TABLE t (k INTEGER, v TEXT); CREATE INDEX t_k ON t (k);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO t SELECT CASE WHEN i <= 1800 THEN 1 ELSE i END, 'x' FROM n;
             ANALYZE;",
        )
        .unwrap();
        let mut count = conn
            .prepare_cached("SELECT count(*) FROM t WHERE k = ?1")
            .unwrap();
        for k in [1, 1900, 1, 1950, 7] {
            count.query_row([k], |r| r.get::<_, i64>(0)).unwrap();
        }
        assert_eq!(
            count.get_status(rusqlite::StatementStatus::RePrepare),
            0,
            "the statement was compiled again for new values"
        );
    }

    #[tokio::test]
    async fn the_checkpoint_thread_copies_the_log_into_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let conn = open_write_connection(&path).unwrap();
        let writer = Writer::start_checkpointed(conn, &path, QUEUE).unwrap();
        writer
            .write(|c| Ok(c.execute_batch("CREATE TABLE t (v TEXT)")?))
            .await
            .unwrap();
        // ~4 MiB of rows: far below the writer's own checkpoint threshold.
        for _ in 0..16 {
            writer
                .write(|c| {
                    let mut insert = c.prepare_cached("INSERT INTO t VALUES (?)")?;
                    for _ in 0..64 {
                        insert.execute([&"x".repeat(4000)])?;
                    }
                    Ok(())
                })
                .await
                .unwrap();
        }
        crate::wait::until(
            "the log copied into the database file",
            Duration::from_secs(10),
            || async {
                match std::fs::metadata(&path).unwrap().len() {
                    size if size >= 4 << 20 => Ok(()),
                    size => Err(format!("the database file has {size} bytes")),
                }
            },
        )
        .await;
    }

    async fn writer_with_table(queue: usize) -> (tempfile::TempDir, Writer) {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_write_connection(&dir.path().join("w.db")).unwrap();
        let writer = Writer::start(conn, queue).unwrap();
        writer
            .write(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?))
            .await
            .unwrap();
        (dir, writer)
    }

    #[tokio::test]
    async fn a_job_knows_whether_others_share_its_transaction() {
        let (_dir, writer) = writer_with_table(16).await;
        assert!(writer.write(|_| Ok(alone())).await.unwrap(), "a lone job");
        // Two jobs queued behind a held writer share the next transaction.
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let (started, running) = oneshot::channel();
        let held = writer.clone();
        let held = tokio::spawn(async move {
            held.write(move |_| {
                let _ = started.send(());
                let _ = blocked.recv();
                Ok(())
            })
            .await
        });
        running.await.unwrap();
        let queued: Vec<_> = (0..2)
            .map(|_| {
                let w = writer.clone();
                tokio::spawn(async move { w.write(|_| Ok(alone())).await })
            })
            .collect();
        while writer.tx.capacity() > 14 {
            tokio::task::yield_now().await;
        }
        drop(release);
        held.await.unwrap().unwrap();
        for job in queued {
            assert!(!job.await.unwrap().unwrap(), "a job that shared its commit");
        }
    }

    #[tokio::test]
    async fn a_full_queue_refuses_new_work_at_once_and_writes_nothing() {
        let (_dir, writer) = writer_with_table(4).await;
        let hold = writer.saturate().await;
        let refused = writer
            .try_write(|c| Ok(c.execute("INSERT INTO t VALUES (1)", [])?))
            .await
            .unwrap_err();
        assert!(
            matches!(refused, StoreError::Backend { retry: Retry::Safe, ref cause } if cause.contains("busy")),
            "{refused:?}"
        );
        hold.release().await;
        // Room again: the writer goes on, and the refused row was never written.
        let count: i64 = writer
            .write(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(count, 0);
    }

    #[tokio::test]
    async fn a_stopped_writer_refuses_at_once_and_says_nothing_was_written() {
        let (tx, rx) = mpsc::channel(1);
        let (urgent, urgent_rx) = mpsc::channel(1);
        drop((rx, urgent_rx));
        let writer = Writer {
            tx,
            urgent,
            lose_acks: Arc::default(),
        };
        for refused in [
            writer.try_write(|_| Ok(())).await.unwrap_err(),
            writer.write(|_| Ok(())).await.unwrap_err(),
            writer.write_urgent(|_| Ok(())).await.unwrap_err(),
        ] {
            assert!(
                matches!(&refused, StoreError::Backend { retry: Retry::Safe, cause } if cause.contains("stopped")),
                "{refused:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_lost_acknowledgement_is_unknown_not_safe_and_the_write_is_there() {
        let (_dir, writer) = writer_with_table(QUEUE).await;
        writer.lose_acknowledgements(1);
        let lost = writer
            .write(|c| Ok(c.execute("INSERT INTO t VALUES (7)", [])?))
            .await
            .unwrap_err();
        assert!(
            matches!(
                lost,
                StoreError::Backend {
                    retry: Retry::Unknown,
                    ..
                }
            ),
            "{lost:?}"
        );
        let count: i64 = writer
            .write(|c| Ok(c.query_row("SELECT count(*) FROM t WHERE v = 7", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(count, 1, "the unacknowledged write was committed");
    }
}
