//! The writer's statement profile, for finding where a write-bound host spends its time:
//! with `DOCKET_SQLITE_PROFILE=<seconds>` set, the writer sums SQLite's own timing of each
//! statement it runs (`sqlite3_trace_v2` profile events) and the jobs of each commit, and
//! logs the costliest statements every that many seconds. Off, it costs nothing.

use rusqlite::Connection;
use rusqlite::trace::{TraceEvent, TraceEventCodes};
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Statements shown per report.
const TOP: usize = 20;

/// What one writer thread has measured since its last report.
#[derive(Default)]
struct Window {
    /// Per statement text: runs and nanoseconds.
    statements: HashMap<String, (u64, u64)>,
    commits: u64,
    jobs: u64,
}

thread_local! {
    static WINDOW: RefCell<Window> = RefCell::default();
}

fn record(event: TraceEvent<'_>) {
    if let TraceEvent::Profile(stmt, took) = event {
        let sql = stmt.sql();
        let text: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        WINDOW.with(|w| {
            let mut w = w.borrow_mut();
            let entry = w.statements.entry(text).or_default();
            entry.0 += 1;
            entry.1 += took.as_nanos() as u64;
        });
    }
}

/// The writer's profile, when one was asked for.
pub(super) struct Profile {
    every: Duration,
    since: Instant,
}

impl Profile {
    /// Starts profiling `conn` on this thread when `DOCKET_SQLITE_PROFILE` names a period.
    pub(super) fn from_env(conn: &Connection) -> Option<Self> {
        let seconds: f64 = std::env::var("DOCKET_SQLITE_PROFILE").ok()?.parse().ok()?;
        Some(Self::start(conn, Duration::from_secs_f64(seconds.max(0.1))))
    }

    /// Profiles `conn` on this thread, reporting every `every`.
    fn start(conn: &Connection, every: Duration) -> Self {
        conn.trace_v2(TraceEventCodes::SQLITE_TRACE_PROFILE, Some(record));
        Self {
            every,
            since: Instant::now(),
        }
    }

    /// Counts a commit of `jobs` jobs, and reports when the period has passed.
    pub(super) fn committed(&mut self, jobs: usize) {
        WINDOW.with(|w| {
            let mut w = w.borrow_mut();
            w.commits += 1;
            w.jobs += jobs as u64;
        });
        if self.since.elapsed() >= self.every {
            tracing::warn!("{}", self.report());
        }
    }

    /// What was measured since the last report, costliest statement first; starts anew.
    fn report(&mut self) -> String {
        let window = WINDOW.with(|w| std::mem::take(&mut *w.borrow_mut()));
        let wall = self.since.elapsed();
        self.since = Instant::now();
        let total: u64 = window.statements.values().map(|(_, ns)| ns).sum();
        let mut rows: Vec<_> = window.statements.into_iter().collect();
        rows.sort_by_key(|row| std::cmp::Reverse(row.1.1));
        let mut out = format!(
            "writer profile over {:.1} s: statements took {:.2} s; {} commits of {:.1} jobs on average\n",
            wall.as_secs_f64(),
            total as f64 / 1e9,
            window.commits,
            window.jobs as f64 / window.commits.max(1) as f64,
        );
        for (sql, (runs, ns)) in rows.into_iter().take(TOP) {
            let shown: String = sql.chars().take(160).collect();
            out.push_str(&format!(
                "  {:5.1} %  {runs:7} runs  {:8.1} µs each  {shown}\n",
                ns as f64 * 100.0 / total.max(1) as f64,
                ns as f64 / 1e3 / runs.max(1) as f64,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_each_statement_with_its_runs_and_the_jobs_per_commit() {
        let conn = Connection::open_in_memory().unwrap();
        let mut profile = Profile::start(&conn, Duration::from_secs(3600));
        conn.execute_batch("CREATE TABLE t (n INTEGER)").unwrap();
        for n in 0..3 {
            conn.execute("INSERT INTO t (n) VALUES (?1)", [n]).unwrap();
        }
        profile.committed(4);
        profile.committed(2);
        let report = profile.report();
        assert!(
            report.contains("2 commits of 3.0 jobs on average"),
            "{report}"
        );
        assert!(
            report.contains("3 runs") && report.contains("INSERT INTO t (n) VALUES (?1)"),
            "{report}"
        );
        // The window starts anew.
        assert!(
            profile.report().contains("0 commits"),
            "{}",
            profile.report()
        );
    }
}
