//! Request and record types of the store traits (plain data, no sqlx).

use crate::intent::{
    AttemptId, AttemptOutcome, CanonicalInput, CompensationTrigger, EvidenceKind, Millis, NewEvent,
    Provenance, ReceiptId, StepRole, StepState, Subject, Trigger, WorkflowId, WorkflowState,
};
use serde::{Deserialize, Serialize};

/// A definition to deploy.
#[derive(Debug, Clone)]
pub struct NewDefinition {
    pub name: String,
    pub version: u32,
    /// `sha256:<hex>` of `source`.
    pub digest: String,
    /// The TOML text, the truth from which the definition is parsed again.
    pub source: String,
    pub deployed_at: Millis,
}

/// What deploying did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeployOutcome {
    Deployed,
    /// The same content was already deployed under this version.
    Unchanged,
}

/// A deployed definition version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDefinition {
    pub name: String,
    pub version: u32,
    pub digest: String,
    pub source: String,
    pub deployed_at: Millis,
}

/// A component's bytes to keep, addressed by their digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewComponent {
    /// `sha256:<hex>` of `bytes`.
    pub digest: String,
    pub name: String,
    pub version: String,
    /// `adapter` or `handler`.
    pub kind: String,
    pub bytes: Vec<u8>,
    pub registered_at: Millis,
    /// Who deployed it (recorded with the `deployed` event when the digest is new).
    pub author: String,
}

/// A stored component, without its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredComponent {
    pub digest: String,
    pub name: String,
    pub version: String,
    pub kind: String,
    pub size_bytes: u64,
    pub registered_at: Millis,
}

/// Which version a registry change makes active.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActiveTarget {
    /// This stored digest.
    Digest(String),
    /// This digest, but only if the name has no active version yet (a first registration).
    IfNone(String),
    /// The version that was active before the current one (rollback).
    Previous,
}

/// A change of a component's active version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveChange {
    pub name: String,
    pub target: ActiveTarget,
    pub author: String,
    pub now: Millis,
}

/// A component name's active version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveComponent {
    pub name: String,
    pub version: String,
    pub digest: String,
    pub since: Millis,
}

/// What a registry change did: the version now active and the one before (if any). An
/// `IfNone` change that found an active version leaves it and reports it, `changed: false`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveOutcome {
    pub active: ActiveComponent,
    pub previous: Option<String>,
    pub changed: bool,
}

/// One entry of the registry's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentEvent {
    pub seq: u64,
    pub name: String,
    pub version: String,
    pub digest: String,
    /// `deployed`, `activated` or `rolled_back`.
    pub action: String,
    pub author: String,
    pub at: Millis,
}

/// The outcome of `docket adapter verify` for one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    pub digest: String,
    pub name: String,
    pub version: String,
    /// Every declared claim held.
    pub passed: bool,
    /// Claim → `held`, `failed` or `not declared`, in the report's order.
    pub verdicts: Vec<(String, String)>,
    pub author: String,
    pub verified_at: Millis,
}

/// The scope of a client idempotency key: (subject, command type, key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyScope {
    pub subject: Subject,
    /// The definition name (command type).
    pub workflow: String,
    pub key: String,
}

/// A key in scope and what it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub workflow_id: WorkflowId,
    /// Digest of the canonical input first submitted under the key.
    pub input_digest: String,
    /// When the key may be reused; `None` while the workflow has not ended.
    pub expires_at: Option<Millis>,
}

/// A step of a new workflow.
#[derive(Debug, Clone)]
pub struct NewStep {
    pub id: String,
    pub depends_on: Vec<String>,
    pub role: StepRole,
    /// The triggers on which the definition compensates this step's effect.
    pub compensate_on: Vec<CompensationTrigger>,
    /// The steps whose receipts this step's input reads; `None`: every receipt of its
    /// workflow. A claim hands the step only these, so a step of a long workflow does not
    /// read (and decode) every receipt before it.
    pub reads: Option<Vec<String>>,
    /// The adapter component it calls (`None` for handlers and approvals): its in-flight
    /// attempts are counted, and its claims paused, per adapter.
    pub adapter: Option<String>,
}

/// An admission: the key is looked up and, if it is free, the intent created, in one
/// transaction.
#[derive(Debug, Clone)]
pub struct AdmitRequest {
    pub scope: KeyScope,
    pub input: CanonicalInput,
    pub now: Millis,
    /// What to create if the key is free. `None` when the caller already knows a new intent
    /// must be refused (an unknown definition, an invalid input) — a refusal that applies
    /// only if the key is free, since a known key answers from what was stored.
    pub create: Option<NewWorkflow>,
}

