//! Items of one batch step sent together: transport efficiency that never collapses what
//! each item is. Every item's attempt passes its own checkpoints 1–3 as usual; at the call
//! (checkpoint 4) it hands its request to the gathering of its batch and waits. The first
//! to arrive leads: once `batch(max-items)` requests are in, or a moment later, it sends
//! them in one `invoke-batch` call and hands each attempt its own answer, which that attempt
//! records at its own checkpoint 5. A lost answer leaves every item of the call uncertain,
//! each recovered on its own.

use crate::contract::{BatchItem, BatchRequest, EffectError, PluginReceipt};
use crate::runtime::{CallEnv, CallLimits, CallReport, Prepared, Runtime};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};

/// How long a leader waits for more items before sending fewer than the most a call takes.
const LINGER: Duration = Duration::from_millis(5);

/// What one item's call answered.
pub(crate) type ItemReport = CallReport<Result<PluginReceipt, EffectError>>;

/// Requests gathering per batch step and adapter version.
#[derive(Default)]
pub(crate) struct Bulk {
    gathering: Mutex<HashMap<String, Gathering>>,
}

#[derive(Default)]
struct Gathering {
    items: Vec<(BatchItem, oneshot::Sender<ItemReport>)>,
    full: Arc<Notify>,
}

impl Bulk {
    /// Sends `item` with the other items of batch `batch` (the workflow and the step) that
    /// gather now, at most `max` per call; answers this item's part.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn invoke(
        &self,
        runtime: &Runtime,
        prepared: &Prepared,
        env: CallEnv,
        limits: CallLimits,
        batch: String,
        item: BatchItem,
        max: usize,
        attempt: u32,
    ) -> ItemReport {
        let gathering = format!("{batch}\u{0}{}", prepared.name());
        let (tx, rx) = oneshot::channel();
        let (leads, full) = {
            let mut all = self.gathering.lock().expect("bulk gathering poisoned");
            let g = all.entry(gathering.clone()).or_default();
            g.items.push((item, tx));
            if g.items.len() >= max {
                g.full.notify_one();
            }
            (g.items.len() == 1, g.full.clone())
        };
        if leads {
            tokio::select! {
                _ = full.notified() => {}
                _ = tokio::time::sleep(LINGER) => {}
            }
            let items = self
                .gathering
                .lock()
                .expect("bulk gathering poisoned")
                .remove(&gathering)
                .map(|g| g.items)
                .unwrap_or_default();
            let mut items = items.into_iter().peekable();
            while items.peek().is_some() {
                let chunk: Vec<_> = items.by_ref().take(max.max(1)).collect();
                send(runtime, prepared, env.clone(), limits, chunk, attempt).await;
            }
        }
        rx.await.unwrap_or_else(|_| CallReport {
            outcome: Ok(Err(EffectError::OutcomeUnknown {
                observation: "the batch call carrying this item ended without an answer for it"
                    .into(),
            })),
            log: Vec::new(),
            denials: Vec::new(),
            elapsed: Duration::ZERO,
        })
    }
}

/// One `invoke-batch` call for `chunk`, each item answered on its own.
async fn send(
    runtime: &Runtime,
    prepared: &Prepared,
    env: CallEnv,
    limits: CallLimits,
    chunk: Vec<(BatchItem, oneshot::Sender<ItemReport>)>,
    attempt: u32,
) {
    let (items, answers): (Vec<BatchItem>, Vec<_>) = chunk.into_iter().unzip();
    // The same set of keys makes the same batch key.
    let keys: Vec<&str> = items.iter().map(|i| i.idempotency_key.as_str()).collect();
    let batch_key = crate::intent::canonicalize(&serde_json::json!(keys))
        .map(|c| c.digest)
        .unwrap_or_default();
    let request = BatchRequest {
        batch_key,
        items,
        attempt,
    };
    let report = runtime.invoke_batch(prepared, env, limits, &request).await;
    for (i, answer) in answers.into_iter().enumerate() {
        let outcome = match &report.outcome {
            Err(failure) => Err(failure.clone()),
            Ok(Err(whole)) => Ok(Err(whole.clone())),
            Ok(Ok(each)) => Ok(each.get(i).cloned().unwrap_or_else(|| {
                Err(EffectError::OutcomeUnknown {
                    observation: "the adapter gave no answer for this item".into(),
                })
            })),
        };
        // An attempt that stopped waiting (its lease lost) needs no answer.
        let _ = answer.send(CallReport {
            outcome,
            log: report.log.clone(),
            denials: report.denials.clone(),
            elapsed: report.elapsed,
        });
    }
}
