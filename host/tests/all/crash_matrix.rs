//! The crash matrix: for each delivery contract and each attempt checkpoint 1–6, a real
//! `docket serve` aborts itself at that checkpoint (`DOCKET_FAILPOINT`), restarts on the same
//! database, and must recover as the contract allows, with at most one delivery. The
//! compensation matrix does the same to the attempt that withdraws a completed delivery
//! (`compensation-checkpoint-N`): at most one cancel takes effect, and never a second cancel
//! without a lookup or idempotency to justify it.
//!
//! The provider simulator runs in the test process, outside every host, so its record of
//! deliveries survives the kill and is the ground truth for "did it happen, how often". The
//! restarted host's clock is moved with the test controls to expire the dead lease and to
//! pass visibility windows and backoffs, instead of sleeping.

use crate::host_process::{Contract, HostOptions, HostProcess, PROVIDER_TOKEN, document, tail};
use crate::postgres::TestDatabase;
use crate::wait;
use docket::sim::{ProviderSim, RunningSim, SimConfig};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Short leases keep recovery quick; the clock is moved past them.
const LEASE_MS: u64 = 3_000;
/// How far the clock moves per step while recovery waits on time (requery, backoff).
const TICK_MS: u64 = 1_000;
/// Cases that run at once: each is one or two host processes on a two-core machine.
const CONCURRENCY: usize = 3;
/// Longest a case may take to settle after the restart.
const SETTLE: Duration = Duration::from_secs(90);

/// What a case must end with.
struct Expect {
    /// Workflow state at the end.
    state: &'static str,
    /// State of the `deliver` step at the end.
    step_state: &'static str,
    /// Deliveries in the provider's record when the process died.
    at_death: usize,
    /// Deliveries in the provider's record at the end.
    deliveries: usize,
    /// Every one of these occurs in the timeline.
    timeline: &'static [&'static str],
    /// At least one of these occurs in the timeline (empty: no requirement).
    timeline_any: &'static [&'static str],
    /// The receipt's evidence kind is one of these (empty: no receipt).
    evidence: &'static [&'static str],
}

/// The recovery the checkpoints and the contract allow, for each contract and checkpoint.
fn expected(contract: Contract, checkpoint: u8) -> Expect {
    use Contract::*;
    const READY_AGAIN: &[&str] = &["nothing was sent, the step is ready again"];
    let completed = |at_death, timeline, timeline_any, evidence| Expect {
        state: "completed",
        step_state: "succeeded",
        at_death,
        deliveries: 1,
        timeline,
        timeline_any,
        evidence,
    };
    let review = |at_death, timeline| Expect {
        state: "needs_review",
        step_state: "outcome_unknown",
        at_death,
        deliveries: at_death,
        timeline,
        timeline_any: &[],
        evidence: &[],
    };
    match (checkpoint, contract) {
        // Before the request identity: nothing can have been sent; simply run it again.
        (1 | 2, _) => completed(0, READY_AGAIN, &[], &["response"]),
        // Identity recorded, call not made.
        (3, Idempotent) => completed(
            0,
            &[
                "query by the stable reference",
                "found nothing",
                "retry with the same idempotency key",
            ],
            &[],
            &["response"],
        ),
        (3, QueryOnly) => review(
            0,
            &[
                "query by the stable reference",
                "found nothing",
                "needs review, no automatic retry",
            ],
        ),
        (3, FireAndForget) => review(
            0,
            &[
                "needs review, no automatic retry",
                "neither lookups nor idempotency",
            ],
        ),
        // The call returned and the provider committed; the result was not stored.
        (4, Idempotent | QueryOnly) => completed(
            1,
            &["query by the stable reference", "verified by query"],
            &[],
            &["query"],
        ),
        (4, FireAndForget) => review(
            1,
            &[
                "needs review, no automatic retry",
                "neither lookups nor idempotency",
            ],
        ),
        // The result is stored: resume from it; nothing is sent or asked again.
        (5, _) => completed(1, &["resuming from the stored result"], &[], &["response"]),
        // The receipt is committed: nothing to recover.
        (6, _) => completed(1, &[], &[], &["response"]),
        _ => unreachable!("checkpoints are 1 to 6"),
    }
}

