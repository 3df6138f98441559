//! The provider's own events: what it posts to a webhook URL when a delivery is created or
//! cancelled, signed per Standard Webhooks (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature`), late or twice when the settings ask (see [`super::Faults`]).
//! A post that fails is not retried: the provider's record stays the truth, and lookups
//! still answer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::state::Event;

/// Posts `event` on a task of its own (after its delay, twice when it repeats).
pub(crate) fn post(client: reqwest::Client, event: Event, now: SystemTime) {
    tokio::spawn(async move {
        if let Some(late) = event.late {
            tokio::time::sleep(late).await;
        }
        let timestamp = (now + event.late.unwrap_or_default())
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let Ok(key) = crate::notify::signing_key(&event.secret) else {
            tracing::warn!(id = %event.id, "the webhook secret is not a signing key; the event is not posted");
            return;
        };
        let signature = crate::notify::signature(&key, &event.id, timestamp, &event.body);
        let times = if event.repeat { 2 } else { 1 };
        for _ in 0..times {
            let sent = client
                .post(&event.url)
                .header("content-type", "application/json")
                .header("webhook-id", &event.id)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", &signature)
                .body(event.body.clone())
                .timeout(Duration::from_secs(10))
                .send()
                .await;
            match sent {
                Ok(r) => {
                    tracing::info!(id = %event.id, status = %r.status(), "provider event posted")
                }
                Err(e) => tracing::warn!(id = %event.id, "posting the provider event failed: {e}"),
            }
        }
    });
}