/// Everything an intent is created with.
#[derive(Debug, Clone)]
pub struct NewWorkflow {
    pub workflow_id: WorkflowId,
    pub definition_version: u32,
    pub steps: Vec<NewStep>,
    /// The workflow's deadline.
    pub deadline_at: Millis,
    /// How long the key stays reserved after the workflow ends.
    pub key_retention_ms: u64,
    /// The first timeline events ("request recorded", the first scheduling event).
    pub events: Vec<NewEvent>,
    /// The workflow this one replaces (a correction after a consequential effect): linked
    /// both ways in the admission's transaction.
    pub replaces: Option<WorkflowId>,
    /// The policy version in force at admission (0: none deployed).
    pub policy_version: u32,
    /// The admission's W3C `traceparent`: every attempt's span is its child.
    pub trace_parent: Option<String>,
}

/// The answer of an admission.
#[derive(Debug, Clone, PartialEq)]
pub enum AdmitOutcome {
    Created(WorkflowRecord),
    /// The key was already known with the same canonical input.
    Replayed(WorkflowRecord),
    /// The key was already known with another input; nothing changed.
    Conflict {
        workflow_id: WorkflowId,
    },
    /// The key is free and nothing was to be created.
    KeyFree,
    /// The intent was built on a definition version that is no longer the newest (another
    /// host or process deployed one since); nothing was written: build it again on the
    /// newest.
    Outdated,
}

/// A workflow as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRecord {
    pub workflow_id: WorkflowId,
    pub workflow: String,
    pub definition_version: u32,
    pub subject: Subject,
    pub idempotency_key: String,
    /// RFC 8785 text of the input.
    pub input: String,
    pub input_digest: String,
    pub state: WorkflowState,
    pub created_at: Millis,
    pub ended_at: Option<Millis>,
    pub deadline_at: Millis,
    pub attempts_used: u32,
    pub external_calls_used: u32,
    pub runtime_used_ms: u64,
    /// Cost units spent by external calls.
    pub cost_used: u64,
    /// Recovery queries drawn from the reserve (once the attempts were spent).
    pub recovery_queries_used: u32,
    /// What operators added to the definition's limits.
    pub budget_added: crate::budget::Amounts,
    /// Grows with every timeline event: the projection's revision.
    pub revision: u64,
    /// 1 at admission; each accepted correction adds one.
    pub input_revision: u32,
    pub replaces: Option<WorkflowId>,
    pub replaced_by: Option<WorkflowId>,
    /// The workflow has a cancellation (it may still be settling).
    pub cancelled: bool,
    /// The policy version in force at admission, and the one last evaluated for it.
    pub policy_at_admission: u32,
    pub policy_current: u32,
    /// When the workflow, waiting for a person, was first seen near its deadline.
    pub deadline_warned_at: Option<Millis>,
    /// The definition version it was last migrated from (`None`: never migrated).
    pub migrated_from: Option<u32>,
}

/// A step as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub workflow_id: WorkflowId,
    pub step: String,
    /// `None` for rows stored before roles were kept.
    pub role: Option<StepRole>,
    pub state: StepState,
    /// The step's effect became uncertain and is still being investigated.
    pub uncertain: bool,
    /// The triggers on which the definition compensates this step's effect.
    pub compensate_on: Vec<CompensationTrigger>,
    /// Why it is blocked, while it is.
    pub blocked: Option<Blocked>,
    pub attempts: u32,
    /// When a `ready` or `failed_retryable` step may be claimed.
    pub ready_at: Option<Millis>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<Millis>,
    pub receipt_id: Option<ReceiptId>,
    /// The latest human-readable reason for the state (error, review reason).
    pub note: Option<String>,
    pub escalated: Option<serde_json::Value>,
    /// Until when the provider remembers the idempotency key the step's request was first
    /// sent under (set at checkpoint 3 of an adapter that declares idempotency).
    pub key_remembered_until: Option<Millis>,
    /// When a person was told that this retention draws near.
    pub retention_warned_at: Option<Millis>,
    /// The step id its external key derives from, when not its own (a migration renamed it).
    pub key_step: Option<String>,
    /// For an item of a batch step: the step, the item's key and its place in the list.
    pub batch_of: Option<String>,
    pub item_key: Option<String>,
    pub item_index: Option<u64>,
    /// For a batch step whose items exist: how many there are.
    pub items: Option<u64>,
}

/// One attempt as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub attempt_id: AttemptId,
    pub workflow_id: WorkflowId,
    pub step: String,
    pub number: u32,
    pub trigger: Trigger,
    pub lease_owner: String,
    /// Recorded at checkpoint 2; `None` for an attempt that ended before it.
    pub provenance: Option<Provenance>,
    /// The external request identity (idempotency key) recorded at checkpoint 3.
    pub request_identity: Option<String>,
    pub checkpoint: u8,
    pub observation: Option<String>,
    pub outcome: AttemptOutcome,
    pub started_at: Millis,
    pub finished_at: Option<Millis>,
    /// The attempt's bounded, redacted log lines.
    pub log: serde_json::Value,
    /// The input revision that invalidated its step, if one did.
    pub superseded_by: Option<u32>,
    /// The input revision it ran on.
    pub input_revision: u32,
    /// The policy decision it ran under (adapter attempts that may cause an effect).
    pub policy: Option<AttemptPolicy>,
}

