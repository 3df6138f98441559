//! The two backends under test, each in a throwaway database.

use docket::store::postgres::PgStore;
use docket::store::sqlite::SqliteStore;
use docket::store::{
    AdmissionStore, ComponentStore, DefinitionStore, ExecutorStore, OperatorStore, ReadStore,
};
use sqlx::{Connection, Executor, PgConnection};
use std::future::Future;

/// Every store role at once: what a backend must implement.
pub trait Store:
    DefinitionStore
    + AdmissionStore
    + ReadStore
    + ExecutorStore
    + OperatorStore
    + ComponentStore
    + Clone
    + 'static
{
}

impl<T> Store for T where
    T: DefinitionStore
        + ComponentStore
        + AdmissionStore
        + ReadStore
        + ExecutorStore
        + OperatorStore
        + Clone
        + 'static
{
}

/// Runs `case` against a SQLite store in a temporary directory.
pub async fn with_sqlite<F, Fut>(case: F)
where
    F: FnOnce(SqliteStore) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(&dir.path().join("docket.db"))
        .await
        .expect("opening a SQLite store");
    case(store).await;
}

const MISSING_URL: &str = "DOCKET_TEST_POSTGRES is not set, so the PostgreSQL half of the store \
conformance suite cannot run. Set it to the URL of a role that may create databases, e.g. \
postgres://docket:docket@127.0.0.1:5432/postgres, or run `bash scripts/test.sh`, which starts \
PostgreSQL, creates that role and sets the variable.";

/// Runs `case` against a PostgreSQL store in a database of its own, dropped afterwards
/// (also when the case fails).
pub async fn with_postgres<F, Fut>(case: F)
where
    F: FnOnce(PgStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let admin_url =
        std::env::var("DOCKET_TEST_POSTGRES").unwrap_or_else(|_| panic!("{MISSING_URL}"));
    let name = format!("docket_t_{:016x}", rand::random::<u64>());
    let mut admin = PgConnection::connect(&admin_url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to DOCKET_TEST_POSTGRES ({admin_url}): {e}"));
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await
        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
    let store = PgStore::connect(&database_url(&admin_url, &name))
        .await
        .expect("connecting to the test database");
    // A spawned task turns a failing case into a JoinError, so the database is dropped
    // before the failure is passed on.
    let outcome = tokio::spawn(case(store.clone())).await;
    store.close().await;
    if let Err(e) = admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .await
    {
        eprintln!("could not drop the test database {name}: {e}");
    }
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// `url` with its database name replaced by `name`.
fn database_url(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}