/// One cell of the matrix, with everything a failure report needs.
struct Case {
    name: String,
    sim: RunningSim,
    /// The log of the process that crashed, kept for reports after the restart.
    crashed_log: Option<PathBuf>,
}

impl Case {
    /// A failure message: the case, what was wrong, and what the host and the provider say.
    async fn report(&self, host: &HostProcess, id: &str, problem: String) -> String {
        let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
        let (_, attempts) = host
            .get(&format!(
                "/v1/workflows/{id}/steps/deliver/attempts?limit=500"
            ))
            .await;
        let crashed = self
            .crashed_log
            .as_ref()
            .map(|p| tail(&std::fs::read_to_string(p).unwrap_or_default(), 25))
            .unwrap_or_default();
        format!(
            "[{}] {problem}\n--- workflow: {wf:#}\n--- timeline:\n{}--- attempts of deliver: {attempts:#}\n--- provider record: {:#?}\n--- log of the crashed process (tail):\n{crashed}\n--- log of the restarted process (tail):\n{}\n",
            self.name,
            host.timeline_text(id).await,
            self.sim.sim().world(),
            host.log_tail(40)
        )
    }
}

/// Fails the case with a full report unless `cond` holds.
macro_rules! check {
    ($case:expr, $host:expr, $id:expr, $cond:expr, $($msg:tt)+) => {
        if !$cond {
            panic!("{}", $case.report($host, $id, format!($($msg)+)).await);
        }
    };
}

/// Where the host under test keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

