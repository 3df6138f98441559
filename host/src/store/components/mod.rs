//! Component bytes and the adapter registry, written once for every backend: a version is
//! stored once under its digest; which version of a name is active changes only by a
//! recorded activation or rollback, one after the other.

pub(crate) mod sqlite;

use super::plan::values;
use super::records::verdicts_text;
use super::rows::{self, Columns};
use super::tx::{Backend, Tx};
use super::{
    ActiveChange, ActiveComponent, ActiveOutcome, ActiveTarget, ComponentEvent, ComponentStore,
    NewComponent, StoreError, StoreResult, StoredComponent, Verification,
};
use crate::intent::Millis;

/// The statements of the registry. Parameters, in order:
/// - `insert` (does nothing when the digest is stored): digest, name, version, kind,
///   bytes, size, registered at;
/// - `insert_event`: name, version, digest, action, author, at;
/// - `all`, `active_each`, `verifications`: none; `bytes`: digest;
/// - `active` (locks the name's row where the database can): name;
/// - `version_of`: digest, name;
/// - `previous` (the last other version activated or rolled back to): name, the digest
///   now active;
/// - `activate`: name, digest, since;
/// - `insert_verification`: digest, name, version, passed, verdicts, author, verified at;
/// - `events` (newest first): name or NULL, limit;
/// - `latest_passed` (the latest verdict's `passed`): digest;
/// - `kind_of`: digest;
/// - `never_verified` (active versions of a kind without any verdict): kind.
pub(crate) struct Sql {
    pub insert: &'static str,
    pub insert_event: &'static str,
    pub all: &'static str,
    pub bytes: &'static str,
    pub active: &'static str,
    pub version_of: &'static str,
    pub previous: &'static str,
    pub activate: &'static str,
    pub active_each: &'static str,
    pub insert_verification: &'static str,
    pub verifications: &'static str,
    pub events: &'static str,
    pub latest_passed: &'static str,
    pub kind_of: &'static str,
    pub never_verified: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders); a
/// backend's module beside this one replaces the few that backend writes its own way.
pub(crate) const SQL: Sql = Sql {
    insert: "INSERT INTO components (digest, name, version, kind, bytes, size_bytes,
                 registered_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (digest) DO NOTHING",
    insert_event: "INSERT INTO component_events (name, version, digest, action, author, at)
                   VALUES ($1, $2, $3, $4, $5, $6)",
    all: "SELECT digest, name, version, kind, size_bytes, registered_at
          FROM components ORDER BY registered_at, digest",
    bytes: "SELECT bytes FROM components WHERE digest = $1",
    // Concurrent changes of one name apply one after the other.
    active: "SELECT digest, since FROM active_components WHERE name = $1 FOR UPDATE",
    version_of: "SELECT version FROM components WHERE digest = $1 AND name = $2",
    previous: "SELECT digest FROM component_events
               WHERE name = $1 AND action IN ('activated', 'rolled_back') AND digest <> $2
               ORDER BY seq DESC LIMIT 1",
    activate: "INSERT INTO active_components (name, digest, since) VALUES ($1, $2, $3)
               ON CONFLICT (name) DO UPDATE SET digest = $2, since = $3",
    active_each: "SELECT a.name, c.version, a.digest, a.since
                  FROM active_components a JOIN components c ON c.digest = a.digest
                  ORDER BY a.name",
    insert_verification: "INSERT INTO component_verifications
                              (digest, name, version, passed, verdicts, author, verified_at)
                          VALUES ($1, $2, $3, $4, $5, $6, $7)",
    verifications: "SELECT digest, name, version, passed, verdicts, author, verified_at
                    FROM component_verifications v
                    WHERE seq = (SELECT MAX(seq) FROM component_verifications
                                 WHERE digest = v.digest)
                    ORDER BY name, version",
    events: "SELECT seq, name, version, digest, action, author, at FROM component_events
             WHERE CAST($1 AS TEXT) IS NULL OR name = $1 ORDER BY seq DESC LIMIT $2",
    latest_passed: "SELECT passed FROM component_verifications WHERE digest = $1
                    ORDER BY seq DESC LIMIT 1",
    kind_of: "SELECT kind FROM components WHERE digest = $1",
    never_verified: "SELECT a.name, c.version, a.digest, a.since
                     FROM active_components a JOIN components c ON c.digest = a.digest
                     WHERE c.kind = $1 AND NOT EXISTS (SELECT 1 FROM component_verifications v
                                       WHERE v.digest = a.digest)
                     ORDER BY a.name",
};

