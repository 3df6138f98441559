//! The operator's host configuration (`docket.toml`), parsed into validated settings.
//!
//! Every field is optional: `docket serve` with no file runs on loopback with SQLite in
//! `.docket/`, the workflows in `workflows/`, and the built example components. Unknown
//! fields are errors that name the field and its location.

use crate::access::{Principal, Role, Roles};
use crate::capabilities::{AdapterPolicy, HostPolicy, HostRule, SecretSource};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment whose hosts run only verified adapter versions by default.
pub const PRODUCTION: &str = "production";
/// The longest key retention a configuration may ask for (ten years): times are stored as
/// signed 64-bit milliseconds.
const MAX_RETENTION: Duration = Duration::from_secs(10 * 365 * 86_400);

/// The shortest secret value a configuration may hold.
pub const MIN_SECRET_CHARS: usize = 8;

/// `docket.toml` as written. Not `Debug`: it holds tokens, secret values and the database
/// URL's password as written.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfigToml {
    pub listen: Option<SocketAddr>,
    /// A second listener serving only `/metrics` (and the health checks), without
    /// authentication, for scrapers that must not reach the API.
    pub metrics_listen: Option<SocketAddr>,
    /// `sqlite://path`, a plain path, or `postgres://…`.
    pub db: Option<String>,
    /// Directory of workflow definitions.
    pub workflows: Option<PathBuf>,
    /// Extra component files to load besides the built examples.
    #[serde(default)]
    pub components: Vec<PathBuf>,
    /// Load the example components built from `adapters/` (default true). A host without
    /// them still runs every component stored in the database.
    pub examples: Option<bool>,
    /// This host's identity, recorded as the lease owner on every attempt (default
    /// `<hostname>-<pid>`). Give each host on one database its own.
    pub host_id: Option<String>,
    /// The environment deployed policies judge this host's attempts in (default
    /// `development`), e.g. `production`.
    pub environment: Option<String>,
    /// Whether components may be uploaded over HTTP (`POST /v1/adapters`; default true).
    pub api_uploads: Option<bool>,
    /// Whether a version runs only with a passing `docket adapter verify` verdict (default
    /// true with `environment = "production"`, false otherwise).
    pub require_verified: Option<bool>,
    #[serde(default)]
    pub tokens: Vec<TokenToml>,
    #[serde(default)]
    pub secrets: SecretsToml,
    #[serde(default)]
    pub adapters: BTreeMap<String, AdapterToml>,
    #[serde(default)]
    pub limits: LimitsToml,
    /// Webhook endpoints told about workflows' meaningful transitions.
    #[serde(default)]
    pub notifications: Vec<NotificationToml>,
    /// Serve HTTPS with this certificate chain and key (PEM files).
    pub tls: Option<TlsToml>,
    /// The host listens behind a proxy that terminates TLS: a non-loopback listener without
    /// `[tls]` is allowed, and console cookies are `Secure`.
    pub behind_tls_proxy: Option<bool>,
    /// CA certificates (PEM) trusted for the host's own HTTPS requests (notifications)
    /// besides the public web roots.
    pub outbound_ca_file: Option<PathBuf>,
    /// `[server]`: who may name the client of a request.
    #[serde(default)]
    pub server: ServerToml,
    /// `[fairness]`: how claims are shared between subjects with ready work.
    #[serde(default)]
    pub fairness: FairnessToml,
}

/// `[fairness]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FairnessToml {
    /// Each subject's weight (default 1): while both have ready work, a subject of weight 2
    /// gets twice the claims of one of weight 1.
    #[serde(default)]
    pub weights: BTreeMap<String, u32>,
}

/// The largest weight a subject may have: beyond it, the others would wait behind a
/// thousand of its steps for each of theirs.
const MAX_WEIGHT: u32 = 1000;

/// `[server]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerToml {
    /// Proxies (addresses or CIDR ranges, e.g. `"10.0.0.0/8"`) whose `client_ip_header`
    /// names the real client; from anyone else that header is ignored.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// The header a trusted proxy names the client in (default `X-Forwarded-For`; its
    /// right-most address that is not a trusted proxy is the client).
    pub client_ip_header: Option<String>,
}
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsToml {
    /// The certificate chain, PEM.
    pub cert: PathBuf,
    /// The private key, PEM.
    pub key: PathBuf,
}

/// One `[[notifications]]` endpoint.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationToml {
    /// Where each notification is `POST`ed.
    pub url: String,
    /// The event types it wants (default: all).
    pub events: Option<Vec<String>>,
    /// The name of the secret (`whsec_…`) that signs its requests.
    pub secret: String,
    /// How long a review (or a deadline warning) waits before it is sent, so one settled
    /// at once never alarms anyone (default "0s").
    pub review_hold: Option<String>,
}

