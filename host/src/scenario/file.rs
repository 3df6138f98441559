//! The scenario file format: its serde shape, mirrored exactly from the TOML, and the
//! checks that turn it into a [`Scenario`] or into `file:line:col` diagnostics.
//!
//! What a file names is checked against what the run will have: the workflow among the
//! definitions given, each step an event, a kill or an expectation names among that
//! workflow's steps, each adapter among the components, each route among its provider's.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use serde_spanned::Spanned;

use crate::workflow::{Diagnostic, Diagnostics, TomlDuration, WorkflowDef, closest, name_list};

use super::provider::{Behaviour, ProviderSpec, Route, RouteKind, Template, Where};

/// The six checkpoints of an adapter attempt, by number.
pub const CHECKPOINTS: std::ops::RangeInclusive<u8> = 1..=6;

/// A scenario, checked: everything [`super::run`] needs besides the components.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file it came from, as given.
    pub file: String,
    /// The case's name (the file's stem unless `name` says otherwise); a checkpoint
    /// expansion adds ` [checkpoint N]`.
    pub name: String,
    pub workflow: String,
    pub seed: u64,
    /// The hosts' lease.
    pub lease: Duration,
    /// How many hosts share the store and take turns looking for work (default 1).
    pub hosts: usize,
    /// How far the simulated clock may run on its own before the run ends.
    pub run_for: Duration,
    pub intents: Vec<Intent>,
    pub adapters: BTreeMap<String, AdapterSetup>,
    pub kill: Option<Kill>,
    pub events: Vec<Event>,
    pub expect: Expect,
}

/// One intent submitted at the start (or by an event).
#[derive(Debug, Clone)]
pub struct Intent {
    pub key: String,
    pub input: Value,
}

/// An adapter's settings and secrets for the run, and the provider standing in for its
/// service.
#[derive(Debug, Clone, Default)]
pub struct AdapterSetup {
    /// The version active when the run starts (default: the highest loaded).
    pub version: Option<String>,
    pub settings: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
    pub provider: Option<ProviderSpec>,
}

/// The host dies right after a checkpoint of a step's first attempt that reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub step: String,
    pub checkpoint: u8,
}

/// Something that happens during the run.
#[derive(Debug, Clone)]
pub struct Event {
    /// When: once the run has settled (nothing left to do without the clock moving), or
    /// while an attempt of this step stands at this checkpoint.
    pub at: Option<Kill>,
    /// Only once the run is at rest: every workflow has ended or waits for a person.
    pub at_rest: bool,
    pub action: EventAction,
    /// 1-based line in the file, for reports.
    pub line: usize,
}

/// What an event does.
#[derive(Debug, Clone)]
pub enum EventAction {
    /// The clock moves forward.
    Advance(Duration),
    /// The host whose attempt stands at the event's `at` stands still this long (its lease
    /// renewals too) while the clock moves on and other hosts work; then it goes on.
    Pause(Duration),
    /// An operator's action through the API on the first intent's workflow: `cancel`,
    /// `withdraw`, `revise`, `replace` and `budget` on the workflow, the step actions
    /// (`query`, `retry`, `resolve`, `escalate`, `compensate`, `exception`, `approve`,
    /// `reject`) on `step`.
    Act {
        action: String,
        step: Option<String>,
        body: Value,
        /// The status the API must answer (default: any 2xx), to rehearse a refusal.
        status: Option<u16>,
    },
    /// A provider's route answers from a new script from now on.
    Script {
        adapter: String,
        route: String,
        script: Vec<Behaviour>,
    },
    /// Another intent is submitted.
    Submit(Intent),
    /// A deployer activates another stored version of a component.
    Activate { adapter: String, version: String },
    /// An operator who knows the world acts on the step the first workflow's next action
    /// names (exploring only): asks the provider, retries, escalates, or resolves it with
    /// what the world holds. The number draws which.
    TruthfulOperator(u32),
}

