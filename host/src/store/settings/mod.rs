//! Settings that belong to the database rather than to one host, written once for every
//! backend: `require_verified` (read by the registry) and the environment the database
//! serves, recorded by the first host to start and moved only when a host is told to adopt
//! its own.

use super::plan::values;
use super::rows::Columns;
use super::tx::{Backend, Tx, Write};
use super::{EnvironmentRecord, SettingsStore, StoreError, StoreResult};
use crate::intent::{EventKind, Millis, NewEvent, WorkflowId};

/// The statements of settings. Parameters, in order:
/// - `get`: name; `set`: name, value, at;
/// - `unfinished` (workflows still running or waiting for a person): none.
pub(crate) struct Sql {
    pub get: &'static str,
    pub set: &'static str,
    pub unfinished: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders).
pub(crate) const SQL: Sql = Sql {
    get: "SELECT value FROM store_settings WHERE name = $1",
    set: "INSERT INTO store_settings (name, value, set_at) VALUES ($1, $2, $3)
          ON CONFLICT (name) DO UPDATE SET value = $2, set_at = $3",
    unfinished: "SELECT workflow_id FROM workflows WHERE state IN ('running', 'needs_review')
                 ORDER BY workflow_id",
};

/// The setting admission copies into each new workflow (see migration 0019): the
/// environment its idempotency keys are derived in.
const ENVIRONMENT: &str = "environment";

/// A setting's value, if the database has it.
pub(super) async fn get<T: Tx>(tx: &mut T, name: &str) -> StoreResult<Option<String>> {
    let sql = tx.sql().settings.get;
    tx.row(sql, &values![name], |r| r.text("value")).await
}

/// Writes a setting's value.
pub(super) async fn set<T: Tx>(
    tx: &mut T,
    name: &str,
    value: &str,
    now: Millis,
) -> StoreResult<()> {
    let sql = tx.sql().settings.set;
    tx.exec(sql, &values![name, value, now as i64]).await?;
    Ok(())
}

/// What a host starting with `configured` finds, and does when told to `adopt` it.
struct Start {
    configured: String,
    adopt: bool,
    host: String,
    now: Millis,
}

async fn record_environment<T: Tx>(tx: &mut T, s: &Start) -> StoreResult<EnvironmentRecord> {
    let recorded = get(tx, ENVIRONMENT).await?;
    match recorded {
        None => {
            set(tx, ENVIRONMENT, &s.configured, s.now).await?;
            Ok(EnvironmentRecord::First)
        }
        Some(recorded) if recorded == s.configured => Ok(EnvironmentRecord::Same),
        Some(recorded) if !s.adopt => Err(StoreError::EnvironmentChanged {
            recorded,
            configured: s.configured.clone(),
        }),
        Some(recorded) => {
            set(tx, ENVIRONMENT, &s.configured, s.now).await?;
            // Every workflow the host may now touch says so on its own timeline: its
            // keys stay those of the environment it was admitted in.
            let sql = tx.sql().settings.unfinished;
            let unfinished = tx.rows(sql, &values![], |r| r.text("workflow_id")).await?;
            let event = NewEvent {
                data: serde_json::json!({
                    "environment": {"from": recorded, "to": s.configured, "host": s.host},
                }),
                ..NewEvent::workflow(
                    EventKind::Action,
                    format!(
                        "Host {} adopted this database for environment `{}` (it was `{recorded}`); this workflow's idempotency keys stay those of the environment it was admitted in, and workflows admitted from now on derive theirs in `{}`",
                        s.host, s.configured, s.configured
                    ),
                )
            };
            let events = [event];
            for id in &unfinished {
                tx.apply(Write::AppendEvents {
                    workflow: &WorkflowId(id.clone()),
                    now: s.now,
                    events: &events,
                })
                .await?;
            }
            Ok(EnvironmentRecord::Adopted {
                from: recorded,
                workflows: unfinished.len(),
            })
        }
    }
}

impl<B: Backend> SettingsStore for B {
    async fn record_environment(
        &self,
        configured: String,
        adopt: bool,
        host: String,
        now: Millis,
    ) -> StoreResult<EnvironmentRecord> {
        let start = Start {
            configured,
            adopt,
            host,
            now,
        };
        self.write(start, |tx, s| Box::pin(record_environment(tx, s)))
            .await
    }

    async fn environment(&self) -> StoreResult<Option<String>> {
        self.read((), |tx, _| Box::pin(get(tx, ENVIRONMENT))).await
    }
}
