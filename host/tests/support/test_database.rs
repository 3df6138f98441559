//! Throwaway PostgreSQL databases for the tests on PostgreSQL, shared by every suite.
//! Each test gets a database of its own, created through `DOCKET_TEST_POSTGRES` (a role
//! that may create databases; `scripts/test.sh` starts PostgreSQL, creates it and sets the
//! variable) and dropped afterwards. Without the variable the tests fail, never skip.

use sqlx::{Connection, Executor, PgConnection};

const MISSING_URL: &str = "DOCKET_TEST_POSTGRES is not set, so the tests on PostgreSQL cannot \
run. Set it to the URL of a role that may create databases, e.g. \
postgres://docket:docket@127.0.0.1:5432/postgres, or run `bash scripts/test.sh`, which starts \
PostgreSQL, creates that role and sets the variable.";

/// A database of its own; [`TestDatabase::drop_now`] (or [`TestDatabase::drop_blocking`]
/// where nothing can be awaited) removes it.
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
        Self {
            url: database_url(&admin_url, &name),
            name,
            admin_url,
        }
    }

    /// Drops the database (its connections are ended).
    pub async fn drop_now(self) {
        drop_database(&self.admin_url, &self.name).await;
    }

    /// [`TestDatabase::drop_now`] from synchronous code (a `Drop`, an unwinding test): on a
    /// thread and runtime of its own.
    pub fn drop_blocking(&self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(drop_database(&admin_url, &name))
        })
        .join();
    }
}

async fn drop_database(admin_url: &str, name: &str) {
    match PgConnection::connect(admin_url).await {
        Ok(mut admin) => {
            if let Err(e) = admin
                .execute(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .await
            {
                eprintln!("could not drop the test database {name}: {e}");
            }
        }
        Err(e) => eprintln!("could not drop the test database {name}: {e}"),
    }
}

/// `url` with its database name replaced by `name` (query parameters kept).
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
