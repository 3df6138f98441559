//! Approval steps: a person's consent to the exact consequence of the adapter steps an
//! approval step `approves`, checked when a definition is read, and the consequence
//! itself — what those steps would send, computed the same way on every host.
//!
//! The consequence is known when approval is asked because each approved step runs after
//! its approval and reads only `$input` and the receipts of steps the approval runs after.
//! Its digest is the SHA-256 of its canonical JSON (RFC 8785), as an admitted input's is.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::def::ApprovalDef;
use super::diagnostics::{Diagnostic, closest, list};
use super::graph::Graph;
use super::mapping::{Located, ReceiptView, Reference};
use super::raw::{StepToml, WorkflowToml};
use super::spans::Part;
use super::step::mapping_path;
use super::validate::{Ctx, nonzero};
use super::{StepKind, WorkflowDef};

/// What an approval's attempts and receipts name as their component: the host itself,
/// through which a person consents.
pub const APPROVAL_COMPONENT: &str = "docket:approval";

/// The provenance of an approval's attempt or receipt; the caller sets the input digest
/// (the consequence's).
pub fn approval_provenance() -> crate::intent::Provenance {
    crate::intent::Provenance {
        component: APPROVAL_COMPONENT.into(),
        component_version: env!("CARGO_PKG_VERSION").into(),
        component_digest: String::new(),
        input_digest: String::new(),
    }
}

/// Reports what an approval step may not have: it runs no component, so it has no
/// component, input, outputs, retry, capabilities, compensation, cost or timeout.
pub(super) fn approval_only(raw: &StepToml, i: usize, ctx: &mut Ctx<'_, '_>) {
    let id = raw.id.get_ref();
    let present = [
        ("component", raw.component.is_some()),
        ("version", raw.version.is_some()),
        ("input", !raw.input.is_empty()),
        ("outputs", !raw.outputs.is_empty()),
        ("retry", raw.retry.is_some()),
        ("capabilities", raw.capabilities.is_some()),
        ("compensation", raw.compensation.is_some()),
        ("cost", raw.cost.is_some()),
        ("timeout", raw.timeout.is_some()),
    ];
    for (field, _) in present.into_iter().filter(|(_, set)| *set) {
        let span = ctx
            .step_span(i, &[super::spans::Seg::key(field)], Part::Key)
            .or(Some(raw.id.span()));
        ctx.push(
            Diagnostic::new(format!(
                "approval step `{id}` has `{field}`, but a person approves it and no component runs it"
            ))
            .at(span)
            .help(format!(
                "remove `{field}` from the approval step; what it approves is the input of the steps in `approves`"
            )),
        );
    }
    for approver in &raw.approvers {
        if approver.get_ref().trim().is_empty() {
            ctx.push(
                Diagnostic::new(format!("approval step `{id}` lists an empty approver"))
                    .at(approver.span())
                    .help("name each subject who may approve, e.g. approvers = [\"alice\"], or remove `approvers` to let anyone holding the approver role approve"),
            );
        }
    }
}

/// The declaration of an approval step (`None` for any other kind).
pub(super) fn declaration(
    raw: &StepToml,
    deadline: Duration,
    ctx: &mut Ctx<'_, '_>,
) -> Option<ApprovalDef> {
    if *raw.kind.get_ref() != StepKind::Approval {
        return None;
    }
    let id = raw.id.get_ref();
    let expires = raw.expires.as_ref().map(|value| {
        let expires = nonzero(
            ctx,
            value,
            &format!("approval step `{id}` `expires`"),
            "give a person time to decide, e.g. expires = \"24h\"",
        );
        if expires > deadline {
            ctx.push(
                Diagnostic::new(format!(
                    "approval step `{id}` expires after `{}`, longer than the workflow deadline `{}`",
                    humantime::format_duration(expires),
                    humantime::format_duration(deadline)
                ))
                .at(value.span())
                .help("the deadline ends the wait anyway: shorten `expires`, or lengthen `deadline`"),
            );
        }
        expires
    });
    if let Some(summary) = &raw.summary
        && let Err(e) = summary_parts(summary.get_ref())
    {
        ctx.push(
            Diagnostic::new(format!("the summary of approval step `{id}` {e}"))
                .at(summary.span())
                .help("write references in braces, e.g. \"Deliver document to {$input.recipient}\"; write `{{` and `}}` for a literal brace"),
        );
    }
    Some(ApprovalDef {
        summary: raw.summary.as_ref().map(|s| s.get_ref().clone()),
        approves: raw.approves.iter().map(|a| a.get_ref().clone()).collect(),
        expires,
        approvers: raw
            .approvers
            .iter()
            .map(|a| a.get_ref().trim().to_string())
            .collect(),
    })
}

