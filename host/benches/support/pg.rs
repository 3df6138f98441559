//! Statements a bench runs on the PostgreSQL server it was given, for its own database.

/// Runs `sql` (a `CREATE` or `DROP DATABASE`) through a new connection to `admin`, again
/// after a pause while it fails: `DROP … WITH (FORCE)` ends the bench's own sessions but may
/// not end an autovacuum worker busy in the database (a superuser's process), which is
/// soon done.
pub async fn admin(admin: &str, sql: &str) {
    use sqlx::{Connection, Executor};
    let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
    let mut tries = 0;
    while let Err(e) = conn.execute(sqlx::AssertSqlSafe(sql.to_string())).await {
        tries += 1;
        assert!(tries < 60, "`{sql}` kept failing: {e}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}
