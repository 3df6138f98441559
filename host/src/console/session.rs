//! Operator sessions of the console: a random id in an `HttpOnly`, `SameSite=Strict`
//! cookie, and a per-session token that every form carries back (cross-site request
//! forgery protection that does not rely on the cookie's `SameSite` alone).
//!
//! Sessions live in this host's memory: signing in again is the cost of a restart.

use crate::api::Principal;
use axum::http::{HeaderMap, header};
use rand::RngCore;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const COOKIE: &str = "docket_console";
/// A session ends this long after it started.
const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Clears the session cookie.
pub const CLEAR_COOKIE: &str =
    "docket_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0";

/// A signed-in operator.
#[derive(Clone)]
pub struct Session {
    pub principal: Principal,
    pub csrf: String,
    started: Instant,
}

impl Session {
    /// Whether a submitted form token is this session's (compared in constant time).
    pub fn csrf_matches(&self, given: &str) -> bool {
        let (a, b) = (self.csrf.as_bytes(), given.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

/// 32 random bytes as hex.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

impl Sessions {
    /// Starts a session; returns the `Set-Cookie` value.
    pub fn start(&self, principal: Principal) -> String {
        let id = random_token();
        let session = Session {
            principal,
            csrf: random_token(),
            started: Instant::now(),
        };
        let mut all = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|_, s| s.started.elapsed() < LIFETIME);
        all.insert(id.clone(), session);
        format!(
            "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
            LIFETIME.as_secs()
        )
    }

    fn id(headers: &HeaderMap) -> Option<String> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == COOKIE)
            .map(|(_, value)| value.to_string())
    }

    /// The live session named by the request's cookie.
    pub fn of_request(&self, headers: &HeaderMap) -> Option<Session> {
        let id = Self::id(headers)?;
        let all = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        all.get(&id)
            .filter(|s| s.started.elapsed() < LIFETIME)
            .cloned()
    }

    /// Ends the request's session.
    pub fn end(&self, headers: &HeaderMap) {
        if let Some(id) = Self::id(headers) {
            self.by_id
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        }
    }
}
