//! Policy at the side-effect boundary: a TOML document of rules, deployed in versions, that
//! decides whether an adapter attempt may cause an effect (invoke or compensate — never a
//! query) for a subject, workflow, step, adapter and environment.
//!
//! The first matching rule wins; when none matches, the answer is deny. With no version
//! deployed, version 0 allows everything. Parsing and deciding are pure: the store keeps
//! the versions, the scheduler asks at checkpoint 2 and records the answer on the attempt.

use serde::{Deserialize, Serialize};

/// The `reason` of a step blocked because the policy in force denied its effect.
pub const BLOCKED_REASON: &str = "policy_denied";

/// What an attempt asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyAction {
    Invoke,
    Compensate,
}

/// What a rule says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    Allow,
    Deny,
}

/// One rule: every list that is given must contain the fact (`"*"` or an omitted list match
/// anything).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default)]
    pub subjects: Vec<String>,
    #[serde(default)]
    pub workflows: Vec<String>,
    #[serde(default)]
    pub steps: Vec<String>,
    /// Component names, or `namespace:<ns>` for every adapter of an idempotency namespace.
    #[serde(default)]
    pub adapters: Vec<String>,
    #[serde(default)]
    pub actions: Vec<PolicyAction>,
    #[serde(default)]
    pub environments: Vec<String>,
    pub effect: Effect,
    /// Shown on a denial.
    pub reason: Option<String>,
}

/// A policy document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDoc {
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// Why a document is not a policy: where, and what to fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct DocumentError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// What an attempt is, as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts<'a> {
    pub subject: &'a str,
    pub workflow: &'a str,
    pub step: &'a str,
    pub adapter: &'a str,
    pub namespace: &'a str,
    pub action: PolicyAction,
    pub environment: &'a str,
}

/// A policy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The deciding rule (1-based, as a person counts them), `None` when none matched.
    pub rule: Option<usize>,
    /// Why, in words (a denial's reason when the rule gives one).
    pub reason: String,
}

fn matches(list: &[String], value: &str) -> bool {
    list.is_empty() || list.iter().any(|v| v == "*" || v == value)
}

impl Rule {
    fn applies(&self, f: &Facts<'_>) -> bool {
        let adapter = self.adapters.is_empty()
            || self.adapters.iter().any(|a| {
                a == "*" || a == f.adapter || a.strip_prefix("namespace:") == Some(f.namespace)
            });
        matches(&self.subjects, f.subject)
            && matches(&self.workflows, f.workflow)
            && matches(&self.steps, f.step)
            && adapter
            && (self.actions.is_empty() || self.actions.contains(&f.action))
            && matches(&self.environments, f.environment)
    }
}

impl PolicyDoc {
    /// Parses a document; every problem names its line and column.
    pub fn parse(source: &str) -> Result<Self, Vec<DocumentError>> {
        let doc: PolicyDoc = toml::from_str(source).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|s| position(source, s.start))
                .unwrap_or((1, 1));
            vec![DocumentError {
                line,
                column,
                message: e.message().trim().to_string(),
            }]
        })?;
        let mut problems = Vec::new();
        for (i, rule) in doc.rules.iter().enumerate() {
            let lists = [
                ("subjects", &rule.subjects),
                ("workflows", &rule.workflows),
                ("steps", &rule.steps),
                ("adapters", &rule.adapters),
                ("environments", &rule.environments),
            ];
            for (name, list) in lists {
                if list.iter().any(|v| v.trim().is_empty()) {
                    let (line, column) = rule_position(source, i);
                    problems.push(DocumentError {
                        line,
                        column,
                        message: format!(
                            "rule {} has an empty entry in `{name}`; name what it matches, or \"*\" for anything",
                            i + 1
                        ),
                    });
                }
            }
        }
        if problems.is_empty() {
            Ok(doc)
        } else {
            Err(problems)
        }
    }

    /// The first matching rule's answer; deny when none matches.
    pub fn decide(&self, facts: &Facts<'_>) -> Decision {
        match self
            .rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.applies(facts))
        {
            Some((i, rule)) => Decision {
                allowed: rule.effect == Effect::Allow,
                rule: Some(i + 1),
                reason: rule.reason.clone().unwrap_or_else(|| {
                    format!(
                        "rule {} {}s it",
                        i + 1,
                        if rule.effect == Effect::Allow {
                            "allow"
                        } else {
                            "denie"
                        }
                    )
                }),
            },
            None => Decision {
                allowed: false,
                rule: None,
                reason: "no rule of the policy allows it".into(),
            },
        }
    }
}

/// The 1-based line and column of byte `offset`.
fn position(source: &str, offset: usize) -> (usize, usize) {
    let before = &source[..offset.min(source.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(1, |l| l.chars().count() + 1);
    (line, column)
}

/// Where the `i`th `[[rules]]` table starts.
fn rule_position(source: &str, i: usize) -> (usize, usize) {
    source
        .match_indices("[[rules]]")
        .nth(i)
        .map_or((1, 1), |(at, _)| position(source, at))
}

/// A deployed policy version: version 0 (none deployed) allows everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    pub version: u32,
    /// `None` for version 0.
    pub doc: Option<PolicyDoc>,
}

impl InForce {
    /// Version 0: no policy deployed, everything allowed.
    pub fn none() -> Self {
        Self {
            version: 0,
            doc: None,
        }
    }

    pub fn decide(&self, facts: &Facts<'_>) -> Decision {
        match &self.doc {
            Some(doc) => doc.decide(facts),
            None => Decision {
                allowed: true,
                rule: None,
                reason: "no policy is deployed (version 0 allows everything)".into(),
            },
        }
    }
}

#[cfg(test)]
mod tests;
