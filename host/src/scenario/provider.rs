//! Scripted providers: a scenario's stand-ins for the services its adapters call, answered
//! inside the runtime's egress hook by host name (no network), and the world record they
//! keep — every resource created, under which key and reference, and every request seen.
//!
//! A provider has routes matched by method and path pattern (`/v1/deliveries/{id}/cancel`).
//! Each route answers from its script, one entry per request in order, and accepts once the
//! script is used up. A route's kind says what accepting means: `create` records a resource
//! (or replays it, when the provider deduplicates and still remembers the key), `lookup`
//! lists the visible resources with the request's reference, `cancel` marks the resource
//! its path names cancelled, `static` only answers. Answer bodies are minijinja templates
//! over the resource (the request's JSON fields plus `id`, `status`, `created_at`),
//! `replayed`, and for lookups `records`.
//!
//! Times are the simulation's clock: a `delay` holds the answer until the clock has moved
//! that far (or, when it is as long as the call's own time limit, lets the call time out
//! then), so the run decides when it ends, and keys are forgotten and resources become
//! visible by the same clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::clock::Clock;
use crate::runtime::{ScriptedAnswer, ScriptedHosts, ScriptedRequest};

/// The built-in routes of the reference delivery protocol (`protocol = "reference-delivery"`).
pub const REFERENCE_DELIVERY: &str = "reference-delivery";

/// What a route does when it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteKind {
    #[default]
    Create,
    Lookup,
    Cancel,
    Static,
}

/// Where a request carries a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Where {
    /// A header, by lower-case name.
    Header(String),
    /// A top-level field of the JSON body.
    Body(String),
    /// A query-string parameter.
    Query(String),
}

/// One entry of a route's script: how the provider answers one request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Behaviour {
    /// Does what the route does and answers it.
    #[default]
    Accept,
    /// Answers this error status; nothing happens.
    Reject(u16),
    /// Does what the route does and answers this much later on the simulated clock; the
    /// caller times out first when its own limit is shorter.
    Delay(Duration),
    /// `429` with `Retry-After`; nothing happens.
    RateLimit(Duration),
    /// Does what the route does, then closes the connection without answering.
    LoseAfterAccept,
    /// `503`; nothing happens.
    Unavailable,
    /// Does what the route does and answers naming a resource other than the one it
    /// recorded (its answers and its own records disagree).
    ConflictingStatus,
    /// `401`: the credentials are no longer accepted; nothing happens.
    Unauthorized,
}

impl Behaviour {
    fn word(&self) -> String {
        match self {
            Behaviour::Accept => "accept".into(),
            Behaviour::Reject(s) => format!("reject {s}"),
            Behaviour::Delay(d) => format!("delay {}", humantime::format_duration(*d)),
            Behaviour::RateLimit(d) => format!("rate_limit {}", humantime::format_duration(*d)),
            Behaviour::LoseAfterAccept => "lose_after_accept".into(),
            Behaviour::Unavailable => "unavailable".into(),
            Behaviour::ConflictingStatus => "conflicting_status".into(),
            Behaviour::Unauthorized => "unauthorized".into(),
        }
    }
}

/// A status and a body template.
#[derive(Debug, Clone, Default)]
pub struct Template {
    pub status: u16,
    pub body: String,
}

/// One route of a scripted provider.
#[derive(Debug, Clone, Default)]
pub struct Route {
    pub name: String,
    pub method: String,
    /// Segments, `{name}` matching any one.
    pub path: String,
    pub kind: RouteKind,
    /// Where a create request carries its idempotency key.
    pub key: Option<Where>,
    /// Where a request carries the stable reference lookups find resources by.
    pub reference: Option<Where>,
    pub script: Vec<Behaviour>,
    /// How it answers once the script is used up.
    pub then: Behaviour,
    /// The answer when the route accepts; a default per kind when `None`.
    pub answer: Option<Template>,
    /// Resource ids are this prefix and a number counting from 1.
    pub id_prefix: String,
}

/// A scripted provider as a scenario declares it.
#[derive(Debug, Clone)]
pub struct ProviderSpec {
    pub host: String,
    /// Whether a create under a key it remembers replays the first resource.
    pub deduplicates: bool,
    /// How long it remembers a key; forever when `None`.
    pub forget_keys_after: Option<Duration>,
    /// How long after creation a resource shows in lookups.
    pub visible_after: Option<Duration>,
    pub routes: Vec<Route>,
}

