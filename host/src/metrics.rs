//! The host's instruments, in Prometheus text: what this host counted of its own work
//! (intents admitted, attempts ended, plugin traps, expired leases recovered, notifications
//! sent) and what the store says at the moment of a scrape (the queues, unknown outcomes,
//! workflows ended and how long they took).
//!
//! Intents, attempts and effects are counted apart: an intent replayed ten times is one
//! workflow, and a step tried three times is three attempts of one step. Counters of this
//! host's work are its own (sum them over hosts); the store's series are the whole
//! database's, the same on every host (take one, or the max). Ended workflows are tallied in
//! the transaction that ends them, so their counts and histograms survive restarts and
//! purges and a scrape never scans history.

use crate::intent::Millis;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of `docket_time_to_outcome_seconds`.
pub const OUTCOME_BOUNDS_S: [f64; 12] = [
    0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 1800.0, 3600.0, 21600.0, 86400.0, 604800.0,
];

/// Upper bounds of `docket_attempts_per_workflow`.
pub const ATTEMPT_BOUNDS: [f64; 8] = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0, 50.0];

/// What an ended workflow is tallied under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TallyMetric {
    /// Milliseconds from admission to the end.
    OutcomeMs,
    /// Attempts the workflow used.
    Attempts,
    /// Milliseconds an approval waited for its decision (the state is its outcome).
    ApprovalWaitMs,
}

impl TallyMetric {
    pub fn as_str(self) -> &'static str {
        match self {
            TallyMetric::OutcomeMs => "outcome_ms",
            TallyMetric::Attempts => "attempts",
            TallyMetric::ApprovalWaitMs => "approval_wait_ms",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "outcome_ms" => Some(TallyMetric::OutcomeMs),
            "attempts" => Some(TallyMetric::Attempts),
            "approval_wait_ms" => Some(TallyMetric::ApprovalWaitMs),
            _ => None,
        }
    }

    /// The bucket `value` (in the tally's unit) falls in: the index of the first bound at or
    /// above it, or one past the last for +Inf.
    pub fn bucket(self, value: u64) -> u32 {
        let (bounds, v): (&[f64], f64) = match self {
            TallyMetric::OutcomeMs | TallyMetric::ApprovalWaitMs => {
                (&OUTCOME_BOUNDS_S, value as f64 / 1000.0)
            }
            TallyMetric::Attempts => (&ATTEMPT_BOUNDS, value as f64),
        };
        bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len()) as u32
    }
}

/// What ending one workflow adds to the tallies: `(metric, bucket, value)`.
pub fn tallies_of_end(
    created_at: Millis,
    ended_at: Millis,
    attempts: u64,
) -> [(TallyMetric, u32, u64); 2] {
    let ms = ended_at.saturating_sub(created_at);
    [
        (
            TallyMetric::OutcomeMs,
            TallyMetric::OutcomeMs.bucket(ms),
            ms,
        ),
        (
            TallyMetric::Attempts,
            TallyMetric::Attempts.bucket(attempts),
            attempts,
        ),
    ]
}

/// One row of the tallies, summed over shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    pub metric: TallyMetric,
    pub workflow: String,
    pub state: String,
    pub bucket: u32,
    pub n: u64,
    pub total: u64,
}

impl Tally {
    /// A stored row of the tallies (summed over shards), if its metric is one of ours.
    pub fn from_row(
        metric: &str,
        workflow: String,
        state: String,
        bucket: i64,
        n: i64,
        total: i64,
    ) -> Option<Self> {
        Some(Tally {
            metric: TallyMetric::parse(metric)?,
            workflow,
            state,
            bucket: bucket as u32,
            n: n as u64,
            total: total as u64,
        })
    }
}

/// Ready steps of one kind (`handler`, `adapter`, `compensation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyQueue {
    pub kind: String,
    pub count: u64,
    /// When the longest-waiting of them became ready.
    pub oldest_ready_at: Millis,
}

/// What the store says at the moment of a scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Workflows not ended, by state.
    pub live_workflows: Vec<(String, u64)>,
    pub outcome_unknown: u64,
    /// When the oldest unknown outcome became uncertain.
    pub outcome_unknown_since: Option<Millis>,
    pub ready: Vec<ReadyQueue>,
    pub tallies: Vec<Tally>,
    /// Approvals waiting for a decision.
    pub approvals_pending: u64,
    /// Each adapter with attempts in flight or paused.
    pub adapters: Vec<AdapterGauge>,
}

