//! Operator actions on a step — `query`, `retry`, `resolve`, `escalate`, `compensate`,
//! `exception`, and on an approval step `approve` and `reject` — as domain
//! decisions, below every interface that offers them (the HTTP API and the console render
//! the same [`ActionResult`]); and a workflow's cancellation, which its owner may ask for
//! too ([`cancel`]); the extension of a workflow's budget ([`extend_budget`]); and a
//! workflow's move to another definition version by an explicit plan ([`migrate`]).
//!
//! An action arrives as a typed [`Order`] under an idempotency key. [`decide`] judges it
//! from the step's state, its attempts and the adapter's declared contract, and returns a
//! [`Plan`] or a [`Refusal`]; the store applies the plan (or records the refusal) in one
//! transaction that also records the key, so a repeat with the same key and order acts once
//! and gets the stored answer, and a repeat with another order is a key conflict. The store
//! moves the step only if it is still in the state the decision saw and not leased.
//!
//! `query` and `retry` make the step claimable at once and wait (bounded) for that attempt
//! to end, so the answer shows its result: the waiter is woken by the scheduler when an
//! attempt ends ([`crate::scheduler::Progress`]), with a bounded poll of the store for
//! attempts that end on another host. A resolution needs evidence and a reason and records
//! who gave them; there is no way to mark a step succeeded without them.

mod budget;
mod cancel;
mod decide;
mod desk;
mod migrate;
mod replace;
mod revise;

pub use budget::{AMOUNTS, EXTEND, ExtendOrder, extend_budget};
pub use cancel::{CANCEL, CancelOrder, CancelResult, cancel};
pub use decide::{CourseFacts, History, Plan, Refusal, SETTLEABLE, Situation, decide};
pub use desk::{ActionResult, DeskError, Target, approver_of, perform};
pub use migrate::{MIGRATE, MIGRATION_REFUSED, MigrateOrder, MigrateResult, migrate};
pub use replace::{REPLACE, ReplaceOrder, Replacement, replace};
pub use revise::{REVISE, ReviseOrder, ReviseResult, revisable, revise};

use serde_json::{Value, json};

/// The six actions an operator takes on a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Query,
    Retry,
    Resolve,
    Escalate,
    /// Reverse one effect by hand (a compensation of its own).
    Compensate,
    /// Let exactly one attempt through the policy that blocked the step.
    Exception,
    /// Consent, on an approval step, to the consequence it asks about.
    Approve,
    /// Refuse it: the approval step fails.
    Reject,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 8] = [
        Action::Query,
        Action::Retry,
        Action::Resolve,
        Action::Escalate,
        Action::Compensate,
        Action::Exception,
        Action::Approve,
        Action::Reject,
    ];

    /// The action named in a path or a form, if any.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "query" => Self::Query,
            "retry" => Self::Retry,
            "resolve" => Self::Resolve,
            "escalate" => Self::Escalate,
            "compensate" => Self::Compensate,
            "exception" => Self::Exception,
            "approve" => Self::Approve,
            "reject" => Self::Reject,
            _ => return None,
        })
    }

    /// The name in paths and on the timeline.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Retry => "retry",
            Self::Resolve => "resolve",
            Self::Escalate => "escalate",
            Self::Compensate => "compensate",
            Self::Exception => "exception",
            Self::Approve => "approve",
            Self::Reject => "reject",
        }
    }

    /// "queried", "retried", …: what the step cannot be.
    pub(crate) fn past(self) -> &'static str {
        match self {
            Self::Query => "queried",
            Self::Retry => "retried",
            Self::Resolve => "resolved",
            Self::Escalate => "escalated",
            Self::Compensate => "compensated",
            Self::Exception => "let through",
            Self::Approve => "approved",
            Self::Reject => "rejected",
        }
    }

    /// "a query", "a retry", …
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Self::Query => "a query",
            Self::Retry => "a retry",
            Self::Resolve => "a resolution",
            Self::Escalate => "an escalation",
            Self::Compensate => "a compensation",
            Self::Exception => "an exception",
            Self::Approve => "an approval",
            Self::Reject => "a rejection",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resolution's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// The effect happened: a manual receipt closes the step and releases its dependents.
    Succeeded,
    /// The effect did not happen: the step is ready again under the same identity.
    NotHappened,
    /// Give up: the step ends `failed_terminal`.
    Abandon,
}