/// The routes of the reference delivery protocol (`reference-provider.md`).
pub fn reference_delivery() -> Vec<Route> {
    vec![
        Route {
            name: "create".into(),
            method: "POST".into(),
            path: "/v1/deliveries".into(),
            kind: RouteKind::Create,
            key: Some(Where::Header("idempotency-key".into())),
            reference: Some(Where::Body("client_reference".into())),
            script: Vec::new(),
            then: Behaviour::Accept,
            answer: Some(Template {
                status: 201,
                body: r#"{"id": {{ id | tojson }}, "client_reference": {{ client_reference | tojson }}, "status": {{ status | tojson }}}"#.into(),
            }),
            id_prefix: "dlv_".into(),
        },
        Route {
            name: "lookup".into(),
            method: "GET".into(),
            path: "/v1/deliveries".into(),
            kind: RouteKind::Lookup,
            key: None,
            reference: Some(Where::Query("client_reference".into())),
            script: Vec::new(),
            then: Behaviour::Accept,
            answer: Some(Template {
                status: 200,
                body: r#"{"data": {{ records | tojson }}}"#.into(),
            }),
            id_prefix: "dlv_".into(),
        },
        Route {
            name: "cancel".into(),
            method: "POST".into(),
            path: "/v1/deliveries/{id}/cancel".into(),
            kind: RouteKind::Cancel,
            key: None,
            reference: None,
            script: Vec::new(),
            then: Behaviour::Accept,
            answer: Some(Template {
                status: 200,
                body: r#"{"id": {{ id | tojson }}, "status": {{ status | tojson }}}"#.into(),
            }),
            id_prefix: "dlv_".into(),
        },
    ]
}

