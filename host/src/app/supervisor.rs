//! A set of named tasks that must all keep running: the first to end is reported by name,
//! and the rest can be waited for (bounded) and cut. A periodic task is a round run
//! [`every`](Supervisor::every) period until the host stops, each completed round counted in
//! the host's [`Ticks`].

use crate::health::Health;
use crate::scheduler::{Tick, Ticks};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::{AbortHandle, Id, JoinSet};
use tokio_util::sync::CancellationToken;

/// How a supervised task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEnd {
    /// It returned although nothing asked it to stop.
    Returned,
    /// It returned an error.
    Failed(String),
    /// It panicked.
    Panicked(String),
    /// It was cancelled from outside.
    Cancelled,
}

impl std::fmt::Display for TaskEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskEnd::Returned => f.write_str("it returned"),
            TaskEnd::Failed(e) => write!(f, "it failed: {e}"),
            TaskEnd::Panicked(m) => write!(f, "it panicked: {m}"),
            TaskEnd::Cancelled => f.write_str("it was cancelled"),
        }
    }
}

/// Named tasks, each expected to run until the host stops.
pub struct Supervisor {
    set: JoinSet<Result<(), String>>,
    names: HashMap<Id, &'static str>,
    /// Every task started, ended or not: whether each has returned is readable without
    /// taking its end from the set (which [`Supervisor::next_end`] reports).
    handles: Vec<(&'static str, AbortHandle)>,
    /// What readiness checks see of the tasks.
    health: Arc<Health>,
    /// Cancelled when the host stops: every task returns on it.
    stop: CancellationToken,
    /// Where periodic tasks count their rounds.
    ticks: Arc<Ticks>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new(CancellationToken::new(), Arc::default())
    }
}

impl Supervisor {
    /// Tasks stopped by `stop`, whose periodic rounds are counted in `ticks`.
    pub fn new(stop: CancellationToken, ticks: Arc<Ticks>) -> Self {
        Self {
            set: JoinSet::new(),
            names: HashMap::new(),
            handles: Vec::new(),
            health: Arc::default(),
            stop,
            ticks,
        }
    }