/// An adapter's attempts in flight on every host, and its pause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdapterGauge {
    pub adapter: String,
    pub in_flight: u64,
    /// Why its claims are paused (`rate_limited`, `unavailable`), if they are.
    pub paused: Option<String>,
}

type Labels<const N: usize> = [(&'static str, String); N];

/// This host's counters, and the text of a scrape.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    intents: Family<Labels<1>, Counter>,
    attempts: Family<Labels<3>, Counter>,
    lease_expiries: Counter,
    traps: Family<Labels<1>, Counter>,
    notifications: Family<Labels<1>, Counter>,
    violations: Family<Labels<1>, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let intents = Family::<Labels<1>, Counter>::default();
        registry.register(
            "docket_intents",
            "Admissions answered by this host, by result (created, replayed, conflict)",
            intents.clone(),
        );
        let attempts = Family::<Labels<3>, Counter>::default();
        registry.register(
            "docket_attempts",
            "Attempts this host ended (ran, or closed by recovery), by workflow, step and outcome",
            attempts.clone(),
        );
        let lease_expiries = Counter::default();
        registry.register(
            "docket_lease_expiries",
            "Expired leases this host's recovery closed",
            lease_expiries.clone(),
        );
        let traps = Family::<Labels<1>, Counter>::default();
        registry.register(
            "docket_plugin_traps",
            "Plugin calls on this host that ended without a value, by kind (trap, memory_cap, host_resources, timeout, instantiate, capacity)",
            traps.clone(),
        );
        let notifications = Family::<Labels<1>, Counter>::default();
        registry.register(
            "docket_notifications",
            "Notification rounds this host settled, by result (delivered, retried, suppressed, failed)",
            notifications.clone(),
        );
        let violations = Family::<Labels<1>, Gauge>::default();
        registry.register(
            "docket_consistency_violations",
            "Violations this host's last complete consistency check found, by invariant (absent before the first)",
            violations.clone(),
        );
        // Series whose labels are known in advance start at zero, so `rate()` and alerts
        // work before the first event.
        for result in INTENT_RESULTS {
            let _ = intents.get_or_create(&[("result", (*result).into())]);
        }
        for kind in TRAP_KINDS {
            let _ = traps.get_or_create(&[("kind", (*kind).into())]);
        }
        for result in NOTIFICATION_RESULTS {
            let _ = notifications.get_or_create(&[("result", (*result).into())]);
        }
        Self {
            registry,
            violations,
            intents,
            attempts,
            lease_expiries,
            traps,
            notifications,
        }
    }
}

/// Every `result` of `docket_intents_total`.
pub const INTENT_RESULTS: &[&str] = &["created", "replayed", "conflict"];
/// Every `kind` of `docket_plugin_traps_total`.
pub const TRAP_KINDS: &[&str] = &[
    "trap",
    "memory_cap",
    "host_resources",
    "timeout",
    "instantiate",
    "capacity",
];
/// Every `outcome` of `docket_approvals_total`.
pub const APPROVAL_OUTCOMES: &[&str] = &["approved", "rejected", "expired"];
/// Every `result` of `docket_notifications_total`.
pub const NOTIFICATION_RESULTS: &[&str] = &["delivered", "retried", "suppressed", "failed"];

impl Metrics {
    /// An admission answered: `created`, `replayed` or `conflict`.
    pub fn intent(&self, result: &'static str) {
        self.intents
            .get_or_create(&[("result", result.into())])
            .inc();
    }

    /// An attempt ended with `outcome`.
    pub fn attempt(&self, workflow: &str, step: &str, outcome: &str) {
        self.attempts
            .get_or_create(&[
                ("workflow", workflow.into()),
                ("step", step.into()),
                ("outcome", outcome.into()),
            ])
            .inc();
    }

    /// `n` expired leases closed by recovery.
    pub fn lease_expiries(&self, n: u64) {
        self.lease_expiries.inc_by(n);
    }

    /// A plugin call ended without a value: one of [`TRAP_KINDS`].
    pub fn trap(&self, kind: &'static str) {
        self.traps.get_or_create(&[("kind", kind.into())]).inc();
    }

