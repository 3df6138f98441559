use super::*;
use crate::intent::{EvidenceKind, Provenance, ReceiptId, WorkflowId};
use serde_json::json;

const V1: &str = r#"
name = "moving"
version = 1
deadline = "1h"
[input_schema]
type = "object"
[[steps]]
id = "prepare"
label = "Prepare"
kind = "handler"
component = "render-document"
version = "^1"
outputs = ["doc"]
[steps.input]
title = "$input.title"
[[steps]]
id = "deliver"
label = "Deliver"
kind = "adapter"
component = "http-delivery"
version = "^1"
after = ["prepare"]
[steps.input]
doc = "$steps.prepare.output.doc"
[[steps]]
id = "notify"
label = "Notify"
kind = "adapter"
component = "http-delivery"
version = "^1"
after = ["deliver"]
[steps.input]
to = "$input.to"
"#;

/// v2: `prepare` relabelled, `deliver` renamed `send` (same input), `audit` added, `notify`
/// gone.
const V2: &str = r#"
name = "moving"
version = 2
deadline = "1h"
[input_schema]
type = "object"
[[steps]]
id = "prepare"
label = "Prepare the document"
kind = "handler"
component = "render-document"
version = "^1"
outputs = ["doc"]
[steps.input]
title = "$input.title"
[[steps]]
id = "send"
label = "Send"
kind = "adapter"
component = "http-delivery"
version = "^1"
after = ["prepare"]
[steps.input]
doc = "$steps.prepare.output.doc"
[[steps]]
id = "audit"
label = "Audit"
kind = "handler"
component = "render-document"
version = "^1"
after = ["send"]
[steps.input]
title = "$input.title"
"#;

fn def(source: &str) -> WorkflowDef {
    crate::workflow::parse("test.toml", source).unwrap_or_else(|d| panic!("{d}"))
}

fn digest(v: serde_json::Value) -> String {
    canonicalize(&v).unwrap().digest
}

fn receipt(step: &str, input: serde_json::Value, output: serde_json::Value) -> Receipt {
    Receipt {
        receipt_id: ReceiptId(format!("rcp_{step}")),
        workflow_id: WorkflowId("wf_1".into()),
        step: step.into(),
        attempt_id: None,
        evidence_kind: EvidenceKind::Response,
        provenance: Provenance {
            component: "render-document".into(),
            component_version: "1.0.0".into(),
            component_digest: "sha256:00".into(),
            input_digest: digest(input),
        },
        external_reference: None,
        output,
        recorded_at: 0,
        author: None,
        reason: None,
        evidence: None,
        superseded_by: None,
    }
}

fn row<'a>(id: &'a str, role: StepRole, state: StepState) -> MigrationStep<'a> {
    MigrationStep {
        id,
        role: Some(role),
        state,
        attempts: 0,
        sent: false,
        receipt: None,
        ran_with: None,
        namespace: None,
        key_step: None,
    }
}

struct World {
    prepared: Receipt,
    sent_with: String,
}

impl World {
    fn new() -> Self {
        Self {
            prepared: receipt("prepare", json!({"title": "T"}), json!({"doc": "D"})),
            sent_with: digest(json!({"doc": "D"})),
        }
    }

    /// `prepare` succeeded, `deliver`'s answer was lost after its request left, `notify`
    /// waits.
    fn rows(&self) -> Vec<MigrationStep<'_>> {
        vec![
            MigrationStep {
                attempts: 1,
                receipt: Some(&self.prepared),
                ran_with: Some(&self.prepared.provenance.input_digest),
                ..row("prepare", StepRole::Handler, StepState::Succeeded)
            },
            MigrationStep {
                attempts: 1,
                sent: true,
                ran_with: Some(&self.sent_with),
                namespace: Some("reference-provider"),
                ..row("deliver", StepRole::Adapter, StepState::OutcomeUnknown)
            },
            row("notify", StepRole::Adapter, StepState::Pending),
        ]
    }
}

fn mapping(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.map(str::to_string)))
        .collect()
}

fn same_namespace(_: &str) -> Option<String> {
    Some("reference-provider".into())
}

fn reasons(r: Result<MigrationPlan, Vec<MigrationRefusal>>) -> Vec<String> {
    r.unwrap_err().into_iter().map(|r| r.reason).collect()
}