impl Resolution {
    pub const ALL: [Resolution; 3] = [
        Resolution::Succeeded,
        Resolution::NotHappened,
        Resolution::Abandon,
    ];

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "succeeded" => Self::Succeeded,
            "not_happened" => Self::NotHappened,
            "abandon" => Self::Abandon,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::NotHappened => "not_happened",
            Self::Abandon => "abandon",
        }
    }
}

/// A checked action: what a person asked for, with what the action needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Order {
    Query,
    Retry,
    Resolve {
        outcome: Resolution,
        evidence: String,
        reason: String,
        external_reference: Option<String>,
        /// The receipt's output (a JSON object) of a step resolved as succeeded: every
        /// field the step declares in `outputs`, which later steps read.
        output: Option<Value>,
    },
    Escalate {
        note: String,
    },
    /// Reverse the step's effect by hand: a compensation of its own.
    Compensate {
        reason: String,
    },
    /// Let one attempt through the policy that blocked the step.
    Exception {
        reason: String,
        evidence: String,
    },
    /// Consent to the consequence with this digest (the one the person saw).
    Approve {
        digest: String,
        note: Option<String>,
    },
    /// Refuse the consequence asked about.
    Reject {
        reason: String,
    },
}

/// A field of an order that is missing or unusable; the message says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidOrder {
    /// The field, as named in the API's body and the console's form.
    pub field: &'static str,
    pub message: String,
}

const OUTCOME_HELP: &str = "it must be one of `succeeded`, `not_happened`, `abandon`";

/// A required JSON object (a corrected input).
fn input_object(input: Option<Value>) -> Result<Value, InvalidOrder> {
    match input {
        Some(v @ Value::Object(_)) => Ok(v),
        _ => Err(InvalidOrder {
            field: "input",
            message: "`input` is required and must be a JSON object: the corrected input".into(),
        }),
    }
}

/// What a change of course reads of one step's history: whether a standing attempt (one no
/// revision superseded) may have sent its request, the provenance of the latest standing
/// attempt that ran, and the step's standing receipt.
struct StepHistory<'a> {
    sent: bool,
    ran: Option<&'a crate::intent::Provenance>,
    receipt: Option<&'a crate::intent::Receipt>,
}

impl<'a> StepHistory<'a> {
    fn of(
        step: &crate::store::StepRecord,
        tried: &'a [crate::store::AttemptRecord],
        receipts: &'a [crate::intent::Receipt],
    ) -> Self {
        let standing = || tried.iter().filter(|a| a.superseded_by.is_none());
        Self {
            sent: standing().any(|a| a.checkpoint >= 3),
            ran: standing().rev().find_map(|a| a.provenance.as_ref()),
            receipt: step
                .receipt_id
                .as_ref()
                .and_then(|rid| receipts.iter().find(|r| &r.receipt_id == rid)),
        }
    }
}

/// The answer stored under a course change's key, given again: the refusal, or the record
/// the change applied (`what` names it in the error of a store that lost its text).
fn replayed<T: serde::de::DeserializeOwned, R>(
    answer: Option<crate::store::ActionAnswer>,
    what: &str,
    applied: impl FnOnce(T) -> R,
    refused: impl FnOnce(crate::store::StoredRefusal) -> R,
) -> Result<R, DeskError> {
    use crate::store::{ActionAnswer, StoreError};
    match answer {
        Some(ActionAnswer::Refused(r)) => Ok(refused(r)),
        Some(ActionAnswer::Applied(text)) => {
            serde_json::from_str(&text).map(applied).map_err(|e| {
                DeskError::Store(StoreError::Corrupt(format!("stored {what} answer: {e}")))
            })
        }
        None => Err(DeskError::Store(StoreError::Corrupt(format!(
            "a {what} key without its answer"
        )))),
    }
}

/// A required, non-empty text.
fn required(field: &'static str, value: Option<&str>, why: &str) -> Result<String, InvalidOrder> {
    match value {
        Some(v) if !v.trim().is_empty() => Ok(v.to_string()),
        _ => Err(InvalidOrder {
            field,
            message: format!("`{field}` is required and must not be empty: {why}"),
        }),
    }
}