/// Filter and page of a workflow list.
#[derive(Debug, Clone, Default)]
pub struct WorkflowFilter {
    pub subject: Option<Subject>,
    pub state: Option<WorkflowState>,
    pub workflow: Option<String>,
    /// Only workflows created before this (created_at, id) position: the cursor.
    pub before: Option<(Millis, WorkflowId)>,
    pub limit: u32,
}

/// A claim of ready steps for one worker.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The host identity recorded as lease owner.
    pub owner: String,
    pub now: Millis,
    pub lease_ms: u64,
    pub limit: u32,
    /// The adapters this host claims under a limit (`[adapters.X] max_in_flight`, `rate`);
    /// any adapter paused by a provider's rate limit is held back besides.
    pub gates: Vec<AdapterGate>,
    /// The claim a finishing write makes for a subject with little work under way while
    /// others hold most of the host: the write goes ahead of queued ones, and claims the
    /// released step even on a busy store, so that a quiet subject's steps do not queue
    /// behind another's burst.
    pub urgent: bool,
}

/// What a host asks of one adapter's claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterGate {
    /// The adapter component's name.
    pub adapter: String,
    /// Claim only while fewer of its attempts than this are in flight on every host of the
    /// store together.
    pub max_in_flight: Option<u32>,
    /// Claims of it this host's `rate` allows now.
    pub rate_room: Option<u32>,
}

/// A pause of all of an adapter's claims, on every host, for the period its provider asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterPause {
    pub adapter: String,
    /// No claim of its steps before this time.
    pub until: Millis,
    /// `rate_limited` (a `429`) or `unavailable` (a `503` with a retry-after).
    pub cause: String,
    /// What the provider answered.
    pub reason: String,
    /// The host whose attempt was answered so.
    pub host: String,
    pub at: Millis,
}

/// An adapter's attempts in flight and its pause, as the projection and `/metrics` show
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterState {
    pub adapter: String,
    /// Attempts under a lease now, on every host.
    pub in_flight: u64,
    /// The pause in effect, if any.
    pub pause: Option<AdapterPause>,
}

/// Proof of a held lease, presented by every fenced write.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    pub workflow_id: WorkflowId,
    pub step: String,
    pub lease_token: String,
}

/// A claimed step.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub fence: Fence,
    pub attempt_id: AttemptId,
    /// 1 for the step's first attempt.
    pub attempt_number: u32,
    pub trigger: Trigger,
    pub workflow: String,
    /// Who the workflow is for (what a policy judges).
    pub subject: Subject,
    pub definition_version: u32,
    pub lease_expires_at: Millis,
    pub deadline_at: Millis,
    pub attempts_used: u32,
    pub external_calls_used: u32,
    pub runtime_used_ms: u64,
    /// Cost units spent by external calls.
    pub cost_used: u64,
    /// Recovery queries drawn from the reserve (once the attempts were spent).
    pub recovery_queries_used: u32,
    /// What operators added to the definition's limits.
    pub budget_added: crate::budget::Amounts,
    /// When the step's effect first became uncertain, if it did.
    pub uncertain_since: Option<Millis>,
    /// Until when the provider remembers the key, recorded at the first request's
    /// checkpoint 3 (adapters that deduplicate).
    pub key_remembered_until: Option<Millis>,
    /// An operator's exception to the policy, waiting for the one attempt it lets through.
    pub policy_exception: Option<PolicyException>,
    /// The workflow's trace (W3C `traceparent`), if it has one.
    pub trace_parent: Option<String>,
    /// The environment its idempotency keys are derived in (`None`: admitted before the
    /// database recorded one).
    pub environment: Option<String>,
    /// The step id its external key derives from, when not its own (a migration renamed
    /// it): the provider saw that identity.
    pub key_step: Option<String>,
    /// For an item of a batch step: the item (its input reads it as `$item`).
    pub item: Option<serde_json::Value>,
    /// The adapter component it calls (`None` for handlers and approvals, and for rows
    /// written before adapters were recorded).
    pub adapter: Option<String>,
    /// The workflow input and the receipts so far, read in the claim's transaction.
    pub context: StepContext,
}

impl Claimed {
    /// The step id its external key derives from: its own, or the id it had when a
    /// migration renamed it (a compensation's, that of its original's identity).
    pub fn identity(&self) -> &str {
        self.key_step.as_deref().unwrap_or(&self.fence.step)
    }
}

