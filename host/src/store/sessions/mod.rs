//! Console sessions, written once for every backend: started (dropping the expired),
//! found while unexpired, ended.

use super::plan::values;
use super::rows;
use super::tx::{Backend, Tx};
use super::{ConsoleSession, SessionStore, StoreResult};
use crate::intent::Millis;

/// The statements of console sessions. Parameters, in order:
/// - `expire`: now; `insert`: id digest, subject, role, CSRF token, started at, expires
///   at; `find`: id digest, now; `end`: id digest, now.
pub(crate) struct Sql {
    pub expire: &'static str,
    pub insert: &'static str,
    pub find: &'static str,
    pub end: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders).
pub(crate) const SQL: Sql = Sql {
    expire: "DELETE FROM console_sessions WHERE expires_at <= $1",
    insert: "INSERT INTO console_sessions (id_digest, subject, role, csrf, started_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
    find: "SELECT id_digest, subject, role, csrf, started_at, expires_at FROM console_sessions
           WHERE id_digest = $1 AND expires_at > $2",
    end: "DELETE FROM console_sessions WHERE id_digest = $1 OR expires_at <= $2",
};

async fn start<T: Tx>(tx: &mut T, s: &ConsoleSession) -> StoreResult<()> {
    let sql = &tx.sql().sessions;
    let (expire, insert) = (sql.expire, sql.insert);
    tx.exec(expire, &values![s.started_at as i64]).await?;
    tx.exec(
        insert,
        &values![
            &s.id_digest,
            &s.subject,
            &s.role,
            &s.csrf,
            s.started_at as i64,
            s.expires_at as i64,
        ],
    )
    .await?;
    Ok(())
}

async fn find<T: Tx>(
    tx: &mut T,
    (id, now): &(String, Millis),
) -> StoreResult<Option<ConsoleSession>> {
    let sql = tx.sql().sessions.find;
    tx.row(sql, &values![id, *now as i64], |r| rows::console_session(r))
        .await
}

async fn end<T: Tx>(tx: &mut T, (id, now): &(String, Millis)) -> StoreResult<()> {
    let sql = tx.sql().sessions.end;
    tx.exec(sql, &values![id, *now as i64]).await?;
    Ok(())
}

impl<B: Backend> SessionStore for B {
    async fn start_session(&self, s: ConsoleSession) -> StoreResult<()> {
        self.write(s, |tx, s| Box::pin(start(tx, s))).await
    }

    async fn session(&self, id_digest: &str, now: Millis) -> StoreResult<Option<ConsoleSession>> {
        self.read((id_digest.to_string(), now), |tx, a| Box::pin(find(tx, a)))
            .await
    }

    async fn end_session(&self, id_digest: &str, now: Millis) -> StoreResult<()> {
        self.write((id_digest.to_string(), now), |tx, a| Box::pin(end(tx, a)))
            .await
    }
}