/// The setting that makes every activation need a passing verdict.
const REQUIRE_VERIFIED: &str = "require_verified";

/// The verdict that marks a version active when `require_verified` came into force: it
/// keeps running and is shown for what it is, never as verified.
pub const GRANDFATHERED: &str = "grandfathered";

/// Whether activations need a passing verdict, as the database records it.
async fn verified_required<T: Tx>(tx: &mut T) -> StoreResult<bool> {
    Ok(super::settings::get(tx, REQUIRE_VERIFIED)
        .await?
        .is_some_and(|v| v == "true"))
}

/// The kind of component whose contract `docket adapter verify` proves; a handler is pure
/// and declares nothing to prove.
const VERIFIED_KIND: &str = "adapter";

/// Refuses to make adapter `digest` active unless its latest verdict passed, when the
/// database requires it.
async fn check_verified<T: Tx>(
    tx: &mut T,
    name: &str,
    version: &str,
    digest: &str,
) -> StoreResult<()> {
    if !verified_required(tx).await? {
        return Ok(());
    }
    let kind_of = tx.sql().components.kind_of;
    let kind = tx
        .row(kind_of, &values![digest], |r| r.text("kind"))
        .await?;
    if kind.as_deref() != Some(VERIFIED_KIND) {
        return Ok(());
    }
    let sql = tx.sql().components.latest_passed;
    let passed = tx
        .row(sql, &values![digest], |r| r.flag("passed"))
        .await?
        .unwrap_or(false);
    if passed {
        Ok(())
    } else {
        Err(StoreError::Unverified {
            name: name.to_string(),
            version: version.to_string(),
        })
    }
}

/// Records whether activations need a passing verdict; when they start to, marks each
/// active version that was never verified as grandfathered (and returns them).
async fn require_verified<T: Tx>(
    tx: &mut T,
    (on, author, now): &(bool, String, Millis),
) -> StoreResult<Vec<ActiveComponent>> {
    let sql = &tx.sql().components;
    let (never_verified, insert_verification) = (sql.never_verified, sql.insert_verification);
    let was = verified_required(tx).await?;
    let value = if *on { "true" } else { "false" };
    super::settings::set(tx, REQUIRE_VERIFIED, value, *now).await?;
    if !*on || was {
        return Ok(Vec::new());
    }
    let active = tx
        .rows(never_verified, &values![VERIFIED_KIND], |r| {
            rows::active_component(r)
        })
        .await?;
    let verdicts = verdicts_text(&[(
        GRANDFATHERED.to_string(),
        "active when require_verified came into force; never verified".to_string(),
    )]);
    for a in &active {
        tx.exec(
            insert_verification,
            &values![
                &a.digest,
                &a.name,
                &a.version,
                false,
                &verdicts,
                author,
                *now as i64,
            ],
        )
        .await?;
    }
    Ok(active)
}

async fn store<T: Tx>(tx: &mut T, c: &NewComponent) -> StoreResult<bool> {
    let sql = &tx.sql().components;
    let (insert, insert_event) = (sql.insert, sql.insert_event);
    let added = tx
        .exec(
            insert,
            &values![
                &c.digest,
                &c.name,
                &c.version,
                &c.kind,
                &c.bytes,
                c.bytes.len() as i64,
                c.registered_at as i64,
            ],
        )
        .await?;
    if added == 1 {
        tx.exec(
            insert_event,
            &values![
                &c.name,
                &c.version,
                &c.digest,
                "deployed",
                &c.author,
                c.registered_at as i64,
            ],
        )
        .await?;
    }
    Ok(added == 1)
}

