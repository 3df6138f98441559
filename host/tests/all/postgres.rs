//! Throwaway PostgreSQL databases for tests that run a real host on PostgreSQL.

use sqlx::{Connection, Executor, PgConnection};

const MISSING_URL: &str = "DOCKET_TEST_POSTGRES is not set, so the tests on PostgreSQL cannot \
run. Set it to the URL of a role that may create databases, e.g. \
postgres://docket:docket@127.0.0.1:5432/postgres, or run `bash scripts/test.sh`, which starts \
PostgreSQL, creates that role and sets the variable.";

/// A database of its own; [`TestDatabase::drop_now`] removes it.
pub struct TestDatabase {
    pub url: String,
    name: String,
    admin_url: String,
}

impl TestDatabase {
    pub async fn create() -> Self {
        let admin_url =
            std::env::var("DOCKET_TEST_POSTGRES").unwrap_or_else(|_| panic!("{MISSING_URL}"));
        let name = format!("docket_t_{:016x}", rand::random::<u64>());
        let mut admin = PgConnection::connect(&admin_url).await.unwrap_or_else(|e| {
            panic!("cannot connect to DOCKET_TEST_POSTGRES ({admin_url}): {e}")
        });
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        let (base, _) = admin_url
            .rsplit_once('/')
            .expect("a database URL with a path");
        Self {
            url: format!("{base}/{name}"),
            name,
            admin_url,
        }
    }

    /// Drops the database (its hosts must have stopped or be killed first).
    pub async fn drop_now(self) {
        if let Ok(mut admin) = PgConnection::connect(&self.admin_url).await {
            let _ = admin
                .execute(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                )))
                .await;
        }
    }
}
