//! Exploring fault schedules: for each seed, a schedule drawn from a ChaCha RNG seeded with
//! it — what the providers answer, a host killed after some checkpoint, a host paused past
//! its lease, the clock jumping across retry windows and key retention, a cancellation, a
//! duplicate submission (while an attempt stands at a checkpoint, or once settled), an
//! operator acting on what waits for a person — run by the scenario engine on a base
//! scenario of the workflow, and the invariants checked afterwards:
//! - no intent lost: every admitted intent's workflow is there, and submitting the key
//!   again gives the same one;
//! - at most one effect per intent in the world;
//! - no `completed` contradicted by the world: each adapter step's receipt names a resource
//!   the provider holds, in force;
//! - every workflow has ended or waits for a person;
//! - `docket check`'s invariants hold for every workflow's records.
//!
//! The same seed draws the same schedule, so a failing seed is replayed by
//! `docket scenario explore WORKFLOW --from SEED --seeds 1`.

use std::fmt::Write;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use super::file::{Event, EventAction, Kill, Scenario};
use super::provider::{Behaviour, RouteKind};

/// One seed's schedule: the scenario it became, and what it injected, in words.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub seed: u64,
    pub scenario: Scenario,
    pub injected: Vec<String>,
}

/// Draws seed `seed`'s schedule over `base` (a scenario of the workflow: its intents and
/// adapters; its own kill, events and expectations are replaced). `adapter_steps` are the
/// workflow's adapter steps, in order.
pub fn schedule(seed: u64, base: &Scenario, adapter_steps: &[String]) -> Schedule {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut s = base.clone();
    s.name = format!("{} seed {seed}", base.workflow);
    s.kill = None;
    s.events = Vec::new();
    s.expect = Default::default();
    let mut injected = Vec::new();
    s.hosts = rng.random_range(1..=3);
    if s.hosts > 1 {
        injected.push(format!("{} hosts share the store", s.hosts));
    }
    for (name, adapter) in s.adapters.iter_mut() {
        let Some(provider) = adapter.provider.as_mut() else {
            continue;
        };
        for route in &mut provider.routes {
            let len = rng.random_range(0..=3);
            route.script = (0..len).map(|_| behaviour(&mut rng, route.kind)).collect();
            route.then = Behaviour::Accept;
            if !route.script.is_empty() {
                injected.push(format!(
                    "{name} {} answers {}",
                    route.name,
                    route
                        .script
                        .iter()
                        .map(|b| format!("{b:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    let pick_step = |rng: &mut ChaCha8Rng| -> Option<String> {
        (!adapter_steps.is_empty())
            .then(|| adapter_steps[rng.random_range(0..adapter_steps.len())].clone())
    };
    // Half the time at a checkpoint of an adapter step (an attempt stands there while it
    // happens), otherwise once the run has settled.
    let checkpoint_or_settled = |rng: &mut ChaCha8Rng| -> Option<Kill> {
        match pick_step(rng) {
            Some(step) if rng.random_bool(0.5) => Some(Kill {
                step,
                checkpoint: rng.random_range(1..=5),
            }),
            _ => None,
        }
    };
    if rng.random_bool(0.5)
        && let Some(step) = pick_step(&mut rng)
    {
        let checkpoint = rng.random_range(1..=6);
        injected.push(format!(
            "the host dies after checkpoint {checkpoint} of `{step}`"
        ));
        s.kill = Some(Kill { step, checkpoint });
    }
    if rng.random_bool(0.3)
        && let Some(step) = pick_step(&mut rng)
    {
        let checkpoint = rng.random_range(1..=5);
        let secs = rng.random_range(5..=120);
        injected.push(format!(
            "the host pauses {secs}s at checkpoint {checkpoint} of `{step}`"
        ));
        s.events.push(Event {
            at: Some(Kill { step, checkpoint }),
            action: EventAction::Pause(std::time::Duration::from_secs(secs)),
            at_rest: false,
            line: 0,
        });
    }
    if rng.random_bool(0.25) {
        let intent = s.intents[0].clone();
        // While an attempt stands at a checkpoint (the retry of a client that timed out
        // while the host was sending), or once the run has settled.
        let at = checkpoint_or_settled(&mut rng);
        injected.push(match &at {
            Some(k) => format!(
                "intent `{}` is submitted again while `{}` stands at checkpoint {}",
                intent.key, k.step, k.checkpoint
            ),
            None => format!("intent `{}` is submitted again", intent.key),
        });
        s.events.push(Event {
            at,
            action: EventAction::Submit(intent),
            at_rest: false,
            line: 0,
        });
    }
    if rng.random_bool(0.3) {
        let secs = [60, 600, 3_600, 25 * 3_600, 49 * 3_600][rng.random_range(0..5)];
        injected.push(format!("the clock jumps {secs}s"));
        s.events.push(Event {
            at: None,
            action: EventAction::Advance(std::time::Duration::from_secs(secs)),
            at_rest: false,
            line: 0,
        });
    }
    if rng.random_bool(0.2) {
        let at = checkpoint_or_settled(&mut rng);
        injected.push(match &at {
            Some(k) => format!(
                "a cancellation arrives at checkpoint {} of `{}`",
                k.checkpoint, k.step
            ),
            None => "a cancellation arrives once the run settled".into(),
        });
        s.events.push(Event {
            at,
            action: EventAction::Act {
                action: "cancel".into(),
                step: None,
                body: serde_json::json!({"reason": "explored"}),
                status: None,
            },
            at_rest: false,
            line: 0,
        });
    }
    // Once the run is at rest, a person may act on what waits for them (and the run goes
    // on from what they did, perhaps to rest again, where another may act).
    let people = [0, 0, 1, 1, 2][rng.random_range(0..5)];
    for _ in 0..people {
        let draw = rng.random_range(0..12u32);
        injected.push(format!(
            "an operator acts once the run is at rest (draw {draw})"
        ));
        s.events.push(Event {
            at: None,
            at_rest: true,
            action: EventAction::TruthfulOperator(draw),
            line: 0,
        });
    }
    Schedule {
        seed,
        scenario: s,
        injected,
    }
}

/// A provider answer drawn for a route of `kind`. Answers that lie about what the provider
/// recorded (`conflicting_status`) are left out: no host can tell them from the truth
/// without a second observation, so they would fail the world's invariant by design.
fn behaviour(rng: &mut ChaCha8Rng, kind: RouteKind) -> Behaviour {
    let secs = |rng: &mut ChaCha8Rng, range: std::ops::RangeInclusive<u64>| {
        std::time::Duration::from_secs(rng.random_range(range))
    };
    match (kind, rng.random_range(0..6)) {
        (_, 0) => Behaviour::Accept,
        (_, 1) => Behaviour::LoseAfterAccept,
        (_, 2) => Behaviour::Unavailable,
        (_, 3) => Behaviour::RateLimit(secs(rng, 1..=5)),
        (_, 4) => Behaviour::Delay(secs(rng, 1..=60)),
        _ => Behaviour::Accept,
    }
}

/// The invariants a finished schedule must keep; each broken one, in words.
pub fn violations(
    submitted: &[(String, Option<String>)],
    projections: &[Value],
    world: &[super::provider::Resource],
    identities: &[Vec<String>],
    checked: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    for (key, id) in submitted {
        if id.is_none() {
            out.push(format!(
                "intent `{key}` was admitted but its workflow is gone"
            ));
        }
    }
    for (wf, ids) in projections.iter().zip(identities) {
        let id = wf["workflow_id"].as_str().unwrap_or("?");
        let mine: Vec<&super::provider::Resource> =
            world.iter().filter(|r| r.caused_by(ids)).collect();
        if mine.len() > 1 {
            out.push(format!(
                "workflow {id}: the world holds {} effects of one intent ({})",
                mine.len(),
                mine.iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let state = wf["state"].as_str().unwrap_or("");
        if !matches!(
            state,
            "completed" | "failed" | "cancelled" | "compensated" | "needs_review"
        ) {
            out.push(format!(
                "workflow {id} is {state}: it neither ended nor waits for a person"
            ));
        }
        if state == "completed" {
            for step in wf["steps"].as_array().into_iter().flatten() {
                let Some(reference) = step["receipt"]["external_reference"].as_str() else {
                    continue;
                };
                let holds = mine
                    .iter()
                    .any(|r| r.id == reference && r.status == "accepted");
                let adapter = step["contract"].is_object();
                if adapter && !holds {
                    out.push(format!(
                        "workflow {id} is completed on `{reference}` from step `{}`, which the world does not hold in force",
                        step["id"].as_str().unwrap_or("?")
                    ));
                }
            }
        }
    }
    out.extend(checked.iter().cloned());
    out
}

/// A failing seed's report: what it injected, what broke, and how to replay it.
pub fn replay_report(workflow: &str, schedule: &Schedule, broken: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "seed {} broke an invariant:", schedule.seed);
    for b in broken {
        let _ = writeln!(out, "  ✗ {b}");
    }
    let _ = writeln!(out, "  its schedule:");
    for i in &schedule.injected {
        let _ = writeln!(out, "    - {i}");
    }
    if schedule.injected.is_empty() {
        let _ = writeln!(out, "    - (nothing injected)");
    }
    let _ = writeln!(
        out,
        "  replay: docket scenario explore {workflow} --from {} --seeds 1",
        schedule.seed
    );
    let _ = writeln!(
        out,
        "  once fixed, keep it: add [[seed]] workflow = \"{workflow}\", seed = {}, broke = \"…\" to scenarios/regressions/seeds.toml",
        schedule.seed
    );
    out
}

/// The projections as a trace keeps them: everything but the time plugin calls took, which
/// is real time (the simulation moves its own clock, not the CPU's).
pub fn traced(projections: &[Value]) -> Vec<Value> {
    projections
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if let Some(used) = p.pointer_mut("/budget/runtime_ms/used") {
                *used = Value::Null;
            }
            p
        })
        .collect()
}
