//! Deployed workflow definitions, written once for every backend: a version is stored once
//! and never changes.

use super::plan::values;
use super::rows::{self, Columns};
use super::tx::{Backend, Tx};
use super::{
    DefinitionStore, DeployOutcome, NewDefinition, StoreError, StoreResult, StoredDefinition,
};

/// The statements of definitions. Parameters, in order:
/// - `insert` (does nothing when the version exists): name, version, digest, source,
///   deployed at;
/// - `digest`, `find`: name, version; `latest`: name; `latest_each`: none.
pub(crate) struct Sql {
    pub insert: &'static str,
    pub digest: &'static str,
    pub find: &'static str,
    pub latest: &'static str,
    pub latest_each: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders).
pub(crate) const SQL: Sql = Sql {
    insert: "INSERT INTO definitions (name, version, digest, source, deployed_at)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name, version) DO NOTHING",
    digest: "SELECT digest FROM definitions WHERE name = $1 AND version = $2",
    find: "SELECT name, version, digest, source, deployed_at FROM definitions
           WHERE name = $1 AND version = $2",
    latest: "SELECT name, version, digest, source, deployed_at FROM definitions
             WHERE name = $1 ORDER BY version DESC LIMIT 1",
    latest_each: "SELECT name, version, digest, source, deployed_at FROM definitions d
                  WHERE version = (SELECT MAX(version) FROM definitions WHERE name = d.name)
                  ORDER BY name",
};

async fn deploy<T: Tx>(tx: &mut T, def: &NewDefinition) -> StoreResult<DeployOutcome> {
    let sql = &tx.sql().definitions;
    let (insert, digest) = (sql.insert, sql.digest);
    // The primary key settles racing deploys: the loser reads the winner's digest.
    let inserted = tx
        .exec(
            insert,
            &values![
                &def.name,
                i64::from(def.version),
                &def.digest,
                &def.source,
                def.deployed_at as i64,
            ],
        )
        .await?;
    if inserted == 1 {
        return Ok(DeployOutcome::Deployed);
    }
    let existing = tx
        .row(digest, &values![&def.name, i64::from(def.version)], |r| {
            r.text("digest")
        })
        .await?
        .ok_or_else(|| StoreError::Corrupt("a deployed definition vanished".into()))?;
    if existing == def.digest {
        Ok(DeployOutcome::Unchanged)
    } else {
        Err(StoreError::DefinitionChanged {
            name: def.name.clone(),
            version: def.version,
            existing,
            new: def.digest.clone(),
        })
    }
}

async fn find<T: Tx>(
    tx: &mut T,
    (name, version): &(String, u32),
) -> StoreResult<Option<StoredDefinition>> {
    let sql = tx.sql().definitions.find;
    tx.row(sql, &values![name, i64::from(*version)], |r| {
        rows::definition(r)
    })
    .await
}

async fn latest<T: Tx>(tx: &mut T, name: &String) -> StoreResult<Option<StoredDefinition>> {
    let sql = tx.sql().definitions.latest;
    tx.row(sql, &values![name], |r| rows::definition(r)).await
}

async fn latest_each<T: Tx>(tx: &mut T, _: &()) -> StoreResult<Vec<StoredDefinition>> {
    let sql = tx.sql().definitions.latest_each;
    tx.rows(sql, &[], |r| rows::definition(r)).await
}

impl<B: Backend> DefinitionStore for B {
    async fn deploy_definition(&self, def: NewDefinition) -> StoreResult<DeployOutcome> {
        self.write(def, |tx, def| Box::pin(deploy(tx, def))).await
    }

    async fn definition(&self, name: &str, version: u32) -> StoreResult<Option<StoredDefinition>> {
        self.read((name.to_string(), version), |tx, a| Box::pin(find(tx, a)))
            .await
    }

    async fn latest_definition(&self, name: &str) -> StoreResult<Option<StoredDefinition>> {
        // On every admission: on SQLite a point read, never a hand-off to another thread.
        self.read(name.to_string(), |tx, name| Box::pin(latest(tx, name)))
            .await
    }

    async fn latest_definitions(&self) -> StoreResult<Vec<StoredDefinition>> {
        self.read((), |tx, a| Box::pin(latest_each(tx, a))).await
    }
}