impl Order {
    /// A resolution; `outcome` as written (`succeeded`, `not_happened`, `abandon`), the
    /// evidence and reason required, an empty external reference taken as none, and the
    /// receipt's output, a JSON object when given.
    pub fn resolve(
        outcome: Option<&str>,
        evidence: Option<&str>,
        reason: Option<&str>,
        external_reference: Option<&str>,
        output: Option<Value>,
    ) -> Result<Order, InvalidOrder> {
        if output.as_ref().is_some_and(|o| !o.is_object()) {
            return Err(InvalidOrder {
                field: "output",
                message: "`output` must be a JSON object: the receipt's fields, e.g. {\"tracking_number\": \"…\"}".into(),
            });
        }
        let outcome = match outcome {
            Some(text) => Resolution::parse(text).ok_or_else(|| InvalidOrder {
                field: "outcome",
                message: format!("`outcome` is `{}`, but {OUTCOME_HELP}", text.escape_debug()),
            })?,
            None => {
                return Err(InvalidOrder {
                    field: "outcome",
                    message: format!("`outcome` is missing, but {OUTCOME_HELP}"),
                });
            }
        };
        Ok(Order::Resolve {
            outcome,
            evidence: required(
                "evidence",
                evidence,
                "say what shows the outcome (a provider record, a message, a call)",
            )?,
            reason: required("reason", reason, "say why this resolution is right")?,
            external_reference: external_reference
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_string),
            output,
        })
    }

    /// An escalation with its note (required).
    pub fn escalate(note: Option<&str>) -> Result<Order, InvalidOrder> {
        Ok(Order::Escalate {
            note: required("note", note, "say what the next person should look at")?,
        })
    }

    /// A compensation by hand, with its reason (required).
    pub fn compensate(reason: Option<&str>) -> Result<Order, InvalidOrder> {
        Ok(Order::Compensate {
            reason: required("reason", reason, "say why the effect must be reversed")?,
        })
    }

    /// An exception to the policy, with its reason and evidence (both required).
    pub fn exception(reason: Option<&str>, evidence: Option<&str>) -> Result<Order, InvalidOrder> {
        Ok(Order::Exception {
            reason: required("reason", reason, "say why this attempt may go through")?,
            evidence: required(
                "evidence",
                evidence,
                "say what authorises it (a ticket, an approval)",
            )?,
        })
    }

    /// An approval of the consequence with `digest` (`sha256:…`, required), with an
    /// optional note.
    pub fn approve(digest: Option<&str>, note: Option<&str>) -> Result<Order, InvalidOrder> {
        let digest = required(
            "digest",
            digest,
            "give the digest of the consequence you approve (GET …/consequence answers it)",
        )?;
        if !digest.starts_with("sha256:") {
            return Err(InvalidOrder {
                field: "digest",
                message: format!(
                    "`digest` is `{}`, but a consequence's digest reads `sha256:<hex>`; copy it from GET …/consequence",
                    digest.escape_debug()
                ),
            });
        }
        Ok(Order::Approve {
            digest,
            note: note
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string),
        })
    }

    /// A rejection, with its reason (required).
    pub fn reject(reason: Option<&str>) -> Result<Order, InvalidOrder> {
        Ok(Order::Reject {
            reason: required("reason", reason, "say why the consequence must not happen")?,
        })
    }

    pub fn action(&self) -> Action {
        match self {
            Order::Query => Action::Query,
            Order::Retry => Action::Retry,
            Order::Resolve { .. } => Action::Resolve,
            Order::Escalate { .. } => Action::Escalate,
            Order::Compensate { .. } => Action::Compensate,
            Order::Exception { .. } => Action::Exception,
            Order::Approve { .. } => Action::Approve,
            Order::Reject { .. } => Action::Reject,
        }
    }

    /// The order as JSON, whose canonical digest identifies it under its key: the same
    /// order from the API or the console is the same request.
    pub fn to_json(&self) -> Value {
        match self {
            Order::Query | Order::Retry => json!({}),
            Order::Resolve {
                outcome,
                evidence,
                reason,
                external_reference,
                output,
            } => {
                let mut v = json!({
                    "outcome": outcome.as_str(),
                    "evidence": evidence,
                    "reason": reason,
                });
                if let Some(r) = external_reference {
                    v["external_reference"] = json!(r);
                }
                if let Some(o) = output {
                    v["output"] = o.clone();
                }
                v
            }
            Order::Escalate { note } => json!({"note": note}),
            Order::Compensate { reason } => json!({"reason": reason}),
            Order::Exception { reason, evidence } => {
                json!({"reason": reason, "evidence": evidence})
            }
            Order::Approve { digest, note } => json!({"digest": digest, "note": note}),
            Order::Reject { reason } => json!({"reason": reason}),
        }
    }
}
