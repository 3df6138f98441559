//! Approval steps against a real `docket serve`, its provider simulator and a real
//! database: a person approves the exact consequence (its digest) before anything is sent;
//! a stale digest, a rejection, an expiry, a revision and a tampered approval each end the
//! way the contract says, and the provider's own record shows what was sent. Each case
//! runs on a SQLite file (`sqlite::<case>`) and a PostgreSQL database of its own
//! (`postgres::<case>`).

use crate::host_process::{HostOptions, HostProcess, document};
use serde_json::{Value, json};
use std::time::Duration;

/// A client, an operator, an approver, and an approver a step may not name.
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
[[tokens]]
token = "dave-token-0123456789abc"
subject = "dave"
role = "approver"
"#;

const OWNER: &str = "owner-token-0123456789";
const OPS: &str = "ops-token-0123456789abcd";
const CAROL: &str = "carol-token-0123456789ab";
const DAVE: &str = "dave-token-0123456789abc";

async fn post(host: &HostProcess, path: &str, key: &str, token: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", host.url))
        .header("Idempotency-Key", key)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    answered("POST", path, r).await
}

/// The answer as JSON, held against the API's OpenAPI document.
async fn answered(method: &str, path: &str, r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let body: Option<Value> = r.json().await.ok();
    crate::openapi_check::check(method, path, status, body.as_ref());
    (status, body.unwrap_or(Value::Null))
}

async fn get(host: &HostProcess, path: &str, token: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{}{path}", host.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    answered("GET", path, r).await
}

fn step<'a>(wf: &'a Value, id: &str) -> &'a Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id}: {wf:#}"))
}

/// The shipped `approved-delivery` definition.
fn shipped() -> String {
    std::fs::read_to_string(
        crate::host_process::repo_root().join("workflows/approved-delivery.toml"),
    )
    .unwrap()
}

/// A host with the tokens, the shipped `approved-delivery` and `workflows`.
async fn start(db: Option<String>, mut workflows: Vec<(String, String)>) -> HostProcess {
    workflows.push(("approved-delivery.toml".into(), shipped()));
    HostProcess::start(HostOptions {
        db,
        config: TOKENS.into(),
        workflows,
        token: Some(OPS.into()),
        ..HostOptions::default()
    })
    .await
}