/// What must hold when the run ends, for every intent.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    pub state: Option<String>,
    pub steps: BTreeMap<String, StepExpect>,
    /// Resources each intent caused in the world (every provider together).
    pub effects: Option<u64>,
    /// The changes of course the projection offers (`actions[].action`), exactly.
    pub actions: Option<Vec<String>>,
    /// `review:<step>` or `approval:<step>`, or `none`.
    pub next_action: Option<String>,
    /// Texts the timeline contains, each somewhere.
    pub timeline: Vec<String>,
    /// Texts no timeline entry contains.
    pub timeline_lacks: Vec<String>,
    /// The transitions told (`workflow.completed`, …), in the order written, exactly.
    pub notifications: Option<Vec<String>>,
}

/// What must hold of one step.
#[derive(Debug, Clone, Default)]
pub struct StepExpect {
    pub state: Option<String>,
    /// The receipt's evidence kind (`response`, `query`, `observation`, `manual`, …), or
    /// `none` for no receipt.
    pub evidence: Option<String>,
    pub attempts: Option<u32>,
    /// The adapter version the step last ran under.
    pub version: Option<String>,
}

// ---- the authored shape ----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioToml {
    name: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
    workflow: Spanned<String>,
    seed: Option<u64>,
    lease: Option<TomlDuration>,
    hosts: Option<Spanned<u32>>,
    run_for: Option<TomlDuration>,
    #[serde(default)]
    intents: Vec<IntentToml>,
    #[serde(default)]
    adapters: BTreeMap<String, Spanned<AdapterToml>>,
    kill_at: Option<Spanned<KillToml>>,
    #[serde(default)]
    events: Vec<Spanned<EventToml>>,
    #[serde(default)]
    expect: Option<ExpectToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IntentToml {
    key: String,
    input: toml::Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdapterToml {
    version: Option<Spanned<String>>,
    #[serde(default)]
    settings: BTreeMap<String, String>,
    #[serde(default)]
    secrets: BTreeMap<String, String>,
    provider: Option<ProviderToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderToml {
    host: Spanned<String>,
    protocol: Option<Spanned<String>>,
    #[serde(default = "yes")]
    deduplicates: bool,
    forget_keys_after: Option<TomlDuration>,
    visible_after: Option<TomlDuration>,
    #[serde(default)]
    routes: Vec<RouteToml>,
    #[serde(default)]
    scripts: BTreeMap<String, Spanned<Vec<Spanned<BehaviourToml>>>>,
    #[serde(default)]
    then: BTreeMap<String, Spanned<BehaviourToml>>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteToml {
    name: String,
    method: String,
    path: String,
    kind: RouteKind,
    key: Option<Spanned<String>>,
    reference: Option<Spanned<String>>,
    #[serde(default)]
    script: Vec<Spanned<BehaviourToml>>,
    then: Option<Spanned<BehaviourToml>>,
    answer: Option<AnswerToml>,
    id_prefix: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerToml {
    status: u16,
    #[serde(default)]
    body: String,
}

/// A script entry: a bare word, or a table naming one behaviour with its value.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum BehaviourToml {
    Word(String),
    Table(BTreeMap<String, toml::Value>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KillToml {
    step: Spanned<String>,
    checkpoint: Spanned<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AtToml {
    step: Spanned<String>,
    checkpoint: Spanned<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventToml {
    at: Option<AtToml>,
    at_rest: Option<Spanned<bool>>,
    advance: Option<TomlDuration>,
    pause: Option<Spanned<TomlDuration>>,
    action: Option<Spanned<String>>,
    step: Option<Spanned<String>>,
    body: Option<toml::Table>,
    status: Option<Spanned<u16>>,
    script: Option<ScriptChangeToml>,
    submit: Option<IntentToml>,
    activate: Option<ActivateToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivateToml {
    adapter: Spanned<String>,
    version: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptChangeToml {
    adapter: Spanned<String>,
    route: Spanned<String>,
    entries: Vec<Spanned<BehaviourToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectToml {
    state: Option<Spanned<String>>,
    #[serde(default)]
    steps: BTreeMap<String, Spanned<StepExpectToml>>,
    effects: Option<u64>,
    actions: Option<Vec<String>>,
    next_action: Option<String>,
    #[serde(default)]
    timeline: Vec<String>,
    #[serde(default)]
    timeline_lacks: Vec<String>,
    notifications: Option<Vec<Spanned<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepExpectToml {
    state: Option<String>,
    evidence: Option<String>,
    attempts: Option<u32>,
    version: Option<String>,
}

/// Workflow end states a scenario may expect.
const WORKFLOW_STATES: &[&str] = &[
    "running",
    "needs_review",
    "completed",
    "failed",
    "cancelling",
    "cancelled",
    "compensating",
    "compensated",
    "blocked",
];

/// Operator actions an event may take on the workflow.
const WORKFLOW_ACTIONS: &[&str] = &["cancel", "withdraw", "revise", "replace", "budget"];

/// Operator actions an event may take.
const ACTIONS: &[&str] = &[
    "cancel",
    "withdraw",
    "revise",
    "replace",
    "budget",
    "query",
    "retry",
    "resolve",
    "escalate",
    "compensate",
    "exception",
    "approve",
    "reject",
];

/// Parses and checks `source` (named `file` in diagnostics) against the definitions
/// available, by name. A `checkpoint = "each"` kill expands into six scenarios.
pub fn parse(
    file: &str,
    source: &str,
    definitions: &BTreeMap<String, WorkflowDef>,
    loaded: &[(String, String)],
) -> Result<Vec<Scenario>, Diagnostics> {
    let mut components: Vec<String> = loaded.iter().map(|(n, _)| n.clone()).collect();
    components.dedup();
    let fail = |items| Diagnostics::new(file, source, items);
    let raw: ScenarioToml = toml::from_str(source).map_err(|e| {
        fail(vec![crate::workflow::toml_diagnostic(
            &e,
            e.span().is_none(),
        )])
    })?;
    let mut diags = Vec::new();
    let stem = std::path::Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.to_string());
    let def = definitions.get(raw.workflow.get_ref());
    if def.is_none() {
        let name = raw.workflow.get_ref();
        let mut d = Diagnostic::new(format!("no workflow named `{name}` is defined"))
            .at(raw.workflow.span());
        d = match closest(name, definitions.keys().map(String::as_str)) {
            Some(near) => d.help(format!("did you mean `{near}`?")),
            None => d.help(format!(
                "name one of {} (the definitions in the workflows directory)",
                name_list(definitions.keys())
            )),
        };
        diags.push(d);
    }
    let steps: Vec<String> = def
        .map(|d| d.steps.iter().map(|s| s.id.to_string()).collect())
        .unwrap_or_default();
    let step_known = |name: &Spanned<String>, diags: &mut Vec<Diagnostic>| {
        if def.is_some() && !steps.iter().any(|s| s == name.get_ref()) {
            let mut d = Diagnostic::new(format!(
                "workflow `{}` has no step `{}`",
                raw.workflow.get_ref(),
                name.get_ref()
            ))
            .at(name.span());
            d = match closest(name.get_ref(), steps.iter().map(String::as_str)) {
                Some(near) => d.help(format!("did you mean `{near}`?")),
                None => d.help(format!("name one of {}", name_list(&steps))),
            };
            diags.push(d);
        }
    };

    if let Some(h) = &raw.hosts
        && !(1..=8).contains(h.get_ref())
    {
        diags.push(
            Diagnostic::new(format!("{} hosts is not 1 … 8", h.get_ref()))
                .at(h.span())
                .help("write how many hosts share the store, from 1 to 8"),
        );
    }
    let mut intents = Vec::new();
    for i in &raw.intents {
        intents.push(intent(i, &mut diags));
    }
    if intents.is_empty() {
        diags.push(
            Diagnostic::new("the scenario submits no intent").help(
                "add one: [[intents]] with key = \"order-1\" and input = { … } as the workflow's input schema wants",
            ),
        );
    }

    let mut adapters = BTreeMap::new();
    for (name, spanned) in &raw.adapters {
        if !components.iter().any(|c| c == name) {
            let mut d = Diagnostic::new(format!("no component named `{name}` is loaded"))
                .at(spanned.span());
            d = match closest(name, components.iter().map(String::as_str)) {
                Some(near) => d.help(format!("did you mean `{near}`?")),
                None => d.help(format!(
                    "name one of {}, or load it with --components",
                    name_list(&components)
                )),
            };
            diags.push(d);
        }
        let a = spanned.get_ref();
        if let Some(v) = &a.version {
            version_known(name, v, loaded, &mut diags);
        }
        let provider = a
            .provider
            .as_ref()
            .and_then(|p| provider(p, spanned.span(), &mut diags));
        adapters.insert(
            name.clone(),
            AdapterSetup {
                version: a.version.as_ref().map(|v| v.get_ref().clone()),
                settings: a.settings.clone(),
                secrets: a.secrets.clone(),
                provider,
            },
        );
    }

    let mut kills = vec![None];
    if let Some(k) = &raw.kill_at {
        let k = k.get_ref();
        step_known(&k.step, &mut diags);
        kills = match k.checkpoint.get_ref() {
            toml::Value::String(each) if each == "each" => CHECKPOINTS
                .map(|n| {
                    Some(Kill {
                        step: k.step.get_ref().clone(),
                        checkpoint: n,
                    })
                })
                .collect(),
            toml::Value::Integer(n) if (1..=6).contains(n) => vec![Some(Kill {
                step: k.step.get_ref().clone(),
                checkpoint: *n as u8,
            })],
            other => {
                diags.push(
                    Diagnostic::new(format!("checkpoint `{other}` is not 1 … 6 or \"each\""))
                        .at(k.checkpoint.span())
                        .help("write a checkpoint number from 1 to 6, or \"each\" to run the scenario once per checkpoint"),
                );
                vec![None]
            }
        };
    }

    let mut events = Vec::new();
    for e in &raw.events {
        if let Some(event) = event(e, source, &raw.adapters, loaded, &mut diags, &mut |s, d| {
            step_known(s, d)
        }) {
            events.push(event);
        }
    }

    let expect = raw
        .expect
        .as_ref()
        .map(|x| expect(x, &mut diags, &mut |s, d| step_known(s, d)))
        .unwrap_or_default();

    if !diags.is_empty() {
        return Err(fail(diags));
    }
    let base = Scenario {
        file: file.to_string(),
        name: raw.name.clone().unwrap_or(stem),
        workflow: raw.workflow.get_ref().clone(),
        seed: raw.seed.unwrap_or(0),
        lease: raw.lease.map_or(Duration::from_secs(30), |d| d.0),
        hosts: raw.hosts.as_ref().map_or(1, |h| *h.get_ref() as usize),
        run_for: raw.run_for.map_or(Duration::from_secs(7 * 86_400), |d| d.0),
        intents,
        adapters,
        kill: None,
        events,
        expect,
    };
    let expand = kills.len() > 1;
    Ok(kills
        .into_iter()
        .map(|kill| {
            let mut s = base.clone();
            if expand && let Some(k) = &kill {
                s.name = format!("{} [checkpoint {}]", s.name, k.checkpoint);
            }
            s.kill = kill;
            s
        })
        .collect())
}

fn intent(raw: &IntentToml, diags: &mut Vec<Diagnostic>) -> Intent {
    let input = match crate::workflow::toml_value_to_json(&raw.input) {
        Ok(v) => v,
        Err(e) => {
            diags.push(Diagnostic::new(format!(
                "intent `{}`: input is not JSON: {e}",
                raw.key
            )));
            Value::Null
        }
    };
    Intent {
        key: raw.key.clone(),
        input,
    }
}

fn provider(
    raw: &ProviderToml,
    at: std::ops::Range<usize>,
    diags: &mut Vec<Diagnostic>,
) -> Option<ProviderSpec> {
    let host = raw.host.get_ref().to_ascii_lowercase();
    if host.is_empty() || host.contains(['/', ':', ' ']) {
        diags.push(
            Diagnostic::new(format!("`{}` is not a host name", raw.host.get_ref()))
                .at(raw.host.span())
                .help("write the host name alone, e.g. host = \"api.provider.example\""),
        );
    }
    let mut routes = match raw.protocol.as_ref().map(|p| p.get_ref().as_str()) {
        None => Vec::new(),
        Some(super::provider::REFERENCE_DELIVERY) => super::provider::reference_delivery(),
        Some(other) => {
            diags.push(
                Diagnostic::new(format!("unknown provider protocol `{other}`"))
                    .at(raw.protocol.as_ref().map(|p| p.span()))
                    .help(format!(
                        "the built-in protocol is `{}`; or write [[…provider.routes]] of your own",
                        super::provider::REFERENCE_DELIVERY
                    )),
            );
            Vec::new()
        }
    };
    for r in &raw.routes {
        let mut route = Route {
            name: r.name.clone(),
            method: r.method.to_ascii_uppercase(),
            path: r.path.clone(),
            kind: r.kind,
            key: r.key.as_ref().and_then(|k| place(k, diags)),
            reference: r.reference.as_ref().and_then(|k| place(k, diags)),
            script: r
                .script
                .iter()
                .filter_map(|b| behaviour(b, diags))
                .collect(),
            then: r
                .then
                .as_ref()
                .and_then(|b| behaviour(b, diags))
                .unwrap_or_default(),
            answer: r.answer.as_ref().map(|a| Template {
                status: a.status,
                body: a.body.clone(),
            }),
            id_prefix: r.id_prefix.clone().unwrap_or_else(|| "res_".into()),
        };
        if let Some(t) = &route.answer
            && let Err(e) = super::provider::check_template(&t.body)
        {
            diags.push(Diagnostic::new(format!(
                "route `{}`: the answer's body is not a valid template: {e}",
                r.name
            )));
        }
        if route.kind == RouteKind::Create && route.key.is_none() && route.reference.is_none() {
            diags.push(Diagnostic::new(format!(
                "route `{}` creates resources but names neither `key` nor `reference`",
                r.name
            )).at(at.clone()).help("say where the request carries its identity, e.g. key = \"header:Idempotency-Key\""));
        }
        if let Some(i) = routes.iter().position(|x: &Route| x.name == r.name) {
            // A route of the team's own replaces the protocol's of the same name.
            routes[i] = std::mem::take(&mut route);
        } else {
            routes.push(route);
        }
    }
    if routes.is_empty() {
        diags.push(
            Diagnostic::new("the provider has no routes")
                .at(at.clone())
                .help(format!(
                    "set protocol = \"{}\", or add [[…provider.routes]]",
                    super::provider::REFERENCE_DELIVERY
                )),
        );
    }
    for (name, script) in &raw.scripts {
        match routes.iter_mut().find(|r| &r.name == name) {
            Some(route) => {
                route.script = script
                    .get_ref()
                    .iter()
                    .filter_map(|b| behaviour(b, diags))
                    .collect();
            }
            None => diags.push(
                Diagnostic::new(format!("the provider has no route `{name}`"))
                    .at(script.span())
                    .help(format!(
                        "script one of {}",
                        name_list(routes.iter().map(|r| &r.name))
                    )),
            ),
        }
    }
    for (name, then) in &raw.then {
        match routes.iter_mut().find(|r| &r.name == name) {
            Some(route) => {
                if let Some(b) = behaviour(then, diags) {
                    route.then = b;
                }
            }
            None => diags.push(
                Diagnostic::new(format!("the provider has no route `{name}`"))
                    .at(then.span())
                    .help(format!(
                        "name one of {}",
                        name_list(routes.iter().map(|r| &r.name))
                    )),
            ),
        }
    }
    Some(ProviderSpec {
        host,
        deduplicates: raw.deduplicates,
        forget_keys_after: raw.forget_keys_after.map(|d| d.0),
        visible_after: raw.visible_after.map(|d| d.0),
        routes,
    })
}

/// `header:<name>`, `body:<field>` or `query:<param>`.
fn place(raw: &Spanned<String>, diags: &mut Vec<Diagnostic>) -> Option<Where> {
    let text = raw.get_ref();
    let parsed = match text.split_once(':') {
        Some(("header", name)) if !name.is_empty() => {
            Some(Where::Header(name.to_ascii_lowercase()))
        }
        Some(("body", name)) if !name.is_empty() => Some(Where::Body(name.to_string())),
        Some(("query", name)) if !name.is_empty() => Some(Where::Query(name.to_string())),
        _ => None,
    };
    if parsed.is_none() {
        diags.push(
            Diagnostic::new(format!("`{text}` does not say where in the request to look"))
                .at(raw.span())
                .help("write header:<name>, body:<field> or query:<parameter>, e.g. \"header:Idempotency-Key\""),
        );
    }
    parsed
}

/// The script behaviours by word, with whether each takes a value.
const BEHAVIOURS: &[&str] = &[
    "accept",
    "reject",
    "delay",
    "rate_limit",
    "lose_after_accept",
    "unavailable",
    "conflicting_status",
    "unauthorized",
];

fn behaviour(raw: &Spanned<BehaviourToml>, diags: &mut Vec<Diagnostic>) -> Option<Behaviour> {
    let bad = |diags: &mut Vec<Diagnostic>, message: String, help: String| {
        diags.push(Diagnostic::new(message).at(raw.span()).help(help));
        None
    };
    let duration = |v: &toml::Value| -> Result<Duration, String> {
        match v {
            toml::Value::String(s) => {
                humantime::parse_duration(s).map_err(|e| format!("`{s}` is not a duration ({e})"))
            }
            other => Err(format!("`{other}` is not a duration")),
        }
    };
    match raw.get_ref() {
        BehaviourToml::Word(word) => match word.as_str() {
            "accept" => Some(Behaviour::Accept),
            "lose_after_accept" => Some(Behaviour::LoseAfterAccept),
            "unavailable" => Some(Behaviour::Unavailable),
            "conflicting_status" => Some(Behaviour::ConflictingStatus),
            "unauthorized" => Some(Behaviour::Unauthorized),
            "reject" => Some(Behaviour::Reject(422)),
            "rate_limit" => Some(Behaviour::RateLimit(Duration::from_secs(1))),
            other => {
                let help = match closest(other, BEHAVIOURS.iter().copied()) {
                    Some(near) => format!("did you mean `{near}`?"),
                    None => format!("write one of {}", name_list(BEHAVIOURS)),
                };
                bad(diags, format!("unknown script behaviour `{other}`"), help)
            }
        },
        BehaviourToml::Table(table) => {
            let mut entries = table.iter();
            let (Some((word, value)), None) = (entries.next(), entries.next()) else {
                return bad(
                    diags,
                    "a script entry names one behaviour".into(),
                    "write e.g. { delay = \"40s\" } or { reject = 422 }".into(),
                );
            };
            match (word.as_str(), value) {
                ("reject", toml::Value::Integer(status)) if (400..600).contains(status) => {
                    Some(Behaviour::Reject(*status as u16))
                }
                ("reject", other) => bad(
                    diags,
                    format!("reject status `{other}` is not an HTTP error status"),
                    "write { reject = 422 } with a status from 400 to 599".into(),
                ),
                ("delay", v) => match duration(v) {
                    Ok(d) => Some(Behaviour::Delay(d)),
                    Err(e) => bad(
                        diags,
                        format!("delay: {e}"),
                        "write { delay = \"40s\" }".into(),
                    ),
                },
                ("rate_limit", v) => match duration(v) {
                    Ok(d) => Some(Behaviour::RateLimit(d)),
                    Err(e) => bad(
                        diags,
                        format!("rate_limit: {e}"),
                        "write { rate_limit = \"2s\" } (sent as Retry-After)".into(),
                    ),
                },
                (other, _) => {
                    let help = match closest(other, BEHAVIOURS.iter().copied()) {
                        Some(near) => format!("did you mean `{near}`?"),
                        None => format!("write one of {}", name_list(BEHAVIOURS)),
                    };
                    bad(diags, format!("unknown script behaviour `{other}`"), help)
                }
            }
        }
    }
}

/// Whether `version` of component `name` is loaded; a diagnostic naming those that are if not.
fn version_known(
    name: &str,
    version: &Spanned<String>,
    loaded: &[(String, String)],
    diags: &mut Vec<Diagnostic>,
) {
    let versions: Vec<&String> = loaded
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v)
        .collect();
    if !versions.is_empty() && !versions.contains(&version.get_ref()) {
        diags.push(
            Diagnostic::new(format!(
                "no version {} of `{name}` is loaded",
                version.get_ref()
            ))
            .at(version.span())
            .help(format!(
                "name one of {}, or load the component file with --components",
                name_list(versions)
            )),
        );
    }
}

fn event(
    raw: &Spanned<EventToml>,
    source: &str,
    adapters: &BTreeMap<String, Spanned<AdapterToml>>,
    loaded: &[(String, String)],
    diags: &mut Vec<Diagnostic>,
    step_known: &mut dyn FnMut(&Spanned<String>, &mut Vec<Diagnostic>),
) -> Option<Event> {
    let e = raw.get_ref();
    let line = source[..raw.span().start.min(source.len())]
        .lines()
        .count()
        .max(1);
    let at = e.at.as_ref().map(|a| {
        step_known(&a.step, diags);
        if !CHECKPOINTS.contains(a.checkpoint.get_ref()) {
            diags.push(
                Diagnostic::new(format!(
                    "checkpoint `{}` is not 1 … 6",
                    a.checkpoint.get_ref()
                ))
                .at(a.checkpoint.span())
                .help("an adapter attempt passes checkpoints 1 to 6"),
            );
        }
        Kill {
            step: a.step.get_ref().clone(),
            checkpoint: *a.checkpoint.get_ref(),
        }
    });
    let mut actions = Vec::new();
    if let Some(d) = e.advance {
        actions.push(EventAction::Advance(d.0));
    }
    if let Some(d) = &e.pause {
        if at.is_none() {
            diags.push(
                Diagnostic::new("a pause needs `at`: the host that pauses is the one whose attempt stands there")
                    .at(d.span())
                    .help("add at = { step = \"<step id>\", checkpoint = N } to the event"),
            );
        }
        actions.push(EventAction::Pause(d.get_ref().0));
    }
    if let Some(action) = &e.action {
        if !ACTIONS.contains(&action.get_ref().as_str()) {
            let help = match closest(action.get_ref(), ACTIONS.iter().copied()) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!("write one of {}", name_list(ACTIONS)),
            };
            diags.push(
                Diagnostic::new(format!("unknown action `{}`", action.get_ref()))
                    .at(action.span())
                    .help(help),
            );
        }
        let on_workflow = WORKFLOW_ACTIONS.contains(&action.get_ref().as_str());
        match (&e.step, on_workflow) {
            (Some(step), false) => step_known(step, diags),
            (None, false) => diags.push(
                Diagnostic::new(format!("action `{}` needs a step", action.get_ref()))
                    .at(action.span())
                    .help("add step = \"<step id>\" to the event"),
            ),
            (None, true) => {}
            (Some(step), true) => diags.push(
                Diagnostic::new(format!(
                    "action `{}` is on the workflow, not on a step",
                    action.get_ref()
                ))
                .at(step.span())
                .help("remove step from the event"),
            ),
        }
        let body = e
            .body
            .as_ref()
            .map(|t| crate::workflow::toml_value_to_json(&toml::Value::Table(t.clone())))
            .transpose()
            .unwrap_or_else(|err| {
                diags.push(Diagnostic::new(format!("event body is not JSON: {err}")));
                None
            })
            .unwrap_or_else(|| Value::Object(Default::default()));
        actions.push(EventAction::Act {
            action: action.get_ref().clone(),
            step: e.step.as_ref().map(|s| s.get_ref().clone()),
            body,
            status: e.status.as_ref().map(|s| *s.get_ref()),
        });
    } else if let Some(status) = &e.status {
        diags.push(
            Diagnostic::new("`status` is the answer an action must get; this event takes none")
                .at(status.span())
                .help("remove status, or add the action it is the answer to"),
        );
    }
    if let Some(change) = &e.script {
        if !adapters.contains_key(change.adapter.get_ref()) {
            diags.push(
                Diagnostic::new(format!(
                    "the scenario sets up no adapter `{}`",
                    change.adapter.get_ref()
                ))
                .at(change.adapter.span())
                .help(format!("name one of {}", name_list(adapters.keys()))),
            );
        }
        actions.push(EventAction::Script {
            adapter: change.adapter.get_ref().clone(),
            route: change.route.get_ref().clone(),
            script: change
                .entries
                .iter()
                .filter_map(|b| behaviour(b, diags))
                .collect(),
        });
    }
    if let Some(i) = &e.submit {
        actions.push(EventAction::Submit(intent(i, diags)));
    }
    if let Some(a) = &e.activate {
        if loaded.iter().any(|(n, _)| n == a.adapter.get_ref()) {
            version_known(a.adapter.get_ref(), &a.version, loaded, diags);
        } else {
            diags.push(
                Diagnostic::new(format!(
                    "no component named `{}` is loaded",
                    a.adapter.get_ref()
                ))
                .at(a.adapter.span())
                .help("name a loaded component, or load it with --components"),
            );
        }
        actions.push(EventAction::Activate {
            adapter: a.adapter.get_ref().clone(),
            version: a.version.get_ref().clone(),
        });
    }
    let at_rest = e.at_rest.as_ref().is_some_and(|r| *r.get_ref());
    if let (Some(r), true) = (&e.at_rest, at.is_some()) {
        diags.push(
            Diagnostic::new(
                "an event waits either at a checkpoint or for the run's rest, not both",
            )
            .at(r.span())
            .help("remove `at` or `at_rest`"),
        );
    }
    match actions.len() {
        1 => Some(Event {
            at_rest,
            at,
            action: actions.pop().expect("one"),
            line,
        }),
        n => {
            diags.push(
                Diagnostic::new(format!("an event does one thing; this one does {n}"))
                    .at(raw.span())
                    .help("give each [[events]] exactly one of advance, pause, action, script, submit or activate"),
            );
            None
        }
    }
}

fn expect(
    raw: &ExpectToml,
    diags: &mut Vec<Diagnostic>,
    step_known: &mut dyn FnMut(&Spanned<String>, &mut Vec<Diagnostic>),
) -> Expect {
    if let Some(state) = &raw.state
        && !WORKFLOW_STATES.contains(&state.get_ref().as_str())
    {
        let help = match closest(state.get_ref(), WORKFLOW_STATES.iter().copied()) {
            Some(near) => format!("did you mean `{near}`?"),
            None => format!("write one of {}", name_list(WORKFLOW_STATES)),
        };
        diags.push(
            Diagnostic::new(format!("`{}` is not a workflow state", state.get_ref()))
                .at(state.span())
                .help(help),
        );
    }
    for n in raw.notifications.iter().flatten() {
        if crate::notify::EventType::parse(n.get_ref()).is_none() {
            let names = crate::notify::EventType::ALL.map(|t| t.as_str());
            let help = match closest(n.get_ref(), names.iter().copied()) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!("write one of {}", name_list(names)),
            };
            diags.push(
                Diagnostic::new(format!("`{}` is not a notification type", n.get_ref()))
                    .at(n.span())
                    .help(help),
            );
        }
    }
    let mut steps = BTreeMap::new();
    for (id, s) in &raw.steps {
        step_known(&Spanned::new(s.span(), id.clone()), diags);
        let s = s.get_ref();
        steps.insert(
            id.clone(),
            StepExpect {
                state: s.state.clone(),
                evidence: s.evidence.clone(),
                attempts: s.attempts,
                version: s.version.clone(),
            },
        );
    }
    Expect {
        state: raw.state.as_ref().map(|s| s.get_ref().clone()),
        steps,
        effects: raw.effects,
        actions: raw.actions.clone(),
        next_action: raw.next_action.clone(),
        timeline: raw.timeline.clone(),
        timeline_lacks: raw.timeline_lacks.clone(),
        notifications: raw
            .notifications
            .as_ref()
            .map(|n| n.iter().map(|n| n.get_ref().clone()).collect()),
    }
}
