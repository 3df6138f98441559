//! Console sessions ([`SessionStore`]): written through the writer, read as point reads.

use super::{SqliteStore, each_row};
use crate::intent::Millis;
use crate::store::rows;
use crate::store::{ConsoleSession, SessionStore, StoreResult};
use rusqlite::params;

impl SessionStore for SqliteStore {
    async fn start_session(&self, s: ConsoleSession) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                conn.prepare_cached("DELETE FROM console_sessions WHERE expires_at <= ?")?
                    .execute([s.started_at as i64])?;
                conn.prepare_cached(
                    "INSERT INTO console_sessions
                       (id_digest, subject, role, csrf, started_at, expires_at)
                     VALUES (?, ?, ?, ?, ?, ?)",
                )?
                .execute(params![
                    &s.id_digest,
                    &s.subject,
                    &s.role,
                    &s.csrf,
                    s.started_at as i64,
                    s.expires_at as i64
                ])?;
                Ok(())
            })
            .await
    }

    async fn session(&self, id_digest: &str, now: Millis) -> StoreResult<Option<ConsoleSession>> {
        self.points.with(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT * FROM console_sessions WHERE id_digest = ? AND expires_at > ?",
            )?;
            Ok(each_row(&mut stmt, params![id_digest, now as i64], |r| {
                rows::console_session(r)
            })?
            .pop())
        })
    }

    async fn end_session(&self, id_digest: &str, now: Millis) -> StoreResult<()> {
        let id_digest = id_digest.to_string();
        self.writer
            .write(move |conn| {
                conn.prepare_cached(
                    "DELETE FROM console_sessions WHERE id_digest = ? OR expires_at <= ?",
                )?
                .execute(params![id_digest, now as i64])?;
                Ok(())
            })
            .await
    }
}
