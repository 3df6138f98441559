//! Waiting for the hosts: when a run has settled (recovery and claims find nothing and every
//! attempt has ended, stands where an event waits, or waits for a held answer), when it is
//! at rest (every workflow has ended or waits for a person), a host's pause, and the end of
//! a run. Each wait lets what the clock or a release woke run to rest before any host looks
//! for work, which is what makes a seed repeat.

use std::time::Duration;

use super::{Parked, Run, SETTLE_LIMIT};
use crate::clock::Clock;
use crate::scheduler::AtCheckpoint;

impl Run {
    /// Lease renewals under way on the hosts that are not paused.
    pub(super) fn renewing(&self) -> usize {
        self.hosts
            .iter()
            .filter(|h| !self.paused.contains(&h.owner))
            .map(|h| h.scheduler.renewing())
            .sum()
    }

    /// Waits until every sleeper the clock woke has run on and no renewal is under way.
    pub(super) async fn quiet(&self, limit: std::time::Instant) -> Result<(), String> {
        loop {
            tokio::task::yield_now().await;
            if self.clock.woken() == 0 && self.renewing() == 0 {
                return Ok(());
            }
            if std::time::Instant::now() > limit {
                return Err(format!(
                    "the hosts' timers did not settle within {SETTLE_LIMIT:?} of real time"
                ));
            }
            self.nap().await;
        }
    }

    /// Steps under way on the hosts that are not paused.
    pub(super) fn busy(&self) -> usize {
        self.hosts
            .iter()
            .filter(|h| !self.paused.contains(&h.owner))
            .map(|h| h.scheduler.busy())
            .sum()
    }

    /// The attempt of `parked` stands still on its paused host for `pause` while the clock
    /// moves on and the other hosts work; then it goes on, and only once it has finished
    /// do its host's timers run again (so its result, late or not, is what it makes of
    /// what it had, not what a lost lease cut short).
    pub(super) async fn pause(&mut self, parked: Parked, pause: Duration) -> Result<(), String> {
        let owner = parked.seen.owner.clone();
        self.paused.push(owner.clone());
        let Some(i) = self.hosts.iter().position(|h| h.owner == owner) else {
            return Err(format!("no host {owner} to pause"));
        };
        self.hosts[i].clock.paused.send_replace(true);
        self.clock.advance(pause.as_millis() as u64);
        self.note(format!(
            "{} {owner} paused for {} with its attempt of `{}` at checkpoint {}",
            crate::intent::rfc3339(self.clock.now_ms()),
            humantime::format_duration(pause),
            parked.seen.step,
            parked.seen.checkpoint
        ));
        if let Some(other) = self.settle().await? {
            let _ = other.release.send(AtCheckpoint::Continue);
            self.let_attempts_run().await?;
            self.settle().await?;
        }
        let _ = parked.release.send(AtCheckpoint::Continue);
        let limit = std::time::Instant::now() + SETTLE_LIMIT;
        while self.hosts[i].scheduler.busy() > 0 {
            if std::time::Instant::now() > limit {
                return Err(format!("{owner}'s attempt did not finish after its pause"));
            }
            // Its call may wait for an answer a provider holds: once everything else stands
            // still too, time passes for it.
            let busy = self.busy() + self.hosts[i].scheduler.busy();
            if busy <= self.providers.held()
                && self.clock.woken() == 0
                && self.renewing() == 0
                && let Some(at) = self.clock.next_wake()
            {
                self.clock.advance_to(at);
            }
            tokio::task::yield_now().await;
            self.nap().await;
        }
        self.paused.retain(|p| *p != owner);
        self.hosts[i].clock.paused.send_replace(false);
        self.note(format!(
            "{} {owner} went on",
            crate::intent::rfc3339(self.clock.now_ms())
        ));
        Ok(())
    }

    /// Whether every workflow has ended or waits for a person (a review, a block, an
    /// approval).
    pub(super) async fn all_rest(&self) -> bool {
        for id in &self.workflows {
            let (_, wf) = self
                .call("GET", &format!("/v1/workflows/{id}"), None, None)
                .await;
            let state = wf["state"].as_str().unwrap_or("");
            let resting = matches!(
                state,
                "completed" | "failed" | "cancelled" | "compensated" | "needs_review" | "blocked"
            ) || wf["next_action"]["kind"] == "approval";
            if !resting {
                return false;
            }
        }
        true
    }

