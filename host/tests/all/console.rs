//! The recovery console in a real browser: headless Chromium driven through chromedriver
//! (WebDriver) against a real `docket serve`. Screenshots of the main pages are saved to
//! `target/console-screenshots/` as artifacts.

use crate::host_process::{Contract, HostOptions, HostProcess, document, free_port, repo_root};
use crate::wait;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// chromedriver on a free port, and a WebDriver session in headless Chromium.
struct Browser {
    driver: Child,
    client: Client,
}

impl Browser {
    async fn start() -> Self {
        let chromedriver = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect(
                "chromedriver is not installed; run `bash scripts/test.sh`, which installs \
                 Debian's chromium and chromium-driver",
            );
        let port = free_port();
        // Its own process group, so that the browser it starts goes with it (see `Drop`).
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--window-size=1280,1400"]}),
        );
        // chromedriver takes a moment to listen.
        let client = wait::until(
            "a Chromium session through chromedriver",
            Duration::from_secs(30),
            || async {
                let connector = hyper_util::client::legacy::connect::HttpConnector::new();
                ClientBuilder::new(connector)
                    .capabilities(caps.clone())
                    .connect(&format!("http://127.0.0.1:{port}"))
                    .await
                    .map_err(|e| e.to_string())
            },
        )
        .await;
        Self { driver, client }
    }

    /// The page's text, once a page is there (a click may still be navigating).
    async fn text(&self) -> String {
        wait::until("a page", Duration::from_secs(10), || async {
            let body = self
                .client
                .find(Locator::Css("body"))
                .await
                .map_err(|e| e.to_string())?;
            body.text().await.map_err(|e| e.to_string())
        })
        .await
    }

    /// The page's text once it contains `needle` (after a navigation), or a failure that
    /// shows the page.
    async fn wait_text(&self, needle: &str) -> String {
        wait::until(
            &format!("the page showing `{needle}`"),
            Duration::from_secs(15),
            || async {
                let text = self.text().await;
                if text.contains(needle) {
                    Ok(text)
                } else {
                    Err(text)
                }
            },
        )
        .await
    }

    /// Waits until the page a script marked `data-stale` on `<html>` before navigating away
    /// has been replaced by a new, fully loaded one.
    async fn wait_navigated(&self) {
        wait::until("the next page", Duration::from_secs(15), || async {
            let fresh = self
                .client
                .execute(
                    "return document.readyState === 'complete' \
                     && document.documentElement.dataset.stale === undefined;",
                    vec![],
                )
                .await
                .map_err(|e| e.to_string())?;
            if fresh == json!(true) {
                Ok(())
            } else {
                Err("the page before the navigation".into())
            }
        })
        .await
    }

    async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = repo_root().join("target/console-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no `{css}` on the page: {e}"))
            .click()
            .await
            .unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the Chromium it started, even when a test failed before closing
        // its session: a browser left behind would load the machine for the tests after it.
        let group = i32::try_from(self.driver.id()).expect("a pid");
        // SAFETY: `kill` takes plain integers; a negative pid names the process group.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = self.driver.wait();
    }
}

const ENDED: &[&str] = &["completed", "needs_review", "failed"];

fn deliver(wf: &Value) -> Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "deliver"))
        .cloned()
        .unwrap()
}

/// A fire-and-forget delivery whose response was lost: outcome unknown, in review.
async fn stuck_fire_and_forget(host: &HostProcess) -> String {
    host.faults(json!({"lose_next": 1})).await;
    let (_, created) = host
        .submit(
            Contract::FireAndForget.workflow(),
            "ff-1",
            document("Invoice"),
        )
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    let wf = host.wait_for(&id, ENDED, Duration::from_secs(30)).await;
    assert_eq!(deliver(&wf)["state"], "outcome_unknown", "{wf:#}");
    id
}

