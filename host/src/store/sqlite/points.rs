//! Point reads on the request path (a key, a workflow, a definition), run inline.

use crate::store::{StoreError, StoreResult};
use rusqlite::Connection;
use std::path::Path;
use std::time::Duration;

/// Read connections for point reads on the request path (a key, a workflow). Such a read
/// takes microseconds and, in WAL mode, never waits for the writer, so it runs inline on
/// the caller's thread: handing it to a connection thread would cost more than the read.
pub(crate) struct PointReads {
    path: std::path::PathBuf,
    idle: std::sync::Mutex<Vec<Connection>>,
}

impl PointReads {
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` on an idle read connection (opening one if none is idle).
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => {
                let conn = Connection::open_with_flags(
                    &self.path,
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(|e| {
                    StoreError::safe(format!(
                        "cannot open `{}` for reading: {e}",
                        self.path.display()
                    ))
                })?;
                conn.busy_timeout(Duration::from_secs(10))?;
                conn
            }
        };
        let result = f(&mut conn);
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
        result
    }
}