    /// A notification's round settled with `result`.
    pub fn notification(&self, result: &'static str) {
        self.notifications
            .get_or_create(&[("result", result.into())])
            .inc();
    }

    /// What a complete consistency check found: `(invariant, violations)` for every
    /// invariant checked.
    pub fn violations(&self, found: impl IntoIterator<Item = (&'static str, u64)>) {
        for (invariant, n) in found {
            self.violations
                .get_or_create(&[("invariant", invariant.into())])
                .set(n as i64);
        }
    }

    /// The scrape: this host's counters, then the store's series as of `now`.
    pub fn render(&self, snapshot: &Snapshot, now: Millis) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = text::encode_registry(&mut out, &self.registry);
        let mut store = Registry::default();
        store.register_collector(Box::new(StoreSeries {
            snapshot: snapshot.clone(),
            now,
        }));
        let _ = text::encode_registry(&mut out, &store);
        let _ = text::encode_eof(&mut out);
        out
    }
}

/// The store's series of one scrape.
#[derive(Debug)]
struct StoreSeries {
    snapshot: Snapshot,
    now: Millis,
}

fn seconds_since(now: Millis, then: Millis) -> f64 {
    now.saturating_sub(then) as f64 / 1000.0
}

impl prometheus_client::collector::Collector for StoreSeries {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.snapshot;
        let gauge = |value: f64| ConstGauge::new(value);
        let count = |value: u64| ConstGauge::new(value as i64);

        let mut e = encoder.encode_descriptor(
            "docket_workflows",
            "Workflows not ended, by state (the whole store).",
            None,
            MetricType::Gauge,
        )?;
        for (state, n) in &s.live_workflows {
            count(*n).encode(e.encode_family(&[("state", state.as_str())])?)?;
        }

        let review = s
            .live_workflows
            .iter()
            .find(|(state, _)| state == "needs_review")
            .map_or(0, |(_, n)| *n);
        count(review).encode(encoder.encode_descriptor(
            "docket_review_queue",
            "Workflows waiting for a person.",
            None,
            MetricType::Gauge,
        )?)?;

        count(s.outcome_unknown).encode(encoder.encode_descriptor(
            "docket_outcome_unknown_steps",
            "Steps whose effect may or may not have happened.",
            None,
            MetricType::Gauge,
        )?)?;
        let oldest = s
            .outcome_unknown_since
            .map_or(0.0, |since| seconds_since(self.now, since));
        gauge(oldest).encode(encoder.encode_descriptor(
            "docket_outcome_unknown_oldest_seconds",
            "How long the oldest unknown outcome has been unknown (0 without one).",
            None,
            MetricType::Gauge,
        )?)?;

        let mut e = encoder.encode_descriptor(
            "docket_ready_queue_age_seconds",
            "How long the longest-waiting ready step of each kind has waited.",
            None,
            MetricType::Gauge,
        )?;
        for kind in ["adapter", "compensation", "handler"] {
            let age = s
                .ready
                .iter()
                .find(|q| q.kind == kind)
                .map_or(0.0, |q| seconds_since(self.now, q.oldest_ready_at));
            gauge(age).encode(e.encode_family(&[("kind", kind)])?)?;
        }

        let mut ended: std::collections::BTreeMap<(&str, &str), u64> = Default::default();
        for t in s
            .tallies
            .iter()
            .filter(|t| t.metric == TallyMetric::OutcomeMs)
        {
            *ended.entry((&t.workflow, &t.state)).or_default() += t.n;
        }
        let mut e = encoder.encode_descriptor(
            "docket_workflows_ended",
            "Workflows that reached an ended state, by workflow and state.",
            None,
            MetricType::Counter,
        )?;
        for ((workflow, state), n) in &ended {
            e.encode_family(&[("workflow", *workflow), ("state", *state)])?
                .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(n, None)?;
        }

        histogram(
            &mut encoder,
            "docket_time_to_outcome_seconds",
            "From admission to an ended state.",
            &OUTCOME_BOUNDS_S,
            s.tallies
                .iter()
                .filter(|t| t.metric == TallyMetric::OutcomeMs),
            1000.0,
        )?;
        histogram(
            &mut encoder,
            "docket_attempts_per_workflow",
            "Attempts an ended workflow used (retry amplification).",
            &ATTEMPT_BOUNDS,
            s.tallies
                .iter()
                .filter(|t| t.metric == TallyMetric::Attempts),
            1.0,
        )?;