async fn run_case(contract: Contract, checkpoint: u8, backend: Backend) {
    let name = format!(
        "{} crashed at checkpoint {checkpoint} ({backend:?})",
        contract.component()
    );
    let database = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => Some(TestDatabase::create().await),
    };
    let db = database.as_ref().map(|d| d.url.clone());
    let expect = expected(contract, checkpoint);
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let provider = sim.base_url();
    let options = |dir, failpoint: Option<u8>| HostOptions {
        config: format!("[limits]\nlease = \"{LEASE_MS}ms\"\n"),
        workflows: vec![contract.definition()],
        env: failpoint
            .map(|n| vec![("DOCKET_FAILPOINT".to_string(), format!("checkpoint-{n}"))])
            .unwrap_or_default(),
        dir,
        provider: Some(provider.clone()),
        db: db.clone(),
        ..HostOptions::default()
    };
    let mut case = Case {
        name,
        sim,
        crashed_log: None,
    };

    // The host that dies at the checkpoint.
    let mut host = HostProcess::start(options(None, Some(checkpoint))).await;
    let (status, created) = host
        .submit(
            contract.workflow(),
            &format!("crash-{checkpoint}"),
            document("Crash test"),
        )
        .await;
    let id = created["workflow_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    check!(
        case,
        &host,
        &id,
        status == 201,
        "submit answered {status}: {created}"
    );
    let exit = host.wait_exit(Duration::from_secs(60)).await;
    let at_death = case.sim.sim().world().len();
    case.crashed_log = Some(host.log.clone());
    let died = exit.is_some_and(|s| !s.success())
        && host
            .log_text()
            .contains(&format!("failpoint checkpoint-{checkpoint} reached"));
    check!(
        case,
        &host,
        &id,
        died,
        "the host did not abort at the failpoint (exit: {exit:?})"
    );
    check!(
        case,
        &host,
        &id,
        at_death == expect.at_death,
        "the provider held {at_death} deliveries when the host died, expected {}",
        expect.at_death
    );

    // The same directory and database, no failpoint.
    let dir = host.kill();
    let host = HostProcess::start(options(Some(dir), None)).await;
    let wf = settle(&case, &host, &id).await;
    check!(
        case,
        &host,
        &id,
        wf["state"] == expect.state,
        "ended {}, expected {}",
        wf["state"],
        expect.state
    );
    let deliver = wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "deliver"))
        .cloned()
        .unwrap_or_default();
    check!(
        case,
        &host,
        &id,
        deliver["state"] == expect.step_state,
        "step deliver ended {}, expected {}",
        deliver["state"],
        expect.step_state
    );
    let world = case.sim.sim().world();
    check!(
        case,
        &host,
        &id,
        world.len() == expect.deliveries,
        "the provider holds {} deliveries, expected {}",
        world.len(),
        expect.deliveries
    );
    let evidence = deliver["receipt"]["evidence_kind"].as_str();
    if expect.evidence.is_empty() {
        check!(case, &host, &id, evidence.is_none(), "unexpected receipt");
    } else {
        check!(
            case,
            &host,
            &id,
            evidence.is_some_and(|e| expect.evidence.contains(&e)),
            "receipt evidence {evidence:?}, expected one of {:?}",
            expect.evidence
        );
        check!(
            case,
            &host,
            &id,
            deliver["receipt"]["external_reference"] == world[0].id.as_str(),
            "the receipt's reference is not the provider's delivery {}",
            world[0].id
        );
    }
    let timeline = host.timeline_text(&id).await;
    // Shown with `--nocapture`: what each case actually went through.
    eprintln!("[{}] ended {}:\n{timeline}", case.name, wf["state"]);
    for text in expect.timeline {
        check!(
            case,
            &host,
            &id,
            timeline.contains(text),
            "the timeline does not say {text:?}"
        );
    }
    check!(
        case,
        &host,
        &id,
        expect.timeline_any.is_empty() || expect.timeline_any.iter().any(|t| timeline.contains(t)),
        "the timeline says none of {:?}",
        expect.timeline_any
    );
    if checkpoint == 6 {
        check!(
            case,
            &host,
            &id,
            !timeline.contains("expired"),
            "a committed receipt needs no recovery"
        );
    }
    // One step, one identity: every attempt that got as far carries the same request identity.
    let attempts = host.attempts(&id, "deliver").await;
    let mut identities: Vec<&str> = attempts
        .iter()
        .filter_map(|a| a["request_identity"].as_str())
        .collect();
    identities.dedup();
    check!(
        case,
        &host,
        &id,
        identities.len() <= 1,
        "attempts carry different request identities: {identities:?}"
    );
    if checkpoint == 5 {
        // What the call returned was stored at checkpoint 5: recovery resumes that attempt to
        // its receipt (checkpoint 6) and keeps its outcome; no second attempt.
        check!(
            case,
            &host,
            &id,
            attempts.len() == 1
                && attempts[0]["outcome"] == "accepted"
                && attempts[0]["checkpoint"] == 6,
            "the crashed attempt lost its stored result: {:#}",
            attempts[0]
        );
    }
    if expect.state == "needs_review" {
        // Review means no automatic action, however much time passes.
        host.advance_clock(24 * 3600 * 1000).await;
        host.wait_scheduler_looked().await;
        let later = host.attempts(&id, "deliver").await;
        check!(
            case,
            &host,
            &id,
            later.len() == attempts.len() && case.sim.sim().world().len() == expect.deliveries,
            "something ran after the step went to review ({} attempts, then {})",
            attempts.len(),
            later.len()
        );
    }
    // The records the crash and the recovery left keep every invariant.
    let checked = db
        .clone()
        .unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let (code, out) = crate::operations::docket_check(&checked, false);
    check!(case, &host, &id, code == 0, "docket check found:\n{out}");
    drop(host);
    if let Some(database) = database {
        database.drop_now().await;
    }
}

/// Moves the restarted host's clock until the workflow leaves `running`: once past the dead
/// host's lease, then a tick at a time while the step waits on time (never while an attempt
/// runs, so a live lease is never expired by the test).
async fn settle(case: &Case, host: &HostProcess, id: &str) -> Value {
    host.advance_clock(LEASE_MS + 1_000).await;
    let settled = wait::poll(SETTLE, Duration::from_millis(150), || async {
        let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
        if wf["state"] != "running" {
            return Ok(wf);
        }
        // A compensation runs nested under its step: its lease is live too.
        let running = wf["steps"].as_array().is_some_and(|s| {
            s.iter()
                .any(|s| s["state"] == "running" || s["compensation"]["state"] == "running")
        });
        if !running {
            host.advance_clock(TICK_MS).await;
        }
        Err(String::new())
    })
    .await;
    match settled {
        Ok(wf) => wf,
        Err(_) => panic!(
            "{}",
            case.report(host, id, format!("still running after {SETTLE:?}"))
                .await
        ),
    }
}

