//! Budgets people can see and extend, against a real `docket serve` and its provider
//! simulator: each limit (attempts, runtime, external calls, cost) exhausted at run time
//! blocks the step with its name before anything more is sent; recovery queries still run
//! from their reserve once the attempts are spent; an operator's extension lets the
//! workflow complete; a workflow waiting for review near its deadline says so. Each case
//! runs on a SQLite file and on a PostgreSQL database of its own.

use crate::host_process::{HostOptions, HostProcess};
use serde_json::{Value, json};
use std::time::Duration;

const SETTLED: &[&str] = &["needs_review", "completed", "failed", "cancelled"];

/// A definition of adapter steps in a chain (`deliver`, then `notify` when `two`), with
/// `budget` as its `[budget]` table and `cost` on each step.
pub(crate) fn chain(name: &str, budget: &str, cost: u32, two: bool) -> (String, String) {
    let step = |id: &str, after: &str| {
        format!(
            r#"
[[steps]]
id = "{id}"
label = "{id} the document"
kind = "adapter"
component = "http-delivery"
version = "^1"
after = [{after}]
timeout = "20s"
cost = {cost}

[steps.input]
recipient = "$input.recipient"
document = "{id}"
document_digest = "sha256:00"

[steps.retry]
max_attempts = 10
initial_backoff = "100ms"
max_backoff = "200ms"

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]
"#
        )
    };
    let mut text = format!(
        "name = \"{name}\"\nversion = 1\ndeadline = \"1h\"\n\n[budget]\n{budget}\n\n[input_schema]\ntype = \"object\"\n"
    );
    text.push_str(&step("deliver", ""));
    if two {
        text.push_str(&step("notify", "\"deliver\""));
    }
    (format!("{name}.toml"), text)
}

fn step<'a>(wf: &'a Value, id: &str) -> &'a Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id}: {wf:#}"))
}

async fn submit(host: &HostProcess, workflow: &str) -> String {
    let (status, created) = host
        .submit(
            workflow,
            &format!("{workflow}-1"),
            json!({"recipient": "reader@example.com"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    created["workflow_id"].as_str().unwrap().to_string()
}

/// One limit's run: `faults` make the workflow spend its budget; the step it blocks, the
/// limit's name, and the extension that lets it complete.
struct LimitCase {
    limit: &'static str,
    budget: &'static str,
    cost: u32,
    two: bool,
    faults: Value,
    blocked_step: &'static str,
    /// Deliveries the provider holds when the step is blocked, and in the end.
    deliveries: (usize, usize),
    add: Value,
}

async fn exhaust_and_extend(db: Option<String>, case: LimitCase) {
    let name = format!("budget-{}", case.limit.replace('_', "-"));
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![chain(&name, case.budget, case.cost, case.two)],
        ..HostOptions::default()
    })
    .await;
    host.faults(case.faults.clone()).await;
    let id = submit(&host, &name).await;
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(30)).await;
    assert_eq!(wf["state"], "needs_review", "{}: {wf:#}", case.limit);
    let blocked = step(&wf, case.blocked_step);
    assert_eq!(blocked["state"], "blocked", "{wf:#}");
    assert_eq!(blocked["blocked"]["reason"], "budget_exhausted", "{wf:#}");
    assert_eq!(blocked["blocked"]["limit"], case.limit, "{wf:#}");
    assert_eq!(
        blocked["receipt"],
        Value::Null,
        "a block is never a receipt"
    );
    let status = wf["status_text"].as_str().unwrap();
    assert!(
        status.contains(&format!("budget exhausted ({})", case.limit)),
        "{status}"
    );
    let spent = &wf["budget"][case.limit];
    assert!(
        spent["used"].as_u64().unwrap() >= spent["limit"].as_u64().unwrap() || case.limit == "cost",
        "{}: {wf:#}",
        case.limit
    );
    // The refused attempt stopped before anything was sent and draws on nothing.
    let attempts = host.attempts(&id, case.blocked_step).await;
    let last = attempts.last().unwrap();
    assert_eq!(last["outcome"], "budget_exceeded", "{attempts:#?}");
    assert!(last["checkpoint"].as_u64().unwrap() <= 2, "{last:#}");
    assert_eq!(host.world().await.len(), case.deliveries.0);

    // The extension, recorded with its author; a replay answers the same; another body
    // under the key is a conflict; a bad amount is named.
    let path = format!("/v1/workflows/{id}/budget");
    let body = json!({"add": case.add, "reason": "the provider is back"});
    let (status, bad) = host
        .post_with_key(
            &path,
            "extend-0",
            json!({"add": {"attempts": -1}, "reason": "x"}),
        )
        .await;
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["error"]["details"][0]["pointer"], "/add/attempts");
    let (status, extended) = host.post_with_key(&path, "extend-1", body.clone()).await;
    assert_eq!(status, 200, "{extended}");
    let (status, again) = host.post_with_key(&path, "extend-1", body).await;
    assert_eq!((status, &again), (200, &extended));
    let (status, conflict) = host
        .post_with_key(
            &path,
            "extend-1",
            json!({"add": {"attempts": 9}, "reason": "other"}),
        )
        .await;
    assert_eq!(status, 409, "{conflict}");

    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    assert_eq!(host.world().await.len(), case.deliveries.1);
    let timeline = host.timeline_text(&id).await;
    assert!(
        timeline.contains("Budget extended by local") && timeline.contains("the provider is back"),
        "{timeline}"
    );
    // The extension is counted in the limits people see.
    let extended_limit = extended[case.limit]["limit"].as_u64().unwrap();
    assert_eq!(wf["budget"][case.limit]["limit"], extended_limit, "{wf:#}");
}