/// Checks what each approval step approves against the whole graph: something, adapter
/// steps only, each approved once, each running after its approval, and each reading only
/// what is known when the approval is asked. `refs` holds each step's input references.
pub(super) fn check(
    raw: &WorkflowToml,
    index: &BTreeMap<&str, usize>,
    graph: &Graph,
    refs: &[Vec<Located<Reference>>],
    ctx: &mut Ctx<'_, '_>,
) {
    let mut approved_by: BTreeMap<&str, &str> = BTreeMap::new();
    for (i, step) in raw.steps.iter().enumerate() {
        if *step.kind.get_ref() != StepKind::Approval {
            continue;
        }
        let id = step.id.get_ref().as_str();
        if let Some(summary) = &step.summary {
            summary_reads(raw, i, summary, index, graph, ctx);
        }
        if step.approves.is_empty() {
            ctx.push(
                Diagnostic::new(format!("approval step `{id}` approves nothing"))
                    .at(ctx
                        .step_span(i, &[super::spans::Seg::key("approves")], Part::Key)
                        .or(Some(step.id.span())))
                    .help(format!(
                        "list the adapter steps whose consequence a person approves, e.g. approves = [\"deliver\"]; the steps are {}",
                        list(index.keys())
                    )),
            );
            continue;
        }
        let approval_ancestors = graph.ancestors(i);
        for entry in &step.approves {
            let name = entry.get_ref().as_str();
            let Some(&j) = index.get(name) else {
                let help = match closest(name, index.keys().copied()) {
                    Some(near) => format!("did you mean `{near}`?"),
                    None => format!("the steps are {}", list(index.keys())),
                };
                ctx.push(
                    Diagnostic::new(format!(
                        "approval step `{id}` approves unknown step `{name}`"
                    ))
                    .at(entry.span())
                    .help(help),
                );
                continue;
            };
            let target = &raw.steps[j];
            let kind = *target.kind.get_ref();
            if kind != StepKind::Adapter {
                ctx.push(
                    Diagnostic::new(format!(
                        "approval step `{id}` approves `{name}`, {} {} step, which has no effect to approve",
                        if kind == StepKind::Approval { "an" } else { "a" },
                        kind.as_str()
                    ))
                    .at(entry.span())
                    .help("approve only adapter steps (kind = \"adapter\"): their calls are the consequence a person consents to"),
                );
                continue;
            }
            if let Some(first) = approved_by.insert(name, id) {
                ctx.push(
                    Diagnostic::new(format!(
                        "step `{name}` is approved by both `{first}` and `{id}`"
                    ))
                    .at(entry.span())
                    .help("let one approval step approve each adapter step"),
                );
                continue;
            }
            if !graph.ancestors(j).contains(&i) && !graph.is_incomplete(j) {
                ctx.push(
                    Diagnostic::new(format!(
                        "approval step `{id}` approves `{name}`, but `{name}` does not run after it"
                    ))
                    .at(entry.span())
                    .help(format!(
                        "add \"{id}\" to the `after` of step `{name}`, so nothing is sent before a person approves"
                    )),
                );
                continue;
            }
            for (path, reference) in &refs[j] {
                let Some(read) = reference.step() else {
                    continue;
                };
                let Some(&k) = index.get(read.as_str()) else {
                    continue;
                };
                if !approval_ancestors.contains(&k) {
                    let span = ctx.step_span(j, &mapping_path(path), Part::Value);
                    let help = if k == i {
                        format!(
                            "an approved step cannot read its own approval; read `$input` or a step `{id}` runs after"
                        )
                    } else {
                        format!(
                            "add \"{read}\" to the `after` of approval step `{id}`, so what `{name}` sends is known when approval is asked"
                        )
                    };
                    ctx.push(
                        Diagnostic::new(format!(
                            "step `{name}` is approved by `{id}` but reads `{reference}`, which is not known when `{id}` is asked"
                        ))
                        .at(span)
                        .help(help),
                    );
                }
            }
        }
    }
}

