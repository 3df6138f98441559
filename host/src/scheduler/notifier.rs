//! Delivers the notification outbox after commit: a periodic tick that claims due rows
//! under a lease (so many hosts on one database deliver each once), reads the workflow
//! again just before sending (a review settled meanwhile is recorded `suppressed`, never
//! sent), signs each request per Standard Webhooks, retries failures with backoff under
//! the same `webhook-id` for up to [`RETRY_WINDOW`], and prunes finished rows after the
//! retention.

use crate::clock::Clock;
use crate::intent::Millis;
use crate::notify::{Endpoint, EventType, RETRY_WINDOW, backoff, signature};
use crate::store::{
    NotificationRecord, NotificationStore, NotificationUpdate, ReadStore, StoreResult,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long a claimed row is this host's: longer than its sends may take.
const LEASE: Duration = Duration::from_secs(60);
/// The longest one endpoint may take to answer.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Rows claimed per round.
const BATCH: u32 = 64;
/// How often finished rows past their retention are pruned, and how many per batch (a
/// bounded batch never holds the writer for long).
const PRUNE_EVERY: Duration = Duration::from_secs(60);
const PRUNE_BATCH: u32 = 1000;

/// The outbox's deliverer on one host.
pub struct Notifier<S> {
    store: S,
    endpoints: Arc<Vec<Endpoint>>,
    clock: Arc<dyn Clock>,
    owner: String,
    client: reqwest::Client,
    /// How long delivered, suppressed and failed rows are kept.
    pub retention: Duration,
    /// How often the outbox is looked at.
    pub poll: Duration,
    /// Where settled rounds are counted.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// When old rows were last tidied.
    pruned_at: AtomicU64,
}

impl<S> Notifier<S>
where
    S: NotificationStore + ReadStore + Clone + 'static,
{
    /// A notifier sending through `client` (see [`crate::outbound::client`]: HTTPS, no
    /// redirects); each request is bounded by its own timeout besides.
    pub fn new(
        store: S,
        endpoints: Vec<Endpoint>,
        clock: Arc<dyn Clock>,
        owner: String,
        retention: Duration,
        client: reqwest::Client,
    ) -> Self {
        Self {
            store,
            endpoints: Arc::new(endpoints),
            clock,
            owner,
            client,
            retention,
            poll: Duration::from_millis(200),
            metrics: Arc::default(),
            pruned_at: AtomicU64::new(0),
        }
    }

    /// One tick of the outbox at `now`: a [`round`](Self::round) when this host has
    /// endpoints (a host without any leaves the rows to hosts that have some), and the
    /// tidying of old rows once every [`PRUNE_EVERY`]. Store failures are logged and the
    /// next tick tries again.
    pub async fn tick(&self, now: Millis) {
        if !self.endpoints.is_empty()
            && let Err(e) = self.round(now).await
        {
            tracing::warn!("delivering notifications failed; the next round tries again: {e}");
        }
        let pruned_at = self.pruned_at.load(Ordering::Acquire);
        if now.saturating_sub(pruned_at) >= PRUNE_EVERY.as_millis() as u64 {
            self.pruned_at.store(now, Ordering::Release);
            self.tidy(now).await;
        }
    }

    /// Records `failed` what no host took within the retry window, and prunes finished
    /// rows past the retention, in bounded batches.
    async fn tidy(&self, now: Millis) {
        let window = now.saturating_sub(RETRY_WINDOW.as_millis() as u64);
        match self
            .store
            .expire_notifications(window, now, PRUNE_BATCH)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                "{n} notifications were not delivered within 24 hours: no endpoint took them"
            ),
            Err(e) => tracing::warn!("expiring notifications failed: {e}"),
        }
        let before = now.saturating_sub(self.retention.as_millis() as u64);
        match self.store.prune_notifications(before, PRUNE_BATCH).await {
            Ok(0) => {}
            Ok(n) => tracing::info!("pruned {n} finished notifications"),
            Err(e) => tracing::warn!("pruning notifications failed: {e}"),
        }
    }

    /// One round: claims what is due and settles each row. Returns how many were claimed.
    pub async fn round(&self, now: Millis) -> StoreResult<usize> {
        let rows = self
            .store
            .claim_notifications(&self.owner, now, LEASE.as_millis() as u64, BATCH)
            .await?;
        let claimed = rows.len();
        let mut sends = tokio::task::JoinSet::new();
        for row in rows {
            let this = self.clone_parts();
            sends.spawn(async move {
                let seq = row.seq;
                let update = this.decide(row).await;
                (seq, update)
            });
        }
        let mut updates = Vec::with_capacity(claimed);
        while let Some(done) = sends.join_next().await {
            let Ok((seq, update)) = done else { continue };
            match update {
                Ok(u) => updates.push((seq, u)),
                // Its lease lapses and a later round tries again.
                Err(e) => tracing::warn!("notification {seq}: reading its workflow failed: {e}"),
            }
        }
        let asked = updates.len() as u64;
        let results: Vec<&'static str> = updates
            .iter()
            .filter_map(|(_, u)| match u {
                NotificationUpdate::Delivered { .. } => Some("delivered"),
                NotificationUpdate::Suppressed { .. } => Some("suppressed"),
                NotificationUpdate::Failed { .. } => Some("failed"),
                NotificationUpdate::Retry {
                    attempted: true, ..
                } => Some("retried"),
                // A review's hold sent nothing.
                NotificationUpdate::Retry { .. } => None,
            })
            .collect();
        let settled = self
            .store
            .settle_notifications(&self.owner, updates, self.clock.now_ms())
            .await?;
        for result in results {
            self.metrics.notification(result);
        }
        if settled < asked {
            tracing::warn!(
                "{} notifications were taken over by another host before they were recorded",
                asked - settled
            );
        }
        Ok(claimed)
    }

    fn clone_parts(&self) -> Sender<S> {
        Sender {
            store: self.store.clone(),
            endpoints: self.endpoints.clone(),
            clock: self.clock.clone(),
            client: self.client.clone(),
        }
    }
}