        count(s.approvals_pending).encode(encoder.encode_descriptor(
            "docket_approvals_pending",
            "Approval steps waiting for a person to approve or reject (the whole store).",
            None,
            MetricType::Gauge,
        )?)?;
        let mut decided: std::collections::BTreeMap<&str, u64> =
            APPROVAL_OUTCOMES.iter().map(|o| (*o, 0)).collect();
        for t in s
            .tallies
            .iter()
            .filter(|t| t.metric == TallyMetric::ApprovalWaitMs)
        {
            *decided.entry(&t.state).or_default() += t.n;
        }
        let mut e = encoder.encode_descriptor(
            "docket_approvals",
            "Approvals decided, by outcome (approved, rejected, expired).",
            None,
            MetricType::Counter,
        )?;
        for (outcome, n) in &decided {
            e.encode_family(&[("outcome", *outcome)])?
                .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(n, None)?;
        }
        adapters(&mut encoder, s)?;
        histogram(
            &mut encoder,
            "docket_approval_wait_seconds",
            "From an approval being asked to its decision (approved, rejected or expired).",
            &OUTCOME_BOUNDS_S,
            s.tallies
                .iter()
                .filter(|t| t.metric == TallyMetric::ApprovalWaitMs),
            1000.0,
        )
    }
}

/// `docket_adapter_in_flight` and `docket_adapter_paused`.
fn adapters(encoder: &mut DescriptorEncoder, s: &Snapshot) -> Result<(), std::fmt::Error> {
    let mut e = encoder.encode_descriptor(
        "docket_adapter_in_flight",
        "Attempts of each adapter under a lease now, on every host of the store.",
        None,
        MetricType::Gauge,
    )?;
    for a in &s.adapters {
        ConstGauge::new(a.in_flight as i64)
            .encode(e.encode_family(&[("adapter", a.adapter.as_str())])?)?;
    }
    let mut e = encoder.encode_descriptor(
        "docket_adapter_paused",
        "1 while an adapter's claims are paused on every host because its provider asked to wait, with why (cause: rate_limited, unavailable); 0 otherwise.",
        None,
        MetricType::Gauge,
    )?;
    for a in &s.adapters {
        let (value, cause) = match &a.paused {
            Some(cause) => (1, cause.as_str()),
            None => (0, "none"),
        };
        ConstGauge::new(value)
            .encode(e.encode_family(&[("adapter", a.adapter.as_str()), ("cause", cause)])?)?;
    }
    Ok(())
}

