//! The batches a store's writers take from a shared queue: held-over jobs first, then what
//! has queued up, each job only where the batch has room for it.

use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc};

/// One writer's side of a queue shared by several writers.
pub(crate) struct Gather<J> {
    jobs: Arc<Mutex<mpsc::Receiver<J>>>,
    /// Jobs a batch had no room for, first in the next one.
    held: VecDeque<J>,
}

impl<J> Gather<J> {
    pub(crate) fn new(jobs: Arc<Mutex<mpsc::Receiver<J>>>) -> Self {
        Self {
            jobs,
            held: VecDeque::new(),
        }
    }

    /// The next batch of at most `max` jobs; a job `fits` refuses (`fits` is asked only
    /// while there is room, and a `true` takes the job) waits for a later batch. `None`
    /// once the queue is closed and nothing is held.
    pub(crate) async fn next(
        &mut self,
        max: usize,
        mut fits: impl FnMut(&J) -> bool,
    ) -> Option<Vec<J>> {
        let mut batch = Vec::new();
        let mut later = VecDeque::new();
        let mut take = |job: J, batch: &mut Vec<J>| {
            if batch.len() < max && fits(&job) {
                batch.push(job);
            } else {
                later.push_back(job);
            }
        };
        for job in std::mem::take(&mut self.held) {
            take(job, &mut batch);
        }
        // A writer with nothing in hand waits for the next job, holding the queue; one with
        // held-over jobs only adds what is there, and never waits for the queue (its holder
        // may be waiting for a job that waits on these).
        let jobs = if batch.is_empty() {
            let mut jobs = self.jobs.lock().await;
            take(jobs.recv().await?, &mut batch);
            Some(jobs)
        } else {
            self.jobs.try_lock().ok()
        };
        if let Some(mut jobs) = jobs {
            while batch.len() < max {
                match jobs.try_recv() {
                    Ok(job) => take(job, &mut batch),
                    Err(_) => break,
                }
            }
        }
        self.held = later;
        Some(batch)
    }
}
