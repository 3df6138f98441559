//! What an adapter attempt does before checkpoint 2, as a pure function of what it read:
//! whether the component is an adapter at all, the namespace rule, the workflow's call
//! budget, what a compensation reverses, and the policy in force. [`preflight`] decides;
//! `run_adapter` writes the checkpoints around its answer, in order.

use crate::budget::{Exhausted, Limits};
use crate::contract::Contract;
use crate::intent::{Receipt, Trigger, external_idempotency_key};
use crate::policy::{InForce, PolicyAction};
use crate::store::{AttemptPolicy, Claimed, PolicyVerdict};
use crate::workflow::StepDef;

/// What the adapter path reads before checkpoint 2.
#[derive(Debug, Clone, Copy)]
pub(super) struct PreflightFacts<'a> {
    pub claimed: &'a Claimed,
    pub step: &'a StepDef,
    /// The component version that would run, as (name, version).
    pub component: (&'a str, &'a str),
    /// Its contract; `None` when it is a handler.
    pub contract: Option<&'a Contract>,
    /// The workflow's limits; `None` for a compensation or a query, which no call budget
    /// refuses.
    pub limits: Option<Limits>,
    /// The policy in force, and the environment it judges in.
    pub policy: &'a InForce,
    pub environment: &'a str,
}

/// What to do, decided before anything is written.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Preflight<'a> {
    /// Record checkpoint 2 with the policy's decision (when a policy judged the attempt),
    /// then make `call` under `key`, the step's external idempotency key.
    Proceed {
        contract: &'a Contract,
        key: String,
        call: Call<'a>,
        policy: Option<AttemptPolicy>,
    },
    /// The attempt cannot start and the step is blocked; the reason names the fix.
    Block { reason: String },
    /// The workflow's budget refuses the call: the step is blocked, naming the limit.
    OverBudget(Exhausted),
    /// The request may have been sent under `sent`, a key this version does not derive:
    /// the step stays uncertain and a person decides.
    NamespaceChanged {
        contract: &'a Contract,
        sent: &'a str,
    },
    /// The policy in force denies the attempt and no exception lets it through: the step
    /// is blocked under `policy`, for `reason`.
    Denied {
        policy: AttemptPolicy,
        reason: String,
    },
}

/// The call an attempt that proceeds makes.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Call<'a> {
    /// A recovery query by `reference`: the step's key, or for a compensation the original
    /// effect's, whose status says whether it was reversed.
    Query { reference: String },
    /// The step's request.
    Invoke,
    /// The reversal of the effect `original` is the receipt of.
    Compensate { original: &'a Receipt },
}

/// Decides an adapter attempt before checkpoint 2. The order is the order of the rules: a
/// handler cannot run at all; an uncertain request is recovered only under the key it may
/// have been sent with; the budget refuses a call before anything is recorded; a
/// compensation needs a version that declares it and an effect to reverse; the policy
/// judges every attempt that may cause an effect, never a query.
pub(super) fn preflight<'a>(f: &PreflightFacts<'a>) -> Preflight<'a> {
    let claimed = f.claimed;
    let Some(contract) = f.contract else {
        // Definitions are checked against every registered version's world; a version of
        // another world can only come from outside that check.
        let (name, version) = f.component;
        return Preflight::Block {
            reason: format!(
                "`{name}@{version}` is a handler, and this is an adapter step; activate an adapter version"
            ),
        };
    };
    let workflow_id = &claimed.fence.workflow_id;
    let namespace = contract.idempotency.namespace.as_str();
    let environment = claimed.environment.as_deref();
    // The id the provider knows the effect by: the step's own, unless a migration renamed it.
    let identity = claimed.identity();
    let key = external_idempotency_key(workflow_id, identity, namespace, environment);
    // The namespace rule: an uncertain request is recovered only under the identity it
    // may have been sent with. A version with another namespace derives another key, which
    // the provider would take for a new request: a person decides instead.
    if let Some(sent) = claimed.context.sent_identity.as_deref()
        && sent != key
    {
        return Preflight::NamespaceChanged { contract, sent };
    }
    if let Some(limits) = &f.limits
        && let Err(exhausted) =
            crate::budget::admit_call(limits, &claimed.budget_used(), f.step.cost)
    {
        return Preflight::OverBudget(exhausted);
    }
    // A compensation reverses the effect named by the original step's receipt, with an
    // adapter version that declares it can.
    let reverses = crate::course::compensated_step(&claimed.fence.step);
    let original = match reverses {
        None => None,
        Some(of) => {
            if !contract.compensation.supported {
                return Preflight::Block {
                    reason: format!(
                        "`{}@{}` does not declare compensation; activate a version that does, or resolve the compensation",
                        contract.name, contract.version
                    ),
                };
            }
            let Some(receipt) = claimed.context.receipts.iter().find(|r| r.step == of) else {
                return Preflight::Block {
                    reason: format!("`{of}` has no receipt: there is no known effect to reverse"),
                };
            };
            Some((of, receipt))
        }
    };
    if claimed.trigger == Trigger::RecoveryQuery {
        let reference = match original {
            Some((of, _)) => {
                let original = crate::course::compensated_step(identity).unwrap_or(of);
                external_idempotency_key(workflow_id, original, namespace, environment)
            }
            None => key.clone(),
        };
        return Preflight::Proceed {
            contract,
            key,
            call: Call::Query { reference },
            policy: None,
        };
    }
    let mut policy = None;
    if f.policy.version > 0 {
        let decision = f.policy.decide(&crate::policy::Facts {
            subject: &claimed.subject.0,
            workflow: &claimed.workflow,
            step: reverses.unwrap_or(&claimed.fence.step),
            adapter: &contract.name,
            namespace,
            action: if original.is_some() {
                PolicyAction::Compensate
            } else {
                PolicyAction::Invoke
            },
            environment: f.environment,
        });
        // An operator's exception lets exactly this one denied attempt through.
        let exception = (!decision.allowed)
            .then_some(claimed.policy_exception.as_ref())
            .flatten();
        let judged = AttemptPolicy {
            version: f.policy.version,
            decision: match (decision.allowed, exception) {
                (true, _) => PolicyVerdict::Allow,
                (false, Some(_)) => PolicyVerdict::Exception,
                (false, None) => PolicyVerdict::Deny,
            },
            author: exception.map(|e| e.author.clone()),
        };
        if judged.decision == PolicyVerdict::Deny {
            return Preflight::Denied {
                policy: judged,
                reason: decision.reason,
            };
        }
        policy = Some(judged);
    }
    let call = match original {
        Some((_, receipt)) => Call::Compensate { original: receipt },
        None => Call::Invoke,
    };
    Preflight::Proceed {
        contract,
        key,
        call,
        policy,
    }
}

#[cfg(test)]
mod tests;