/// Each limit exhausted at run time blocks the step with its name; an extension of that
/// limit lets the workflow complete.
async fn each_budget_limit_blocks_the_step_with_its_name_until_extended(db: Option<String>) {
    let cases = [
        LimitCase {
            limit: "attempts",
            budget: "max_attempts = 2",
            cost: 1,
            two: false,
            faults: json!({"unavailable_next": 3}),
            blocked_step: "deliver",
            deliveries: (0, 1),
            add: json!({"attempts": 2}),
        },
        LimitCase {
            limit: "external_calls",
            budget: "max_external_calls = 1",
            cost: 1,
            two: false,
            faults: json!({"unavailable_next": 1}),
            blocked_step: "deliver",
            deliveries: (0, 1),
            add: json!({"external_calls": 1}),
        },
        LimitCase {
            limit: "cost",
            budget: "max_cost = 5",
            cost: 3,
            two: false,
            faults: json!({"unavailable_next": 1}),
            blocked_step: "deliver",
            deliveries: (0, 1),
            add: json!({"cost": 1}),
        },
        LimitCase {
            limit: "runtime_ms",
            budget: "max_runtime = \"100ms\"",
            cost: 1,
            two: true,
            faults: json!({"slow_next": 1, "slow_ms": 400}),
            blocked_step: "notify",
            deliveries: (1, 2),
            add: json!({"runtime_ms": 60_000}),
        },
    ];
    for case in cases {
        exhaust_and_extend(db.clone(), case).await;
    }
}

/// With every attempt of the budget spent, a recovery query still asks what became of a
/// request whose response was lost, from the reserve: the workflow completes with the
/// provider's record, and the reserve shows one query fewer.
async fn recovery_queries_run_from_the_reserve_when_the_attempts_are_spent(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![chain("budget-reserve", "max_attempts = 1", 1, false)],
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"lose_next": 1})).await;
    let id = submit(&host, "budget-reserve").await;
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(30)).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    assert_eq!(
        wf["budget"]["attempts"],
        json!({"used": 1, "limit": 1}),
        "{wf:#}"
    );
    assert_eq!(wf["budget"]["recovery_queries_left"], 2, "{wf:#}");
    let attempts = host.attempts(&id, "deliver").await;
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    assert_eq!(attempts[1]["trigger"], "recovery_query");
    assert_eq!(step(&wf, "deliver")["receipt"]["evidence_kind"], "query");
    assert_eq!(host.world().await.len(), 1, "sent once, found by the query");
}

