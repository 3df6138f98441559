//! Stores written by earlier releases open under this one: a migration keeps what the store
//! held and says plainly what it cannot recover.
//!
//! Each case builds the older store the way that release left it — the migrations up to
//! its version, then rows as it wrote them — and opens it with the current store, which
//! applies the rest. Both backends.

use docket::intent::WorkflowId;
use docket::store::postgres::PgStore;
use docket::store::sqlite::SqliteStore;
use docket::store::{CourseStore, ReadStore};
use sqlx::migrate::Migrator;
use sqlx::{Connection, Executor};
use std::borrow::Cow;

/// The migrations up to `version` only: the schema an earlier release left.
fn up_to(mut migrator: Migrator, version: i64) -> Migrator {
    migrator.migrations = Cow::Owned(
        migrator
            .migrations
            .iter()
            .filter(|m| m.version <= version)
            .cloned()
            .collect(),
    );
    migrator
}

/// What a release before migration 16 wrote: `wf_revised` was corrected once, which
/// overwrote revision 1's text in its row; `wf_plain` never was. `wf_revised`'s first
/// attempt ran before the correction, its second after.
const BEFORE_16: &[&str] = &[
    "INSERT INTO workflows (workflow_id, workflow, definition_version, subject,
         idempotency_key, input, input_digest, state, created_at, deadline_at,
         key_retention_ms, input_revision)
     VALUES ('wf_revised', 'letters', 1, 'alice', 'k-1', '{\"title\":\"Fixed\"}',
             'sha256:two', 'running', 1000, 9000000, 86400000, 2),
            ('wf_plain', 'letters', 1, 'alice', 'k-2', '{\"title\":\"Plain\"}',
             'sha256:plain', 'running', 1100, 9000000, 86400000, 1)",
    "INSERT INTO steps (workflow_id, step, state) VALUES
         ('wf_revised', 'send', 'running'), ('wf_plain', 'send', 'ready')",
    "INSERT INTO revisions (workflow_id, input_revision, prior_digest, input_digest, input,
         author, reason, at, invalidated_steps, kept_receipts)
     VALUES ('wf_revised', 2, 'sha256:one', 'sha256:two', '{\"title\":\"Fixed\"}', 'alice',
             'typo', 2000, '[\"send\"]', '[]')",
    "INSERT INTO attempts (attempt_id, workflow_id, step, number, trigger, lease_owner,
         checkpoint, outcome, started_at)
     VALUES ('att_1', 'wf_revised', 'send', 1, 'initial', 'h', 2, 'interrupted', 1500),
            ('att_2', 'wf_revised', 'send', 2, 'initial', 'h', 1, 'in_progress', 2500)",
];

/// What the current store shows of [`BEFORE_16`]'s rows.
async fn revision_one_survives_as_its_digest<S: CourseStore + ReadStore>(store: &S) {
    let revised = WorkflowId("wf_revised".into());
    let revisions = store.revisions(&revised).await.unwrap();
    assert_eq!(revisions.len(), 2, "{revisions:#?}");
    let first = &revisions[0];
    assert_eq!(
        (first.input_revision, first.prior_digest.as_deref()),
        (1, None)
    );
    assert_eq!(first.input_digest, "sha256:one");
    assert_eq!(first.input, None, "the text was lost before this release");
    assert!(
        first.reason.contains("only its digest remains"),
        "{first:?}"
    );
    assert_eq!((first.author.as_str(), first.at), ("alice", 1000));
    let second = &revisions[1];
    assert_eq!(second.input.as_deref(), Some("{\"title\":\"Fixed\"}"));
    assert_eq!(second.prior_digest.as_deref(), Some("sha256:one"));

    let attempts = store.attempts(&revised, "send", 0, 10).await.unwrap();
    let ran_on: Vec<u32> = attempts.iter().map(|a| a.input_revision).collect();
    assert_eq!(ran_on, [1, 2], "{attempts:#?}");

    // Never revised: revision 1 is the command as admitted, text and all.
    let plain = store
        .revisions(&WorkflowId("wf_plain".into()))
        .await
        .unwrap();
    assert_eq!(plain.len(), 1, "{plain:#?}");
    assert_eq!(plain[0].input.as_deref(), Some("{\"title\":\"Plain\"}"));
    assert_eq!(plain[0].reason, docket::course::ADMITTED);
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_a_revision_made_before_every_revision_was_kept_leaves_its_digest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docket.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    up_to(sqlx::migrate!("../migrations/sqlite"), 15)
        .run(&mut conn)
        .await
        .unwrap();
    for statement in BEFORE_16 {
        conn.execute(*statement).await.unwrap();
    }
    conn.close().await.unwrap();
    let store = SqliteStore::open(&path).await.unwrap();
    revision_one_survives_as_its_digest(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_a_revision_made_before_every_revision_was_kept_leaves_its_digest() {
    let database = crate::postgres::TestDatabase::create().await;
    let mut conn = sqlx::PgConnection::connect(&database.url).await.unwrap();
    up_to(sqlx::migrate!("../migrations/postgres"), 15)
        .run(&mut conn)
        .await
        .unwrap();
    for statement in BEFORE_16 {
        conn.execute(*statement).await.unwrap();
    }
    conn.close().await.unwrap();
    let store = PgStore::connect(&database.url).await.unwrap();
    revision_one_survives_as_its_digest(&store).await;
    store.close().await;
    database.drop_now().await;
}