async fn submit(host: &HostProcess, workflow: &str, key: &str, input: Value) -> String {
    let (status, created) = post(
        host,
        "/v1/intents",
        key,
        OWNER,
        json!({"workflow": workflow, "input": input}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    created["workflow_id"].as_str().unwrap().to_string()
}

/// Waits until step `approval` of `id` waits for a decision (asked with a digest other
/// than `not`), and answers its consequence.
async fn asked(host: &HostProcess, id: &str, approval: &str, not: Option<&str>) -> Value {
    asked_by(host, id, approval, not, CAROL).await
}

/// [`asked`], as `approver` reads it.
async fn asked_by(
    host: &HostProcess,
    id: &str,
    approval: &str,
    not: Option<&str>,
    approver: &str,
) -> Value {
    let path = format!("/v1/workflows/{id}/steps/{approval}/consequence");
    let asked = crate::wait::poll(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async {
            let (status, c) = get(host, &path, approver).await;
            let fresh = c["digest"].as_str().is_some_and(|d| Some(d) != not);
            if status == 200 && c["state"] == "awaiting_approval" && fresh {
                Ok(c)
            } else {
                Err(format!("{status} {c:#}"))
            }
        },
    )
    .await;
    match asked {
        Ok(c) => c,
        Err(last) => {
            let timeline = timeline(host, id).await;
            panic!("{approval} of {id} was not asked: {last}\n{timeline}")
        }
    }
}

/// The workflow's timeline as text, read by an operator.
async fn timeline(host: &HostProcess, id: &str) -> String {
    let (_, page) = get(host, &format!("/v1/workflows/{id}/timeline?limit=500"), OPS).await;
    page.to_string()
}

async fn projection(host: &HostProcess, id: &str) -> Value {
    get(host, &format!("/v1/workflows/{id}"), OPS).await.1
}

/// Approving the digest shown delivers once, and the receipts say who approved what; a
/// stale digest, another action, or a caller without the approver role changes nothing.
async fn an_approval_of_the_digest_shown_delivers_once(db: Option<String>) {
    let host = start(db, vec![]).await;
    let id = submit(
        &host,
        "approved-delivery",
        "approve-1",
        document("Approve me"),
    )
    .await;
    let consequence = asked(&host, &id, "approve", None).await;
    let digest = consequence["digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("sha256:"), "{consequence:#}");
    let steps = consequence["consequence"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{consequence:#}");
    assert_eq!(steps[0]["step"], "deliver");
    assert_eq!(steps[0]["component"], "http-delivery");
    assert_eq!(steps[0]["version"], "^1");
    assert_eq!(steps[0]["input"]["recipient"], "reader@example.com");
    assert_eq!(steps[0]["outbound_hosts"], json!(["$base_url"]));
    assert_eq!(steps[0]["cost"], 1);
    assert_eq!(
        consequence["summary"],
        "Needs your approval: Deliver document to reader@example.com"
    );

    // The workflow runs, waiting for a person; nothing was sent.
    let wf = projection(&host, &id).await;
    assert_eq!(wf["state"], "running", "{wf:#}");
    assert_eq!(
        wf["status_text"],
        "Needs your approval: Deliver document to reader@example.com"
    );
    assert_eq!(wf["next_action"]["kind"], "approval", "{wf:#}");
    assert_eq!(wf["next_action"]["step"], "approve");
    assert_eq!(step(&wf, "approve")["state"], "awaiting_approval");
    assert_eq!(step(&wf, "approve")["approval"]["digest"], digest.as_str());
    assert!(step(&wf, "approve")["approval"]["outcome"].is_null());
    assert_eq!(step(&wf, "deliver")["state"], "pending");
    assert!(host.world().await.is_empty());

    // The approver's list shows it; an operator's and a client's do not exist.
    let (status, list) = get(&host, "/v1/approvals", CAROL).await;
    assert_eq!(status, 200, "{list}");
    let listed = list["approvals"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{list:#}");
    assert_eq!(listed[0]["workflow_id"], id.as_str());
    assert_eq!(listed[0]["digest"], digest.as_str());
    assert_eq!(get(&host, "/v1/approvals", OPS).await.0, 403);

    let approve = format!("/v1/workflows/{id}/steps/approve/approve");
    // A stale digest is refused with the current one.
    let stale = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let (status, body) = post(&host, &approve, "a-0", CAROL, json!({"digest": stale})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "consequence_changed");
    assert_eq!(
        body["error"]["details"][0]["current_digest"],
        digest.as_str()
    );
    // A digest is required; an operator is no approver; an approval step is not retried.
    let (status, body) = post(&host, &approve, "a-1", CAROL, json!({})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["details"][0]["pointer"], "/digest");
    let (status, body) = post(&host, &approve, "a-2", OPS, json!({"digest": digest})).await;
    assert_eq!(status, 403, "{body}");
    let retry = format!("/v1/workflows/{id}/steps/approve/retry");
    let (status, body) = post(&host, &retry, "r-0", OPS, json!({})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "invalid_transition");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("approve") && message.contains("reject"),
        "{message}"
    );
    assert!(host.world().await.is_empty());

    // The right digest: approved once, delivered once.
    let approval = json!({"digest": digest, "note": "checked the recipient"});
    let (status, answered) = post(&host, &approve, "a-3", CAROL, approval.clone()).await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["state"], "succeeded", "{answered:#}");
    let (status, again) = post(&host, &approve, "a-3", CAROL, approval).await;
    assert_eq!((status, &again), (200, &answered));
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    let receipt = &step(&wf, "approve")["receipt"];
    assert_eq!(receipt["evidence_kind"], "approval", "{wf:#}");
    assert_eq!(receipt["output"]["approver"], "carol");
    assert_eq!(receipt["output"]["consequence_digest"], digest.as_str());
    assert_eq!(
        receipt["output"]["inputs"]["deliver"],
        steps[0]["input_digest"]
    );
    assert_eq!(receipt["output"]["note"], "checked the recipient");
    let approved = &step(&wf, "approve")["approval"];
    assert_eq!(approved["outcome"], "approved", "{wf:#}");
    assert_eq!(approved["by"], "carol");
    assert_eq!(
        step(&wf, "deliver")["receipt"]["external_reference"],
        world[0]["id"]
    );
    // The effect's receipt names the approval it was caused under.
    assert_eq!(
        step(&wf, "deliver")["receipt"]["approved_in"],
        receipt["receipt_id"]
    );
    let (_, list) = get(&host, "/v1/approvals", CAROL).await;
    assert_eq!(list["approvals"], json!([]));
    let timeline = timeline(&host, &id).await;
    assert!(
        timeline.contains("Approve delivery approved by carol"),
        "{timeline}"
    );
    // An approver reads the workflow it may approve, and no other.
    let (status, seen) = get(&host, &format!("/v1/workflows/{id}"), CAROL).await;
    assert_eq!(status, 200, "{seen}");
    let other = submit(
        &host,
        "document-delivery",
        "not-approved-1",
        document("Other"),
    )
    .await;
    let (status, _) = get(&host, &format!("/v1/workflows/{other}"), CAROL).await;
    assert_ne!(status, 200);
}

/// Where a step names its approvers, only they decide; others hear why.
async fn only_the_named_approvers_decide(db: Option<String>) {
    let named = shipped()
        .replace(
            "name = \"approved-delivery\"",
            "name = \"approved-by-dave\"",
        )
        .replace(
            "expires = \"24h\"",
            "expires = \"24h\"\napprovers = [\"dave\"]",
        );
    let host = start(db, vec![("approved-by-dave.toml".into(), named)]).await;
    let id = submit(&host, "approved-by-dave", "named-1", document("Named")).await;
    let consequence = asked_by(&host, &id, "approve", None, DAVE).await;
    let approve = format!("/v1/workflows/{id}/steps/approve/approve");
    let body = json!({"digest": consequence["digest"]});
    let (status, refused) = post(&host, &approve, "n-0", CAROL, body.clone()).await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only by dave"),
        "{refused}"
    );
    let (_, list) = get(&host, "/v1/approvals", CAROL).await;
    assert_eq!(list["approvals"], json!([]), "carol may not decide it");
    let (status, _) = post(&host, &approve, "n-1", DAVE, body).await;
    assert_eq!(status, 200);
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    assert_eq!(host.world().await.len(), 1);
}

/// A definition whose earlier effect is compensated when the workflow fails, before an
/// approval of the delivery.
fn noticed_delivery() -> (String, String) {
    let notice = r#"[[steps]]
id = "notice"
label = "Send notice"
kind = "adapter"
component = "http-delivery"
version = "^1"
after = ["render"]
outputs = ["id"]

[steps.input]
recipient = "$steps.render.output.recipient"
document = "notice"
document_digest = "sha256:notice"

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]

[steps.compensation]
on = "workflow_failed"

[[steps]]
id = "approve""#;
    let text = shipped()
        .replace("name = \"approved-delivery\"", "name = \"noticed-delivery\"")
        .replace("expires = \"24h\"", "expires = \"10m\"")
        .replace("[[steps]]\nid = \"approve\"", notice)
        .replace(
            "id = \"approve\"\nlabel = \"Approve delivery\"\nkind = \"approval\"\nafter = [\"render\"]",
            "id = \"approve\"\nlabel = \"Approve delivery\"\nkind = \"approval\"\nafter = [\"notice\"]",
        );
    assert!(text.contains("after = [\"notice\"]"), "{text}");
    ("noticed-delivery.toml".into(), text)
}

/// A rejection fails the approval step and the workflow, and the earlier effect whose
/// definition asks for it is compensated; the approved step never sends anything.
async fn a_rejection_fails_the_workflow_and_compensates_earlier_effects(db: Option<String>) {
    let host = start(db, vec![noticed_delivery()]).await;
    let id = submit(&host, "noticed-delivery", "reject-1", document("Reject me")).await;
    asked(&host, &id, "approve", None).await;
    assert_eq!(host.world().await.len(), 1, "the notice was sent");
    let reject = format!("/v1/workflows/{id}/steps/approve/reject");
    let (status, body) = post(&host, &reject, "j-0", CAROL, json!({})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["details"][0]["pointer"], "/reason");
    let (status, answered) = post(
        &host,
        &reject,
        "j-1",
        CAROL,
        json!({"reason": "wrong recipient"}),
    )
    .await;
    assert_eq!(status, 200, "{answered}");
    let wf = host
        .wait_for(&id, &["failed"], Duration::from_secs(30))
        .await;
    let approval = step(&wf, "approve");
    assert_eq!(approval["state"], "failed_terminal", "{wf:#}");
    assert_eq!(approval["approval"]["outcome"], "rejected");
    assert_eq!(approval["approval"]["by"], "carol");
    assert_eq!(approval["approval"]["reason"], "wrong recipient");
    assert_eq!(step(&wf, "notice")["state"], "compensated", "{wf:#}");
    assert_eq!(step(&wf, "deliver")["state"], "pending", "{wf:#}");
    let world = host.world().await;
    assert_eq!(world.len(), 1, "only the notice: {world:#?}");
    assert_eq!(world[0]["status"], "cancelled", "{world:#?}");
    // A decided approval is decided: approving now is refused.
    let approve = format!("/v1/workflows/{id}/steps/approve/approve");
    let (status, body) = post(
        &host,
        &approve,
        "j-2",
        CAROL,
        json!({"digest": approval["approval"]["digest"]}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
}

/// Nobody deciding before `expires` ends the approval step as a rejection would, by
/// `docket`, with the earlier effect compensated.
async fn an_expired_approval_fails_the_workflow(db: Option<String>) {
    let host = start(db, vec![noticed_delivery()]).await;
    let id = submit(&host, "noticed-delivery", "expire-1", document("Expire me")).await;
    let consequence = asked(&host, &id, "approve", None).await;
    let asked_at = consequence["asked_at"].as_str().unwrap().to_string();
    assert!(consequence["expires_at"].as_str().unwrap() > asked_at.as_str());
    host.advance_clock(11 * 60 * 1000).await;
    let wf = host
        .wait_for(&id, &["failed"], Duration::from_secs(30))
        .await;
    let approval = step(&wf, "approve");
    assert_eq!(approval["approval"]["outcome"], "expired", "{wf:#}");
    assert_eq!(approval["approval"]["by"], "docket");
    assert_eq!(step(&wf, "notice")["state"], "compensated", "{wf:#}");
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    let timeline = timeline(&host, &id).await;
    assert!(timeline.contains("Approval expired"), "{timeline}");
}

/// A revision that changes what the delivery would send asks again: the old digest is
/// stale, the new one is what must be approved, and only the corrected delivery is sent.
async fn a_revision_asks_the_approval_again(db: Option<String>) {
    let host = start(db.clone(), vec![]).await;
    let id = submit(
        &host,
        "approved-delivery",
        "revise-1",
        document("Revise me"),
    )
    .await;
    let first = asked(&host, &id, "approve", None).await;
    let old = first["digest"].as_str().unwrap().to_string();
    let corrected = json!({"title": "Revise me", "recipient": "other@example.com", "body": "Hello from docket"});
    let (status, revised) = post(
        &host,
        &format!("/v1/workflows/{id}/revisions"),
        "v-1",
        OWNER,
        json!({"input": corrected, "reason": "the right recipient"}),
    )
    .await;
    assert_eq!(status, 201, "{revised}");
    let second = asked(&host, &id, "approve", Some(&old)).await;
    let new = second["digest"].as_str().unwrap().to_string();
    assert_ne!(old, new);
    assert_eq!(
        second["consequence"]["steps"][0]["input"]["recipient"],
        "other@example.com"
    );
    let approve = format!("/v1/workflows/{id}/steps/approve/approve");
    let (status, body) = post(&host, &approve, "a-old", CAROL, json!({"digest": old})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "consequence_changed");
    assert_eq!(body["error"]["details"][0]["current_digest"], new.as_str());
    let (status, body) = post(&host, &approve, "a-new", CAROL, json!({"digest": new})).await;
    assert_eq!(status, 200, "{body}");
    host.wait_for(&id, &["completed"], Duration::from_secs(30))
        .await;
    let world = host.world().await;
    assert_eq!(world.len(), 1, "{world:#?}");
    assert_eq!(world[0]["recipient"], "other@example.com", "{world:#?}");
    let timeline = timeline(&host, &id).await;
    assert!(
        timeline.contains(&old) && timeline.contains(&new),
        "{timeline}"
    );
    // The archive keeps both questions: the first superseded, the second approved.
    let database = db.unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["export", &id, "--db", &database])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let story: Value = serde_json::from_slice(&out.stdout).unwrap();
    let asked = story["approvals"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "{story:#}");
    assert_eq!(asked[0]["digest"], old.as_str());
    assert_eq!(asked[0]["outcome"], "superseded");
    assert_eq!(asked[1]["digest"], new.as_str());
    assert_eq!(asked[1]["outcome"], "approved");
    assert_eq!(asked[1]["decided_by"], "carol");
}

/// Approves `id`'s consequence after its first approved step's input digest was altered
/// where the question is kept (so the approval's receipt names another input), and answers
/// the workflow once it waits for a person.
async fn approve_a_tampered_consequence(host: &HostProcess, db: Option<String>, id: &str) -> Value {
    let consequence = asked(host, id, "approve", None).await;
    let mut altered = consequence["consequence"].clone();
    altered["steps"][0]["input_digest"] =
        json!("sha256:1111111111111111111111111111111111111111111111111111111111111111");
    let text = altered.to_string().replace('\'', "''");
    let url = db.unwrap_or_else(|| host.path().join("docket.db").display().to_string());
    crate::operations::corrupt(
        &url,
        &format!("UPDATE approvals SET consequence = '{text}' WHERE workflow_id = '{id}'"),
    )
    .await;
    let approve = format!("/v1/workflows/{id}/steps/approve/approve");
    let (status, body) = post(
        host,
        &approve,
        "tampered",
        CAROL,
        json!({"digest": consequence["digest"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    host.wait_for(id, &["needs_review"], Duration::from_secs(30))
        .await
}

/// An approval whose recorded input digest is not what the step would send blocks the
/// step at checkpoint 2 (`approval_mismatch`): nothing reaches the provider.
async fn a_mismatching_input_is_blocked_before_anything_is_sent(db: Option<String>) {
    let host = start(db.clone(), vec![]).await;
    let id = submit(
        &host,
        "approved-delivery",
        "mismatch-1",
        document("Tampered"),
    )
    .await;
    let wf = approve_a_tampered_consequence(&host, db, &id).await;
    let deliver = step(&wf, "deliver");
    assert_eq!(deliver["state"], "blocked", "{wf:#}");
    assert_eq!(deliver["blocked"]["reason"], "approval_mismatch", "{wf:#}");
    assert!(host.world().await.is_empty());
}

/// A mailing whose whole recipient list a person approves before any item is sent.
const APPROVED_MAILING: &str = r#"
name = "approved-mailing"
version = 1
deadline = "1h"

[input_schema]
type = "object"
required = ["document", "recipients"]
properties.document.type = "string"
properties.recipients.type = "array"

[[steps]]
id = "approve"
label = "Approve the mailing"
kind = "approval"
approves = ["deliver"]
summary = "Send {$input.document} to every recipient"

[[steps]]
id = "deliver"
label = "Deliver to each recipient"
kind = "adapter"
component = "http-delivery"
version = "^1"
after = ["approve"]
for_each = "$input.recipients"
item_key = "$item.email"
max_parallel = 2
timeout = "30s"
outputs = ["id", "client_reference", "status", "replayed"]

[steps.input]
recipient = "$item.email"
document = "$input.document"
document_digest = "$input.document"

[steps.capabilities]
outbound_hosts = ["$base_url"]
secrets = ["provider_token"]
"#;

fn mailing_input(emails: &[&str]) -> Value {
    let recipients: Vec<Value> = emails.iter().map(|e| json!({"email": e})).collect();
    json!({"document": "Quarterly report", "recipients": recipients})
}

/// An approval of a batch step binds its whole item set: the consequence lists every item
/// with what it would send; a revision that adds a recipient asks again (the old digest
/// is stale), and approving the new set sends exactly that set, once each.
async fn an_approval_of_a_batch_binds_the_whole_item_set(db: Option<String>) {
    let host = start(
        db,
        vec![("approved-mailing.toml".into(), APPROVED_MAILING.into())],
    )
    .await;
    let id = submit(
        &host,
        "approved-mailing",
        "mailing-1",
        mailing_input(&["a@example.com", "b@example.com", "c@example.com"]),
    )
    .await;
    let first = asked(&host, &id, "approve", None).await;
    let asked_step = &first["consequence"]["steps"][0];
    assert_eq!(asked_step["item_count"], 3, "{first:#}");
    assert_eq!(asked_step["items"][1]["item_key"], "b@example.com");
    assert_eq!(
        asked_step["items"][1]["input"]["recipient"],
        "b@example.com"
    );
    assert!(asked_step.get("input").is_none(), "{first:#}");
    let old = first["digest"].as_str().unwrap().to_string();
    let (status, revised) = post(
        &host,
        &format!("/v1/workflows/{id}/revisions"),
        "mailing-v2",
        OWNER,
        json!({"input": mailing_input(&["a@example.com", "b@example.com", "c@example.com", "d@example.com"]), "reason": "one more reader"}),
    )
    .await;
    assert_eq!(status, 201, "{revised}");
    let second = asked(&host, &id, "approve", Some(&old)).await;
    let new = second["digest"].as_str().unwrap().to_string();
    assert_eq!(second["consequence"]["steps"][0]["item_count"], 4);
    let approve = format!("/v1/workflows/{id}/steps/approve/approve");
    let (status, body) = post(&host, &approve, "m-old", CAROL, json!({"digest": old})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "consequence_changed");
    let (status, body) = post(&host, &approve, "m-new", CAROL, json!({"digest": new})).await;
    assert_eq!(status, 200, "{body}");
    let wf = host
        .wait_for(&id, &["completed"], Duration::from_secs(60))
        .await;
    assert_eq!(step(&wf, "deliver")["items"]["succeeded"], 4, "{wf:#}");
    let mut sent: Vec<String> = host
        .world()
        .await
        .iter()
        .map(|d| d["recipient"].as_str().unwrap().to_string())
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        [
            "a@example.com",
            "b@example.com",
            "c@example.com",
            "d@example.com"
        ]
    );
}

/// A batch whose item set is not the one the approval receipt bound is blocked
/// (`approval_mismatch`) before any item is written: nothing reaches the provider.
async fn a_batch_whose_items_were_not_approved_sends_nothing(db: Option<String>) {
    let host = start(
        db.clone(),
        vec![("approved-mailing.toml".into(), APPROVED_MAILING.into())],
    )
    .await;
    let id = submit(
        &host,
        "approved-mailing",
        "mailing-tampered",
        mailing_input(&["a@example.com", "b@example.com"]),
    )
    .await;
    let wf = approve_a_tampered_consequence(&host, db, &id).await;
    let deliver = step(&wf, "deliver");
    assert_eq!(deliver["state"], "blocked", "{wf:#}");
    assert_eq!(deliver["blocked"]["reason"], "approval_mismatch", "{wf:#}");
    assert!(deliver["items"].is_null(), "no item was written: {wf:#}");
    assert!(host.world().await.is_empty());
}

on_both_stores!(
    an_approval_of_the_digest_shown_delivers_once,
    only_the_named_approvers_decide,
    a_rejection_fails_the_workflow_and_compensates_earlier_effects,
    an_expired_approval_fails_the_workflow,
    a_revision_asks_the_approval_again,
    a_mismatching_input_is_blocked_before_anything_is_sent,
    an_approval_of_a_batch_binds_the_whole_item_set,
    a_batch_whose_items_were_not_approved_sends_nothing,
);

/// `docket approvals`, `docket approve` and `docket reject` against a host: the table
/// names the digest, a stale one is refused, the right one delivers once.
#[tokio::test(flavor = "multi_thread")]
async fn the_command_line_lists_approves_and_rejects() {
    let host = start(None, vec![]).await;
    let first = submit(&host, "approved-delivery", "cli-1", document("By the CLI")).await;
    let second = submit(
        &host,
        "approved-delivery",
        "cli-2",
        document("Rejected by the CLI"),
    )
    .await;
    let digest = asked(&host, &first, "approve", None).await["digest"]
        .as_str()
        .unwrap()
        .to_string();
    asked(&host, &second, "approve", None).await;
    let docket = |args: &[&str], token: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
            .args(args)
            .args(["--server", &host.url, "--token", token])
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (ok, table) = docket(&["approvals"], CAROL);
    assert!(ok, "{table}");
    assert!(table.contains(&first) && table.contains(&second), "{table}");
    assert!(table.contains(&format!("digest {digest}")), "{table}");
    assert!(
        table.contains("Needs your approval: Deliver document to reader@example.com"),
        "{table}"
    );
    let stale = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let (ok, refused) = docket(&["approve", &first, "approve", "--digest", stale], CAROL);
    assert!(!ok, "{refused}");
    assert!(refused.contains("consequence_changed"), "{refused}");
    let (ok, approved) = docket(
        &[
            "approve", &first, "approve", "--digest", &digest, "--note", "ok",
        ],
        CAROL,
    );
    assert!(ok, "{approved}");
    let (ok, rejected) = docket(
        &["reject", &second, "approve", "--reason", "not now"],
        CAROL,
    );
    assert!(ok, "{rejected}");
    host.wait_for(&first, &["completed"], Duration::from_secs(30))
        .await;
    host.wait_for(&second, &["failed"], Duration::from_secs(30))
        .await;
    assert_eq!(host.world().await.len(), 1);
    let (ok, table) = docket(&["approvals"], CAROL);
    assert!(ok && table.contains("No approval waits for you"), "{table}");
}