/// One API token: exactly one of `token`, `token_sha256`, `token_file` or `token_env`, and
/// `role` or `roles`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenToml {
    /// The token itself (development; prefer the others).
    pub token: Option<String>,
    /// The token's SHA-256 digest, `sha256:<hex>`: the file never holds the token.
    pub token_sha256: Option<String>,
    /// A file whose first line is the token.
    pub token_file: Option<PathBuf>,
    /// An environment variable holding the token.
    pub token_env: Option<String>,
    pub subject: String,
    pub role: Option<Role>,
    #[serde(default)]
    pub roles: Vec<Role>,
}

impl std::fmt::Debug for TokenToml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token, nor its digest.
        f.debug_struct("TokenToml")
            .field("subject", &self.subject)
            .field("role", &self.role)
            .field("roles", &self.roles)
            .finish_non_exhaustive()
    }
}

/// A configured token, as the host keeps it: its digest and what it may do.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenEntry {
    /// `sha256:<hex>` of the token.
    pub digest: String,
    pub principal: Principal,
}

impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEntry")
            .field("subject", &self.principal.subject.0)
            .field("roles", &self.principal.roles.names())
            .finish_non_exhaustive()
    }
}

/// The shortest token a configuration may hold: 22 base64 characters carry 128 bits.
pub const MIN_TOKEN_CHARS: usize = 22;

/// Where secret values come from. Not `Debug`: it may hold secret values.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretsToml {
    /// Values written in the file (development only).
    #[serde(default)]
    pub values: BTreeMap<String, String>,
    /// Environment variables `<prefix><NAME in upper case>` supply secrets too.
    pub env_prefix: Option<String>,
}

/// The operator's allowance for one adapter.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterToml {
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    #[serde(default)]
    pub allow_secrets: Vec<String>,
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// Pins the allowance to these component digests (`sha256:<hex>`).
    #[serde(default)]
    pub digests: Vec<String>,
    /// Lets the granted host names resolve to private addresses (default false).
    #[serde(default)]
    pub allow_private: bool,
    /// The name of the secret (`whsec_…`) the provider signs its deliveries to
    /// `POST /v1/evidence/<adapter>` with; without it the adapter takes no deliveries.
    pub webhook_secret: Option<String>,
    /// Claim its steps only while fewer of its attempts are in flight, counted on every
    /// host of the store.
    pub max_in_flight: Option<u32>,
    /// Start at most this many of its attempts per period on this host, e.g. `"100/s"`.
    pub rate: Option<String>,
}

/// Host limits.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsToml {
    pub memory_mib: Option<usize>,
    pub max_concurrent: Option<usize>,
    pub lease: Option<String>,
    /// The longest an idle host waits before looking for work without being woken.
    pub idle_poll: Option<String>,
    /// How long a component version that is neither active nor running stays loaded.
    pub unload_idle: Option<String>,
    /// How long a stopping host waits for attempts under way before ending its leases.
    pub shutdown_grace: Option<String>,
    pub key_retention: Option<String>,
    pub max_body_bytes: Option<usize>,
    /// How long delivered, suppressed and failed notifications are kept (default 7 days).
    pub notification_retention: Option<String>,
    /// Most connections the API's listener holds at once (default 1024).
    pub max_connections: Option<usize>,
    /// Longest a client may take to send a request's headers (default 10 s).
    pub header_read_timeout: Option<String>,
    /// Longest a client may take to send a request's body, from its headers on (default
    /// 60 s).
    pub body_read_timeout: Option<String>,
    /// Most connections one client address holds at once (default a quarter of
    /// `max_connections`); trusted proxies are not held to it.
    pub max_connections_per_client: Option<usize>,
    /// Time between the host's own consistency checks (default 1 h).
    pub check_interval: Option<String>,
    /// How long an ended workflow is kept before it is purged (default 30 days; never
    /// before its idempotency key expired).
    pub workflow_retention: Option<String>,
}

/// Why the configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// Validated host settings. Its `Debug` never shows a token, a secret value or the
/// database URL's password.
pub struct HostConfig {
    pub listen: Option<SocketAddr>,
    pub metrics_listen: Option<SocketAddr>,
    pub db: Option<String>,
    pub workflows: PathBuf,
    /// Whether `workflows` was configured; when it was not and `workflows/` does not
    /// exist, the host deploys the definitions shipped in its binary.
    pub workflows_configured: bool,
    pub components: Vec<PathBuf>,
    pub examples: bool,
    pub host_id: Option<String>,
    /// What deployed policies match in `environments`.
    pub environment: String,
    pub api_uploads: bool,
    pub require_verified: bool,
    pub tokens: Vec<TokenEntry>,
    pub secrets: SecretSource,
    pub policy: HostPolicy,
    pub memory_cap_bytes: usize,
    pub max_concurrent: usize,
    pub lease: Duration,
    pub idle_poll: Duration,
    pub unload_idle: Duration,
    pub shutdown_grace: Duration,
    pub key_retention: Duration,
    pub max_body_bytes: usize,
    pub notifications: Vec<crate::notify::Endpoint>,
    pub notification_retention: Duration,
    pub tls: Option<TlsToml>,
    pub behind_tls_proxy: bool,
    /// Extra CA certificates for the host's own HTTPS requests.
    pub outbound_ca_file: Option<PathBuf>,
    /// Who may name a request's client (the failed-authentication throttle's key).
    pub proxies: crate::access::ProxyTrust,
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub check_interval: Duration,
    pub workflow_retention: Duration,
    /// `[fairness] weights`, checked.
    pub fairness_weights: BTreeMap<String, u32>,
    /// `[adapters.X] max_in_flight` and `rate`, checked.
    pub adapter_limits: Vec<crate::scheduler::AdapterLimit>,
}