/// A query-only delivery whose response was lost and that lookups see only after 60 s
/// (past the adapter's window): outcome unknown, in review, but a later query can settle it.
async fn stuck_query_only(host: &HostProcess) -> String {
    host.faults(json!({"lose_next": 1, "visibility_delay_ms": 60_000}))
        .await;
    let (_, created) = host
        .submit(Contract::QueryOnly.workflow(), "q-1", document("Statement"))
        .await;
    let id = created["workflow_id"].as_str().unwrap().to_string();
    // Empty lookups wait on time: the clock moves a second whenever the step waits.
    let wf = wait::until(
        "the delivery leaving `running`",
        Duration::from_secs(30),
        || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            if wf["state"] != "running" {
                return Ok(wf);
            }
            if deliver(&wf)["state"] == "failed_retryable" {
                host.advance_clock(1_000).await;
            }
            Err(format!("{wf:#}"))
        },
    )
    .await;
    assert_eq!(deliver(&wf)["state"], "outcome_unknown", "{wf:#}");
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_settles_stuck_steps_through_the_console_in_a_browser() {
    let host = HostProcess::start(HostOptions {
        workflows: vec![
            Contract::QueryOnly.definition(),
            Contract::FireAndForget.definition(),
        ],
        ..HostOptions::default()
    })
    .await;
    let resolved = stuck_fire_and_forget(&host).await;
    let queried = stuck_query_only(&host).await;
    let browser = Browser::start().await;
    let b = &browser;

    // Without a session every page leads to the sign-in.
    b.client
        .goto(&format!("{}/console/workflows", host.url))
        .await
        .unwrap();
    assert!(
        b.client
            .current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/console/sign-in")
    );
    b.click("form[action='/console/sign-in'] button").await;

    // The list: the needs-review queue first.
    let text = b.wait_text("Needs review (").await;
    assert!(text.contains("Needs review (2)"), "{text}");
    assert!(
        text.contains(&queried) && text.contains(&resolved),
        "{text}"
    );
    b.screenshot("workflows").await;

    // The stuck workflow: state in words, milestones, the next action, the timeline.
    b.click(&format!("a[href='/console/workflows/{queried}']"))
        .await;
    let text = b.text().await;
    assert!(text.contains("A person must decide"), "{text}");
    assert!(
        text.contains("Milestones") && text.contains("Delivery verified"),
        "{text}"
    );
    assert!(
        !text.contains('%'),
        "milestones are never a percentage: {text}"
    );
    for kind in ["OBSERVATION", "ACTION", "CONCLUSION"] {
        assert!(
            text.to_uppercase().contains(kind),
            "no {kind} on the timeline: {text}"
        );
    }
    b.screenshot("workflow").await;

    // The stuck step answers the four questions and offers what is safe.
    b.click("div.next a").await;
    let text = b.wait_text("Which actions are safe now").await;
    for heading in [
        "What docket intended to request",
        "What evidence exists",
        "Which actions are safe now",
    ] {
        assert!(text.contains(heading), "no `{heading}`: {text}");
    }
    assert!(text.contains("Query the provider"), "{text}");
    assert!(
        text.contains("Retry: not offered"),
        "a query-only adapter must not offer a same-key retry: {text}"
    );
    assert!(!text.to_lowercase().contains("force"), "{text}");
    b.screenshot("stuck-step").await;

    // The provider shows the delivery now; the query through the form verifies it.
    host.advance_clock(60_000).await;
    b.click("form[action$='/query'] button").await;
    let text = b.wait_text("was recorded").await;
    assert!(text.contains("The query action was recorded"), "{text}");
    assert!(text.contains("Receipt: query"), "{text}");
    let (_, wf) = host.get(&format!("/v1/workflows/{queried}")).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    assert_eq!(deliver(&wf)["receipt"]["evidence_kind"], "query");

    // The other stuck step: a manual receipt with evidence and reason.
    b.client
        .goto(&format!(
            "{}/console/workflows/{resolved}/steps/deliver",
            host.url
        ))
        .await
        .unwrap();
    let text = b.wait_text("Which actions are safe now").await;
    assert!(text.contains("Query: not possible"), "{text}");
    let form = b
        .client
        .find(Locator::Css("form[action$='/resolve']"))
        .await
        .unwrap();
    let key = form
        .find(Locator::Css("input[name='key']"))
        .await
        .unwrap()
        .attr("value")
        .await
        .unwrap()
        .unwrap();
    let csrf = form
        .find(Locator::Css("input[name='csrf']"))
        .await
        .unwrap()
        .attr("value")
        .await
        .unwrap()
        .unwrap();
    form.find(Locator::Css("input[value='succeeded']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    form.find(Locator::Css("textarea[name='evidence']"))
        .await
        .unwrap()
        .send_keys("Provider support confirmed the delivery by phone")
        .await
        .unwrap();
    form.find(Locator::Css("textarea[name='reason']"))
        .await
        .unwrap()
        .send_keys("The customer received the invoice")
        .await
        .unwrap();
    form.find(Locator::Css("button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let text = b.wait_text("was recorded").await;
    assert!(text.contains("The resolve action was recorded"), "{text}");
    assert!(text.contains("Resolved by local"), "{text}");

    // Pressing again: the same rendered form (same key) submitted a second time.
    b.client
        .execute(
            r#"
            const [action, key, csrf] = arguments;
            document.documentElement.dataset.stale = '1';
            const f = document.createElement('form');
            f.method = 'post';
            f.action = action;
            for (const [n, v] of Object.entries({key, csrf, outcome: 'succeeded',
                 evidence: 'Provider support confirmed the delivery by phone',
                 reason: 'The customer received the invoice'})) {
                const i = document.createElement('input');
                i.type = 'hidden'; i.name = n; i.value = v; f.appendChild(i);
            }
            document.body.appendChild(f);
            f.submit();
            "#,
            vec![
                json!(format!(
                    "/console/workflows/{resolved}/steps/deliver/resolve"
                )),
                json!(key),
                json!(csrf),
            ],
        )
        .await
        .unwrap();
    b.wait_navigated().await;
    let text = b.wait_text("was recorded").await;
    assert!(text.contains("The resolve action was recorded"), "{text}");
    // Whatever the second press could have set going has had its chance to run.
    host.wait_scheduler_looked().await;
    let (_, timeline) = host
        .get(&format!("/v1/workflows/{resolved}/timeline?limit=500"))
        .await;
    let resolutions = timeline["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["text"]
                .as_str()
                .unwrap_or("")
                .contains("resolved by local")
        })
        .count();
    assert_eq!(resolutions, 1, "{timeline:#}");
    let (_, wf) = host.get(&format!("/v1/workflows/{resolved}")).await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let receipt = deliver(&wf)["receipt"].clone();
    assert_eq!(receipt["author"], "local");
    assert_eq!(receipt["reason"], "The customer received the invoice");

    // Author, evidence and reason on the workflow's timeline.
    b.client
        .goto(&format!("{}/console/workflows/{resolved}", host.url))
        .await
        .unwrap();
    let text = b.wait_text("Timeline").await;
    assert!(
        text.contains("resolved by local")
            && text.contains("Provider support confirmed the delivery by phone")
            && text.contains("The customer received the invoice"),
        "{text}"
    );
    b.screenshot("resolved-workflow").await;

    // The adapters page shows versions, the active one, contracts and recorded verdicts.
    let db = host.path().join("docket.db").display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["adapter", "verify", "http-delivery-query-only", "--db", &db])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    b.client
        .goto(&format!("{}/console/adapters", host.url))
        .await
        .unwrap();
    let text = b.wait_text("Changes").await;
    assert!(
        text.contains("http-delivery-query-only") && text.contains("active"),
        "{text}"
    );
    assert!(
        text.contains("every declared claim held")
            && text.contains("query: held")
            && text.contains("idempotency: not declared"),
        "{text}"
    );
    b.screenshot("adapters").await;

    // A form posted from elsewhere (the right cookie, no session token) does nothing.
    let cookie = b.client.get_named_cookie("docket_console").await.unwrap();
    let r = reqwest::Client::new()
        .post(format!(
            "{}/console/workflows/{queried}/steps/deliver/escalate",
            host.url
        ))
        .header("Cookie", format!("docket_console={}", cookie.value()))
        .form(&[("csrf", "forged"), ("key", "k-1"), ("note", "forged")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let timeline = host.timeline_text(&queried).await;
    assert!(!timeline.contains("forged"), "{timeline}");
    let _ = browser.client.clone().close().await;
}

/// An operator withdraws a completed delivery from its workflow page: the withdrawal's
/// consequences are listed before it is asked for, and afterwards the page shows both
/// effects — the delivery and the compensation that reversed it — on the timeline, the
/// page refreshing itself as the compensation runs.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_withdraws_a_completed_delivery_in_a_browser() {
    let (file, text) = Contract::Idempotent.definition();
    let host = HostProcess::start(HostOptions {
        workflows: vec![(
            file,
            format!("{text}\n[steps.compensation]\non = \"workflow_cancelled\"\n"),
        )],
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit(
            Contract::Idempotent.workflow(),
            "withdraw-in-browser",
            document("Withdrawn in the console"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let delivery = host.world().await[0]["id"].as_str().unwrap().to_string();

    let browser = Browser::start().await;
    let b = &browser;
    b.client
        .goto(&format!("{}/console/workflows", host.url))
        .await
        .unwrap();
    b.click("form[action='/console/sign-in'] button").await;
    b.wait_text("Workflows").await;
    b.client
        .goto(&format!("{}/console/workflows/{id}", host.url))
        .await
        .unwrap();
    let text = b.wait_text("Request withdrawal").await;
    assert!(
        text.contains(&delivery) && text.contains("will be reversed by a compensation"),
        "{text}"
    );
    let form = b
        .client
        .find(Locator::Css("form[action$='/course/withdraw']"))
        .await
        .unwrap();
    form.find(Locator::Css("textarea[name='reason']"))
        .await
        .unwrap()
        .send_keys("Sent to the wrong reader")
        .await
        .unwrap();
    form.find(Locator::Css("button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // Both effects on the timeline, once the compensation has run (the page refreshes
    // itself when the workflow moves).
    let text = b
        .wait_text("Compensation of Deliver document succeeded")
        .await;
    assert!(text.contains("Deliver document succeeded"), "{text}");
    assert!(text.contains("Withdrawal cnl_"), "{text}");
    assert!(text.contains("Sent to the wrong reader"), "{text}");
    let text = b.wait_text("Reversed after partial completion —").await;
    assert!(text.contains("Cancelled"), "{text}");
    b.screenshot("withdrawn").await;
    let world = host.world().await;
    assert_eq!(world[0]["status"], "cancelled", "{world:?}");
    assert_eq!(world[0]["cancel_requests"], 1);
    // A reload (the form sent again with its key) withdraws nothing twice.
    let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(wf["state"], "cancelled", "{wf:#}");
    assert_eq!(deliver(&wf)["state"], "compensated");
    let _ = browser.client.clone().close().await;
}

/// An approver signs in, sees what waits for them, and approves one delivery: it happens
/// once. A revision made while another approval's page is open makes its approve form answer
/// that the consequence changed, and show the new one, which is then approved.
#[tokio::test(flavor = "multi_thread")]
async fn an_approver_approves_the_consequence_they_saw_in_a_browser() {
    const TOKENS: &str = r#"
[[tokens]]
token = "owner-token-0123456789"
subject = "team-a"
role = "client"
[[tokens]]
token = "ops-token-0123456789abcd"
subject = "alice"
role = "operator"
[[tokens]]
token = "carol-token-0123456789ab"
subject = "carol"
role = "approver"
"#;
    let shipped =
        std::fs::read_to_string(repo_root().join("workflows/approved-delivery.toml")).unwrap();
    let host = HostProcess::start(HostOptions {
        config: TOKENS.into(),
        workflows: vec![("approved-delivery.toml".into(), shipped)],
        token: Some("ops-token-0123456789abcd".into()),
        ..HostOptions::default()
    })
    .await;
    let submit = async |key: &str| {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/intents", host.url))
            .header("Idempotency-Key", key)
            .bearer_auth("owner-token-0123456789")
            .json(&json!({"workflow": "approved-delivery", "input": document(key)}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 201);
        let body: Value = r.json().await.unwrap();
        body["workflow_id"].as_str().unwrap().to_string()
    };
    let first = submit("approve-in-browser").await;
    let second = submit("revised-in-browser").await;
    let asked = async |id: &str, not: Option<String>| {
        wait::until("the approval asked", Duration::from_secs(30), || async {
            let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
            let approval = &wf["steps"][2]["approval"];
            let digest = approval["digest"].as_str().map(str::to_string);
            match digest {
                Some(d)
                    if wf["steps"][2]["state"] == "awaiting_approval"
                        && Some(&d) != not.as_ref() =>
                {
                    Ok(d)
                }
                _ => Err(format!("{wf:#}")),
            }
        })
        .await
    };
    asked(&first, None).await;
    let old = asked(&second, None).await;

    let browser = Browser::start().await;
    let b = &browser;
    b.client
        .goto(&format!("{}/console/sign-in", host.url))
        .await
        .unwrap();
    b.client
        .find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys("carol-token-0123456789ab")
        .await
        .unwrap();
    b.click("form[action='/console/sign-in'] button").await;
    let text = b.wait_text("Approvals waiting for you").await;
    assert!(
        text.contains(&first) && text.contains(&second),
        "both are listed: {text}"
    );
    assert!(
        text.contains("Needs your approval: Deliver document to reader@example.com"),
        "{text}"
    );
    // An approver is no operator: the workflows list is not theirs.
    b.client
        .goto(&format!("{}/console/workflows", host.url))
        .await
        .unwrap();
    b.wait_text("you hold the approver role").await;

    b.client
        .goto(&format!(
            "{}/console/workflows/{first}/approvals/approve",
            host.url
        ))
        .await
        .unwrap();
    let text = b.wait_text("Approve this consequence").await;
    assert!(text.contains("reader@example.com"), "{text}");
    assert!(text.contains("http-delivery"), "{text}");
    b.screenshot("approval").await;
    b.click("form#approve button").await;
    b.wait_text("Approved: the approved steps run now").await;
    host.wait_for(&first, &["completed"], Duration::from_secs(30))
        .await;
    assert_eq!(host.world().await.len(), 1);

    // The second approval's page is open; the owner corrects the recipient meanwhile.
    b.client
        .goto(&format!(
            "{}/console/workflows/{second}/approvals/approve",
            host.url
        ))
        .await
        .unwrap();
    let text = b.wait_text("Approve this consequence").await;
    assert!(text.contains(&old), "{text}");
    let corrected = json!({"title": "revised-in-browser", "recipient": "other@example.com",
                           "body": "Hello from docket"});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/workflows/{second}/revisions", host.url))
        .header("Idempotency-Key", "revise-in-browser")
        .bearer_auth("owner-token-0123456789")
        .json(&json!({"input": corrected, "reason": "the right reader"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let new = asked(&second, Some(old.clone())).await;
    b.click("form#approve button").await;
    let text = b.wait_text("The consequence changed").await;
    assert!(
        text.contains(&new) && text.contains("other@example.com"),
        "the new consequence is shown: {text}"
    );
    assert_eq!(host.world().await.len(), 1, "nothing was approved");
    b.screenshot("approval-changed").await;
    b.click("form#approve button").await;
    b.wait_text("Approved: the approved steps run now").await;
    host.wait_for(&second, &["completed"], Duration::from_secs(30))
        .await;
    let world = host.world().await;
    assert_eq!(world.len(), 2, "{world:?}");
    assert_eq!(world[1]["recipient"], "other@example.com", "{world:?}");
    let _ = browser.client.clone().close().await;
}

/// The operator reads what providers posted: the inbox holds the event that matched no
/// step (and why), the matched table the event that met a delivery, linked to its
/// workflow.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_reads_the_providers_evidence_in_a_browser() {
    const SECRET: &str = "whsec_c2lnbmluZy1rZXktb2YtdGhlLWNvbnNvbGUtdGVzdA==";
    let host = HostProcess::start(HostOptions {
        config: format!("[secrets]\nvalues = {{ provider_webhook_secret = {SECRET:?} }}\n"),
        ..HostOptions::default()
    })
    .await;
    let (status, created) = host
        .submit("document-delivery", "evidence-in-browser", document("Seen"))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap().to_string();
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let body = json!({"id": "evt_stray", "type": "delivery.accepted",
                      "data": {"id": "dlv_stray", "client_reference": "dk-nobody", "status": "accepted"}})
    .to_string();
    let key = docket::notify::signing_key(SECRET).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let r = reqwest::Client::new()
        .post(format!("{}/v1/evidence/http-delivery", host.url))
        .header("webhook-id", "wh-stray")
        .header("webhook-timestamp", now.to_string())
        .header(
            "webhook-signature",
            docket::notify::signature(&key, "wh-stray", now, &body),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    wait::until(
        "both observations kept",
        Duration::from_secs(30),
        || async {
            let (_, page) = host.get("/v1/evidence").await;
            let data = page["data"].as_array().cloned().unwrap_or_default();
            if data.len() == 2 && data.iter().all(|o| o["verdict"] != "held") {
                Ok(())
            } else {
                Err(format!("{page:#}"))
            }
        },
    )
    .await;

    let browser = Browser::start().await;
    let b = &browser;
    b.client
        .goto(&format!("{}/console/workflows", host.url))
        .await
        .unwrap();
    b.click("form[action='/console/sign-in'] button").await;
    b.wait_text("Workflows").await;
    b.click("header a[href='/console/evidence']").await;
    let text = b.wait_text("Evidence from providers").await;
    let inbox = b
        .client
        .find(Locator::Css("table#inbox"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        inbox.contains("dlv_stray") && inbox.contains("unmatched"),
        "{inbox}"
    );
    let matched = b
        .client
        .find(Locator::Css("table#matched"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        matched.contains(&id) && matched.contains("kept") && matched.contains("deliver"),
        "{matched}\n{text}"
    );
    b.screenshot("evidence").await;
    b.click("table#matched a").await;
    b.wait_text("Delivery verified").await;
}
