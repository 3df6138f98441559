//! Who is calling: bearer tokens mapped to a subject and a role, for every interface (the
//! API's requests and the console's sign-in).
//!
//! With tokens configured, a caller must present a known token. With none configured the
//! host is open: every caller is subject `local` holding every role. Refusing to listen
//! on anything but loopback in that case is the composition root's job; [`Auth::is_open`]
//! tells it.
//!
//! Tokens are kept only as SHA-256 digests, and looked up by the digest of the presented
//! token, so neither a memory dump nor lookup timing reveals a usable token.

use crate::intent::{Subject, sha256_digest};
use http::{HeaderMap, header};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Why a caller is not authenticated; the message says what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub &'static str);

/// A failed authentication as the caller is answered: refused (`401`), or refused and
/// told to wait (`429`) after too many failures from its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    Refused(AuthError),
    Throttled(std::time::Duration),
}

/// The role matrix: what each role may do, as the API enforces it and the README and
/// `docs/roles.md` write it down. A token may hold several roles.
pub const MATRIX: &[(&str, &[Role])] = &[
    ("submit an intent, read it by key", &[Role::Client]),
    (
        "list and read workflows (a client only its own subject's)",
        &[Role::Client, Role::Operator],
    ),
    (
        "cancel, revise or replace a workflow (a client only its own)",
        &[Role::Client, Role::Operator],
    ),
    (
        "act on steps, extend budgets, read notifications, providers' evidence and /metrics, use the console",
        &[Role::Operator],
    ),
    (
        "deploy, activate and roll back adapters; deploy policies",
        &[Role::Deployer],
    ),
    (
        "approve or reject an approval step (where it names approvers, only they), and read the workflows one may approve",
        &[Role::Approver],
    ),
];

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Submits intents and reads, cancels and corrects its own subject's workflows.
    Client,
    /// Reads every workflow and may act on steps, exceptions and budgets.
    Operator,
    /// Deploys, activates and rolls back adapters, and deploys policies: the code and the
    /// rules that run with the host's grants.
    Deployer,
    /// Approves or rejects the consequence an approval step asks about.
    Approver,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Client, Role::Operator, Role::Deployer, Role::Approver];

    /// The name as written in config and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Operator => "operator",
            Role::Deployer => "deployer",
            Role::Approver => "approver",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The roles a token holds (one or several).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Roles(u8);

impl Roles {
    pub fn of(roles: impl IntoIterator<Item = Role>) -> Self {
        Self(roles.into_iter().fold(0, |bits, r| bits | r.bit()))
    }

    pub fn has(self, role: Role) -> bool {
        self.0 & role.bit() != 0
    }