impl std::fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("listen", &self.listen)
            .field(
                "db",
                &self.db.as_deref().map(crate::store::without_password),
            )
            .field("workflows", &self.workflows)
            .field("environment", &self.environment)
            .field("tokens", &self.tokens)
            .field("secrets", &self.secrets)
            .field("notifications", &self.notifications)
            .finish_non_exhaustive()
    }
}

impl HostConfig {
    /// Reads `path`, or the defaults when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let (name, raw) = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| ConfigError::Read {
                    path: p.display().to_string(),
                    reason: e.to_string(),
                })?;
                (
                    p.display().to_string(),
                    Self::parse_toml(&p.display().to_string(), &text)?,
                )
            }
            None => ("<defaults>".to_string(), HostConfigToml::default()),
        };
        Self::from_toml(&name, raw)
    }

    pub(crate) fn parse_toml(name: &str, text: &str) -> Result<HostConfigToml, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let location = e
                .span()
                .map(|s| {
                    let before = &text[..s.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!("{line}:{col}: ")
                })
                .unwrap_or_default();
            ConfigError::Invalid {
                path: name.to_string(),
                message: format!("{location}{}", e.message()),
            }
        })
    }

    pub(crate) fn from_toml(name: &str, raw: HostConfigToml) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: name.to_string(),
            message,
        };
        let duration = |field: &str,
                        text: &Option<String>,
                        default: Duration|
         -> Result<Duration, ConfigError> {
            match text {
                None => Ok(default),
                Some(t) => humantime::parse_duration(t).map_err(|e| {
                    invalid(format!(
                        "[limits] {field} = {t:?}: {e}; write e.g. \"30s\" or \"24h\""
                    ))
                }),
            }
        };
        let within = |field: &str, value: usize, min: usize, max: usize| {
            if (min..=max).contains(&value) {
                Ok(value)
            } else {
                Err(invalid(format!(
                    "[limits] {field} = {value} is outside {min}..={max}; choose a value in that range"
                )))
            }
        };
        let at_least = |field: &str, value: Duration, min: Duration| {
            if value >= min {
                Ok(())
            } else {
                Err(invalid(format!(
                    "[limits] {field} = {value:?} is too short; it must be at least {min:?}"
                )))
            }
        };
        let at_most = |field: &str, value: Duration, max: Duration| {
            if value <= max {
                Ok(())
            } else {
                Err(invalid(format!(
                    "[limits] {field} = {value:?} is too long; it must be at most {} days",
                    max.as_secs() / 86_400
                )))
            }
        };
        let mut secrets = SecretSource::default();
        let mut found = Vec::new();
        for (k, v) in &raw.secrets.values {
            found.push((format!("[secrets] values.{k}"), k.clone(), v.clone()));
        }
        if raw.secrets.env_prefix.as_deref() == Some("") {
            return Err(invalid(
                "[secrets] env_prefix = \"\" would make every environment variable of the process a secret; use a prefix such as \"DOCKET_SECRET_\"".into(),
            ));
        }
        if let Some(prefix) = &raw.secrets.env_prefix {
            // `vars_os`: one variable of the process that is not UTF-8 is no reason to fail;
            // one of ours is, by name.
            for (k, v) in std::env::vars_os() {
                let Some(name) = k.to_str().and_then(|k| k.strip_prefix(prefix.as_str())) else {
                    continue;
                };
                let Some(value) = v.to_str() else {
                    return Err(invalid(format!(
                        "environment variable {prefix}{name} is not valid UTF-8; a secret must be text"
                    )));
                };
                found.push((
                    format!("environment variable {prefix}{name}"),
                    name.to_lowercase(),
                    value.to_string(),
                ));
            }
        }
        for (origin, name, value) in found {
            // Every text a call produces is redacted by replacing each secret value it
            // contains: a very short value would be found, and blanked, in unrelated text.
            let chars = value.chars().count();
            if chars < MIN_SECRET_CHARS {
                return Err(invalid(format!(
                    "{origin}: the secret `{name}` has {chars} characters; a secret needs at least {MIN_SECRET_CHARS} (a shorter one is guessable, and docket could not tell it apart from ordinary text when it keeps secrets out of logs)"
                )));
            }
            secrets.insert(name, value.as_str());
        }
        let mut adapters = BTreeMap::new();
        let mut adapter_limits = Vec::new();
        for (component, a) in raw.adapters {
            let rate = match &a.rate {
                None => None,
                Some(text) => Some(
                    text.parse::<crate::scheduler::Rate>()
                        .map_err(|e| invalid(format!("[adapters.{component}] rate: {e}")))?,
                ),
            };
            if a.max_in_flight == Some(0) {
                return Err(invalid(format!(
                    "[adapters.{component}] max_in_flight = 0 would never run its steps; give at least 1 (to stop an adapter, deactivate its versions)"
                )));
            }
            if a.max_in_flight.is_some() || rate.is_some() {
                adapter_limits.push(crate::scheduler::AdapterLimit {
                    adapter: component.clone(),
                    max_in_flight: a.max_in_flight,
                    rate,
                });
            }
            let allow_hosts = a
                .allow_hosts
                .iter()
                .map(|h| h.parse::<HostRule>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(format!("[adapters.{component}] allow_hosts: {e}")))?;
            let digests = a
                .digests
                .iter()
                .map(|d| {
                    let hex = d.strip_prefix("sha256:").unwrap_or_default();
                    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                        Ok(d.to_ascii_lowercase())
                    } else {
                        Err(invalid(format!(
                            "[adapters.{component}] digests: {d:?} is not `sha256:` and 64 hex digits; copy it from `docket adapter inspect` or `docket adapter list`"
                        )))
                    }
                })
                .collect::<Result<_, _>>()?;
            let webhook_key = match &a.webhook_secret {
                None => None,
                Some(name) => {
                    let at = format!("[adapters.{component}] webhook_secret");
                    let secret = secrets.get(name).ok_or_else(|| {
                        invalid(format!(
                            "{at}: secret {name:?} is not configured; add it under [secrets] values or through [secrets] env_prefix"
                        ))
                    })?;
                    let key = crate::notify::signing_key(secret.expose())
                        .map_err(|e| invalid(format!("{at}: secret {name:?}: {e}")))?;
                    Some(crate::capabilities::WebhookKey(key))
                }
            };
            adapters.insert(
                component,
                AdapterPolicy {
                    allow_hosts,
                    allow_secrets: a.allow_secrets.into_iter().collect(),
                    settings: a.settings,
                    digests,
                    allow_private: a.allow_private,
                    webhook_key,
                },
            );
        }
        let limits = &raw.limits;
        // A call's budget holds the host's reserve for its resources (8 MiB) besides the
        // guest's linear memory.
        let memory_mib = within(
            "memory_mib",
            limits.memory_mib.unwrap_or(128),
            16,
            16 * 1024,
        )?;
        let max_concurrent = within(
            "max_concurrent",
            limits
                .max_concurrent
                .unwrap_or(crate::scheduler::DEFAULT_MAX_CONCURRENT),
            1,
            10_000,
        )?;
        let max_body_bytes = within(
            "max_body_bytes",
            limits.max_body_bytes.unwrap_or(1 << 20),
            1024,
            1 << 30,
        )?;
        let lease = duration("lease", &limits.lease, Duration::from_secs(30))?;
        let idle_poll = duration("idle_poll", &limits.idle_poll, Duration::from_secs(1))?;
        // A lease must outlive its renewal round trips, and an idle host must sleep.
        at_least("lease", lease, Duration::from_millis(500))?;
        at_least("idle_poll", idle_poll, Duration::from_millis(10))?;
        let key_retention = duration(
            "key_retention",
            &limits.key_retention,
            Duration::from_secs(24 * 3600),
        )?;
        at_most("key_retention", key_retention, MAX_RETENTION)?;
        let notification_retention = duration(
            "notification_retention",
            &limits.notification_retention,
            Duration::from_secs(7 * 24 * 3600),
        )?;
        at_most(
            "notification_retention",
            notification_retention,
            MAX_RETENTION,
        )?;
        let max_connections = within(
            "max_connections",
            limits.max_connections.unwrap_or(1024),
            1,
            1_000_000,
        )?;
        let max_connections_per_client = within(
            "max_connections_per_client",
            limits
                .max_connections_per_client
                .unwrap_or((max_connections / 4).max(1)),
            1,
            max_connections,
        )?;
        let body_read_timeout = duration(
            "body_read_timeout",
            &limits.body_read_timeout,
            Duration::from_secs(60),
        )?;
        at_least(
            "body_read_timeout",
            body_read_timeout,
            Duration::from_millis(100),
        )?;
        let header_read_timeout = duration(
            "header_read_timeout",
            &limits.header_read_timeout,
            Duration::from_secs(10),
        )?;
        at_least(
            "header_read_timeout",
            header_read_timeout,
            Duration::from_millis(100),
        )?;
        at_most(
            "header_read_timeout",
            header_read_timeout,
            Duration::from_secs(600),
        )?;
        let check_interval = duration(
            "check_interval",
            &limits.check_interval,
            Duration::from_secs(3600),
        )?;
        at_least("check_interval", check_interval, Duration::from_secs(1))?;
        let workflow_retention = duration(
            "workflow_retention",
            &limits.workflow_retention,
            Duration::from_secs(30 * 24 * 3600),
        )?;
        at_least(
            "workflow_retention",
            workflow_retention,
            Duration::from_secs(60),
        )?;
        at_most("workflow_retention", workflow_retention, MAX_RETENTION)?;
        let environment = raw
            .environment
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| crate::catalog::DEFAULT_ENVIRONMENT.to_string());
        // Production runs only verified adapter versions unless told otherwise.
        let require_verified = raw.require_verified.unwrap_or(environment == PRODUCTION);
        let notifications = raw
            .notifications
            .iter()
            .enumerate()
            .map(|(i, n)| endpoint(i, n, &secrets).map_err(&invalid))
            .collect::<Result<Vec<_>, _>>()?;
        for (subject, weight) in &raw.fairness.weights {
            if !(1..=MAX_WEIGHT).contains(weight) {
                return Err(invalid(format!(
                    "[fairness] weights.{subject:?} = {weight} is outside 1..={MAX_WEIGHT}; a subject's weight is its share of the claims against others' (default 1)"
                )));
            }
        }
        Ok(Self {
            listen: raw.listen,
            metrics_listen: raw.metrics_listen,
            db: raw.db,
            workflows_configured: raw.workflows.is_some(),
            workflows: raw.workflows.unwrap_or_else(|| PathBuf::from("workflows")),
            components: raw.components,
            examples: raw.examples.unwrap_or(true),
            host_id: raw.host_id,
            environment,
            tokens: tokens(&raw.tokens).map_err(&invalid)?,
            api_uploads: raw.api_uploads.unwrap_or(true),
            require_verified,
            secrets,
            policy: HostPolicy { adapters },
            memory_cap_bytes: memory_mib << 20,
            max_concurrent,
            lease,
            idle_poll,
            unload_idle: duration(
                "unload_idle",
                &raw.limits.unload_idle,
                Duration::from_secs(60),
            )?,
            shutdown_grace: duration(
                "shutdown_grace",
                &raw.limits.shutdown_grace,
                Duration::from_secs(10),
            )?,
            key_retention,
            max_body_bytes,
            notifications,
            notification_retention,
            tls: raw.tls,
            behind_tls_proxy: raw.behind_tls_proxy.unwrap_or(false),
            proxies: proxy_trust(&raw.server).map_err(&invalid)?,
            outbound_ca_file: match raw.outbound_ca_file {
                Some(path) => {
                    // Read now: a bad file is a configuration error, not a failed webhook.
                    crate::outbound::tls_config(Some(&path))
                        .map_err(|e| invalid(format!("outbound_ca_file: {e}")))?;
                    Some(path)
                }
                None => None,
            },
            max_connections,
            max_connections_per_client,
            header_read_timeout,
            body_read_timeout,
            check_interval,
            workflow_retention,
            fairness_weights: raw.fairness.weights,
            adapter_limits,
        })
    }
}