/// A lease renewal.
#[derive(Debug, Clone)]
pub struct RenewRequest {
    pub fence: Fence,
    pub now: Millis,
    pub lease_ms: u64,
}

/// What an attempt learned by a checkpoint.
#[derive(Debug, Clone, Default)]
pub struct AttemptFacts {
    /// Known from checkpoint 2 on.
    pub provenance: Option<Provenance>,
    pub request_identity: Option<String>,
    pub observation: Option<String>,
    pub outcome: Option<AttemptOutcome>,
    /// The adapter's result as decided at checkpoint 5, so recovery can resume from it.
    pub result: Option<AttemptResult>,
    /// The policy decision at checkpoint 2, for an attempt that may cause an effect.
    pub policy: Option<AttemptPolicy>,
}

/// The policy version an attempt was judged by, and the decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttemptPolicy {
    pub version: u32,
    /// `allow`, `deny` or `exception` (an operator let it through).
    pub decision: PolicyVerdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

/// An operator's exception to the policy: exactly one attempt allowed despite it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyException {
    pub author: String,
    pub reason: String,
    pub evidence: String,
}

/// What the policy said of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyVerdict {
    Allow,
    Deny,
    Exception,
}

/// An adapter attempt's result, stored at checkpoint 5 before anything follows from it:
/// what the step becomes and what the timeline will say. A crash between 5 and 6 resumes
/// from here instead of asking the provider again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptResult {
    pub outcome: AttemptOutcome,
    pub transition: StepTransition,
    pub note: Option<String>,
    pub events: Vec<NewEvent>,
}

/// A checkpoint write.
#[derive(Debug, Clone)]
pub struct CheckpointRequest {
    pub fence: Fence,
    pub attempt_id: AttemptId,
    pub checkpoint: u8,
    pub facts: AttemptFacts,
    /// Counts one external call costing this many units against the workflow's budget
    /// (at checkpoint 3 of a step; a compensation is not charged).
    pub external_call: Option<u32>,
    /// At checkpoint 3 of an adapter that deduplicates: until when its provider remembers
    /// the key (kept from the step's first request).
    pub remembered_until: Option<Millis>,
    pub events: Vec<NewEvent>,
    pub now: Millis,
}

/// What an attempt learned after its lease was lost: added to its evidence, never
/// rewriting what was recorded, never moving the step.
#[derive(Debug, Clone)]
pub struct LateEvidence {
    pub workflow_id: WorkflowId,
    pub attempt_id: AttemptId,
    pub facts: AttemptFacts,
    pub events: Vec<NewEvent>,
    pub now: Millis,
}

/// The step's state after an attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepTransition {
    /// A receipt closes the step; dependents whose dependencies all succeeded become ready.
    Succeeded(Box<NewReceipt>),
    /// Claimable again at `ready_at` (the backoff). `uncertain_since` marks (once) when
    /// the step's effect became uncertain.
    Retry {
        ready_at: Millis,
        next_trigger: Trigger,
        uncertain_since: Option<Millis>,
    },
    /// Nothing automatic will run it again.
    Terminal(StepState),
}

/// A receipt to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewReceipt {
    pub receipt_id: ReceiptId,
    pub evidence_kind: EvidenceKind,
    #[serde(flatten)]
    pub provenance: Provenance,
    pub external_reference: Option<String>,
    pub output: serde_json::Value,
    pub author: Option<String>,
    pub reason: Option<String>,
    pub evidence: Option<String>,
}

/// A claimed batch step's items, written as rows of their own under its lease.
#[derive(Debug, Clone)]
pub struct ExpandBatch {
    pub fence: Fence,
    /// The claim's attempt, which ends here: the items run as intents of their own.
    pub attempt_id: AttemptId,
    /// Each item's key and canonical JSON, in the list's order.
    pub items: Vec<(String, String)>,
    pub max_parallel: u32,
    /// The digest of the whole item set (what an approval of the step binds).
    pub digest: String,
    pub now: Millis,
}

/// The end of an attempt.
#[derive(Debug, Clone)]
pub struct FinishRequest {
    pub fence: Fence,
    pub attempt_id: AttemptId,
    /// The checkpoint the attempt ends at (6 when a receipt is recorded).
    pub checkpoint: u8,
    pub facts: AttemptFacts,
    pub transition: StepTransition,
    /// A short reason kept on the step (shown as its note).
    pub note: Option<String>,
    pub log: serde_json::Value,
    pub runtime_ms: u64,
    pub events: Vec<NewEvent>,
    pub now: Millis,
    /// Recovery only: finish only if the lease expired before this time, so a lease that
    /// was renewed meanwhile is never taken over.
    pub expired_before: Option<Millis>,
    /// Recovery only: finish only if the attempt is still at the checkpoint the decision
    /// was made from. A holder whose lease ran out may still write its next checkpoint
    /// (say 3, "may have been sent") between recovery's read and its write; the decision
    /// is then stale, and recovery decides again.
    pub decided_at: Option<u8>,
    /// Why the step is blocked, when the attempt blocks it (kept until it moves again).
    pub blocked: Option<Blocked>,
    /// What the attempt draws on: the claim counted it as an attempt; a query from the
    /// reserve, or an attempt refused before it started, is counted again here.
    pub charge: crate::budget::Charge,
}

