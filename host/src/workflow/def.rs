//! The validated definition types and the questions the host asks of them.
//!
//! A [`WorkflowDef`] only comes out of [`super::parse`] / [`super::check`] after every
//! check passed, so its invariants hold: step ids are unique, `after` names existing
//! steps and forms no cycle, every reference reads the input or a (transitive)
//! dependency's declared output, durations are positive and the input schema compiles.
//! The types serialise (serde) so the host can store a parsed definition as JSON next to
//! its source text; the source text stays the truth and is what gets re-parsed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::mapping::{InputMapping, Reference};
use super::retry::RetryPolicy;
use super::values::{StepId, WorkflowName, duration_text};

/// The first milestone of every workflow, reached when the intent is admitted.
pub const REQUEST_RECORDED: &str = "Request recorded";
/// The last milestone of every workflow, reached when it completes.
pub const COMPLETION_RECORDED: &str = "Completion recorded";

/// One deployed-able version of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowDef {
    /// The workflow's name; the API's command type.
    pub name: WorkflowName,
    /// The definition version (from 1). A running workflow keeps the version it began with.
    pub version: u32,
    /// What the workflow does, for people.
    pub description: String,
    /// The whole workflow's deadline, from admission.
    #[serde(with = "duration_text")]
    pub deadline: Duration,
    /// Limits over all steps.
    pub budget: Budget,
    /// The JSON Schema (draft 2020-12) the input must satisfy at admission.
    pub input_schema: serde_json::Value,
    /// The steps, in definition order.
    pub steps: Vec<StepDef>,
    /// `sha256:<hex>` of the source file's bytes; tells two texts of one version apart.
    pub source_digest: String,
}

/// Limits over a whole workflow. Defaults: 20 attempts, 10 minutes of attempt time and
/// 10 external calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Attempts over all steps.
    pub max_attempts: u32,
    /// Summed wall time of all attempts.
    #[serde(with = "duration_text")]
    pub max_runtime: Duration,
    /// Adapter invocations over all steps (recovery queries draw on a separate reserve).
    pub max_external_calls: u32,
    /// Cost units over all external calls (each costs its step's `cost`); `None`: no limit.
    #[serde(default)]
    pub max_cost: Option<u32>,
    /// Recovery queries that may still run once `max_attempts` is spent: asking what
    /// happened is never what the budget stops first.
    #[serde(default = "Budget::default_recovery_queries")]
    pub recovery_queries: u32,
}

impl Budget {
    /// Attempts when `[budget]` does not say.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 20;
    /// Runtime when `[budget]` does not say.
    pub const DEFAULT_MAX_RUNTIME: Duration = Duration::from_secs(600);
    /// External calls when `[budget]` does not say.
    pub const DEFAULT_MAX_EXTERNAL_CALLS: u32 = 10;
    /// The recovery-query reserve when `[budget]` does not say.
    pub const DEFAULT_RECOVERY_QUERIES: u32 = 3;

    fn default_recovery_queries() -> u32 {
        Self::DEFAULT_RECOVERY_QUERIES
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            max_runtime: Self::DEFAULT_MAX_RUNTIME,
            max_external_calls: Self::DEFAULT_MAX_EXTERNAL_CALLS,
            max_cost: None,
            recovery_queries: Self::DEFAULT_RECOVERY_QUERIES,
        }
    }
}

/// What runs a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// A pure handler component: no side effects, no capabilities.
    Handler,
    /// An adapter component: causes an external side effect under granted capabilities.
    Adapter,
    /// A person's consent to the exact consequence of the adapter steps it approves; no
    /// component runs it.
    Approval,
}

impl StepKind {
    /// The role its rows have in a workflow's steps.
    pub fn role(self) -> crate::intent::StepRole {
        match self {
            StepKind::Handler => crate::intent::StepRole::Handler,
            StepKind::Adapter => crate::intent::StepRole::Adapter,
            StepKind::Approval => crate::intent::StepRole::Approval,
        }
    }

    /// The kind as written in TOML.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Handler => "handler",
            StepKind::Adapter => "adapter",
            StepKind::Approval => "approval",
        }
    }
}

pub use crate::intent::CompensationTrigger;

/// A step's compensation: when the adapter's `compensate` is called for its effect, with
/// which input, and how its failed attempts are retried. It runs as a step of its own,
/// `<step>.compensate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compensation {
    /// The trigger.
    pub on: CompensationTrigger,
    /// The compensation's input; `None`: the step's own mapped input. It may read the
    /// step's receipt and those of the steps it runs after.
    pub input: Option<InputMapping>,
    /// How failed attempts of the compensation are retried.
    pub retry: RetryPolicy,
}

