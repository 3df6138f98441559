//! Who is calling: bearer tokens mapped to a subject and a role, for every interface (the
//! API's requests and the console's sign-in).
//!
//! With tokens configured, a caller must present a known token. With none configured the
//! host is open: every caller is subject `local` with role `operator`. Refusing to listen
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

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Submits intents and reads its own subject's workflows.
    Client,
    /// Reads every workflow and may act on steps.
    Operator,
}

impl Role {
    /// The name as written in config and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Operator => "operator",
        }
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "client" => Ok(Role::Client),
            "operator" => Ok(Role::Operator),
            other => Err(format!(
                "`{other}` is not a role; use `client` or `operator`"
            )),
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub subject: Subject,
    pub role: Role,
}

impl Principal {
    /// The caller of an open API (no tokens configured).
    pub fn local() -> Self {
        Self {
            subject: Subject("local".to_string()),
            role: Role::Operator,
        }
    }

    /// Whether this caller may see a workflow owned by `owner`.
    pub fn can_see(&self, owner: &Subject) -> bool {
        self.role == Role::Operator || &self.subject == owner
    }
}

/// The token map. Cheap to clone.
#[derive(Clone, Default)]
pub struct Auth {
    /// Principals by the digest of their token.
    by_digest: Arc<HashMap<String, Principal>>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print token digests.
        f.debug_struct("Auth")
            .field("tokens", &self.by_digest.len())
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
        let by_digest = tokens
            .into_iter()
            .map(|(token, principal)| (sha256_digest(token.as_bytes()), principal))
            .collect();
        Self {
            by_digest: Arc::new(by_digest),
        }
    }

    /// Whether no tokens are configured (anyone who can connect is an operator).
    pub fn is_open(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// Whether `subject` holds the operator role under this configuration (for sessions
    /// that outlive a change of the token map).
    pub fn is_operator(&self, subject: &Subject) -> bool {
        if self.is_open() {
            return *subject == Principal::local().subject;
        }
        self.by_digest
            .values()
            .any(|p| p.role == Role::Operator && &p.subject == subject)
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
        self.by_digest
            .get(&sha256_digest(token.as_bytes()))
            .cloned()
            .ok_or(AuthError(
                "the bearer token is not one the host knows; use a token from the host's \
                 configuration",
            ))
    }
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
        Principal {
            subject: Subject("alice".into()),
            role: Role::Client,
        }
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
    fn clients_see_only_their_own_subject() {
        let bob = Subject("bob".into());
        assert!(!alice().can_see(&bob));
        assert!(alice().can_see(&Subject("alice".into())));
        assert!(Principal::local().can_see(&bob));
        assert_eq!("operator".parse::<Role>().unwrap(), Role::Operator);
        assert!("admin".parse::<Role>().unwrap_err().contains("`admin`"));
    }
}