/// Why a step is blocked: never a receipt, always a reason a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocked {
    /// `policy_denied`, `budget_exhausted` or `missing_allowance`.
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u32>,
    /// A contradicted step's references: the one it stood on, then the one seen later.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<String>,
    pub message: String,
}

/// What finishing changed.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishOutcome {
    pub workflow_state: WorkflowState,
    /// Steps that became ready because this one succeeded.
    pub released: Vec<String>,
}

/// Inputs of a claimed step's mapping.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepContext {
    /// The workflow input (canonical JSON), shared: the claims of one workflow's steps (a
    /// batch's thousands of items) read one copy.
    pub input: std::sync::Arc<serde_json::Value>,
    /// Receipts by step id.
    pub receipts: Vec<crate::intent::Receipt>,
    /// While the step's outcome is uncertain: the external request identity under which an
    /// earlier attempt may have sent its request. A recovery must use the same one.
    pub sent_identity: Option<String>,
}

/// A lease that ran out.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpiredLease {
    pub fence: Fence,
    pub lease_owner: String,
    pub lease_expires_at: Millis,
    /// The step's latest attempt and the checkpoint it reached.
    pub attempt_id: Option<AttemptId>,
    pub checkpoint: u8,
    pub attempt_number: u32,
    pub attempt_started_at: Millis,
    pub trigger: Trigger,
    /// The component that attempt ran (recorded at checkpoint 2).
    pub component: Option<String>,
    pub component_version: Option<String>,
    pub workflow: String,
    pub definition_version: u32,
    pub uncertain_since: Option<Millis>,
    /// Until when the provider remembers the key (recorded at checkpoint 3).
    pub key_remembered_until: Option<Millis>,
    /// The result stored at checkpoint 5, if the attempt got that far.
    pub result: Option<AttemptResult>,
}

/// Where an operator action's idempotency key lives: (subject, workflow, step, action).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionScope {
    pub subject: Subject,
    pub workflow_id: WorkflowId,
    pub step: String,
    /// `query`, `retry`, `resolve` or `escalate`.
    pub action: String,
    pub key: String,
}

/// An operator action as stored under its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    pub request_digest: String,
    /// The answer once known; `None` while the action runs.
    pub answer: Option<ActionAnswer>,
}

/// What an operator action came to, as every repeat of its key answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionAnswer {
    /// Applied: the step as it stood once the action was done (its JSON projection).
    Applied(String),
    /// Refused, and nothing changed.
    Refused(StoredRefusal),
}

/// A refused action as stored: the refusal's stable code and the message it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRefusal {
    pub code: String,
    pub message: String,
    /// What stopped it, when the refusal names things (e.g. the steps that refuse a
    /// revision); empty otherwise.
    pub details: Vec<serde_json::Value>,
}

/// What an operator action does to its step.
#[derive(Debug, Clone, PartialEq)]
pub enum StepChange {
    /// Claimable now, as a new attempt of this kind. `settle_uncertainty` forgets that the
    /// effect was uncertain (a person established that it did not happen).
    Ready {
        trigger: Trigger,
        settle_uncertainty: bool,
    },
    /// Closed by a manual receipt; dependents are released.
    Succeed(Box<NewReceipt>),
    /// Ended with nothing automatic to follow, with the reason as its note.
    Terminal { state: StepState, note: String },
    /// Marked for another person (`{"note", "by", "at"}`); the state is unchanged.
    Escalate(serde_json::Value),
    /// Its effect is reversed by a compensation of its own (`id`, ready at once): the
    /// step becomes `compensating`.
    Compensate { id: String },
    /// Ready at once, its next attempt let through the policy that blocked it.
    Exception(PolicyException),
}

/// An operator action to apply in one transaction, with its key.
#[derive(Debug, Clone)]
pub struct ActionRequest {
    pub scope: ActionScope,
    pub request_digest: String,
    /// The step state the decision was made in; if the step moved meanwhile, nothing
    /// changes and `stale` is stored as the answer.
    pub expected_state: StepState,
    /// `Err(refusal)`: the action is refused; the refusal is stored under the key.
    pub change: Result<StepChange, StoredRefusal>,
    pub stale: StoredRefusal,
    pub events: Vec<NewEvent>,
    pub now: Millis,
    /// An approval step's decision, applied with the change.
    pub approval: Option<ApprovalDecision>,
}