/// Checks what the summary of approval step `i` reads: `$input`, or the declared outputs
/// of a step the approval runs after.
fn summary_reads(
    raw: &WorkflowToml,
    i: usize,
    summary: &serde_spanned::Spanned<String>,
    index: &BTreeMap<&str, usize>,
    graph: &Graph,
    ctx: &mut Ctx<'_, '_>,
) {
    let id = raw.steps[i].id.get_ref();
    let Ok(parts) = summary_parts(summary.get_ref()) else {
        return;
    };
    let ancestors = graph.ancestors(i);
    for reference in parts.iter().filter_map(|p| match p {
        SummaryPart::Reference(r) => Some(r),
        SummaryPart::Text(_) => None,
    }) {
        let Some(read) = reference.step() else {
            continue;
        };
        let known = index.get(read.as_str()).copied();
        let readable = known.is_some_and(|j| ancestors.contains(&j));
        if !readable && !graph.is_incomplete(i) {
            ctx.push(
                Diagnostic::new(format!(
                    "the summary of approval step `{id}` reads `{reference}`, which is not known when `{id}` is asked"
                ))
                .at(summary.span())
                .help(format!(
                    "read `$input`, or a step in the `after` of `{id}` (add \"{read}\" to it)"
                )),
            );
            continue;
        }
        if let (Some(j), Some(field)) = (known, reference.receipt_field()) {
            let declared = raw.steps[j].outputs.iter().any(|o| o.get_ref() == field);
            if !declared {
                ctx.push(
                    Diagnostic::new(format!(
                        "the summary of approval step `{id}` reads `{reference}`, but step `{read}` declares no output `{field}`"
                    ))
                    .at(summary.span())
                    .help(format!("add \"{field}\" to the `outputs` of step `{read}`")),
                );
            }
        }
    }
}

/// A piece of an approval's summary.
#[derive(Debug, Clone, PartialEq)]
enum SummaryPart {
    Text(String),
    Reference(Reference),
}

/// A summary's text split into its pieces: literal text, and `{<reference>}` placeholders
/// (`{{` and `}}` are literal braces). `Err` says what is wrong, for a diagnostic.
fn summary_parts(text: &str) -> Result<Vec<SummaryPart>, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '{' => {
                let inner: String = chars.by_ref().take_while(|c| *c != '}').collect();
                if !inner.starts_with('$') {
                    return Err(format!(
                        "has `{{{inner}` where a reference (`{{$input.<field>}}`) or `{{{{` belongs"
                    ));
                }
                let reference = Reference::parse(&inner).map_err(|e| format!("has {e}"))?;
                if !literal.is_empty() {
                    parts.push(SummaryPart::Text(std::mem::take(&mut literal)));
                }
                parts.push(SummaryPart::Reference(reference));
            }
            '}' => {
                return Err("has a `}` that closes nothing; write `}}` for a literal one".into());
            }
            other => literal.push(other),
        }
    }
    if !literal.is_empty() {
        parts.push(SummaryPart::Text(literal));
    }
    Ok(parts)
}