/// One histogram from tallies, over all workflows and states.
fn histogram<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    bounds: &[f64],
    tallies: impl Iterator<Item = &'a Tally>,
    unit: f64,
) -> Result<(), std::fmt::Error> {
    let mut per_bucket = vec![0u64; bounds.len() + 1];
    let (mut sum, mut count) = (0.0, 0u64);
    for t in tallies {
        let i = (t.bucket as usize).min(bounds.len());
        per_bucket[i] += t.n;
        sum += t.total as f64 / unit;
        count += t.n;
    }
    // Per bucket: the encoder makes them cumulative.
    let buckets: Vec<(f64, u64)> = bounds
        .iter()
        .copied()
        .chain([f64::INFINITY])
        .zip(per_bucket)
        .collect();
    encoder
        .encode_descriptor(name, help, None, MetricType::Histogram)?
        .encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_fall_in_the_first_bucket_at_or_above_them() {
        assert_eq!(TallyMetric::Attempts.bucket(1), 0);
        assert_eq!(TallyMetric::Attempts.bucket(3), 2);
        assert_eq!(TallyMetric::Attempts.bucket(6), 5);
        assert_eq!(
            TallyMetric::Attempts.bucket(1000),
            ATTEMPT_BOUNDS.len() as u32
        );
        assert_eq!(TallyMetric::OutcomeMs.bucket(100), 0);
        assert_eq!(TallyMetric::OutcomeMs.bucket(101), 1);
    }

    /// Known label values are exposed at zero before any event, so a `rate()` or an alert
    /// on them has a series from the first scrape.
    #[test]
    fn known_series_start_at_zero() {
        let text = Metrics::default().render(&Snapshot::default(), 0);
        for result in INTENT_RESULTS {
            let line = format!("docket_intents_total{{result=\"{result}\"}} 0");
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        for kind in TRAP_KINDS {
            let line = format!("docket_plugin_traps_total{{kind=\"{kind}\"}} 0");
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        for result in NOTIFICATION_RESULTS {
            let line = format!("docket_notifications_total{{result=\"{result}\"}} 0");
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }

    #[test]
    fn a_scrape_has_every_series() {
        let m = Metrics::default();
        m.intent("created");
        m.intent("replayed");
        m.attempt("document-delivery", "deliver", "accepted");
        m.trap("trap");
        m.violations([("projection_matches", 1), ("timeline_grows", 0)]);
        let snapshot = Snapshot {
            live_workflows: vec![("running".into(), 2), ("needs_review".into(), 1)],
            outcome_unknown: 1,
            outcome_unknown_since: Some(1_000),
            ready: vec![ReadyQueue {
                kind: "adapter".into(),
                count: 3,
                oldest_ready_at: 4_000,
            }],
            tallies: vec![
                Tally {
                    metric: TallyMetric::OutcomeMs,
                    workflow: "w".into(),
                    state: "completed".into(),
                    bucket: 1,
                    n: 2,
                    total: 600,
                },
                Tally {
                    metric: TallyMetric::Attempts,
                    workflow: "w".into(),
                    state: "completed".into(),
                    bucket: 2,
                    n: 2,
                    total: 6,
                },
                Tally {
                    metric: TallyMetric::ApprovalWaitMs,
                    workflow: "w".into(),
                    state: "rejected".into(),
                    bucket: 3,
                    n: 1,
                    total: 4_000,
                },
            ],
            approvals_pending: 2,
            adapters: vec![
                AdapterGauge {
                    adapter: "mail".into(),
                    in_flight: 5,
                    paused: None,
                },
                AdapterGauge {
                    adapter: "sms".into(),
                    in_flight: 0,
                    paused: Some("rate_limited".into()),
                },
            ],
        };
        let text = m.render(&snapshot, 11_000);
        for line in [
            "docket_intents_total{result=\"created\"} 1",
            "docket_attempts_total{workflow=\"document-delivery\",step=\"deliver\",outcome=\"accepted\"} 1",
            "docket_plugin_traps_total{kind=\"trap\"} 1",
            "docket_consistency_violations{invariant=\"projection_matches\"} 1",
            "docket_consistency_violations{invariant=\"timeline_grows\"} 0",
            "docket_workflows{state=\"running\"} 2",
            "docket_review_queue 1",
            "docket_approvals_pending 2",
            "docket_approvals_total{outcome=\"rejected\"} 1",
            "docket_approvals_total{outcome=\"approved\"} 0",
            "docket_approval_wait_seconds_count 1",
            "docket_approval_wait_seconds_sum 4.0",
            "docket_outcome_unknown_steps 1",
            "docket_outcome_unknown_oldest_seconds 10.0",
            "docket_ready_queue_age_seconds{kind=\"adapter\"} 7.0",
            "docket_ready_queue_age_seconds{kind=\"handler\"} 0.0",
            "docket_workflows_ended_total{workflow=\"w\",state=\"completed\"} 2",
            "docket_time_to_outcome_seconds_bucket{le=\"0.1\"} 0",
            "docket_time_to_outcome_seconds_bucket{le=\"0.5\"} 2",
            "docket_time_to_outcome_seconds_bucket{le=\"+Inf\"} 2",
            "docket_time_to_outcome_seconds_sum 0.6",
            "docket_attempts_per_workflow_bucket{le=\"2.0\"} 0",
            "docket_attempts_per_workflow_bucket{le=\"3.0\"} 2",
            "docket_attempts_per_workflow_bucket{le=\"+Inf\"} 2",
            "docket_attempts_per_workflow_count 2",
            "docket_adapter_in_flight{adapter=\"mail\"} 5",
            "docket_adapter_paused{adapter=\"mail\",cause=\"none\"} 0",
            "docket_adapter_paused{adapter=\"sms\",cause=\"rate_limited\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
