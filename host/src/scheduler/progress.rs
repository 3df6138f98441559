//! Signals that work moved, for those waiting on it: the host-wide signal (an operator's
//! `query` or `retry` answers once its attempt is over) and one per workflow (a long-poll
//! on a workflow's projection wakes only when that workflow moved, not on every step of
//! every workflow). A waiter reads the store again when its signal moves, and also after a
//! bounded wait: work that ends on another host moves these only as far as this host hears
//! of it.

use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::watch;

/// Waited-on workflows remembered before entries nobody waits on any more are dropped.
const PRUNE_AT: usize = 1024;

/// Counters that move whenever an attempt ends or other hosts report work.
#[derive(Debug)]
pub struct Progress {
    tx: watch::Sender<u64>,
    /// Only workflows someone waits on have an entry.
    workflows: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            tx: watch::channel(0).0,
            workflows: Mutex::default(),
        }
    }
}

impl Progress {
    /// Something ended, no workflow in particular: wake the host-wide waiters.
    pub fn advance(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Workflow `id` moved: wake its waiters and the host-wide ones.
    pub fn advance_workflow(&self, id: &str) {
        self.advance();
        let mut workflows = self.workflows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = workflows.get(id) {
            if tx.receiver_count() == 0 {
                workflows.remove(id);
            } else {
                tx.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    /// A receiver that sees every later [`Progress::advance`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// A receiver that sees every later [`Progress::advance_workflow`] of `id`.
    pub fn subscribe_workflow(&self, id: &str) -> watch::Receiver<u64> {
        let mut workflows = self.workflows.lock().unwrap_or_else(|e| e.into_inner());
        if workflows.len() >= PRUNE_AT {
            workflows.retain(|_, tx| tx.receiver_count() > 0);
        }
        workflows
            .entry(id.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// How many workflows have an entry (for tests).
    pub fn watched(&self) -> usize {
        self.workflows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_waiter_is_woken() {
        let progress = Progress::default();
        let mut a = progress.subscribe();
        let mut b = progress.subscribe();
        progress.advance();
        a.changed().await.unwrap();
        b.changed().await.unwrap();
        assert_eq!(*a.borrow(), 1);
    }

    /// A workflow's waiters wake on its own moves only; another workflow's step, or
    /// host-wide news, leaves them asleep. Entries of workflows nobody waits on go.
    #[tokio::test]
    async fn a_workflows_waiters_wake_only_for_it() {
        let progress = Progress::default();
        let mine = progress.subscribe_workflow("wf_a");
        progress.advance_workflow("wf_b");
        progress.advance();
        assert!(!mine.has_changed().unwrap());
        progress.advance_workflow("wf_a");
        assert!(mine.has_changed().unwrap());
        drop(mine);
        progress.advance_workflow("wf_a");
        assert_eq!(progress.watched(), 0);
    }
}