/// What an approval step asks a person to consent to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Consequence {
    /// `sha256:<hex>` of the canonical text of `document`.
    pub digest: String,
    /// Per approved step, in the order `approves` lists them: `step`, `component`,
    /// `version` (the requirement), `input` (the mapped input), `input_digest`,
    /// `outbound_hosts` (as the definition requests them) and `cost`.
    pub document: Value,
    /// Each approved step's mapped-input digest, by step id: what checkpoint 2 compares.
    pub inputs: BTreeMap<String, String>,
}

/// Why a consequence cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsequenceError {
    #[error("`{0}` is not an approval step of this definition")]
    NotAnApproval(String),
    #[error("the input of approved step `{step}` cannot be built: {reason}")]
    Input { step: String, reason: String },
}

impl WorkflowDef {
    /// What approval step `approval` asks a person, in words: its `summary` with each
    /// reference read from the workflow `input` and the receipts that stand, else the
    /// labels of the steps it approves. A reference that cannot be read shows as written.
    pub fn approval_summary(
        &self,
        approval: &str,
        input: &Value,
        receipts: impl Fn(&str) -> Option<ReceiptView>,
    ) -> String {
        let Some(step) = self.step(approval) else {
            return approval.to_string();
        };
        let decl = step.approval.as_ref();
        let parts = decl
            .and_then(|a| a.summary.as_deref())
            .and_then(|s| summary_parts(s).ok());
        let Some(parts) = parts else {
            let labels: Vec<&str> = decl
                .iter()
                .flat_map(|a| &a.approves)
                .filter_map(|id| self.step(id.as_str()).map(|s| s.label.as_str()))
                .collect();
            return labels.join(", ");
        };
        let mut out = String::new();
        for part in parts {
            match part {
                SummaryPart::Text(t) => out.push_str(&t),
                SummaryPart::Reference(r) => {
                    let read =
                        super::mapping::InputMapping::from_value(&json!({"v": r.to_string()}))
                            .ok()
                            .and_then(|m| m.resolve(input, &receipts).ok())
                            .and_then(|v| v.get("v").cloned());
                    match read {
                        Some(Value::String(s)) => out.push_str(&s),
                        Some(other) => out.push_str(&other.to_string()),
                        None => out.push_str(&r.to_string()),
                    }
                }
            }
        }
        out
    }