/// What applying an operator action did.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionOutcome {
    /// Applied now; the answer is still to be stored.
    Applied { workflow_state: WorkflowState },
    /// Refused (or the step moved meanwhile); this refusal is stored under the key.
    Refused(StoredRefusal),
    /// The key was used before with the same request.
    Replayed(ActionRecord),
    /// The key was used before with another request.
    KeyConflict,
}

/// Verdicts as stored: a JSON array of `[claim, verdict]` pairs (order kept).
pub(crate) fn verdicts_text(v: &[(String, String)]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

pub(crate) fn verdicts_from(text: &str) -> super::StoreResult<Vec<(String, String)>> {
    serde_json::from_str(text)
        .map_err(|e| super::StoreError::Corrupt(format!("stored verdicts: {e}")))
}

/// A console session as stored: the digest of the cookie's value, never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    pub id_digest: String,
    pub subject: String,
    /// `operator` or `client`, as at sign-in.
    pub role: String,
    pub csrf: String,
    pub started_at: Millis,
    pub expires_at: Millis,
}

/// A workflow's cancellation as stored: an intent of its own, with what it did first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancellationRecord {
    pub cancellation_id: crate::intent::CancellationId,
    pub workflow_id: WorkflowId,
    pub requested_by: String,
    pub requested_at: Millis,
    pub reason: String,
    pub withdraw: bool,
    pub outcome: crate::course::CancelOutcome,
    pub message: String,
    /// The effects already made when it was requested, and whether each is reversed.
    pub consequences: Vec<crate::course::Consequence>,
}

/// A request to cancel a workflow, under an idempotency key (`scope.action` is `cancel`).
#[derive(Debug, Clone)]
pub struct CancelRequest {
    pub scope: ActionScope,
    pub request_digest: String,
    pub cancellation_id: crate::intent::CancellationId,
    pub reason: String,
    pub withdraw: bool,
    /// Step labels, for the message a person reads.
    pub labels: std::collections::HashMap<String, String>,
    pub now: Millis,
}

/// What a cancel request came to.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelAnswer {
    /// This request created the workflow's cancellation.
    Created(CancellationRecord),
    /// The workflow already had one: pressing twice acts once.
    Existing(CancellationRecord),
    /// Refused, and nothing changed; stored under the key.
    Refused(StoredRefusal),
    /// The key was used before with the same request: its stored answer.
    Replayed(ActionRecord),
    /// The key was used before with another request.
    KeyConflict,
}

/// The stored answer of a cancel request that was not refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredCancel {
    /// Whether that request created the cancellation.
    pub created: bool,
    pub cancellation: CancellationRecord,
}

/// An input revision as stored: who corrected what, why, and what it invalidated.
/// Revision 1 is the command as admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionRecord {
    pub workflow_id: WorkflowId,
    pub input_revision: u32,
    /// The digest of the revision before it; `None` for revision 1.
    pub prior_digest: Option<String>,
    pub input_digest: String,
    /// The canonical text of this revision's input. `None` only for a revision 1 whose
    /// text was overwritten before every revision was kept (its `reason` says so).
    #[serde(default)]
    pub input: Option<String>,
    pub author: String,
    pub reason: String,
    pub at: Millis,
    pub invalidated_steps: Vec<String>,
    pub kept_receipts: Vec<String>,
}

/// What a revision saw when it was planned; it applies only if nothing of it moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionSnapshot {
    pub state: WorkflowState,
    pub input_revision: u32,
    pub input_digest: String,
    /// Every step's state and attempt count.
    pub steps: Vec<(String, StepState, u32)>,
}

/// A correction of a workflow's input under a key (`scope.action` is `revise`).
#[derive(Debug, Clone)]
pub struct ReviseRequest {
    pub scope: ActionScope,
    pub request_digest: String,
    pub input: CanonicalInput,
    pub reason: String,
    pub seen: RevisionSnapshot,
    /// The plan, or the refusal to store under the key.
    pub change: Result<crate::course::RevisionPlan, StoredRefusal>,
    pub now: Millis,
}

/// What a revision request came to.
#[derive(Debug, Clone, PartialEq)]
pub enum ReviseAnswer {
    Applied(RevisionRecord),
    Refused(StoredRefusal),
    /// The workflow moved since the plan was made: nothing was written; plan again.
    Moved,
    Replayed(ActionRecord),
    KeyConflict,
}

/// What a migration saw of its workflow: it is applied only if the workflow is still so.
#[derive(Debug, Clone)]
pub struct MigrationSnapshot {
    pub state: WorkflowState,
    pub definition_version: u32,
    /// Every step's state and attempt count.
    pub steps: Vec<(String, StepState, u32)>,
}