/// A workflow blocked for review with a fifth of its deadline left says so, once: in the
/// projection, its status and its timeline.
async fn a_blocked_workflow_near_its_deadline_is_visible_as_such(db: Option<String>) {
    let host = HostProcess::start(HostOptions {
        db,
        workflows: vec![chain("budget-deadline", "max_attempts = 1", 1, false)],
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"unavailable_next": 2})).await;
    let id = submit(&host, "budget-deadline").await;
    let wf = host.wait_for(&id, SETTLED, Duration::from_secs(30)).await;
    assert_eq!(step(&wf, "deliver")["state"], "blocked", "{wf:#}");
    assert_eq!(wf["deadline"]["approaching"], false, "{wf:#}");
    let revision = wf["revision"].as_u64().unwrap();
    // 50 of the 60 minutes pass.
    host.advance_clock(50 * 60 * 1000).await;
    let wf = crate::wait::until(
        "the deadline to be told",
        Duration::from_secs(10),
        || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            if wf["deadline"]["approaching"] == true {
                Ok(wf)
            } else {
                Err(format!("{wf:#}"))
            }
        },
    )
    .await;
    assert!(wf["revision"].as_u64().unwrap() > revision, "{wf:#}");
    assert!(
        wf["status_text"]
            .as_str()
            .unwrap()
            .contains("deadline approaching"),
        "{wf:#}"
    );
    let timeline = host.timeline_text(&id).await;
    assert_eq!(
        timeline.matches("Deadline approaching").count(),
        1,
        "{timeline}"
    );
    let (_, told) = host
        .get(&format!("/v1/notifications?workflow_id={id}&limit=10"))
        .await;
    let types: Vec<&str> = told["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "workflow.recorded",
            "workflow.needs_review",
            "workflow.deadline_approaching"
        ],
        "{told:#}"
    );
}

on_both_stores!(
    each_budget_limit_blocks_the_step_with_its_name_until_extended,
    recovery_queries_run_from_the_reserve_when_the_attempts_are_spent,
    a_blocked_workflow_near_its_deadline_is_visible_as_such,
);

/// The console shows a step blocked by the budget with its limit and the budget's table,
/// and extends it with a plain form; the workflow page lists its notifications.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_a_budget_block_and_extends_it_with_a_form() {
    let host = HostProcess::start(HostOptions {
        workflows: vec![chain("budget-console", "max_attempts = 1", 1, false)],
        ..HostOptions::default()
    })
    .await;
    host.faults(json!({"unavailable_next": 1})).await;
    let id = submit(&host, "budget-console").await;
    host.wait_for(&id, &["needs_review"], Duration::from_secs(30))
        .await;
    let (client, cookie) = crate::course::console_session(&host).await;
    let page = crate::course::console_page(
        &host,
        &client,
        &cookie,
        &format!("/console/workflows/{id}/steps/deliver"),
    )
    .await;
    assert!(page.contains("Blocked by the budget"), "{page}");
    assert!(page.contains("<strong>attempts</strong>"), "{page}");
    assert!(page.contains("Recovery room"), "{page}");
    let (csrf, key) =
        crate::course::form_keys(&page, &format!("/console/workflows/{id}/course/budget"));
    let post = |fields: Vec<(&'static str, String)>| {
        let (client, cookie, url) = (client.clone(), cookie.clone(), host.url.clone());
        let id = id.clone();
        async move {
            let r = client
                .post(format!("{url}/console/workflows/{id}/course/budget"))
                .header("cookie", cookie)
                .form(&fields)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, refused) = post(vec![
        ("csrf", csrf.clone()),
        ("key", key.clone()),
        ("add_attempts", "many".into()),
        ("reason", "x".into()),
    ])
    .await;
    assert_eq!(status, 400);
    assert!(refused.contains("is not a whole number"), "{refused}");
    let (status, answered) = post(vec![
        ("csrf", csrf),
        ("key", key),
        ("add_attempts", "2".into()),
        ("add_cost", "".into()),
        ("reason", "the provider is back".into()),
    ])
    .await;
    assert_eq!(status, 200, "{answered}");
    assert!(answered.contains("Budget extended"), "{answered}");
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let page =
        crate::course::console_page(&host, &client, &cookie, &format!("/console/workflows/{id}"))
            .await;
    assert!(page.contains("Notifications"), "{page}");
    assert!(page.contains("workflow.completed"), "{page}");
}
