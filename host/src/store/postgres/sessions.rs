//! Console sessions ([`SessionStore`]).

use super::PgStore;
use crate::intent::Millis;
use crate::store::rows;
use crate::store::{ConsoleSession, SessionStore, StoreResult};

impl SessionStore for PgStore {
    async fn start_session(&self, s: ConsoleSession) -> StoreResult<()> {
        sqlx::query("DELETE FROM console_sessions WHERE expires_at <= $1")
            .bind(s.started_at as i64)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "INSERT INTO console_sessions (id_digest, subject, role, csrf, started_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&s.id_digest)
        .bind(&s.subject)
        .bind(&s.role)
        .bind(&s.csrf)
        .bind(s.started_at as i64)
        .bind(s.expires_at as i64)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn session(&self, id_digest: &str, now: Millis) -> StoreResult<Option<ConsoleSession>> {
        let row =
            sqlx::query("SELECT * FROM console_sessions WHERE id_digest = $1 AND expires_at > $2")
                .bind(id_digest)
                .bind(now as i64)
                .fetch_optional(&self.pool)
                .await?;
        row.as_ref().map(rows::console_session).transpose()
    }

    async fn end_session(&self, id_digest: &str, now: Millis) -> StoreResult<()> {
        sqlx::query("DELETE FROM console_sessions WHERE id_digest = $1 OR expires_at <= $2")
            .bind(id_digest)
            .bind(now as i64)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