/// What an allowed migration writes: its plan and the new version's step rows, in order.
#[derive(Debug, Clone)]
pub struct MigrationChange {
    pub plan: crate::course::MigrationPlan,
    pub steps: Vec<NewStep>,
}

/// A move of a workflow to another definition version under a key (`scope.action` is
/// `migrate`).
#[derive(Debug, Clone)]
pub struct MigrateRequest {
    pub scope: ActionScope,
    pub request_digest: String,
    pub reason: String,
    pub seen: MigrationSnapshot,
    /// The change, or the refusal to store under the key.
    pub change: Result<MigrationChange, StoredRefusal>,
    pub now: Millis,
}

/// What a migration request came to.
#[derive(Debug, Clone, PartialEq)]
pub enum MigrateAnswer {
    Applied(MigrationRecord),
    Refused(StoredRefusal),
    /// The workflow moved since the plan was made: nothing was written; plan again.
    Moved,
    Replayed(ActionRecord),
    KeyConflict,
}

/// A workflow's move to another definition version, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationRecord {
    pub workflow_id: WorkflowId,
    /// 1 for the workflow's first migration.
    pub number: u32,
    #[serde(flatten)]
    pub plan: crate::course::MigrationPlan,
    pub author: String,
    pub reason: String,
    pub at: Millis,
}

/// A policy document to deploy.
#[derive(Debug, Clone)]
pub struct NewPolicy {
    pub digest: String,
    pub document: String,
    pub author: String,
    pub now: Millis,
}

/// A deployed policy version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPolicy {
    pub version: u32,
    pub digest: String,
    pub document: String,
    pub author: String,
    pub deployed_at: Millis,
}

/// An operator's extension of a workflow's budget, under an idempotency key.
#[derive(Debug, Clone)]
pub struct ExtendRequest {
    pub scope: ActionScope,
    pub request_digest: String,
    /// Added to what earlier extensions added.
    pub add: crate::budget::Amounts,
    pub reason: String,
    /// The definition's budget the additions extend.
    pub base: crate::workflow::Budget,
    pub now: Millis,
}

/// What an extension came to.
#[derive(Debug, Clone, PartialEq)]
pub enum ExtendAnswer {
    /// Applied: the workflow's `budget` block afterwards (stored under the key as JSON).
    Applied(String),
    /// The key was used before with the same request: its stored answer.
    Replayed(ActionRecord),
    /// The key was used before with another request.
    KeyConflict,
}

/// What a workflow has spent, in the budget's terms.
macro_rules! used_amounts {
    ($t:ty) => {
        impl $t {
            pub fn budget_used(&self) -> crate::budget::Amounts {
                crate::budget::Amounts {
                    attempts: u64::from(self.attempts_used),
                    runtime_ms: self.runtime_used_ms,
                    external_calls: u64::from(self.external_calls_used),
                    cost: self.cost_used,
                    recovery_queries: u64::from(self.recovery_queries_used),
                }
            }
        }
    };
}
used_amounts!(WorkflowRecord);
used_amounts!(Claimed);

/// A notification as the outbox holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotificationRecord {
    pub seq: u64,
    /// `ntf_…`: its `webhook-id`.
    pub id: String,
    pub workflow_id: WorkflowId,
    /// `workflow.completed`, …
    #[serde(rename = "type")]
    pub kind: String,
    pub revision: u64,
    /// The body as sent, fixed when the transition committed.
    pub body: String,
    /// `pending`, `delivered`, `suppressed` or `failed`.
    pub state: String,
    pub attempts: u32,
    pub created_at: Millis,
    pub next_at: Millis,
    /// The endpoints that answered 2xx.
    pub delivered_to: Vec<String>,
    pub last_error: Option<String>,
    pub finished_at: Option<Millis>,
}

/// What became of a claimed notification.
#[derive(Debug, Clone, PartialEq)]
pub enum NotificationUpdate {
    /// Every endpoint that wants it answered 2xx (or none wants it).
    Delivered { delivered_to: Vec<String> },
    /// The transition no longer holds: not sent.
    Suppressed { reason: String },
    /// Some endpoint failed: tried again at `next_at`, skipping those that answered.
    Retry {
        next_at: Millis,
        error: String,
        delivered_to: Vec<String>,
        /// Whether a request was made (a hold makes none).
        attempted: bool,
    },
    /// Retried for the whole window without success.
    Failed {
        error: String,
        delivered_to: Vec<String>,
    },
}

/// Which notifications to list.
#[derive(Debug, Clone, Default)]
pub struct NotificationFilter {
    pub workflow_id: Option<WorkflowId>,
    pub state: Option<String>,
    /// Only rows after this `seq` (the cursor).
    pub after: Option<u64>,
    pub limit: u32,
}