/// Runs the cases of one contract a few at a time and reports every failure, not just the
/// first.
async fn run_matrix(contract: Contract, checkpoints: &[u8], backend: Backend) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut cases = tokio::task::JoinSet::new();
    for &checkpoint in checkpoints {
        let slots = slots.clone();
        cases.spawn(async move {
            let _slot = slots.acquire_owned().await.unwrap();
            run_case(contract, checkpoint, backend).await;
        });
    }
    let mut failures = Vec::new();
    while let Some(result) = cases.join_next().await {
        if let Err(e) = result {
            let panic = e.into_panic();
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a case panicked".into());
            failures.push(text);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        checkpoints.len(),
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_matrix_idempotent_on_postgres() {
    run_matrix(Contract::Idempotent, &[1, 2, 3, 4, 5, 6], Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_matrix_query_only_on_postgres() {
    run_matrix(Contract::QueryOnly, &[1, 2, 3, 4, 5, 6], Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_matrix_fire_and_forget_on_postgres() {
    run_matrix(
        Contract::FireAndForget,
        &[1, 2, 3, 4, 5, 6],
        Backend::Postgres,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_matrix_idempotent() {
    run_matrix(Contract::Idempotent, &[1, 2, 3, 4, 5, 6], Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_matrix_query_only() {
    run_matrix(Contract::QueryOnly, &[1, 2, 3, 4, 5, 6], Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_matrix_fire_and_forget() {
    run_matrix(
        Contract::FireAndForget,
        &[1, 2, 3, 4, 5, 6],
        Backend::Sqlite,
    )
    .await;
}

/// A failpoint is a test control: without `--test-controls` the variable is ignored.
#[tokio::test(flavor = "multi_thread")]
async fn a_failpoint_without_test_controls_is_ignored() {
    let mut host = HostProcess::start(HostOptions {
        env: vec![("DOCKET_FAILPOINT".into(), "checkpoint-3".into())],
        without_test_controls: true,
        ..HostOptions::default()
    })
    .await;
    let (_, created) = host
        .submit("document-delivery", "no-failpoint", document("Production"))
        .await;
    let id = created["workflow_id"].as_str().unwrap();
    host.wait_for(id, &["completed"], Duration::from_secs(30))
        .await;
    assert!(host.wait_exit(Duration::ZERO).await.is_none());
    assert_eq!(host.world().await.len(), 1);
    assert!(
        host.log_text()
            .contains("DOCKET_FAILPOINT is ignored: failpoints need --test-controls"),
        "{}",
        host.log_tail(20)
    );
}

/// An idempotent step whose host died after recording the request identity, restarted only
/// after the provider's key retention ended: a same-key retry could now duplicate the effect,
/// so after an empty lookup the step waits for review with the reason.
#[tokio::test(flavor = "multi_thread")]
async fn past_the_retention_deadline_an_unknown_outcome_goes_to_review() {
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let provider = sim.base_url();
    let options = |dir, failpoint: Option<&str>| HostOptions {
        config: format!("[limits]\nlease = \"{LEASE_MS}ms\"\n"),
        workflows: vec![Contract::Idempotent.definition()],
        env: failpoint
            .map(|f| vec![("DOCKET_FAILPOINT".to_string(), f.to_string())])
            .unwrap_or_default(),
        dir,
        provider: Some(provider.clone()),
        ..HostOptions::default()
    };
    let mut host = HostProcess::start(options(None, Some("checkpoint-3"))).await;
    let (_, created) = host
        .submit(
            Contract::Idempotent.workflow(),
            "retention-1",
            document("Too late"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    assert!(host.wait_exit(Duration::from_secs(60)).await.is_some());
    let host = HostProcess::start(options(Some(host.kill()), None)).await;
    // Two days later: past the adapter's 24 h retention.
    host.advance_clock(2 * 24 * 3600 * 1000).await;
    let wf = host
        .wait_for(
            &id,
            &["completed", "needs_review", "failed"],
            Duration::from_secs(30),
        )
        .await;
    let timeline = host.timeline_text(&id).await;
    assert_eq!(wf["state"], "needs_review", "{wf:#}\n{timeline}");
    assert!(
        timeline.contains("no longer remembers the key"),
        "{timeline}"
    );
    assert!(!timeline.contains("retry with the same"), "{timeline}");
    let attempts = host.attempts(&id, "deliver").await;
    let triggers: Vec<&str> = attempts
        .iter()
        .map(|a| a["trigger"].as_str().unwrap())
        .collect();
    assert_eq!(triggers, ["initial", "recovery_query"], "{attempts:#?}");
    assert_eq!(sim.sim().world().len(), 0);
}

/// What a compensation case must end with.
struct CompensationExpect {
    /// Workflow state at the end.
    state: &'static str,
    /// State of `deliver` and of its compensation at the end.
    step_state: &'static str,
    compensation_state: &'static str,
    /// The delivery was cancelled when the host died.
    cancelled_at_death: bool,
    /// Cancel requests the provider received, all in all.
    cancel_requests: u32,
    /// The compensation receipt's evidence kind (`None`: no receipt).
    evidence: Option<&'static str>,
    /// Every one of these occurs in the timeline.
    timeline: &'static [&'static str],
}

/// The recovery of a compensation the checkpoints and the contract allow: like any effect,
/// by a lookup of the original reference (whose status says whether it was reversed), a
/// same-key retry where the contract allows it, else review — never a second cancel
/// without either.
fn compensation_expected(contract: Contract, checkpoint: u8) -> CompensationExpect {
    use Contract::*;
    let reversed = |cancelled_at_death, evidence, timeline| CompensationExpect {
        state: "cancelled",
        step_state: "compensated",
        compensation_state: "succeeded",
        cancelled_at_death,
        cancel_requests: 1,
        evidence: Some(evidence),
        timeline,
    };
    match (checkpoint, contract) {
        (1 | 2, _) => reversed(
            false,
            "response",
            &["nothing was sent, the step is ready again"],
        ),
        // The identity is recorded and the cancel never left: the lookup shows the delivery
        // still in effect; an idempotent adapter sends the cancel under the same key…
        (3, Idempotent) => reversed(
            false,
            "response",
            &["still in effect", "retry with the same idempotency key"],
        ),
        // …one without idempotency may not: a person decides.
        (3, _) => CompensationExpect {
            state: "needs_review",
            step_state: "compensating",
            compensation_state: "outcome_unknown",
            cancelled_at_death: false,
            cancel_requests: 0,
            evidence: None,
            timeline: &["still in effect", "needs review, no automatic retry"],
        },
        // The provider cancelled; the answer was not stored: the lookup shows it reversed.
        (4, _) => reversed(true, "query", &["verified by query"]),
        (5, _) => reversed(true, "response", &["resuming from the stored result"]),
        (6, _) => reversed(true, "response", &[]),
        _ => unreachable!("checkpoints are 1 to 6"),
    }
}

/// A definition that withdraws the delivery through `contract` on cancellation.
fn compensated(contract: Contract) -> (String, String) {
    let (file, text) = contract.definition();
    (
        file,
        format!("{text}\n[steps.compensation]\non = \"workflow_cancelled\"\n"),
    )
}

async fn run_compensation_case(contract: Contract, checkpoint: u8, backend: Backend) {
    let name = format!(
        "{} compensation crashed at checkpoint {checkpoint} ({backend:?})",
        contract.component()
    );
    let database = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => Some(TestDatabase::create().await),
    };
    let db = database.as_ref().map(|d| d.url.clone());
    let expect = compensation_expected(contract, checkpoint);
    let sim = ProviderSim::start(
        SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let provider = sim.base_url();
    let options = |dir, failpoint: Option<u8>| HostOptions {
        config: format!("[limits]\nlease = \"{LEASE_MS}ms\"\n"),
        workflows: vec![compensated(contract)],
        env: failpoint
            .map(|n| {
                vec![(
                    "DOCKET_FAILPOINT".to_string(),
                    format!("compensation-checkpoint-{n}"),
                )]
            })
            .unwrap_or_default(),
        dir,
        provider: Some(provider.clone()),
        db: db.clone(),
        ..HostOptions::default()
    };
    let mut case = Case {
        name,
        sim,
        crashed_log: None,
    };
    // The delivery completes on the host that will die while reversing it.
    let mut host = HostProcess::start(options(None, Some(checkpoint))).await;
    let (status, created) = host
        .submit(
            contract.workflow(),
            &format!("withdraw-{checkpoint}"),
            document("Withdrawn"),
        )
        .await;
    let id = created["workflow_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    check!(
        case,
        &host,
        &id,
        status == 201,
        "submit answered {status}: {created}"
    );
    let wf = host.wait_for(&id, &["completed"], SETTLE).await;
    check!(
        case,
        &host,
        &id,
        wf["state"] == "completed",
        "not completed: {wf}"
    );
    let (status, answer) = host
        .post_with_key(
            &format!("/v1/workflows/{id}/cancel"),
            "withdraw",
            serde_json::json!({"reason": "withdrawn", "withdraw": true}),
        )
        .await;
    check!(
        case,
        &host,
        &id,
        status == 202 && answer["outcome"] == "compensating",
        "the withdrawal answered {status}: {answer}"
    );
    let exit = host.wait_exit(Duration::from_secs(60)).await;
    case.crashed_log = Some(host.log.clone());
    let died = exit.is_some_and(|s| !s.success())
        && host.log_text().contains(&format!(
            "failpoint compensation-checkpoint-{checkpoint} reached"
        ));
    check!(
        case,
        &host,
        &id,
        died,
        "the host did not abort at the failpoint (exit: {exit:?})"
    );
    let world = case.sim.sim().world();
    check!(
        case,
        &host,
        &id,
        world.len() == 1 && world[0].cancelled_at.is_some() == expect.cancelled_at_death,
        "when the host died the provider held {world:?}, expected the delivery cancelled: {}",
        expect.cancelled_at_death
    );

    // The same directory and database, no failpoint.
    let dir = host.kill();
    let host = HostProcess::start(options(Some(dir), None)).await;
    let wf = settle(&case, &host, &id).await;
    check!(
        case,
        &host,
        &id,
        wf["state"] == expect.state,
        "ended {}, expected {}",
        wf["state"],
        expect.state
    );
    let deliver = wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "deliver"))
        .cloned()
        .unwrap_or_default();
    let compensation = &deliver["compensation"];
    check!(
        case,
        &host,
        &id,
        deliver["state"] == expect.step_state && compensation["state"] == expect.compensation_state,
        "deliver ended {} and its compensation {}, expected {} and {}",
        deliver["state"],
        compensation["state"],
        expect.step_state,
        expect.compensation_state
    );
    check!(
        case,
        &host,
        &id,
        compensation["receipt"]["evidence_kind"].as_str() == expect.evidence,
        "compensation receipt evidence {}, expected {:?}",
        compensation["receipt"]["evidence_kind"],
        expect.evidence
    );
    // The original receipt stays: the effect happened and was reversed, never erased.
    check!(
        case,
        &host,
        &id,
        deliver["receipt"]["external_reference"] == world[0].id.as_str(),
        "the delivery's receipt is gone"
    );
    let world = case.sim.sim().world();
    check!(
        case,
        &host,
        &id,
        world.len() == 1 && world[0].cancel_requests == expect.cancel_requests,
        "the provider received {} cancel requests, expected {}",
        world[0].cancel_requests,
        expect.cancel_requests
    );
    let timeline = host.timeline_text(&id).await;
    eprintln!("[{}] ended {}:\n{timeline}", case.name, wf["state"]);
    for text in expect.timeline {
        check!(
            case,
            &host,
            &id,
            timeline.contains(text),
            "the timeline does not say {text:?}"
        );
    }
    let checked = db
        .clone()
        .unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let (code, out) = crate::operations::docket_check(&checked, false);
    check!(case, &host, &id, code == 0, "docket check found:\n{out}");
    drop(host);
    if let Some(database) = database {
        database.drop_now().await;
    }
}

async fn run_compensation_matrix(contract: Contract, backend: Backend) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut cases = tokio::task::JoinSet::new();
    for checkpoint in 1..=6 {
        let slots = slots.clone();
        cases.spawn(async move {
            let _slot = slots.acquire_owned().await.unwrap();
            run_compensation_case(contract, checkpoint, backend).await;
        });
    }
    let mut failures = Vec::new();
    while let Some(result) = cases.join_next().await {
        if let Err(e) = result {
            let panic = e.into_panic();
            failures.push(
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a case panicked".into()),
            );
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 6 cases failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn compensation_crash_matrix_idempotent() {
    run_compensation_matrix(Contract::Idempotent, Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn compensation_crash_matrix_query_only() {
    run_compensation_matrix(Contract::QueryOnly, Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn compensation_crash_matrix_idempotent_on_postgres() {
    run_compensation_matrix(Contract::Idempotent, Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn compensation_crash_matrix_query_only_on_postgres() {
    run_compensation_matrix(Contract::QueryOnly, Backend::Postgres).await;
}