/// Capabilities a step asks for. The effective grant is the intersection with what the
/// operator's config allows for the component.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestedCapabilities {
    /// `scheme://host:port`, `host:port`, or `$setting` (the host of the URL in that
    /// adapter setting, e.g. `$base_url`).
    pub outbound_hosts: Vec<String>,
    /// Secret names the component may resolve.
    pub secrets: Vec<String>,
    /// What `query` may reach instead, when the definition says (else the above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<ActionCapabilities>,
    /// What `compensate` may reach instead, when the definition says (else the above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensate: Option<ActionCapabilities>,
}

/// The hosts and secrets one adapter action may use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionCapabilities {
    /// As [`RequestedCapabilities::outbound_hosts`].
    pub outbound_hosts: Vec<String>,
    /// As [`RequestedCapabilities::secrets`].
    pub secrets: Vec<String>,
}

/// The three calls an adapter answers, each with a grant of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterAction {
    Invoke,
    Query,
    Compensate,
}

impl RequestedCapabilities {
    /// The hosts and secrets `action` asks for: its own table, else the step's.
    pub fn of(&self, action: AdapterAction) -> (&[String], &[String]) {
        let own = match action {
            AdapterAction::Invoke => None,
            AdapterAction::Query => self.query.as_ref(),
            AdapterAction::Compensate => self.compensate.as_ref(),
        };
        match own {
            Some(a) => (&a.outbound_hosts, &a.secrets),
            None => (&self.outbound_hosts, &self.secrets),
        }
    }

    /// Whether any action asks for a host or a secret.
    pub fn requests_any(&self) -> bool {
        [
            AdapterAction::Invoke,
            AdapterAction::Query,
            AdapterAction::Compensate,
        ]
        .into_iter()
        .any(|a| {
            let (hosts, secrets) = self.of(a);
            !(hosts.is_empty() && secrets.is_empty())
        })
    }
}

/// One step of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepDef {
    /// Stable id; attempts, receipts and idempotency keys derive from it.
    pub id: StepId,
    /// Display label; may change between versions.
    pub label: String,
    /// Handler or adapter.
    pub kind: StepKind,
    /// The component's name.
    pub component: String,
    /// Which component versions may run this step.
    pub version_req: semver::VersionReq,
    /// Steps whose receipts must be committed before this one starts.
    pub after: Vec<StepId>,
    /// How the step's input is built.
    pub input: InputMapping,
    /// Receipt output fields later steps may read by name.
    pub outputs: Vec<String>,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// The limit on one attempt's wall time.
    #[serde(with = "duration_text")]
    pub timeout: Duration,
    /// Capabilities requested (adapters only; empty for handlers).
    pub capabilities: RequestedCapabilities,
    /// The user-facing milestone reached when this step's receipt commits.
    pub milestone: Option<String>,
    /// How the step's effect is undone (adapters only).
    pub compensation: Option<Compensation>,
    /// Cost units of one external call of this step, against `[budget] max_cost`
    /// (adapters only; default 1).
    #[serde(default = "StepDef::default_cost")]
    pub cost: u32,
    /// What an approval step approves, and who may and until when (approval steps only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalDef>,
    /// The list whose items each become an effect of their own (adapter steps only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchDef>,
}

/// A batch step's declaration: each item of a list is an effect intent of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchDef {
    /// The list: `$input.<path>` or `$steps.<id>.output.<field>[.<path>]`.
    #[serde(with = "reference_text")]
    pub for_each: Reference,
    /// What names an item stably (`$item[.<path>]`); `None`: its canonical JSON digest.
    #[serde(default, with = "reference_text::option")]
    pub item_key: Option<Reference>,
    /// How many items may run at once.
    pub max_parallel: u32,
}

impl BatchDef {
    /// `max_parallel` when a definition does not say.
    pub const DEFAULT_MAX_PARALLEL: u32 = 8;
    /// The most `max_parallel` may be.
    pub const MAX_PARALLEL: u32 = 1000;
}