#[test]
fn a_renamed_step_keeps_its_state_receipt_and_identity() {
    let w = World::new();
    let plan = plan_migration(
        &def(V1),
        &def(V2),
        &json!({"title": "T", "to": "x@y"}),
        &w.rows(),
        &mapping(&[("deliver", Some("send")), ("notify", None)]),
        same_namespace,
    )
    .unwrap();
    assert_eq!((plan.from_version, plan.to_version), (1, 2));
    assert_eq!(
        plan.moved,
        vec![
            MovedStep {
                from: "prepare".into(),
                to: "prepare".into(),
                state: StepState::Succeeded,
                key_step: None,
                receipt_id: Some("rcp_prepare".into()),
                items: None,
            },
            MovedStep {
                from: "deliver".into(),
                to: "send".into(),
                state: StepState::OutcomeUnknown,
                key_step: Some("deliver".into()),
                receipt_id: None,
                items: None,
            },
        ]
    );
    assert_eq!(plan.added, vec!["audit".to_string()]);
    assert_eq!(plan.dropped, vec!["notify".to_string()]);
}

#[test]
fn a_step_moved_twice_keeps_its_first_identity_and_one_that_never_began_waits_again() {
    let w = World::new();
    let mut rows = w.rows();
    rows[1].key_step = Some("dispatch");
    // `notify` was ready (never claimed): under v3 it waits for its new dependencies.
    rows[2].state = StepState::Ready;
    let v3 = V1.replace("version = 1", "version = 3");
    let plan = plan_migration(
        &def(V1),
        &def(&v3),
        &json!({"title": "T"}),
        &rows,
        &BTreeMap::new(),
        same_namespace,
    )
    .unwrap();
    assert_eq!(plan.moved[1].key_step.as_deref(), Some("dispatch"));
    assert_eq!(plan.moved[2].state, StepState::Pending);
    assert!(plan.added.is_empty() && plan.dropped.is_empty());
}

#[test]
fn nothing_moves_while_a_step_runs() {
    let w = World::new();
    let mut rows = w.rows();
    rows[1].state = StepState::Running;
    let why = reasons(plan_migration(
        &def(V1),
        &def(V2),
        &json!({"title": "T"}),
        &rows,
        &mapping(&[("deliver", Some("send")), ("notify", None)]),
        same_namespace,
    ));
    assert_eq!(
        why,
        vec!["`deliver` is running: migrate once its attempt has ended"]
    );
}

#[test]
fn a_kept_identity_with_another_namespace_or_input_is_refused() {
    let w = World::new();
    let plan = mapping(&[("deliver", Some("send")), ("notify", None)]);
    let input = json!({"title": "T"});
    let why = reasons(plan_migration(
        &def(V1),
        &def(V2),
        &input,
        &w.rows(),
        &plan,
        |_| Some("another-provider".into()),
    ));
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains("namespace `reference-provider`")
            && why[0].contains("namespace `another-provider`"),
        "{why:?}"
    );
    // v2 sends a field more under the same key: the provider would see another request.
    let changed = V2.replace(
        "doc = \"$steps.prepare.output.doc\"",
        "doc = \"$steps.prepare.output.doc\"\ncopy = \"$input.title\"",
    );
    let why = reasons(plan_migration(
        &def(V1),
        &def(&changed),
        &input,
        &w.rows(),
        &plan,
        same_namespace,
    ));
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains("a changed input under a kept identity") && why[0].contains(&w.sent_with),
        "{why:?}"
    );
    // Without a loaded version for the new step, the namespace cannot be known.
    let why = reasons(plan_migration(
        &def(V1),
        &def(V2),
        &input,
        &w.rows(),
        &plan,
        |_| None,
    ));
    assert!(
        why[0].contains("no loaded version of `http-delivery`"),
        "{why:?}"
    );
}

#[test]
fn a_plan_that_does_not_fit_the_versions_says_each_reason() {
    let w = World::new();
    let mut rows = w.rows();
    rows[2].attempts = 1;
    rows[2].state = StepState::FailedRetryable;
    let why = reasons(plan_migration(
        &def(V1),
        &def(V2),
        &json!({"title": "T"}),
        &rows,
        &mapping(&[
            ("deliver", Some("sned")),
            ("notify", None),
            ("nothing", Some("send")),
        ]),
        same_namespace,
    ));
    assert_eq!(
        why,
        vec![
            "the plan moves `deliver` to `sned`, which v2 does not have (it has `prepare`, `send`, `audit`)",
            "the plan names `nothing`, which is not a step of this workflow (v1 has `prepare`, `deliver`, `notify`)",
            "`notify` is failed_retryable after 1 attempt(s): only a step that has not begun can be dropped",
        ]
    );
    // An old step v2 lacks must be named; two steps cannot become one.
    let why = reasons(plan_migration(
        &def(V1),
        &def(V2),
        &json!({"title": "T"}),
        &w.rows(),
        &mapping(&[("notify", Some("prepare"))]),
        same_namespace,
    ));
    assert!(
        why.iter()
            .any(|r| r.starts_with("v2 has no step `deliver`: name it in the plan's `steps`")),
        "{why:?}"
    );
    assert!(
        why.iter().any(|r| r
            == "`prepare`, `notify` would all become `prepare`: one step of v2 holds one effect"),
        "{why:?}"
    );
}

