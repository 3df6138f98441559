//! The two backends under test, each in a throwaway database.

use docket::store::postgres::PgStore;
use docket::store::sqlite::SqliteStore;
use docket::store::{
    AdmissionStore, BudgetStore, ComponentStore, CourseStore, DefinitionStore, ExecutorStore,
    NotificationStore, OperatorStore, ReadStore, SessionStore, SettingsStore,
};
use std::future::Future;

/// Every store role at once: what a backend must implement.
pub trait Store:
    DefinitionStore
    + BudgetStore
    + AdmissionStore
    + ReadStore
    + ExecutorStore
    + OperatorStore
    + CourseStore
    + ComponentStore
    + SessionStore
    + NotificationStore
    + SettingsStore
    + Clone
    + 'static
{
}

impl<T> Store for T where
    T: DefinitionStore
        + BudgetStore
        + ComponentStore
        + AdmissionStore
        + ReadStore
        + ExecutorStore
        + OperatorStore
        + CourseStore
        + SessionStore
        + NotificationStore
        + SettingsStore
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

/// Runs `case` against a PostgreSQL store in a database of its own, dropped afterwards
/// (also when the case fails).
pub async fn with_postgres<F, Fut>(case: F)
where
    F: FnOnce(PgStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    on_postgres(case, false).await
}

/// [`with_postgres`], the store writing each finish and new intent on its own
/// ([`PgStore::one_at_a_time`]).
pub async fn with_postgres_one_at_a_time<F, Fut>(case: F)
where
    F: FnOnce(PgStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    on_postgres(case, true).await
}

async fn on_postgres<F, Fut>(case: F, one_at_a_time: bool)
where
    F: FnOnce(PgStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let database = crate::postgres::TestDatabase::create().await;
    let mut store = PgStore::connect(&database.url)
        .await
        .expect("connecting to the test database");
    if one_at_a_time {
        store = store.one_at_a_time();
    }
    // A spawned task turns a failing case into a JoinError, so the database is dropped
    // before the failure is passed on.
    let outcome = tokio::spawn(case(store.clone())).await;
    store.close().await;
    database.drop_now().await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