/// A reference as its text, for the serialized definition.
mod reference_text {
    use super::Reference;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(r: &Reference, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(r)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Reference, D::Error> {
        let text = String::deserialize(d)?;
        Reference::parse(&text).map_err(serde::de::Error::custom)
    }

    pub mod option {
        use super::Reference;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(r: &Option<Reference>, s: S) -> Result<S::Ok, S::Error> {
            match r {
                Some(r) => s.collect_str(r),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Reference>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|text| Reference::parse(&text).map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}

/// An approval step's declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDef {
    /// The adapter steps whose consequence it approves, in the order written.
    pub approves: Vec<StepId>,
    /// How long it may wait from when it is asked; never past the workflow's deadline.
    #[serde(default, with = "duration_text::option")]
    pub expires: Option<Duration>,
    /// The subjects who may approve; empty: anyone holding the `approver` role.
    #[serde(default)]
    pub approvers: Vec<String>,
    /// What a person is asked, with `{<reference>}` placeholders read when it is asked;
    /// `None`: the labels of the approved steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

impl WorkflowDef {
    /// The milestones a person sees, in order: [`REQUEST_RECORDED`], each step's
    /// milestone in definition order (each once), then [`COMPLETION_RECORDED`].
    pub fn milestones(&self) -> Vec<String> {
        let mut out = vec![REQUEST_RECORDED.to_string()];
        for milestone in self.steps.iter().filter_map(|s| s.milestone.as_ref()) {
            if !out.contains(milestone) {
                out.push(milestone.clone());
            }
        }
        out.push(COMPLETION_RECORDED.to_string());
        out
    }

    /// The step with this id.
    pub fn step(&self, id: &str) -> Option<&StepDef> {
        self.steps.iter().find(|s| s.id.as_str() == id)
    }

    /// The fields of step `id`'s receipt that later steps read (`$steps.<id>.output.<field>`
    /// in their input), each once, in the order first read: what a receipt written by
    /// hand must hold so they can run.
    pub fn fields_read(&self, id: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for reference in self.steps.iter().flat_map(|s| s.input.references()) {
            if reference.step().is_some_and(|s| s.as_str() == id)
                && let Some(field) = reference.receipt_field()
                && !out.iter().any(|f| f == field)
            {
                out.push(field.to_string());
            }
        }
        out
    }

    /// The approval step that approves step `id`, if one does.
    pub fn approval_of(&self, id: &str) -> Option<&StepDef> {
        self.steps.iter().find(|s| {
            s.approval
                .as_ref()
                .is_some_and(|a| a.approves.iter().any(|x| x.as_str() == id))
        })
    }

    /// The steps whose receipts step `id` reads when it runs: those its input references
    /// (and, for a batch step, its `for_each` and `item_key`: its items may come from an
    /// earlier receipt); for an approval step, those the steps it approves reference (its
    /// consequence is their input); for an approved step, its approval's too (checkpoint 2
    /// compares).
    pub fn reads(&self, id: &str) -> std::collections::BTreeSet<String> {
        let referenced = |step: &StepDef| {
            let batch = step
                .batch
                .iter()
                .flat_map(|b| std::iter::once(&b.for_each).chain(b.item_key.as_ref()));
            step.input
                .references()
                .into_iter()
                .chain(batch)
                .filter_map(|r| r.step().map(ToString::to_string))
                .collect::<Vec<_>>()
        };
        let mut out = std::collections::BTreeSet::new();
        let Some(step) = self.step(id) else {
            return out;
        };
        out.extend(referenced(step));
        for approved in step.approval.iter().flat_map(|a| &a.approves) {
            if let Some(approved) = self.step(approved.as_str()) {
                out.extend(referenced(approved));
            }
        }
        if let Some(approval) = self.approval_of(id) {
            out.insert(approval.id.to_string());
        }
        out
    }

    /// The steps no other step must precede: the ones ready at admission.
    pub fn initial_steps(&self) -> impl Iterator<Item = &StepDef> {
        self.steps.iter().filter(|s| s.after.is_empty())
    }

    /// The steps that list `id` in `after`.
    pub fn dependents<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a StepDef> + 'a {
        self.steps
            .iter()
            .filter(move |s| s.after.iter().any(|a| a.as_str() == id))
    }

    /// All steps, each after its dependencies; ties keep definition order.
    pub fn topological_order(&self) -> Vec<&StepDef> {
        topological_order(&self.steps)
    }
}

/// Why a step's result does not hold what the step declares: its text is not JSON, or a
/// field listed in `outputs` (which later steps read by name) is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputMismatch {
    #[error("is not JSON ({0})")]
    NotJson(String),
    #[error(
        "lacks the declared field{} {}",
        if .0.len() == 1 { "" } else { "s" },
        .0.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
    )]
    Lacks(Vec<String>),
}

impl StepDef {
    fn default_cost() -> u32 {
        1
    }

    /// The fields of `outputs` that `output` lacks.
    pub fn missing_outputs(&self, output: &serde_json::Value) -> Vec<String> {
        self.outputs
            .iter()
            .filter(|f| output.get(f.as_str()).is_none())
            .cloned()
            .collect()
    }

    /// A result's text as JSON holding every field the step declares in `outputs`; what a
    /// receipt of this step must be, since later steps read those fields by name.
    pub fn output_of(&self, text: &str) -> Result<serde_json::Value, OutputMismatch> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| OutputMismatch::NotJson(e.to_string()))?;
        let missing = self.missing_outputs(&value);
        if missing.is_empty() {
            Ok(value)
        } else {
            Err(OutputMismatch::Lacks(missing))
        }
    }

    /// Whether every dependency has succeeded, by `succeeded(step id)`.
    pub fn is_ready(&self, succeeded: impl Fn(&str) -> bool) -> bool {
        self.after.iter().all(|a| succeeded(a.as_str()))
    }
}