/// An approval step asked for consent, recorded under its lease: the step waits in
/// `awaiting_approval` and its lease is released.
#[derive(Debug, Clone)]
pub struct AskApproval {
    pub fence: Fence,
    pub attempt_id: AttemptId,
    /// The consequence asked consent to, and its digest.
    pub digest: String,
    pub consequence: serde_json::Value,
    pub expires_at: Millis,
    /// The step's note while it waits ("Needs your approval: …").
    pub note: String,
    pub events: Vec<NewEvent>,
    pub now: Millis,
}

/// One time an approval step was asked, and how it was closed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub workflow_id: WorkflowId,
    pub step: String,
    /// The attempt that asked.
    pub attempt_id: AttemptId,
    pub digest: String,
    pub consequence: serde_json::Value,
    pub asked_at: Millis,
    pub expires_at: Millis,
    /// When the warning that a fifth of the wait is left was queued.
    pub warned_at: Option<Millis>,
    /// `None` while it waits.
    pub outcome: Option<crate::intent::ApprovalOutcome>,
    pub decided_by: Option<String>,
    pub decided_at: Option<Millis>,
    /// The approver's note, or the reason of a rejection or expiry.
    pub decision_text: Option<String>,
}

/// An approval waiting for a person, with what the list of approvals shows of its
/// workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingApproval {
    pub record: ApprovalRecord,
    pub workflow: String,
    pub definition_version: u32,
    /// Who the workflow is for.
    pub subject: Subject,
    /// The step's note: what it asks, in words.
    pub note: Option<String>,
}

/// The approval decision an operator action carries: applied only while the step's open
/// approval is the one asked with `digest`.
#[derive(Debug, Clone)]
pub struct ApprovalDecision {
    /// When the question it answers was asked (how long it waited is tallied).
    pub asked_at: Millis,
    pub digest: String,
    pub outcome: crate::intent::ApprovalOutcome,
    pub by: Subject,
    pub text: Option<String>,
    /// Stored as the answer when the open approval has another digest (or none); its
    /// details gain `{"current_digest": …}`.
    pub changed: StoredRefusal,
}

/// A provider's delivery whose signature was verified, to keep once per adapter and
/// `webhook-id`.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub adapter: String,
    pub webhook_id: String,
    pub inbound: crate::contract::Inbound,
    pub received_at: Millis,
}

/// A kept delivery a host claimed to read with its adapter's `observe`.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    pub delivery_id: i64,
    pub adapter: String,
    pub webhook_id: String,
    pub inbound: crate::contract::Inbound,
    pub received_at: Millis,
}

/// What reading a delivery came to.
#[derive(Debug, Clone)]
pub enum DeliveryReading {
    /// The adapter read these observations (perhaps none).
    Read {
        component_version: String,
        observations: Vec<crate::contract::Observation>,
    },
    /// The adapter could not read it, or no version of it could run here: the reason goes
    /// to the inbox.
    Unreadable {
        component_version: Option<String>,
        error: String,
    },
}

/// A claimed delivery's reading, to apply: its observations kept, matched and judged in
/// one transaction with the delivery's end, so a reading is applied exactly once.
#[derive(Debug, Clone)]
pub struct ReadDelivery {
    pub delivery: ClaimedDelivery,
    /// The claim's owner: a reading whose claim another host took over is not applied.
    pub owner: String,
    pub reading: DeliveryReading,
    pub now: Millis,
}

/// One observation as kept, with what it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservationRecord {
    pub observation_id: crate::intent::ObservationId,
    pub delivery_id: i64,
    pub adapter: String,
    /// The delivery's `webhook-id`.
    pub webhook_id: String,
    pub event_id: Option<String>,
    pub external_reference: Option<String>,
    /// The full key: shown only shortened.
    pub idempotency_key: Option<String>,
    /// `None` for an unreadable delivery.
    pub effect_status: Option<crate::contract::EffectStatus>,
    pub provider_status: String,
    pub observed_at: Option<Millis>,
    pub output: Option<String>,
    pub recorded_at: Millis,
    pub workflow_id: Option<WorkflowId>,
    pub step: Option<String>,
    pub verdict: crate::intent::ObservationVerdict,
    pub receipt_id: Option<ReceiptId>,
    /// What it did, in words (an unreadable delivery's reason).
    pub note: Option<String>,
}

/// Which observations to list, oldest first.
#[derive(Debug, Clone, Default)]
pub struct EvidenceFilter {
    /// `Some(false)`: the inbox (unmatched and unreadable); `Some(true)`: the matched.
    pub matched: Option<bool>,
    pub adapter: Option<String>,
    pub workflow_id: Option<WorkflowId>,
    /// Only those after this id (the page's cursor).
    pub after: Option<String>,
    pub limit: u32,
}
