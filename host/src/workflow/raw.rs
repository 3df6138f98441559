//! The authored shape of a definition file: serde types that mirror the TOML exactly.
//!
//! Every table denies unknown fields, scalar values with rules are validating newtypes,
//! and values that later checks point at are `Spanned`. Nothing here is checked beyond
//! its own value; [`super::validate`] turns these into the validated types.

use serde::Deserialize;
use serde_spanned::Spanned;

use super::values::{StepId, TomlDuration, TomlVersionReq, WorkflowName};
use super::{CompensationTrigger, StepKind};

/// A whole definition file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WorkflowToml {
    pub name: Spanned<WorkflowName>,
    pub version: Spanned<i64>,
    #[serde(default)]
    pub description: String,
    pub deadline: Spanned<TomlDuration>,
    pub budget: Option<BudgetToml>,
    pub input_schema: Spanned<toml::Table>,
    #[serde(default)]
    pub steps: Vec<StepToml>,
}

/// `[budget]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BudgetToml {
    pub max_attempts: Option<Spanned<i64>>,
    pub max_runtime: Option<Spanned<TomlDuration>>,
    pub max_external_calls: Option<Spanned<i64>>,
    pub max_cost: Option<Spanned<i64>>,
    pub recovery_queries: Option<Spanned<i64>>,
}

/// One `[[steps]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StepToml {
    pub id: Spanned<StepId>,
    pub label: Spanned<String>,
    pub kind: Spanned<StepKind>,
    pub component: Spanned<String>,
    pub version: Spanned<TomlVersionReq>,
    #[serde(default)]
    pub after: Vec<Spanned<StepId>>,
    #[serde(default)]
    pub input: toml::Table,
    #[serde(default)]
    pub outputs: Vec<Spanned<String>>,
    pub milestone: Option<Spanned<String>>,
    pub timeout: Option<Spanned<TomlDuration>>,
    pub retry: Option<RetryToml>,
    pub capabilities: Option<CapabilitiesToml>,
    pub compensation: Option<Spanned<CompensationToml>>,
    pub cost: Option<Spanned<i64>>,
}

/// `[steps.retry]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RetryToml {
    pub max_attempts: Option<Spanned<i64>>,
    pub initial_backoff: Option<Spanned<TomlDuration>>,
    pub max_backoff: Option<Spanned<TomlDuration>>,
    pub multiplier: Option<Spanned<f64>>,
    pub jitter: Option<Spanned<f64>>,
}

/// `[steps.capabilities]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CapabilitiesToml {
    #[serde(default)]
    pub outbound_hosts: Vec<Spanned<String>>,
    #[serde(default)]
    pub secrets: Vec<Spanned<String>>,
}

/// `[steps.compensation]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CompensationToml {
    pub on: CompensationTrigger,
    pub input: Option<toml::Table>,
    pub retry: Option<RetryToml>,
}