/// Kahn's algorithm over `after`, lowest definition index first. Steps on a cycle (only
/// possible for unvalidated input) are left out.
pub(super) fn topological_order(steps: &[StepDef]) -> Vec<&StepDef> {
    let index: BTreeMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut waiting: Vec<usize> = steps
        .iter()
        .map(|s| {
            s.after
                .iter()
                .filter(|a| index.contains_key(a.as_str()))
                .count()
        })
        .collect();
    let mut done = vec![false; steps.len()];
    let mut out = Vec::with_capacity(steps.len());
    while let Some(next) = (0..steps.len()).find(|&i| !done[i] && waiting[i] == 0) {
        done[next] = true;
        out.push(&steps[next]);
        for (i, step) in steps.iter().enumerate() {
            let edges = step
                .after
                .iter()
                .filter(|a| a.as_str() == steps[next].id.as_str());
            waiting[i] -= edges.count();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(id: &str, after: &[&str], milestone: Option<&str>) -> StepDef {
        StepDef {
            id: StepId::new(id).unwrap(),
            label: id.to_string(),
            kind: StepKind::Handler,
            component: "c".to_string(),
            version_req: semver::VersionReq::STAR,
            after: after.iter().map(|a| StepId::new(*a).unwrap()).collect(),
            input: InputMapping::default(),
            outputs: Vec::new(),
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(1),
            capabilities: RequestedCapabilities::default(),
            milestone: milestone.map(str::to_string),
            compensation: None,
            cost: 1,
            approval: None,
            batch: None,
        }
    }

    fn def(steps: Vec<StepDef>) -> WorkflowDef {
        WorkflowDef {
            name: WorkflowName::new("w").unwrap(),
            version: 1,
            description: String::new(),
            deadline: Duration::from_secs(60),
            budget: Budget::default(),
            input_schema: serde_json::json!({}),
            steps,
            source_digest: "sha256:00".to_string(),
        }
    }

    #[test]
    fn the_fields_read_of_a_receipt_are_those_later_inputs_name() {
        let mut b = step("b", &["a"], None);
        b.input = InputMapping::from_value(&serde_json::json!({
            "to": "$steps.a.output.recipient",
            "ref": "$steps.a.external_reference",
            "whole": "$input",
        }))
        .unwrap();
        let mut c = step("c", &["b"], None);
        c.input = InputMapping::from_value(&serde_json::json!({
            "again": "$steps.a.output.recipient",
            "code": "$steps.a.output.code.value",
            "other": "$steps.b.output.x",
        }))
        .unwrap();
        let d = def(vec![step("a", &[], None), b, c]);
        assert_eq!(d.fields_read("a"), ["recipient", "code"]);
        assert_eq!(d.fields_read("b"), ["x"]);
        assert!(d.fields_read("c").is_empty());
    }

    #[test]
    fn milestones_wrap_step_milestones_once() {
        let d = def(vec![
            step("a", &[], Some("Input validated")),
            step("b", &["a"], None),
            step("c", &["b"], Some("Input validated")),
            step("d", &["c"], Some("Delivery verified")),
        ]);
        assert_eq!(
            d.milestones(),
            [
                REQUEST_RECORDED,
                "Input validated",
                "Delivery verified",
                COMPLETION_RECORDED
            ]
        );
    }

    #[test]
    fn orders_steps_after_their_dependencies() {
        let d = def(vec![
            step("late", &["mid", "early"], None),
            step("mid", &["early"], None),
            step("early", &[], None),
            step("side", &[], None),
        ]);
        let order: Vec<&str> = d
            .topological_order()
            .iter()
            .map(|s| s.id.as_str())
            .collect();
        assert_eq!(order, ["early", "mid", "late", "side"]);
        assert_eq!(d.initial_steps().count(), 2);
        let dependents: Vec<&str> = d.dependents("early").map(|s| s.id.as_str()).collect();
        assert_eq!(dependents, ["late", "mid"]);
        let late = d.step("late").unwrap();
        assert!(!late.is_ready(|id| id == "early"));
        assert!(late.is_ready(|id| id == "early" || id == "mid"));
    }

    #[test]
    fn leaves_cycles_out_of_the_order() {
        let steps = vec![
            step("a", &["b"], None),
            step("b", &["a"], None),
            step("c", &[], None),
        ];
        let order: Vec<&str> = topological_order(&steps)
            .iter()
            .map(|s| s.id.as_str())
            .collect();
        assert_eq!(order, ["c"]);
    }
}