/// `[server]`'s trusted proxies and client header, checked.
fn proxy_trust(raw: &ServerToml) -> Result<crate::access::ProxyTrust, String> {
    let proxies = raw
        .trusted_proxies
        .iter()
        .map(|p| {
            let p = p.trim();
            p.parse::<ipnet::IpNet>()
                .or_else(|_| p.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    format!(
                        "[server] trusted_proxies: `{p}` is neither an address nor a CIDR range (e.g. \"10.0.0.7\" or \"10.0.0.0/8\")"
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let header = raw.client_ip_header.as_deref().unwrap_or("x-forwarded-for");
    let header = http::HeaderName::from_bytes(header.trim().as_bytes()).map_err(|_| {
        format!(
            "[server] client_ip_header: `{header}` is not a header name (e.g. \"X-Forwarded-For\")"
        )
    })?;
    if raw.client_ip_header.is_some() && proxies.is_empty() {
        return Err(
            "[server] client_ip_header is set but trusted_proxies is empty: the header would be ignored; list the proxies that set it".into(),
        );
    }
    Ok(crate::access::ProxyTrust::new(proxies, header))
}

/// The configured tokens as digests with their principals: each from exactly one source,
/// with at least one role, none twice.
fn tokens(raw: &[TokenToml]) -> Result<Vec<TokenEntry>, String> {
    let mut out: Vec<TokenEntry> = Vec::new();
    for (i, t) in raw.iter().enumerate() {
        let at = format!("[[tokens]] #{} (subject {:?})", i + 1, t.subject);
        let sources = [
            t.token.is_some(),
            t.token_sha256.is_some(),
            t.token_file.is_some(),
            t.token_env.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err(format!(
                "{at}: give exactly one of `token`, `token_sha256`, `token_file` or `token_env`"
            ));
        }
        let plain = |token: &str, from: &str| -> Result<String, String> {
            let token = token.trim();
            if token.chars().count() < MIN_TOKEN_CHARS {
                return Err(format!(
                    "{at}: the token {from} has {} characters; use at least {MIN_TOKEN_CHARS} random ones, 128 bits or more (e.g. `openssl rand -hex 32`)",
                    token.chars().count()
                ));
            }
            let bits = crate::access::token_entropy_bits(token);
            if bits < crate::access::MIN_TOKEN_BITS {
                return Err(format!(
                    "{at}: the token {from} can hold at most about {bits:.0} bits of entropy (too few kinds of character, or too many repeated), under the 128 needed; use a random one (e.g. `openssl rand -hex 32`)"
                ));
            }
            Ok(crate::intent::sha256_digest(token.as_bytes()))
        };
        let digest = if let Some(token) = &t.token {
            plain(token, "in the file")?
        } else if let Some(d) = &t.token_sha256 {
            let hex = d.strip_prefix("sha256:").unwrap_or(d).to_ascii_lowercase();
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "{at}: token_sha256 must be `sha256:` and 64 hex digits (e.g. the output of `printf %s TOKEN | sha256sum`)"
                ));
            }
            format!("sha256:{hex}")
        } else if let Some(path) = &t.token_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("{at}: cannot read token_file {}: {e}", path.display()))?;
            plain(
                text.lines().next().unwrap_or_default(),
                &format!("in {}", path.display()),
            )?
        } else {
            let name = t.token_env.as_deref().unwrap_or_default();
            let value = std::env::var(name).map_err(|_| {
                format!("{at}: the environment variable {name} (token_env) is not set")
            })?;
            plain(&value, &format!("in ${name}"))?
        };
        let roles: Vec<Role> = t.role.iter().chain(t.roles.iter()).copied().collect();
        if roles.is_empty() {
            return Err(format!(
                "{at}: give the token a role: role = \"client\", \"operator\" or \"deployer\", or several as roles = [...]"
            ));
        }
        if t.subject.trim().is_empty() {
            return Err(format!(
                "{at}: the subject is empty; name who holds the token"
            ));
        }
        if let Some(twin) = out.iter().find(|e| e.digest == digest) {
            return Err(format!(
                "{at}: the same token is configured twice (also for subject {:?}); give each holder its own",
                twin.principal.subject.0
            ));
        }
        out.push(TokenEntry {
            digest,
            principal: Principal {
                subject: crate::intent::Subject(t.subject.clone()),
                roles: Roles::of(roles),
            },
        });
    }
    Ok(out)
}

