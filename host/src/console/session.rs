//! Sessions of the console (operators and approvers): a random id in an `HttpOnly`, `SameSite=Strict`
//! cookie, and a per-session token that every form carries back (cross-site request
//! forgery protection that does not rely on the cookie's `SameSite` alone).
//!
//! Sessions are stored in the database ([`SessionStore`]) under the digest of the cookie's
//! value, so any host on it knows them — several hosts behind one address, or a restarted
//! one, do not sign the operator out — and the table holds nothing usable as a cookie.

use crate::access::{Auth, Principal, Role, Roles};
use crate::intent::{Millis, Subject, sha256_digest};
use crate::store::{ConsoleSession, SessionStore, StoreResult};
use axum::http::{HeaderMap, header};
use rand::RngCore;
use std::time::Duration;

const COOKIE: &str = "docket_console";
/// The cookie's name over TLS: the `__Host-` prefix makes browsers refuse it unless it is
/// `Secure`, for the whole host and set by the host itself.
const SECURE_COOKIE: &str = "__Host-docket_console";
/// A session ends this long after it started.
const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Clears the session cookie.
pub const CLEAR_COOKIE: &str =
    "docket_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0";
/// Clears the session cookie set over TLS.
pub const CLEAR_SECURE_COOKIE: &str =
    "__Host-docket_console=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0";

/// A signed-in operator.
#[derive(Clone)]
pub struct Session {
    pub principal: Principal,
    pub csrf: String,
}

impl Session {
    /// Whether a submitted form token is this session's (compared in constant time).
    pub fn csrf_matches(&self, given: &str) -> bool {
        let (a, b) = (self.csrf.as_bytes(), given.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// 32 random bytes as hex.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Starts a session for `principal`; returns the `Set-Cookie` value.
pub async fn start<S: SessionStore>(
    store: &S,
    principal: &Principal,
    now: Millis,
    secure: bool,
) -> StoreResult<String> {
    let id = random_token();
    store
        .start_session(ConsoleSession {
            id_digest: sha256_digest(id.as_bytes()),
            subject: principal.subject.0.clone(),
            // The console acts as an operator and as an approver, whatever else the token
            // may do: the roles it signed in with, as names separated by commas.
            role: console_roles(principal.roles).names().replace(' ', ""),
            csrf: random_token(),
            started_at: now,
            expires_at: now + LIFETIME.as_millis() as Millis,
        })
        .await?;
    Ok(if secure {
        format!(
            "{SECURE_COOKIE}={id}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={}",
            LIFETIME.as_secs()
        )
    } else {
        format!(
            "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
            LIFETIME.as_secs()
        )
    })
}

fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE || *name == SECURE_COOKIE)
        .map(|(_, value)| value.to_string())
}

/// The live session named by the request's cookie, if its subject is still an operator
/// under this host's tokens.
pub async fn of_request<S: SessionStore>(
    store: &S,
    auth: &Auth,
    headers: &HeaderMap,
    now: Millis,
) -> StoreResult<Option<Session>> {
    let Some(id) = cookie(headers) else {
        return Ok(None);
    };
    let Some(stored) = store.session(&sha256_digest(id.as_bytes()), now).await? else {
        return Ok(None);
    };
    let subject = Subject(stored.subject);
    // A session keeps only the roles its subject still holds under this host's tokens.
    let held = auth.roles_of(&subject);
    let roles = Roles::of(
        stored
            .role
            .split(',')
            .filter_map(|r| r.trim().parse::<Role>().ok())
            .filter(|r| held.has(*r)),
    );
    if console_roles(roles) == Roles::default() {
        return Ok(None);
    }
    Ok(Some(Session {
        principal: Principal {
            subject,
            roles: console_roles(roles),
        },
        csrf: stored.csrf,
    }))
}

/// The roles the console acts under: an operator's and an approver's.
pub fn console_roles(roles: Roles) -> Roles {
    Roles::of(
        [Role::Operator, Role::Approver]
            .into_iter()
            .filter(|r| roles.has(*r)),
    )
}

/// Ends the request's session.
pub async fn end<S: SessionStore>(store: &S, headers: &HeaderMap, now: Millis) -> StoreResult<()> {
    match cookie(headers) {
        Some(id) => store.end_session(&sha256_digest(id.as_bytes()), now).await,
        None => Ok(()),
    }
}