async fn version_of<T: Tx>(tx: &mut T, name: &str, digest: &str) -> StoreResult<Option<String>> {
    let sql = tx.sql().components.version_of;
    tx.row(sql, &values![digest, name], |r| r.text("version"))
        .await
}

/// A registry change (see [`ComponentStore::set_active`]).
async fn set_active<T: Tx>(tx: &mut T, change: &ActiveChange) -> StoreResult<ActiveOutcome> {
    let name = change.name.as_str();
    let sql = &tx.sql().components;
    let (active, previous, activate, insert_event) =
        (sql.active, sql.previous, sql.activate, sql.insert_event);
    let current = tx
        .row(active, &values![name], |r| {
            Ok((r.text("digest")?, r.int("since")?))
        })
        .await?;
    let before = match (&change.target, &current) {
        (ActiveTarget::Previous, Some((now_active, _))) => {
            tx.row(previous, &values![name, now_active], |r| r.text("digest"))
                .await?
        }
        _ => None,
    };
    let (digest, action) = match active_change(change, current.as_ref(), before)? {
        ActivePlan::Keep { digest, since } => {
            let version = version_of(tx, name, &digest).await?;
            return kept(name, version, digest, since);
        }
        ActivePlan::Switch { digest, action } => (digest, action),
    };
    let version = version_of(tx, name, &digest)
        .await?
        .ok_or_else(|| unknown_version(name, &digest))?;
    check_verified(tx, name, &version, &digest).await?;
    tx.exec(activate, &values![name, &digest, change.now as i64])
        .await?;
    tx.exec(
        insert_event,
        &values![
            name,
            &version,
            &digest,
            action,
            &change.author,
            change.now as i64,
        ],
    )
    .await?;
    Ok(switched(change, version, digest, current))
}

async fn record_verification<T: Tx>(tx: &mut T, v: &Verification) -> StoreResult<()> {
    let sql = tx.sql().components.insert_verification;
    let verdicts = verdicts_text(&v.verdicts);
    tx.exec(
        sql,
        &values![
            &v.digest,
            &v.name,
            &v.version,
            v.passed,
            &verdicts,
            &v.author,
            v.verified_at as i64,
        ],
    )
    .await?;
    Ok(())
}

async fn all<T: Tx>(tx: &mut T, _: &()) -> StoreResult<Vec<StoredComponent>> {
    let sql = tx.sql().components.all;
    tx.rows(sql, &[], |r| rows::stored_component(r)).await
}

async fn bytes<T: Tx>(tx: &mut T, digest: &String) -> StoreResult<Option<Vec<u8>>> {
    let sql = tx.sql().components.bytes;
    tx.row(sql, &values![digest], |r| r.bytes("bytes")).await
}

async fn active_each<T: Tx>(tx: &mut T, _: &()) -> StoreResult<Vec<ActiveComponent>> {
    let sql = tx.sql().components.active_each;
    tx.rows(sql, &[], |r| rows::active_component(r)).await
}

async fn verifications<T: Tx>(tx: &mut T, _: &()) -> StoreResult<Vec<Verification>> {
    let sql = tx.sql().components.verifications;
    tx.rows(sql, &[], |r| rows::verification(r)).await
}

async fn events<T: Tx>(
    tx: &mut T,
    (name, limit): &(Option<String>, u32),
) -> StoreResult<Vec<ComponentEvent>> {
    let sql = tx.sql().components.events;
    tx.rows(sql, &values![name.as_deref(), i64::from(*limit)], |r| {
        rows::component_event(r)
    })
    .await
}

impl<B: Backend> ComponentStore for B {
    async fn adapter_states(&self, now: Millis) -> StoreResult<Vec<crate::store::AdapterState>> {
        self.read(now, |tx, now| Box::pin(crate::store::gates::view(tx, now)))
            .await
    }

    async fn store_component(&self, c: NewComponent) -> StoreResult<bool> {
        self.write(c, |tx, c| Box::pin(store(tx, c))).await
    }