    /// Waits until no attempt of any host, paused or not, is under way (after the run).
    pub(super) async fn wind_down(&self) -> Result<(), String> {
        {
            let mut shared = self.shared.lock().unwrap();
            shared.waiting_at = None;
            shared.kill = None;
        }
        let limit = std::time::Instant::now() + SETTLE_LIMIT;
        loop {
            // Attempts that come to a checkpoint now go on.
            for parked in std::mem::take(&mut self.shared.lock().unwrap().parked) {
                let _ = parked.release.send(AtCheckpoint::Continue);
            }
            let busy: usize = self.hosts.iter().map(|h| h.scheduler.busy()).sum();
            if busy == 0 {
                return Ok(());
            }
            if std::time::Instant::now() > limit {
                return Err(format!(
                    "{busy} attempts were still running {SETTLE_LIMIT:?} after the run ended"
                ));
            }
            self.nap().await;
        }
    }

    /// Waits a little for the hosts' work to move on: until an attempt ends, or a
    /// millisecond (what SQLite's threads answer moves nothing this could wait on).
    pub(super) async fn nap(&self) {
        let mut ended = self.ended.lock().await;
        tokio::select! {
            _ = ended.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(1)) => {}
        }
    }

    /// Waits until the attempts under way have ended, stand at a checkpoint, or wait for a
    /// held answer. A released attempt runs to there before any host claims again: two
    /// tasks talking to SQLite at once would otherwise interleave as its threads happen to
    /// answer, and a seed would not repeat.
    pub(super) async fn let_attempts_run(&self) -> Result<(), String> {
        let limit = std::time::Instant::now() + SETTLE_LIMIT;
        loop {
            tokio::task::yield_now().await;
            if !self.shared.lock().unwrap().parked.is_empty() {
                return Ok(());
            }
            let busy = self.busy();
            if busy <= self.providers.held() && self.clock.woken() == 0 && self.renewing() == 0 {
                return Ok(());
            }
            if std::time::Instant::now() > limit {
                return Err(format!(
                    "a released attempt did not come to rest within {SETTLE_LIMIT:?} of real time ({busy} attempts still running)"
                ));
            }
            self.nap().await;
        }
    }

    /// Runs recovery and claims until neither finds anything and every attempt has ended,
    /// stands at a checkpoint an event waits for, or waits for a held answer. Returns the
    /// parked attempt, if one stands at the next event's checkpoint.
    pub(super) async fn settle(&mut self) -> Result<Option<Parked>, String> {
        let limit = std::time::Instant::now() + SETTLE_LIMIT;
        // What the clock's last move woke (renewals, held answers) runs first, and the
        // attempts it woke run to rest before any host looks for work: recovery racing an
        // attempt whose answer just came would interleave as SQLite's threads answer.
        self.quiet(limit).await?;
        self.let_attempts_run().await?;
        loop {
            let host = self.host();
            let now = self.clock.now_ms();
            let recovered = host
                .recovery_tick(now)
                .await
                .map_err(|e| format!("recovery failed: {e}"))?;
            let claimed = host
                .clone()
                .claim_tick(now)
                .await
                .map_err(|e| format!("claiming failed: {e}"))?;
            // Wait for the attempts under way to end or stand still; one that ended may
            // have made work ready, so the host looks again after any wait.
            let mut waited = false;
            loop {
                tokio::task::yield_now().await;
                if let Some(p) = {
                    let mut shared = self.shared.lock().unwrap();
                    (!shared.parked.is_empty()).then(|| shared.parked.remove(0))
                } {
                    return Ok(Some(p));
                }
                let busy = self.busy();
                if busy <= self.providers.held() && self.clock.woken() == 0 && self.renewing() == 0
                {
                    break;
                }
                waited = true;
                if std::time::Instant::now() > limit {
                    return Err(format!(
                        "the run did not settle within {SETTLE_LIMIT:?} of real time ({busy} attempts still running)"
                    ));
                }
                self.nap().await;
            }
            if recovered == 0 && claimed == 0 && !waited {
                return Ok(None);
            }
        }
    }
}