/// Whether `body` is a template the provider can render.
pub fn check_template(body: &str) -> Result<(), String> {
    environment()
        .template_from_str(body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
    env
}

/// A resource in a provider's world.
#[derive(Debug, Clone, Serialize)]
pub struct Resource {
    pub id: String,
    pub route: String,
    pub key: Option<String>,
    pub reference: Option<String>,
    /// `accepted`, or `cancelled` once a cancel took effect.
    pub status: String,
    pub created_at: String,
    /// The request's JSON body.
    pub request: Value,
    pub cancel_requests: u32,
    #[serde(skip)]
    created_ms: u64,
}

impl Resource {
    /// Whether a request sent under one of `identities` (its key or reference) made it.
    pub fn caused_by(&self, identities: &[String]) -> bool {
        [&self.key, &self.reference]
            .into_iter()
            .flatten()
            .any(|k| identities.contains(k))
    }
}

/// One request a provider saw and how it answered.
#[derive(Debug, Clone, Serialize)]
pub struct Exchange {
    pub at: String,
    pub method: String,
    pub path: String,
    /// The route that matched, if any.
    pub route: Option<String>,
    pub behaviour: String,
    /// The status answered; `null` when the answer was lost or the caller timed out.
    pub status: Option<u16>,
}

#[derive(Debug, Default)]
struct World {
    resources: Vec<Resource>,
    exchanges: Vec<Exchange>,
    /// Ids drawn so far (resources and the ids conflicting answers name).
    ids: u64,
    /// Requests each route answered so far.
    used: BTreeMap<String, usize>,
}

#[derive(Debug)]
struct Provider {
    spec: Mutex<ProviderSpec>,
    world: Mutex<World>,
}

/// Every scripted provider of a run.
#[derive(Clone)]
pub struct ScriptedProviders {
    providers: Arc<BTreeMap<String, Arc<Provider>>>,
    clock: Arc<dyn Clock>,
    /// Answers held by a `delay` now.
    held: Arc<std::sync::atomic::AtomicUsize>,
    /// Once the run is over: every held answer and every later request is lost, so the
    /// run's attempts end instead of waiting for a clock that no longer moves.
    closed: Arc<tokio::sync::watch::Sender<bool>>,
}

impl std::fmt::Debug for ScriptedProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedProviders")
            .field("hosts", &self.providers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ScriptedProviders {
    pub fn new(specs: Vec<ProviderSpec>, clock: Arc<dyn Clock>) -> Self {
        let providers = specs
            .into_iter()
            .map(|spec| {
                (
                    spec.host.clone(),
                    Arc::new(Provider {
                        spec: Mutex::new(spec),
                        world: Mutex::default(),
                    }),
                )
            })
            .collect();
        Self {
            providers: Arc::new(providers),
            clock,
            held: Arc::default(),
            closed: Arc::new(tokio::sync::watch::Sender::new(false)),
        }
    }

    /// The run is over: held answers and later requests are lost at once.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Answers held by a `delay` right now.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Replaces a route's script from now on; false when there is no such route.
    pub fn rescript(&self, host: &str, route: &str, script: Vec<Behaviour>) -> bool {
        let Some(p) = self.providers.get(host) else {
            return false;
        };
        let mut spec = p.spec.lock().unwrap();
        let Some(r) = spec.routes.iter_mut().find(|r| r.name == route) else {
            return false;
        };
        r.script = script;
        p.world.lock().unwrap().used.insert(route.to_string(), 0);
        true
    }

    /// Every resource of every provider.
    pub fn resources(&self) -> Vec<Resource> {
        self.providers
            .values()
            .flat_map(|p| p.world.lock().unwrap().resources.clone())
            .collect()
    }

    /// The world record: per provider host, its resources and the requests it saw.
    pub fn world(&self) -> Value {
        let mut out = Map::new();
        for (host, p) in self.providers.iter() {
            let w = p.world.lock().unwrap();
            out.insert(
                host.clone(),
                json!({"resources": w.resources, "requests": w.exchanges}),
            );
        }
        Value::Object(out)
    }

    fn provider(&self, host: &str) -> Option<Arc<Provider>> {
        self.providers.get(host).cloned()
    }
}

impl ScriptedHosts for ScriptedProviders {
    fn answers(&self, host: &str) -> bool {
        self.providers.contains_key(host)
    }

    fn answer(
        &self,
        request: ScriptedRequest,
    ) -> std::pin::Pin<Box<dyn Future<Output = ScriptedAnswer> + Send>> {
        let this = self.clone();
        Box::pin(async move {
            let mut closed = this.closed.subscribe();
            if *closed.borrow() {
                return ScriptedAnswer::Lost;
            }
            let Some(provider) = this.provider(&request.host) else {
                return ScriptedAnswer::Lost;
            };
            let now = this.clock.now_ms();
            let (answer, delay) = provider.decide(&request, now);
            let Some(delay) = delay else {
                return answer;
            };
            // Held on the simulated clock; the call's own limit ends the wait first.
            this.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let timed_out = delay >= request.call_timeout;
            let wait = if timed_out {
                request.call_timeout
            } else {
                delay
            };
            let answered = tokio::select! {
                _ = this.clock.sleep_until(now.saturating_add(wait.as_millis() as u64)) => true,
                _ = closed.wait_for(|c| *c) => false,
            };
            this.held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            if !answered {
                return ScriptedAnswer::Lost;
            }
            if timed_out {
                provider.lost_answer();
                ScriptedAnswer::TimedOut
            } else {
                answer
            }
        })
    }
}

/// The request's path without its query, and its query parameters.
fn split_target(target: &str) -> (&str, Vec<(String, String)>) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let params = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    (path, params)
}

/// Percent-decoding of a query component (`+` as space).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The captures of `pattern` in `path`, when it matches.
fn matches(pattern: &str, path: &str) -> Option<BTreeMap<String, String>> {
    let want: Vec<&str> = pattern.trim_matches('/').split('/').collect();
    let got: Vec<&str> = path.trim_matches('/').split('/').collect();
    if want.len() != got.len() {
        return None;
    }
    let mut captures = BTreeMap::new();
    for (w, g) in want.iter().zip(&got) {
        if let Some(name) = w.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
            captures.insert(name.to_string(), decode(g));
        } else if w != g {
            return None;
        }
    }
    Some(captures)
}

fn error(status: u16, code: &str) -> ScriptedAnswer {
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    if status == 503 {
        headers.push(("retry-after".into(), "1".into()));
    }
    ScriptedAnswer::Response {
        status,
        headers,
        body: json!({"error": code}).to_string().into(),
    }
}