/// What one row's delivery needs, owned by its task.
struct Sender<S> {
    store: S,
    endpoints: Arc<Vec<Endpoint>>,
    clock: Arc<dyn Clock>,
    client: reqwest::Client,
}

impl<S: ReadStore> Sender<S> {
    /// Sends `row` to every endpoint that wants it and has not answered yet, unless it
    /// must wait (a review's hold) or no longer holds; returns what became of it.
    async fn decide(&self, row: NotificationRecord) -> StoreResult<NotificationUpdate> {
        let event = EventType::parse(&row.kind);
        let wanted: Vec<&Endpoint> = self
            .endpoints
            .iter()
            .filter(|e| event.is_some_and(|t| e.wants(t)) && !row.delivered_to.contains(&e.url))
            .collect();
        if wanted.is_empty() {
            // No endpoint of this host asks for it (or all have it): nothing to send.
            return Ok(NotificationUpdate::Delivered {
                delivered_to: row.delivered_to,
            });
        }
        let now = self.clock.now_ms();
        if let Some(event) = event.filter(|e| e.is_alarm()) {
            let hold = wanted
                .iter()
                .map(|e| e.review_hold)
                .max()
                .unwrap_or_default();
            let until = row.created_at + hold.as_millis() as u64;
            if now < until {
                return Ok(NotificationUpdate::Retry {
                    next_at: until,
                    error: format!(
                        "held for {} so a review settled at once does not alarm anyone",
                        humantime::format_duration(hold)
                    ),
                    delivered_to: row.delivered_to,
                    attempted: false,
                });
            }
            // Read again just before sending: a settled review is no news any more.
            let state = self
                .store
                .workflow(&row.workflow_id)
                .await?
                .map(|w| w.state);
            match state {
                Some(state) if event.holds(state) => {}
                other => {
                    return Ok(NotificationUpdate::Suppressed {
                        reason: format!(
                            "the workflow is {} now: the transition no longer holds",
                            other.map_or("gone", |s| s.as_str())
                        ),
                    });
                }
            }
        }
        let timestamp = now / 1000;
        let mut delivered_to = row.delivered_to.clone();
        let mut errors = Vec::new();
        for endpoint in wanted {
            match self.send(endpoint, &row, timestamp).await {
                Ok(()) => delivered_to.push(endpoint.url.clone()),
                Err(e) => errors.push(format!("{}: {e}", endpoint.url)),
            }
        }
        if errors.is_empty() {
            return Ok(NotificationUpdate::Delivered { delivered_to });
        }
        let error = errors.join("; ");
        if now >= row.created_at + RETRY_WINDOW.as_millis() as u64 {
            return Ok(NotificationUpdate::Failed {
                error,
                delivered_to,
            });
        }
        Ok(NotificationUpdate::Retry {
            next_at: now + backoff(row.attempts + 1).as_millis() as u64,
            error,
            delivered_to,
            attempted: true,
        })
    }

    /// One signed `POST`; `Ok` on a 2xx answer.
    async fn send(
        &self,
        endpoint: &Endpoint,
        row: &NotificationRecord,
        timestamp: u64,
    ) -> Result<(), String> {
        let answer = self
            .client
            .post(&endpoint.url)
            .header("content-type", "application/json")
            .header("webhook-id", &row.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header(
                "webhook-signature",
                signature(&endpoint.key, &row.id, timestamp, &row.body),
            )
            .body(row.body.clone())
            .send()
            .await
            .map_err(|e| format!("no answer ({e})"))?;
        if answer.status().is_success() {
            Ok(())
        } else {
            Err(format!("answered {}", answer.status()))
        }
    }
}