    /// "operator, deployer".
    pub fn names(self) -> String {
        Role::ALL
            .into_iter()
            .filter(|r| self.has(*r))
            .map(Role::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl From<Role> for Roles {
    fn from(role: Role) -> Self {
        Self::of([role])
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "client" => Ok(Role::Client),
            "operator" => Ok(Role::Operator),
            "deployer" => Ok(Role::Deployer),
            "approver" => Ok(Role::Approver),
            other => Err(format!(
                "`{other}` is not a role; use `client`, `operator`, `deployer` or `approver`"
            )),
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub subject: Subject,
    pub roles: Roles,
}

impl Principal {
    /// A caller holding `roles`.
    pub fn new(subject: impl Into<String>, roles: impl Into<Roles>) -> Self {
        Self {
            subject: Subject(subject.into()),
            roles: roles.into(),
        }
    }

    /// The caller of an open API (no tokens configured): every role.
    pub fn local() -> Self {
        Self::new("local", Roles::of(Role::ALL))
    }

    /// Whether the caller holds `role`.
    pub fn has(&self, role: Role) -> bool {
        self.roles.has(role)
    }

    /// Whether this caller may see a workflow owned by `owner`: an operator any, a client
    /// its own subject's ([`MATRIX`]).
    pub fn can_see(&self, owner: &Subject) -> bool {
        self.has(Role::Operator) || (self.has(Role::Client) && &self.subject == owner)
    }
}

/// The token map. Cheap to clone.
#[derive(Clone, Default)]
pub struct Auth {
    /// Principals by the digest of their token; replaced whole by a reload (SIGHUP).
    by_digest: Arc<std::sync::RwLock<Arc<HashMap<String, Principal>>>>,
    /// Failed authentications by client, shared by the API and the console.
    pub throttle: Throttle,
    /// Which peers may name the client (the throttle's key).
    pub proxies: Arc<ProxyTrust>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print token digests.
        f.debug_struct("Auth")
            .field("tokens", &self.tokens().len())
            .finish()
    }
}

impl Auth {
    /// No tokens: every caller is [`Principal::local`].
    pub fn open() -> Self {
        Self::default()
    }

    /// Tokens mapped to principals. An empty map is the same as [`Auth::open`].
    pub fn with_tokens(tokens: impl IntoIterator<Item = (String, Principal)>) -> Self {
        Self::with_digests(
            tokens
                .into_iter()
                .map(|(token, principal)| (sha256_digest(token.as_bytes()), principal)),
        )
    }

    /// Token digests (`sha256:<hex>`, as [`sha256_digest`] writes them) mapped to
    /// principals: the configuration need not hold the tokens themselves.
    pub fn with_digests(digests: impl IntoIterator<Item = (String, Principal)>) -> Self {
        Self {
            by_digest: Arc::new(std::sync::RwLock::new(Arc::new(
                digests.into_iter().collect(),
            ))),
            throttle: Throttle::default(),
            proxies: Arc::default(),
        }
    }

    /// The same tokens, with `proxies` trusted to name the client.
    pub fn trusting(mut self, proxies: ProxyTrust) -> Self {
        self.proxies = Arc::new(proxies);
        self
    }

    /// Authenticates a request from `peer`; a failure is counted against the real client
    /// and, past the throttle's limit, answered with the wait instead.
    pub fn authenticate_from(
        &self,
        headers: &HeaderMap,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Principal, AuthFailure> {
        self.authenticate(headers).map_err(|e| {
            let throttled = peer
                .map(|peer| self.proxies.client_ip(peer, headers))
                .and_then(|client| self.throttle.failed(client).err());
            match throttled {
                Some(wait) => AuthFailure::Throttled(wait),
                None => AuthFailure::Refused(e),
            }
        })
    }

    fn tokens(&self) -> Arc<HashMap<String, Principal>> {
        self.by_digest
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `other`'s tokens in force for every request from now on (a rotation); the
    /// failure counts stay.
    pub fn replace(&self, other: &Auth) {
        let tokens = other.tokens();
        *self.by_digest.write().unwrap_or_else(|e| e.into_inner()) = tokens;
    }

    /// Whether no tokens are configured (anyone who can connect is an operator).
    pub fn is_open(&self) -> bool {
        self.tokens().is_empty()
    }

    /// Whether `subject` holds the operator role under this configuration (for sessions
    /// that outlive a change of the token map).
    pub fn is_operator(&self, subject: &Subject) -> bool {
        self.roles_of(subject).has(Role::Operator)
    }

    /// Every role `subject` holds under this configuration, over all its tokens.
    pub fn roles_of(&self, subject: &Subject) -> Roles {
        if self.is_open() {
            return if *subject == Principal::local().subject {
                Principal::local().roles
            } else {
                Roles::default()
            };
        }
        Roles::of(
            self.tokens()
                .values()
                .filter(|p| &p.subject == subject)
                .flat_map(|p| Role::ALL.into_iter().filter(|r| p.has(*r))),
        )
    }

    /// The caller named by the request's `Authorization` header.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthError> {
        if self.is_open() {
            return Ok(Principal::local());
        }
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Err(AuthError(
                "this request has no `Authorization` header; send `Authorization: Bearer <token>` \
                 with a token from the host's configuration",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(AuthError(
                "the `Authorization` header is not of the form `Bearer <token>`; send \
                 `Authorization: Bearer <token>`",
            ))?;
        self.tokens()
            .get(&sha256_digest(token.as_bytes()))
            .cloned()
            .ok_or(AuthError(
                "the bearer token is not one the host knows; use a token from the host's \
                 configuration",
            ))
    }
}

/// The address a request came from, as the listener saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub std::net::SocketAddr);

/// Which peers are proxies whose word on the client's address is believed
/// (`[server] trusted_proxies`, `client_ip_header`). With none, the client is the socket
/// peer; a header from anyone else is ignored, since any client can write it.
#[derive(Debug, Clone)]
pub struct ProxyTrust {
    proxies: Vec<ipnet::IpNet>,
    header: http::HeaderName,
}

impl Default for ProxyTrust {
    fn default() -> Self {
        Self {
            proxies: Vec::new(),
            header: http::HeaderName::from_static("x-forwarded-for"),
        }
    }
}

impl ProxyTrust {
    /// Proxies (addresses or CIDR ranges) whose `header` names the client.
    pub fn new(proxies: Vec<ipnet::IpNet>, header: http::HeaderName) -> Self {
        Self { proxies, header }
    }

    /// Whether `ip` is one of the trusted proxies.
    pub fn is_trusted(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.proxies.iter().any(|net| net.contains(&ip))
    }

    /// The real client of a request from `peer`: the peer itself unless it is a trusted
    /// proxy; then the right-most address of the header's list that is not a trusted proxy
    /// (addresses left of it were written by the client and prove nothing).
    pub fn client_ip(&self, peer: std::net::IpAddr, headers: &HeaderMap) -> std::net::IpAddr {
        if !self.is_trusted(peer) {
            return peer;
        }
        let mut client = peer;
        for value in headers.get_all(&self.header) {
            let Ok(list) = value.to_str() else {
                return peer;
            };
            for hop in list.split(',').rev() {
                let Some(ip) = parse_hop(hop) else {
                    return client;
                };
                client = ip;
                if !self.is_trusted(ip) {
                    return ip;
                }
            }
        }
        client
    }
}

/// One hop of a forwarding header: `203.0.113.7`, `2001:db8::1`, `[2001:db8::1]:443` or
/// `203.0.113.7:5000`.
fn parse_hop(hop: &str) -> Option<std::net::IpAddr> {
    let hop = hop.trim();
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Ok(addr) = hop.parse::<std::net::SocketAddr>() {
        return Some(addr.ip());
    }
    hop.strip_prefix('[')
        .and_then(|rest| rest.split(']').next())
        .and_then(|ip| ip.parse().ok())
}

/// Failed authentications per client address: after [`Throttle::MAX_FAILURES`] within
/// [`Throttle::WINDOW`], the client's further *failed* attempts are answered `429` until
/// the window has passed. A valid token is always answered normally — a shared address
/// (a proxy, a NAT) must not let one caller lock out the others; the tokens' entropy is
/// the defence against guessing, this only slows a noisy guesser.
#[derive(Clone, Default)]
pub struct Throttle {
    failures: Arc<std::sync::Mutex<HashMap<std::net::IpAddr, (std::time::Instant, u32)>>>,
}

impl Throttle {
    pub const MAX_FAILURES: u32 = 10;
    pub const WINDOW: std::time::Duration = std::time::Duration::from_secs(60);
    /// Most clients remembered at once; past it, expired windows are dropped and, if none
    /// has expired, a new client is not counted (it is never refused for want of room).
    pub const MAX_CLIENTS: usize = 10_000;

    /// Counts one failed authentication of `client`; `Err` with the wait once it has failed
    /// too often lately.
    pub fn failed(&self, client: std::net::IpAddr) -> Result<(), std::time::Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if !failures.contains_key(&client) && failures.len() >= Self::MAX_CLIENTS {
            // Only when full: a failure costs a lookup, not a scan.
            failures.retain(|_, (since, _)| since.elapsed() < Self::WINDOW);
            if failures.len() >= Self::MAX_CLIENTS {
                return Ok(());
            }
        }
        let entry = failures
            .entry(client)
            .or_insert_with(|| (std::time::Instant::now(), 0));
        if entry.0.elapsed() >= Self::WINDOW {
            *entry = (std::time::Instant::now(), 0);
        }
        entry.1 = entry.1.saturating_add(1);
        if entry.1 > Self::MAX_FAILURES {
            Err(Self::WINDOW.saturating_sub(entry.0.elapsed()))
        } else {
            Ok(())
        }
    }

    /// How many clients are remembered.
    pub fn clients(&self) -> usize {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

/// Roughly how many bits of entropy `token` can hold: its length times the bits of the
/// alphabet its character classes span (lower case, upper case, digits, other). A guess at
/// an upper bound, enough to refuse `password1` and `ops-token-1`.
pub fn token_entropy_bits(token: &str) -> f64 {
    let has = |f: fn(&char) -> bool| token.chars().any(|c| f(&c));
    let mut alphabet = 0u32;
    if has(char::is_ascii_lowercase) {
        alphabet += 26;
    }
    if has(char::is_ascii_uppercase) {
        alphabet += 26;
    }
    if has(char::is_ascii_digit) {
        alphabet += 10;
    }
    if has(|c| !c.is_ascii_alphanumeric()) {
        alphabet += 33;
    }
    let distinct = token
        .chars()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    // A token of one repeated character holds no more than its distinct characters say.
    let alphabet = alphabet.min(distinct.max(1) as u32 * 4).max(1);
    token.chars().count() as f64 * f64::from(alphabet).log2()
}

/// The least entropy a configured token may have.
pub const MIN_TOKEN_BITS: f64 = 128.0;

/// Why a request is refused before anyone looks at its credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestRefusal {
    /// Open mode answers only to loopback names: another `Host` is a page that rebound its
    /// DNS name to this machine (`421`).
    Misdirected(String),
    /// A state-changing request sent by a page of another site (`403`).
    CrossSite(String),
}

impl RequestRefusal {
    pub fn message(&self) -> &str {
        match self {
            RequestRefusal::Misdirected(m) | RequestRefusal::CrossSite(m) => m,
        }
    }
}

/// Whether `host` (a `Host` header: name or address, with an optional port) names this
/// machine's loopback interface.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        // `[::1]:8080`
        rest.split(']').next().unwrap_or_default()
    } else if host.matches(':').count() > 1 {
        host
    } else {
        host.split(':').next().unwrap_or_default()
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// The checks a browser's ambient authority calls for, before credentials: in open mode a
/// `Host` that is not a loopback name; on a state-changing request an `Origin` that is not
/// this host's own, or `Sec-Fetch-Site: cross-site`. Clients that are not browsers send
/// neither header and pass.
pub fn check_request(
    open: bool,
    method: &http::Method,
    headers: &HeaderMap,
) -> Result<(), RequestRefusal> {
    // A `Host` that is not text names no loopback interface: it is refused like any
    // other name, not passed as if absent.
    let host = headers
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"))
        .map(str::trim);
    if open && let Some(host) = host.filter(|h| !is_loopback_host(h)) {
        return Err(RequestRefusal::Misdirected(format!(
            "this host has no tokens, so it answers only to loopback names (localhost, 127.0.0.1, [::1]), not `{}`; configure [[tokens]] to serve other names",
            host.escape_debug()
        )));
    }
    let safe = matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    );
    if safe {
        return Ok(());
    }
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    if fetch_site.as_deref() == Some("cross-site") {
        return Err(RequestRefusal::CrossSite(
            "a page of another site sent this request (Sec-Fetch-Site: cross-site); docket does not act on requests from other sites".into(),
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default().trim();
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'))
            .unwrap_or_default();
        let same = host.is_some_and(|h| !authority.is_empty() && authority.eq_ignore_ascii_case(h));
        if !same {
            return Err(RequestRefusal::CrossSite(format!(
                "a page of another origin (`{}`) sent this request; docket acts only on requests from its own pages or from clients that are not browsers",
                origin.escape_debug()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        h
    }

    fn alice() -> Principal {
        Principal::new("alice", Role::Client)
    }

    #[test]
    fn open_auth_makes_everyone_a_local_operator() {
        let auth = Auth::open();
        assert!(auth.is_open());
        assert_eq!(
            auth.authenticate(&headers(None)).unwrap(),
            Principal::local()
        );
        assert_eq!(
            auth.authenticate(&headers(Some("Bearer x"))).unwrap(),
            Principal::local()
        );
    }

    #[test]
    fn tokens_map_to_principals() {
        let auth = Auth::with_tokens([("s3cret".to_string(), alice())]);
        assert!(!auth.is_open());
        assert_eq!(
            auth.authenticate(&headers(Some("Bearer s3cret"))).unwrap(),
            alice()
        );
        assert_eq!(
            auth.authenticate(&headers(Some("bearer  s3cret ")))
                .unwrap(),
            alice()
        );
        for bad in [
            None,
            Some("Bearer nope"),
            Some("Basic s3cret"),
            Some("Bearer "),
            Some("s3cret"),
        ] {
            let err = auth.authenticate(&headers(bad)).unwrap_err();
            assert!(!err.0.contains("s3cret"), "{bad:?}");
        }
        assert!(!format!("{auth:?}").contains("sha256"));
    }

    #[test]
    fn open_mode_answers_only_to_loopback_names() {
        for good in [
            "localhost",
            "localhost:8080",
            "app.localhost:1",
            "127.0.0.1:8080",
            "127.1.2.3",
            "[::1]:8080",
            "::1",
        ] {
            assert!(is_loopback_host(good), "{good}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.1",
            "[::2]:80",
            "",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
        let mut h = HeaderMap::new();
        h.insert(
            header::HOST,
            HeaderValue::from_static("rebound.example:8080"),
        );
        let refused = check_request(true, &http::Method::GET, &h).unwrap_err();
        assert!(matches!(refused, RequestRefusal::Misdirected(_)));
        assert_eq!(check_request(false, &http::Method::GET, &h), Ok(()));
    }

    #[test]
    fn state_changes_from_other_sites_are_refused() {
        let post = http::Method::POST;
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert_eq!(check_request(true, &post, &h), Ok(()), "no browser headers");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert_eq!(check_request(true, &post, &h), Ok(()), "its own page");
        for origin in ["https://evil.example", "null", "http://127.0.0.1:9999"] {
            h.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
            assert!(
                matches!(
                    check_request(false, &post, &h),
                    Err(RequestRefusal::CrossSite(_))
                ),
                "{origin}"
            );
            assert_eq!(
                check_request(true, &http::Method::GET, &h),
                Ok(()),
                "reads pass"
            );
        }
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(check_request(false, &post, &h).is_err());
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert_eq!(check_request(false, &post, &h), Ok(()));
    }

    #[test]
    fn repeated_failures_from_one_client_are_throttled() {
        let t = Throttle::default();
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..Throttle::MAX_FAILURES {
            assert_eq!(t.failed(a), Ok(()));
        }
        assert!(t.failed(a).is_err());
        assert_eq!(t.failed(b), Ok(()), "another client is not affected");
    }

    /// Behind one address (a proxy, a NAT), a caller with a valid token is answered
    /// normally however many failures others sent from there.
    #[test]
    fn a_valid_token_is_never_throttled() {
        let auth = Auth::with_tokens([("s3cret".to_string(), alice())]);
        let shared = Some("192.0.2.1".parse().unwrap());
        for _ in 0..Throttle::MAX_FAILURES {
            assert!(matches!(
                auth.authenticate_from(&headers(Some("Bearer guess")), shared),
                Err(AuthFailure::Refused(_))
            ));
        }
        assert!(matches!(
            auth.authenticate_from(&headers(Some("Bearer guess")), shared),
            Err(AuthFailure::Throttled(_))
        ));
        assert_eq!(
            auth.authenticate_from(&headers(Some("Bearer s3cret")), shared),
            Ok(alice())
        );
    }

    /// The map holds at most `MAX_CLIENTS`; a client past it is not counted (never refused
    /// for want of room), and nothing is scanned while there is room.
    #[test]
    fn the_throttle_remembers_a_bounded_number_of_clients() {
        let t = Throttle::default();
        for i in 0..Throttle::MAX_CLIENTS as u32 + 50 {
            let ip = std::net::IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert_eq!(t.failed(ip), Ok(()));
        }
        assert_eq!(t.clients(), Throttle::MAX_CLIENTS);
    }

    /// Only a trusted proxy's header names the client, read from the right past trusted
    /// hops; anyone else's header is ignored.
    #[test]
    fn the_client_is_named_only_by_trusted_proxies() {
        let trust = ProxyTrust::new(
            vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
            http::HeaderName::from_static("x-forwarded-for"),
        );
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("1.2.3.4, 203.0.113.9, 10.1.1.1"),
        );
        let proxy: std::net::IpAddr = "10.0.0.5".parse().unwrap();
        let stranger: std::net::IpAddr = "198.51.100.2".parse().unwrap();
        assert_eq!(
            trust.client_ip(proxy, &h),
            "203.0.113.9".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(trust.client_ip(stranger, &h), stranger);
        assert_eq!(trust.client_ip(proxy, &HeaderMap::new()), proxy);
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("[2001:db8::7]:443"),
        );
        assert_eq!(
            trust.client_ip("::1".parse().unwrap(), &h),
            "2001:db8::7".parse::<std::net::IpAddr>().unwrap()
        );
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("not an address"),
        );
        assert_eq!(trust.client_ip(proxy, &h), proxy);
    }

    #[test]
    fn token_entropy_refuses_short_or_repetitive_tokens() {
        for weak in ["ops-token-0123456789", "password1", &"a".repeat(40)] {
            assert!(token_entropy_bits(weak) < MIN_TOKEN_BITS, "{weak}");
        }
        for strong in [
            "Zk3x9Qm2Lp7Vw4Rt8Ny6Hb",           // 22 base64 characters
            "9f86d081884c7d659a2feaa0c55ad015", // 32 hex digits
            "client-token-0123456789",
        ] {
            assert!(token_entropy_bits(strong) >= MIN_TOKEN_BITS, "{strong}");
        }
    }

    /// A deployer-only token sees no workflow, not even one of its own subject's: reading
    /// workflows is a client's (its own) or an operator's.
    #[test]
    fn only_clients_and_operators_see_workflows() {
        let deployer = Principal::new("alice", Role::Deployer);
        assert!(!deployer.can_see(&Subject("alice".into())));
        let operator = Principal::new("ops", Role::Operator);
        assert!(operator.can_see(&Subject("alice".into())));
    }

    #[test]
    fn clients_see_only_their_own_subject() {
        let bob = Subject("bob".into());
        assert!(!alice().can_see(&bob));
        assert!(alice().can_see(&Subject("alice".into())));
        assert!(Principal::local().can_see(&bob));
        assert_eq!("operator".parse::<Role>().unwrap(), Role::Operator);
        assert!("admin".parse::<Role>().unwrap_err().contains("`admin`"));
        let local = Principal::local();
        assert!(Role::ALL.iter().all(|r| local.has(*r)));
        let both = Roles::of([Role::Operator, Role::Deployer]);
        assert!(both.has(Role::Deployer) && !both.has(Role::Client));
        assert_eq!(both.names(), "operator, deployer");
    }
}