impl Provider {
    /// What to answer, and how long to hold it.
    fn decide(&self, request: &ScriptedRequest, now: u64) -> (ScriptedAnswer, Option<Duration>) {
        let spec = self.spec.lock().unwrap().clone();
        let (path, params) = split_target(&request.path_and_query);
        let found = spec.routes.iter().find_map(|r| {
            (r.method.eq_ignore_ascii_case(&request.method))
                .then(|| matches(&r.path, path).map(|c| (r, c)))
                .flatten()
        });
        let mut world = self.world.lock().unwrap();
        let at = crate::intent::rfc3339(now);
        let Some((route, captures)) = found else {
            world.exchanges.push(Exchange {
                at,
                method: request.method.clone(),
                path: request.path_and_query.clone(),
                route: None,
                behaviour: "no route".into(),
                status: Some(404),
            });
            return (error(404, "no_scripted_route"), None);
        };
        let used = world.used.entry(route.name.clone()).or_default();
        let behaviour = route
            .script
            .get(*used)
            .cloned()
            .unwrap_or_else(|| route.then.clone());
        *used += 1;
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let value_at = |place: &Option<Where>| -> Option<String> {
            match place.as_ref()? {
                Where::Header(name) => request
                    .headers
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone()),
                Where::Body(field) => body.get(field).and_then(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Null => None,
                    other => Some(other.to_string()),
                }),
                Where::Query(param) => params
                    .iter()
                    .find(|(k, _)| k == param)
                    .map(|(_, v)| v.clone()),
            }
        };
        let log = |world: &mut World, status: Option<u16>| {
            world.exchanges.push(Exchange {
                at: at.clone(),
                method: request.method.clone(),
                path: request.path_and_query.clone(),
                route: Some(route.name.clone()),
                behaviour: behaviour.word(),
                status,
            });
        };
        let refusal = match &behaviour {
            Behaviour::Reject(status) => Some(error(*status, "rejected")),
            Behaviour::Unavailable => Some(error(503, "unavailable")),
            Behaviour::Unauthorized => Some(error(401, "unauthorized")),
            Behaviour::RateLimit(d) => Some(ScriptedAnswer::Response {
                status: 429,
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    ("retry-after".into(), d.as_secs().max(1).to_string()),
                ],
                body: json!({"error": "rate_limited"}).to_string().into(),
            }),
            _ => None,
        };
        if let Some(answer) = refusal {
            let status = match &answer {
                ScriptedAnswer::Response { status, .. } => Some(*status),
                _ => None,
            };
            log(&mut world, status);
            return (answer, None);
        }
        // The route acts; then the behaviour decides how (and whether) it is answered.
        let outcome = match route.kind {
            RouteKind::Create => {
                let key = value_at(&route.key);
                let reference = value_at(&route.reference);
                let remembered = |r: &Resource| {
                    spec.forget_keys_after
                        .is_none_or(|keep| now < r.created_ms + keep.as_millis() as u64)
                };
                let earlier = key.as_ref().filter(|_| spec.deduplicates).and_then(|k| {
                    world
                        .resources
                        .iter()
                        .position(|r| r.key.as_deref() == Some(k) && remembered(r))
                });
                match earlier {
                    Some(i) if world.resources[i].request != body => {
                        Err(error(409, "idempotency_key_reused"))
                    }
                    Some(i) => Ok((vec![world.resources[i].clone()], true)),
                    None => {
                        world.ids += 1;
                        let resource = Resource {
                            id: format!("{}{}", route.id_prefix, world.ids),
                            route: route.name.clone(),
                            key,
                            reference,
                            status: "accepted".into(),
                            created_at: at.clone(),
                            request: body.clone(),
                            cancel_requests: 0,
                            created_ms: now,
                        };
                        world.resources.push(resource.clone());
                        Ok((vec![resource], false))
                    }
                }
            }
            RouteKind::Lookup => {
                let reference = value_at(&route.reference);
                let visible = |r: &Resource| {
                    spec.visible_after
                        .is_none_or(|after| now >= r.created_ms + after.as_millis() as u64)
                };
                Ok((
                    world
                        .resources
                        .iter()
                        .filter(|r| reference.is_some() && r.reference == reference && visible(r))
                        .cloned()
                        .collect(),
                    false,
                ))
            }
            RouteKind::Cancel => {
                let id = captures.get("id").cloned().unwrap_or_default();
                match world.resources.iter_mut().find(|r| r.id == id) {
                    None => Err(error(404, "not_found")),
                    Some(r) => {
                        r.cancel_requests += 1;
                        r.status = "cancelled".into();
                        Ok((vec![r.clone()], false))
                    }
                }
            }
            RouteKind::Static => Ok((Vec::new(), false)),
        };
        let (mut records, replayed) = match outcome {
            Ok(found) => found,
            Err(answer) => {
                let status = match &answer {
                    ScriptedAnswer::Response { status, .. } => Some(*status),
                    _ => None,
                };
                log(&mut world, status);
                return (answer, None);
            }
        };
        if behaviour == Behaviour::ConflictingStatus {
            // The answer names an id the provider never recorded for this request.
            for r in &mut records {
                world.ids += 1;
                r.id = format!("{}{}", route.id_prefix, world.ids);
            }
        }
        let template = route
            .answer
            .clone()
            .unwrap_or_else(|| default_answer(route.kind));
        let status = if replayed && template.status == 201 {
            200
        } else {
            template.status
        };
        let rendered = render(&template.body, &records, replayed, &captures);
        let answer = match rendered {
            Ok(body) => ScriptedAnswer::Response {
                status,
                headers: vec![("content-type".into(), "application/json".into())],
                body: body.into(),
            },
            Err(e) => error(500, &format!("template: {e}")),
        };
        match behaviour {
            Behaviour::LoseAfterAccept => {
                log(&mut world, None);
                (ScriptedAnswer::Lost, None)
            }
            Behaviour::Delay(d) => {
                log(&mut world, Some(status));
                (answer, Some(d))
            }
            _ => {
                log(&mut world, Some(status));
                (answer, None)
            }
        }
    }

    /// The last request's answer never reached the caller (it timed out first).
    fn lost_answer(&self) {
        if let Some(e) = self.world.lock().unwrap().exchanges.last_mut() {
            e.status = None;
            e.behaviour.push_str(" (the caller timed out first)");
        }
    }
}