#[test]
fn a_step_that_ran_as_a_handler_does_not_become_an_adapter() {
    let w = World::new();
    let swapped = V2.replace(
        "id = \"prepare\"\nlabel = \"Prepare the document\"\nkind = \"handler\"\ncomponent = \"render-document\"",
        "id = \"prepare\"\nlabel = \"Prepare the document\"\nkind = \"adapter\"\ncomponent = \"http-delivery\"",
    );
    let why = reasons(plan_migration(
        &def(V1),
        &def(&swapped),
        &json!({"title": "T"}),
        &w.rows(),
        &mapping(&[("deliver", Some("send")), ("notify", None)]),
        same_namespace,
    ));
    assert_eq!(
        why,
        vec!["`prepare` ran as a handler step; v2's `prepare` is an adapter step"]
    );
}

/// A mailing whose batch step `deliver` (items from `$input.to`) becomes `send`.
fn mailing(version: u32, batch: &str, for_each: bool) -> WorkflowDef {
    let each = if for_each {
        "for_each = \"$input.to\"\nitem_key = \"$item\"\n"
    } else {
        ""
    };
    let input = if for_each { "$item" } else { "$input.title" };
    def(&format!(
        r#"
name = "mailing"
version = {version}
deadline = "1h"
[input_schema]
type = "object"
[[steps]]
id = "{batch}"
label = "Deliver to each"
kind = "adapter"
component = "http-delivery"
version = "^1"
{each}[steps.input]
to = "{input}"
"#
    ))
}

/// A batch step's items move with it: the plan carries their number, each sent item
/// keeps its namespace, and a step that is not a batch under the new version, a running
/// item or another item set under the kept identity is refused.
#[test]
fn a_batch_step_moves_with_its_items() {
    let input = json!({"to": ["a", "b"], "title": "T"});
    let set = digest(json!([
        {"item_key": "a", "input": {"to": "a"}},
        {"item_key": "b", "input": {"to": "b"}},
    ]));
    let rows = |b: StepState| {
        vec![
            MigrationStep {
                attempts: 1,
                ran_with: Some(set.as_str()),
                ..row("deliver", StepRole::Adapter, StepState::WaitingForReview)
            },
            MigrationStep {
                attempts: 1,
                sent: true,
                namespace: Some("reference-provider"),
                ..row("deliver[a]", StepRole::Adapter, StepState::Succeeded)
            },
            MigrationStep {
                attempts: 1,
                sent: true,
                namespace: Some("reference-provider"),
                ..row("deliver[b]", StepRole::Adapter, b)
            },
        ]
    };
    let to_send = mapping(&[("deliver", Some("send"))]);
    let plan = plan_migration(
        &mailing(1, "deliver", true),
        &mailing(2, "send", true),
        &input,
        &rows(StepState::OutcomeUnknown),
        &to_send,
        same_namespace,
    )
    .unwrap();
    assert_eq!(plan.moved.len(), 1, "{plan:?}");
    assert_eq!(plan.moved[0].items, Some(2));
    assert_eq!(plan.moved[0].key_step.as_deref(), Some("deliver"));

    let refused = reasons(plan_migration(
        &mailing(1, "deliver", true),
        &mailing(2, "send", false),
        &input,
        &rows(StepState::Running),
        &to_send,
        same_namespace,
    ));
    assert!(
        refused
            .iter()
            .any(|r| r.contains("`deliver[b]` is running")),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|r| r.contains("not a batch step")),
        "{refused:?}"
    );
    let refused = reasons(plan_migration(
        &mailing(1, "deliver", true),
        &mailing(2, "send", true),
        &json!({"to": ["a", "b", "c"]}),
        &rows(StepState::OutcomeUnknown),
        &to_send,
        |_| Some("another".into()),
    ));
    assert!(
        refused
            .iter()
            .any(|r| r.contains("`deliver[a]` was sent under idempotency namespace")),
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .any(|r| r.contains("a changed input under a kept identity")),
        "{refused:?}"
    );
}