    async fn stored_components(&self) -> StoreResult<Vec<StoredComponent>> {
        self.read((), |tx, a| Box::pin(all(tx, a))).await
    }

    async fn component_bytes(&self, digest: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read(digest.to_string(), |tx, d| Box::pin(bytes(tx, d)))
            .await
    }

    async fn set_active(&self, change: ActiveChange) -> StoreResult<ActiveOutcome> {
        self.write(change, |tx, c| Box::pin(set_active(tx, c)))
            .await
    }

    async fn active_components(&self) -> StoreResult<Vec<ActiveComponent>> {
        self.read((), |tx, a| Box::pin(active_each(tx, a))).await
    }

    async fn record_verification(&self, v: Verification) -> StoreResult<()> {
        self.write(v, |tx, v| Box::pin(record_verification(tx, v)))
            .await
    }

    async fn verifications(&self) -> StoreResult<Vec<Verification>> {
        self.read((), |tx, a| Box::pin(verifications(tx, a))).await
    }

    async fn require_verified(
        &self,
        on: bool,
        author: String,
        now: Millis,
    ) -> StoreResult<Vec<ActiveComponent>> {
        self.write((on, author, now), |tx, a| Box::pin(require_verified(tx, a)))
            .await
    }

    async fn component_events(
        &self,
        name: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<ComponentEvent>> {
        self.read((name.map(str::to_string), limit), |tx, a| {
            Box::pin(events(tx, a))
        })
        .await
    }
}

/// What an activation or rollback does.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ActivePlan {
    /// Nothing changes: this digest stays active (since the given time).
    Keep { digest: String, since: i64 },
    /// This digest becomes active, recorded as `action` (`activated`, `rolled_back`).
    Switch {
        digest: String,
        action: &'static str,
    },
}

/// Decides a change of the active version from the one active now (`current`: digest and
/// since) and, for a rollback, the one active before it.
fn active_change(
    change: &ActiveChange,
    current: Option<&(String, i64)>,
    before: Option<String>,
) -> StoreResult<ActivePlan> {
    let name = &change.name;
    match (&change.target, current) {
        (ActiveTarget::IfNone(_), Some((digest, since))) => Ok(ActivePlan::Keep {
            digest: digest.clone(),
            since: *since,
        }),
        (ActiveTarget::Digest(target), Some((digest, since))) if target == digest => {
            Ok(ActivePlan::Keep {
                digest: digest.clone(),
                since: *since,
            })
        }
        (ActiveTarget::IfNone(d) | ActiveTarget::Digest(d), _) => Ok(ActivePlan::Switch {
            digest: d.clone(),
            action: "activated",
        }),
        (ActiveTarget::Previous, None) => Err(StoreError::NotFound(format!(
            "active version of `{name}` to roll back from"
        ))),
        (ActiveTarget::Previous, Some(_)) => match before {
            Some(digest) => Ok(ActivePlan::Switch {
                digest,
                action: "rolled_back",
            }),
            None => Err(StoreError::NotFound(format!(
                "earlier active version of `{name}` to roll back to"
            ))),
        },
    }
}

/// The answer of an activation that kept the active version.
fn kept(
    name: &str,
    version: Option<String>,
    digest: String,
    since: i64,
) -> StoreResult<ActiveOutcome> {
    Ok(ActiveOutcome {
        active: ActiveComponent {
            name: name.to_string(),
            version: version.unwrap_or_default(),
            digest,
            since: super::rows::unsigned("since", since)?,
        },
        previous: None,
        changed: false,
    })
}

/// The answer of an activation that switched versions.
fn switched(
    change: &ActiveChange,
    version: String,
    digest: String,
    current: Option<(String, i64)>,
) -> ActiveOutcome {
    ActiveOutcome {
        active: ActiveComponent {
            name: change.name.clone(),
            version,
            digest,
            since: change.now,
        },
        previous: current.map(|(d, _)| d),
        changed: true,
    }
}

/// A version the registry is asked to activate but does not hold.
fn unknown_version(name: &str, digest: &str) -> StoreError {
    StoreError::NotFound(format!("deployed version of `{name}` with digest {digest}"))
}
