//! The single SQLite writer, with group commit.
//!
//! SQLite allows one writer at a time, and every commit costs an fsync. All writes go
//! through one task that owns the write connection: it takes the first queued job, then
//! every job that queued up behind it (up to a bound), and runs them in one `BEGIN
//! IMMEDIATE` transaction, each inside its own savepoint so one job's failure (a lost lease,
//! say) rolls back only that job. Nobody hears "done" before the commit: results are sent
//! only after `COMMIT` returns, and if the commit fails every job in the batch fails.

use crate::store::{StoreError, StoreResult};
use sqlx::{Connection, SqliteConnection};
use std::future::Future;
use std::pin::Pin;
use tokio::sync::{mpsc, oneshot};

/// Most jobs in one transaction; bounds the latency one commit adds to the first job.
const MAX_BATCH: usize = 512;

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

trait Job: Send {
    /// Runs the job's statements; keeps its result until the commit is known.
    fn run<'c>(&'c mut self, conn: &'c mut SqliteConnection) -> BoxFuture<'c, bool>;
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
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>> + Send + 'static,
{
    fn run<'c>(&'c mut self, conn: &'c mut SqliteConnection) -> BoxFuture<'c, bool> {
        let f = self.f.take().expect("a job runs once");
        Box::pin(async move {
            let result = f(conn).await;
            let ok = result.is_ok();
            self.result = Some(result);
            ok
        })
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

impl Writer {
    /// Starts the writer task on `conn`.
    pub(crate) fn start(conn: SqliteConnection) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run_writer(conn, rx));
        Self { tx }
    }

    /// Runs `f` inside a write transaction shared with other jobs; resolves after commit.
    pub(crate) async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>>
            + Send
            + 'static,
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

async fn run_writer(mut conn: SqliteConnection, mut rx: mpsc::UnboundedReceiver<Box<dyn Job>>) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let t0 = std::time::Instant::now();
        let commit = run_batch(&mut conn, &mut batch).await;
        tracing::trace!(jobs = batch.len(), elapsed = ?t0.elapsed(), "write batch committed");
        if let Err(e) = &commit {
            tracing::error!("a write transaction of {} jobs failed: {e}", batch.len());
            // A failed COMMIT may leave the transaction open; make sure it is gone.
            let _ = sqlx::query("ROLLBACK").execute(&mut conn).await;
            if conn.ping().await.is_err() {
                tracing::error!("the database write connection is broken");
            }
        }
        for job in batch.drain(..) {
            job.finish(commit.clone());
        }
    }
}

async fn run_batch(conn: &mut SqliteConnection, batch: &mut [Box<dyn Job>]) -> StoreResult<()> {
    sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    for job in batch.iter_mut() {
        sqlx::query("SAVEPOINT job").execute(&mut *conn).await?;
        if job.run(conn).await {
            sqlx::query("RELEASE job").execute(&mut *conn).await?;
        } else {
            sqlx::query("ROLLBACK TO job").execute(&mut *conn).await?;
            sqlx::query("RELEASE job").execute(&mut *conn).await?;
        }
    }
    // With synchronous=FULL this commit is fsynced before it returns.
    sqlx::query("COMMIT").execute(&mut *conn).await?;
    Ok(())
}