    /// The token that stops the host: a task returns once it is cancelled.
    pub fn stopper(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Starts `round` under `name`, run every `period` (the first after one period) until
    /// the host stops; each completed round counts one `tick`. A round under way when the
    /// stop comes finishes, as a drain does (a round that may be cut short races the stop
    /// itself), and is not counted: the stop is seen between rounds. A round reports its
    /// own failures, and the next one tries again.
    pub fn every<F, R>(&mut self, name: &'static str, period: Duration, tick: Tick, round: F)
    where
        F: FnMut() -> R + Send + 'static,
        R: Future<Output = ()> + Send + 'static,
    {
        self.every_or_woken(name, period, tick, Arc::default(), round);
    }

    /// [`Supervisor::every`], and at once when `wake` is notified (work that should not
    /// wait for the period).
    pub fn every_or_woken<F, R>(
        &mut self,
        name: &'static str,
        period: Duration,
        tick: Tick,
        wake: Arc<tokio::sync::Notify>,
        mut round: F,
    ) where
        F: FnMut() -> R + Send + 'static,
        R: Future<Output = ()> + Send + 'static,
    {
        let (stop, ticks) = (self.stop.clone(), self.ticks.clone());
        self.spawn(name, async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(period) => {}
                    _ = wake.notified() => {}
                }
                round().await;
                if stop.is_cancelled() {
                    return Ok(());
                }
                ticks.done(tick);
            }
        });
    }

    /// Starts `task` under `name`; an `Err` it returns is reported as [`TaskEnd::Failed`].
    pub fn spawn<F>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        let handle = self.set.spawn(task);
        self.names.insert(handle.id(), name);
        self.handles.push((name, handle));
        self.health.started(name);
    }

    /// The tasks' states, as readiness checks read them.
    pub fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    /// The names of the tasks still running.
    pub fn running(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.names.values().copied().collect();
        names.sort_unstable();
        names
    }

    /// The names of the tasks that have not returned yet, whether or not an end was
    /// reported: what a caller waits on to know every task has seen a stop.
    pub fn unfinished(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self
            .handles
            .iter()
            .filter(|(_, handle)| !handle.is_finished())
            .map(|(name, _)| *name)
            .collect();
        names.sort_unstable();
        names
    }

    /// Waits for the next task to end and says which and how; never completes when there
    /// is none (so it can sit in a `select!` beside a shutdown signal).
    pub async fn next_end(&mut self) -> Option<(&'static str, TaskEnd)> {
        let Some(done) = self.set.join_next_with_id().await else {
            return std::future::pending().await;
        };
        let (id, end) = match done {
            Ok((id, Ok(()))) => (id, TaskEnd::Returned),
            Ok((id, Err(e))) => (id, TaskEnd::Failed(e)),
            Err(e) => {
                let id = e.id();
                let end = if e.is_panic() {
                    TaskEnd::Panicked(panic_message(e.into_panic()))
                } else {
                    TaskEnd::Cancelled
                };
                (id, end)
            }
        };
        let name = self.names.remove(&id).unwrap_or("unnamed");
        self.health.ended(name, end.to_string());
        Some((name, end))
    }

    /// Waits up to `limit` for every task to end, then aborts the rest; returns the names
    /// of those that had to be cut.
    pub async fn wait_all(mut self, limit: Duration) -> Vec<&'static str> {
        let all_ended = async {
            while let Some((name, end)) = self.next_end_or_none().await {
                match end {
                    TaskEnd::Returned | TaskEnd::Cancelled => {}
                    other => tracing::warn!("the `{name}` task, stopping: {other}"),
                }
            }
        };
        if tokio::time::timeout(limit, all_ended).await.is_ok() {
            return Vec::new();
        }
        let cut = self.running();
        self.set.shutdown().await;
        cut
    }

    async fn next_end_or_none(&mut self) -> Option<(&'static str, TaskEnd)> {
        if self.set.is_empty() {
            return None;
        }
        self.next_end().await
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[tokio::test]
    async fn the_first_task_to_end_is_named_with_how_it_ended() {
        let mut tasks = Supervisor::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn("server", async move {
            let _ = rx.await;
            Ok(())
        });
        tasks.spawn("scheduler", async { panic!("boom") });
        let (name, end) = tasks.next_end().await.unwrap();
        assert_eq!(name, "scheduler");
        assert_eq!(end, TaskEnd::Panicked("boom".into()));
        assert_eq!(tasks.running(), vec!["server"]);
        let _ = tx.send(());
        assert!(tasks.wait_all(Duration::from_secs(10)).await.is_empty());
    }

    #[tokio::test]
    async fn a_failure_is_reported_with_its_error() {
        let mut tasks = Supervisor::default();
        tasks.spawn("registry", async {
            Err("the database went away".to_string())
        });
        let (name, end) = tasks.next_end().await.unwrap();
        assert_eq!(name, "registry");
        assert_eq!(end, TaskEnd::Failed("the database went away".into()));
    }

    #[tokio::test]
    async fn tasks_that_do_not_stop_in_time_are_cut_and_named() {
        let mut tasks = Supervisor::default();
        tasks.spawn("stubborn", std::future::pending());
        tasks.spawn("quick", async { Ok(()) });
        let cut = tasks.wait_all(Duration::from_millis(50)).await;
        assert_eq!(cut, vec!["stubborn"]);
    }

    #[tokio::test]
    async fn a_periodic_task_counts_each_round_and_returns_on_the_stop() {
        let stop = CancellationToken::new();
        let ticks = Arc::new(Ticks::default());
        let mut tasks = Supervisor::new(stop.clone(), ticks.clone());
        let rounds = Arc::new(AtomicU64::new(0));
        let counted = rounds.clone();
        tasks.every(
            "retention",
            Duration::from_millis(1),
            Tick::Retention,
            move || {
                let rounds = counted.clone();
                async move {
                    rounds.fetch_add(1, Ordering::SeqCst);
                }
            },
        );
        crate::wait::until("three rounds counted", Duration::from_secs(10), || async {
            match ticks.get(Tick::Retention) {
                n if n >= 3 => Ok(()),
                n => Err(format!("{n} retention ticks")),
            }
        })
        .await;
        stop.cancel();
        let (name, end) = tasks.next_end().await.unwrap();
        assert_eq!((name, end), ("retention", TaskEnd::Returned));
        // Every round that ran was counted, and only under its own kind — but for one
        // under way at the stop, which finishes uncounted.
        let (counted, ran) = (ticks.get(Tick::Retention), rounds.load(Ordering::SeqCst));
        assert!(
            ran == counted || ran == counted + 1,
            "{ran} rounds, {counted} counted"
        );
        assert_eq!(ticks.get(Tick::Checker), 0);
    }

    #[tokio::test]
    async fn a_round_under_way_at_the_stop_finishes_uncounted() {
        let stop = CancellationToken::new();
        let ticks = Arc::new(Ticks::default());
        let mut tasks = Supervisor::new(stop.clone(), ticks.clone());
        let (started_tx, started) = tokio::sync::mpsc::unbounded_channel::<()>();
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let finished = Arc::new(AtomicU64::new(0));
        let (gate, done) = (release.clone(), finished.clone());
        tasks.every(
            "checker",
            Duration::from_millis(1),
            Tick::Checker,
            move || {
                let (started, gate, done) = (started_tx.clone(), gate.clone(), done.clone());
                async move {
                    let _ = started.send(());
                    gate.acquire().await.unwrap().forget();
                    done.fetch_add(1, Ordering::SeqCst);
                }
            },
        );
        let mut started = started;
        started.recv().await.unwrap();
        stop.cancel();
        release.add_permits(1);
        let (name, end) = tasks.next_end().await.unwrap();
        assert_eq!((name, end), ("checker", TaskEnd::Returned));
        assert_eq!(finished.load(Ordering::SeqCst), 1, "the round finished");
        assert_eq!(
            ticks.get(Tick::Checker),
            0,
            "a round the stop overtook is not counted"
        );
    }
}