fn default_answer(kind: RouteKind) -> Template {
    match kind {
        RouteKind::Create => Template {
            status: 201,
            body: r#"{"id": {{ id | tojson }}, "status": {{ status | tojson }}}"#.into(),
        },
        RouteKind::Lookup => Template {
            status: 200,
            body: r#"{"data": {{ records | tojson }}}"#.into(),
        },
        RouteKind::Cancel => Template {
            status: 200,
            body: r#"{"id": {{ id | tojson }}, "status": {{ status | tojson }}}"#.into(),
        },
        RouteKind::Static => Template {
            status: 200,
            body: "{}".into(),
        },
    }
}

/// A resource as an answer shows it: the request's fields, then `id`, `status` and
/// `created_at`.
fn shown(r: &Resource) -> Map<String, Value> {
    let mut out = match &r.request {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    out.insert("id".into(), Value::String(r.id.clone()));
    out.insert("status".into(), Value::String(r.status.clone()));
    out.insert("created_at".into(), Value::String(r.created_at.clone()));
    out
}

fn render(
    template: &str,
    records: &[Resource],
    replayed: bool,
    captures: &BTreeMap<String, String>,
) -> Result<String, String> {
    let env = environment();
    let mut context = records.first().map(shown).unwrap_or_default();
    for (k, v) in captures {
        context
            .entry(k.clone())
            .or_insert_with(|| Value::String(v.clone()));
    }
    context.insert("replayed".into(), Value::Bool(replayed));
    context.insert(
        "records".into(),
        Value::Array(records.iter().map(|r| Value::Object(shown(r))).collect()),
    );
    env.render_str(template, Value::Object(context))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn request(method: &str, target: &str, key: Option<&str>, body: Value) -> ScriptedRequest {
        ScriptedRequest {
            method: method.into(),
            host: "deliveries.example".into(),
            path_and_query: target.into(),
            headers: key
                .map(|k| vec![("idempotency-key".to_string(), k.to_string())])
                .unwrap_or_default(),
            body: body.to_string().into(),
            call_timeout: Duration::from_secs(30),
        }
    }

    fn provider(script: Vec<Behaviour>) -> (ScriptedProviders, Arc<ManualClock>) {
        let clock = ManualClock::new(1_000_000);
        let mut routes = reference_delivery();
        routes[0].script = script;
        let p = ScriptedProviders::new(
            vec![ProviderSpec {
                host: "deliveries.example".into(),
                deduplicates: true,
                forget_keys_after: Some(Duration::from_secs(3600)),
                visible_after: None,
                routes,
            }],
            clock.clone(),
        );
        (p, clock)
    }

    fn status(a: &ScriptedAnswer) -> Option<u16> {
        match a {
            ScriptedAnswer::Response { status, .. } => Some(*status),
            _ => None,
        }
    }

    fn body(a: &ScriptedAnswer) -> Value {
        match a {
            ScriptedAnswer::Response { body, .. } => serde_json::from_slice(body).unwrap(),
            _ => Value::Null,
        }
    }

    #[tokio::test]
    async fn a_lost_answer_still_creates_and_a_lookup_finds_it_by_reference() {
        let (p, _) = provider(vec![Behaviour::LoseAfterAccept]);
        let send =
            json!({"client_reference": "k1", "recipient": "a@b", "document_digest": "sha256:0"});
        let first = p
            .answer(request("POST", "/v1/deliveries", Some("k1"), send.clone()))
            .await;
        assert!(matches!(first, ScriptedAnswer::Lost));
        let found = p
            .answer(request(
                "GET",
                "/v1/deliveries?client_reference=k1",
                None,
                Value::Null,
            ))
            .await;
        assert_eq!(status(&found), Some(200));
        assert_eq!(body(&found)["data"][0]["id"], "dlv_1");
        // The same key again replays the one delivery.
        let again = p
            .answer(request("POST", "/v1/deliveries", Some("k1"), send))
            .await;
        assert_eq!(status(&again), Some(200));
        assert_eq!(body(&again)["id"], "dlv_1");
        assert_eq!(p.resources().len(), 1);
    }

    #[tokio::test]
    async fn a_forgotten_key_creates_again_and_refusals_create_nothing() {
        let (p, clock) = provider(vec![
            Behaviour::Unavailable,
            Behaviour::RateLimit(Duration::from_secs(2)),
            Behaviour::Unauthorized,
            Behaviour::Reject(422),
        ]);
        let send = json!({"client_reference": "k1"});
        for want in [503, 429, 401, 422, 201] {
            let a = p
                .answer(request("POST", "/v1/deliveries", Some("k1"), send.clone()))
                .await;
            assert_eq!(status(&a), Some(want), "{a:?}");
        }
        clock.advance(3_600_000);
        let a = p
            .answer(request("POST", "/v1/deliveries", Some("k1"), send))
            .await;
        assert_eq!(status(&a), Some(201));
        assert_eq!(p.resources().len(), 2);
    }

    #[tokio::test]
    async fn a_conflicting_answer_names_another_resource_than_the_one_recorded() {
        let (p, _) = provider(vec![Behaviour::ConflictingStatus]);
        let a = p
            .answer(request(
                "POST",
                "/v1/deliveries",
                Some("k1"),
                json!({"client_reference": "k1"}),
            ))
            .await;
        assert_eq!(body(&a)["id"], "dlv_2");
        assert_eq!(p.resources()[0].id, "dlv_1");
    }

    #[tokio::test]
    async fn a_delay_is_held_on_the_simulated_clock_and_a_long_one_times_the_caller_out() {
        let (p, clock) = provider(vec![
            Behaviour::Delay(Duration::from_secs(10)),
            Behaviour::Delay(Duration::from_secs(60)),
        ]);
        let send = json!({"client_reference": "k1"});
        let held =
            tokio::spawn(p.answer(request("POST", "/v1/deliveries", Some("k1"), send.clone())));
        tokio::task::yield_now().await;
        assert_eq!(p.held(), 1);
        assert_eq!(clock.next_wake(), Some(1_010_000));
        clock.advance(10_000);
        assert_eq!(status(&held.await.unwrap()), Some(201));
        let slow = tokio::spawn(p.answer(request(
            "POST",
            "/v1/deliveries",
            Some("k2"),
            json!({"client_reference": "k2"}),
        )));
        tokio::task::yield_now().await;
        clock.advance(30_000);
        assert!(matches!(slow.await.unwrap(), ScriptedAnswer::TimedOut));
        assert_eq!(p.resources().len(), 2, "the slow one was still created");
    }
}