    /// The consequence approval step `approval` asks consent to, for the workflow `input`
    /// and the receipts that stand (`receipts` by step id).
    pub fn consequence(
        &self,
        approval: &str,
        input: &Value,
        receipts: impl Fn(&str) -> Option<ReceiptView>,
    ) -> Result<Consequence, ConsequenceError> {
        let decl = self
            .step(approval)
            .and_then(|s| s.approval.as_ref())
            .ok_or_else(|| ConsequenceError::NotAnApproval(approval.to_string()))?;
        let mut steps = Vec::with_capacity(decl.approves.len());
        let mut inputs = BTreeMap::new();
        for id in &decl.approves {
            let step = self
                .step(id.as_str())
                .ok_or_else(|| ConsequenceError::NotAnApproval(approval.to_string()))?;
            let fail = |reason: String| ConsequenceError::Input {
                step: id.to_string(),
                reason,
            };
            let mapped = step
                .would_send(input, &receipts)
                .map_err(|e| fail(e.to_string()))?;
            let canonical =
                crate::intent::canonicalize(&mapped).map_err(|e| fail(e.to_string()))?;
            let hosts: BTreeSet<&String> = step.capabilities.outbound_hosts.iter().collect();
            let mut entry = json!({
                "step": id.as_str(),
                "component": step.component,
                "version": step.version_req.to_string(),
                "input_digest": canonical.digest,
                "outbound_hosts": hosts,
                "cost": step.cost,
            });
            // A batch step's consequence is its whole item set, each item with what it
            // would send; the digest binds the set.
            if step.batch.is_some() {
                let count = mapped.as_array().map_or(0, Vec::len);
                entry["item_count"] = json!(count);
                entry["items"] = mapped;
            } else {
                entry["input"] = mapped;
            }
            steps.push(entry);
            inputs.insert(id.to_string(), canonical.digest);
        }
        let document = json!({ "approval": approval, "steps": steps });
        let digest = crate::intent::canonicalize(&document)
            .map_err(|e| ConsequenceError::Input {
                step: approval.to_string(),
                reason: e.to_string(),
            })?
            .digest;
        Ok(Consequence {
            digest,
            document,
            inputs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summary reads its references when asked; braces doubled are literal, a value that
    /// is not text shows as JSON, and one that cannot be read shows as written.
    #[test]
    fn a_summary_reads_its_references_and_keeps_literal_braces() {
        let def = crate::workflow::parse(
            "approved.toml",
            r#"
name = "approved"
version = 1
deadline = "1h"
[input_schema]
type = "object"
[[steps]]
id = "approve"
label = "Approve"
kind = "approval"
approves = ["deliver"]
summary = "Send {{draft}} to {$input.to}, {$input.copies} copies{$input.missing}"
[[steps]]
id = "deliver"
label = "Deliver"
kind = "adapter"
component = "http-delivery"
version = "^1"
after = ["approve"]
[steps.input]
to = "$input.to"
"#,
        )
        .unwrap();
        let input = serde_json::json!({"to": "reader@example.com", "copies": 2});
        assert_eq!(
            def.approval_summary("approve", &input, |_| None),
            "Send {draft} to reader@example.com, 2 copies$input.missing"
        );
        assert!(summary_parts("a } b").is_err());
        assert!(summary_parts("a {b} c").is_err());
        assert!(summary_parts("a {$nope} c").is_err());
    }

    /// Without a summary, the approved steps' labels; the consequence's digest changes with
    /// what an approved step would send, and only with that.
    #[test]
    fn the_consequence_digest_follows_what_would_be_sent() {
        let def = crate::workflow::parse(
            "approved.toml",
            r#"
name = "approved"
version = 1
deadline = "1h"
[input_schema]
type = "object"
[[steps]]
id = "approve"
label = "Approve"
kind = "approval"
approves = ["deliver"]
[[steps]]
id = "deliver"
label = "Deliver"
kind = "adapter"
component = "http-delivery"
version = "^1"
after = ["approve"]
cost = 3
[steps.input]
to = "$input.to"
[steps.capabilities]
outbound_hosts = ["$base_url"]
"#,
        )
        .unwrap();
        let input = serde_json::json!({"to": "a@example.com", "note": "x"});
        assert_eq!(def.approval_summary("approve", &input, |_| None), "Deliver");
        let first = def.consequence("approve", &input, |_| None).unwrap();
        let same = def
            .consequence(
                "approve",
                &serde_json::json!({"to": "a@example.com", "note": "changed"}),
                |_| None,
            )
            .unwrap();
        let other = def
            .consequence(
                "approve",
                &serde_json::json!({"to": "b@example.com"}),
                |_| None,
            )
            .unwrap();
        assert_eq!(
            first.digest, same.digest,
            "a field nobody sends changes nothing"
        );
        assert_ne!(first.digest, other.digest);
        assert_eq!(first.document["steps"][0]["cost"], 3);
        assert_eq!(
            first.document["steps"][0]["outbound_hosts"],
            serde_json::json!(["$base_url"])
        );
        assert_eq!(
            first.inputs["deliver"],
            crate::intent::canonicalize(&serde_json::json!({"to": "a@example.com"}))
                .unwrap()
                .digest
        );
        assert!(matches!(
            def.consequence("deliver", &input, |_| None),
            Err(ConsequenceError::NotAnApproval(_))
        ));
    }
}