/// The `i`-th `[[notifications]]` endpoint, its secret resolved into a signing key.
fn endpoint(
    i: usize,
    n: &NotificationToml,
    secrets: &SecretSource,
) -> Result<crate::notify::Endpoint, String> {
    use crate::notify::EventType;
    let at = format!("[[notifications]] #{} ({})", i + 1, n.url);
    let url = reqwest::Url::parse(&n.url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| {
            format!(
                "{at}: url {:?} is not an http(s) URL; write e.g. \"https://hooks.example.com/docket\"",
                n.url
            )
        })?;
    let events = match &n.events {
        None => EventType::ALL.into_iter().collect(),
        Some(names) => names
            .iter()
            .map(|name| {
                EventType::parse(name).ok_or_else(|| {
                    format!(
                        "{at}: event {name:?} is not one docket sends; choose from {}",
                        EventType::ALL.map(EventType::as_str).join(", ")
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let secret = secrets.get(&n.secret).ok_or_else(|| {
        format!(
            "{at}: secret {:?} is not configured; add it under [secrets] values or through [secrets] env_prefix",
            n.secret
        )
    })?;
    let key = crate::notify::signing_key(secret.expose())
        .map_err(|e| format!("{at}: secret {:?}: {e}", n.secret))?;
    let review_hold = match &n.review_hold {
        None => Duration::ZERO,
        Some(t) => humantime::parse_duration(t)
            .map_err(|e| format!("{at}: review_hold = {t:?}: {e}; write e.g. \"30s\""))?,
    };
    Ok(crate::notify::Endpoint {
        url: url.to_string(),
        events,
        secret_name: n.secret.clone(),
        key,
        review_hold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_named_with_their_line() {
        let Err(err) =
            HostConfig::parse_toml("docket.toml", "listen = \"127.0.0.1:1\"\nlistn = 3\n")
        else {
            panic!("an unknown field was accepted");
        };
        let text = err.to_string();
        assert!(
            text.contains("docket.toml: 2:1") && text.contains("listn"),
            "{text}"
        );
    }

    #[test]
    fn debug_never_shows_a_token_a_secret_or_a_password() {
        let raw = HostConfig::parse_toml(
            "docket.toml",
            r#"
            db = "postgres://docket:hunter2-password@db.internal/docket"
            [[tokens]]
            token = "tok-0123456789abcdefghij"
            subject = "alice"
            roles = ["operator", "deployer"]
            [secrets]
            values = { provider_token = "very-secret-value" }
            "#,
        )
        .unwrap();
        let c = HostConfig::from_toml("docket.toml", raw).unwrap();
        let shown = format!("{c:?}");
        for hidden in [
            "tok-0123456789abcdefghij",
            "very-secret-value",
            "hunter2-password",
            "sha256:",
        ] {
            assert!(!shown.contains(hidden), "{hidden} in {shown}");
        }
        assert!(
            shown.contains("alice") && shown.contains("operator, deployer"),
            "{shown}"
        );
    }

    #[test]
    fn tokens_and_an_empty_env_prefix_are_checked() {
        let load = |text: &str| {
            HostConfig::from_toml("c.toml", HostConfig::parse_toml("c.toml", text).unwrap())
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let token = |body: &str| format!("[[tokens]]\nsubject = \"s\"\n{body}\n");
        for (text, expect) in [
            (token("token = \"short\"\nrole = \"client\""), "at least 22"),
            (
                token("token = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nrole = \"client\""),
                "[[tokens]] #1 (subject \"s\"): the token in the file can hold at most about 64 bits",
            ),
            (
                "[server]\ntrusted_proxies = [\"10.0.0.0/33\"]\n".to_string(),
                "`10.0.0.0/33` is neither an address nor a CIDR range",
            ),
            (
                "[server]\nclient_ip_header = \"X-Real-IP\"\n".to_string(),
                "trusted_proxies is empty",
            ),
            (
                "outbound_ca_file = \"/nonexistent/ca.pem\"\n".to_string(),
                "cannot read the CA file /nonexistent/ca.pem",
            ),
            (token("role = \"client\""), "exactly one of"),
            (
                token("token = \"0123456789abcdefghijklmnop\""),
                "give the token a role",
            ),
            (
                token("token_sha256 = \"sha256:xyz\"\nrole = \"client\""),
                "64 hex digits",
            ),
            (
                format!(
                    "{}{}",
                    token("token = \"0123456789abcdefghijklmnop\"\nrole = \"client\""),
                    token("token = \"0123456789abcdefghijklmnop\"\nrole = \"operator\"")
                ),
                "configured twice",
            ),
            (
                "[secrets]\nenv_prefix = \"\"\n".to_string(),
                "every environment variable",
            ),
        ] {
            let err = load(&text).unwrap_err();
            assert!(err.contains(expect), "{text}: {err}");
        }
        let digest = crate::intent::sha256_digest(b"0123456789abcdefghijklmnop");
        assert_eq!(
            load(&token(&format!(
                "token_sha256 = {digest:?}\nrole = \"client\""
            ))),
            Ok(())
        );
    }

    #[test]
    fn a_full_config_parses() {
        let raw = HostConfig::parse_toml(
            "docket.toml",
            r#"
            listen = "127.0.0.1:8080"
            [[tokens]]
            token = "t1-0123456789abcdefghijk"
            subject = "alice"
            role = "client"
            [secrets]
            values = { provider_token = "abc-defg-hij" }
            [adapters.http-delivery]
            allow_hosts = ["http://127.0.0.1:8090"]
            allow_secrets = ["provider_token"]
            settings = { base_url = "http://127.0.0.1:8090" }
            [limits]
            lease = "5s"
            "#,
        )
        .unwrap();
        let c = HostConfig::from_toml("docket.toml", raw).unwrap();
        assert_eq!(c.lease, Duration::from_secs(5));
        assert!(c.policy.allows_host("http-delivery", "$base_url"));
        assert_eq!(
            c.secrets.get("provider_token").unwrap().expose(),
            "abc-defg-hij"
        );
        assert_eq!(c.tokens[0].principal, Principal::new("alice", Role::Client));
    }

    #[test]
    fn adapter_limits_are_read_and_checked() {
        let raw = HostConfig::parse_toml(
            "c.toml",
            "[adapters.mail]\nmax_in_flight = 5\nrate = \"100/s\"\n[adapters.sms]\nallow_hosts = []\n",
        )
        .unwrap();
        let config = HostConfig::from_toml("c.toml", raw).unwrap();
        assert_eq!(
            config.adapter_limits,
            vec![crate::scheduler::AdapterLimit {
                adapter: "mail".into(),
                max_in_flight: Some(5),
                rate: Some("100/s".parse().unwrap()),
            }]
        );
        for (line, expect) in [
            (
                "max_in_flight = 0",
                "[adapters.mail] max_in_flight = 0 would never run",
            ),
            (
                "rate = \"fast\"",
                "[adapters.mail] rate: \"fast\" is not a rate",
            ),
        ] {
            let raw =
                HostConfig::parse_toml("c.toml", &format!("[adapters.mail]\n{line}\n")).unwrap();
            let err = HostConfig::from_toml("c.toml", raw)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expect), "{line}: {err}");
        }
    }

    #[test]
    fn fairness_weights_are_read_and_checked() {
        let raw = HostConfig::parse_toml(
            "c.toml",
            "[fairness]\nweights = { \"team-a\" = 2, \"batch-jobs\" = 1 }\n",
        )
        .unwrap();
        let config = HostConfig::from_toml("c.toml", raw).unwrap();
        assert_eq!(
            config.fairness_weights,
            BTreeMap::from([("batch-jobs".into(), 1), ("team-a".into(), 2)])
        );
        for (weight, expect) in [
            ("0", "weights.\"team-a\" = 0 is outside 1..=1000"),
            ("1001", "weights.\"team-a\" = 1001 is outside 1..=1000"),
        ] {
            let raw = HostConfig::parse_toml(
                "c.toml",
                &format!("[fairness]\nweights = {{ \"team-a\" = {weight} }}\n"),
            )
            .unwrap();
            let err = HostConfig::from_toml("c.toml", raw)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expect), "{weight}: {err}");
        }
        let err = HostConfig::parse_toml("c.toml", "[fairness]\nweight = {}\n")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("weight"), "{err}");
    }

    #[test]
    fn limits_out_of_range_are_refused_with_the_range() {
        for (line, expect) in [
            (
                "max_concurrent = 0",
                "max_concurrent = 0 is outside 1..=10000",
            ),
            ("memory_mib = 0", "memory_mib = 0 is outside"),
            ("idle_poll = \"0s\"", "idle_poll = 0ns is too short"),
            ("lease = \"1ms\"", "lease = 1ms is too short"),
            ("key_retention = \"100years\"", "key_retention"),
            (
                "header_read_timeout = \"10ms\"",
                "header_read_timeout = 10ms is too short",
            ),
            ("header_read_timeout = \"1h\"", "header_read_timeout"),
            (
                "check_interval = \"10ms\"",
                "check_interval = 10ms is too short",
            ),
            (
                "workflow_retention = \"1s\"",
                "workflow_retention = 1s is too short",
            ),
        ] {
            let raw = HostConfig::parse_toml("c.toml", &format!("[limits]\n{line}\n")).unwrap();
            let err = HostConfig::from_toml("c.toml", raw)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expect), "{line}: {err}");
        }
    }

    #[test]
    fn a_short_secret_is_refused_by_name() {
        let raw =
            HostConfig::parse_toml("c.toml", "[secrets]\nvalues = { pin = \"1234\" }\n").unwrap();
        let err = HostConfig::from_toml("c.toml", raw)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("values.pin")
                && err.contains("4 characters")
                && err.contains("at least 8"),
            "{err}"
        );
        assert!(!err.contains("1234"), "the error shows the value: {err}");
    }

    #[test]
    fn bad_durations_and_hosts_say_how_to_fix_them() {
        let raw = HostConfig::parse_toml("c.toml", "[limits]\nlease = \"soon\"\n").unwrap();
        let err = HostConfig::from_toml("c.toml", raw)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"soon\"") && err.contains("30s"), "{err}");
        let raw = HostConfig::parse_toml("c.toml", "[adapters.x]\nallow_hosts = [\"ftp://h:1\"]\n")
            .unwrap();
        let err = HostConfig::from_toml("c.toml", raw)
            .unwrap_err()
            .to_string();
        assert!(err.contains("ftp://h:1"), "{err}");
    }

    #[test]
    fn a_webhook_secret_names_a_configured_signing_secret() {
        let load = |text: &str| {
            HostConfig::from_toml("c.toml", HostConfig::parse_toml("c.toml", text).unwrap())
        };
        let err = load("[adapters.x]\nwebhook_secret = \"events\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[adapters.x] webhook_secret") && err.contains("\"events\""),
            "{err}"
        );
        let err = load(
            "[secrets]\nvalues = { events = \"not-a-webhook-secret\" }\n[adapters.x]\nwebhook_secret = \"events\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("whsec_"), "{err}");
        let config = load(
            "[secrets]\nvalues = { events = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\" }\n[adapters.x]\nwebhook_secret = \"events\"\n",
        )
        .unwrap();
        let key = config.policy.adapter("x").webhook_key.expect("a key");
        assert_eq!(format!("{key:?}"), "WebhookKey(..)");
    }
}
