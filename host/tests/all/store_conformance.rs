//! One store conformance suite, run against both backends through the store traits.
//!
//! Every case is a generic function over [`backends::Store`]; the `conformance!` list
//! instantiates each one for SQLite (a temporary file) and for PostgreSQL (a fresh
//! database per test, created through `DOCKET_TEST_POSTGRES` and dropped afterwards). The
//! PostgreSQL half fails, rather than skips, when that variable is not set:
//! `scripts/test.sh` starts PostgreSQL and sets it.
//!
//! Times are simulated: every request carries its own `now`, nothing sleeps for time to pass.

mod actions;
mod admission;
mod backends;
mod concurrency;
mod executor;
mod fixtures;
mod outbox;
mod sessions;
mod settings;
mod wakeups;

/// Instantiates each listed case once per backend, as `sqlite::<case>` and `postgres::<case>`,
/// and once more on PostgreSQL writing each finish and new intent on its own
/// (`postgres_one_at_a_time::<case>`): the batches and the shared rules give one answer.
macro_rules! conformance {
    ($($module:ident :: $case:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::store_conformance::backends::with_sqlite(crate::store_conformance::$module::$case).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::store_conformance::backends::with_postgres(crate::store_conformance::$module::$case).await;
                }
            )+
        }
        mod postgres_one_at_a_time {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::store_conformance::backends::with_postgres_one_at_a_time(crate::store_conformance::$module::$case).await;
                }
            )+
        }
    };
}

conformance!(
    admission::deploy_is_idempotent_per_version,
    admission::admission_creates_once_then_replays_or_conflicts,
    admission::an_expired_key_is_free_again,
    admission::an_intent_of_a_superseded_version_writes_nothing,
    admission::reads_filter_and_page,
    executor::claims_respect_limit_readiness_and_carry_context,
    executor::a_claim_carries_only_the_receipts_its_step_reads,
    executor::claims_are_shared_between_subjects_by_weight,
    executor::an_adapter_is_claimed_under_its_limit_on_every_host_and_paused_for_all,
    executor::fenced_writes_refuse_a_stale_lease,
    executor::success_releases_dependents_and_derives_the_workflow_state,
    executor::expired_leases_report_checkpoint_and_stored_result,
    executor::late_evidence_fills_gaps_and_moves_nothing,
    executor::late_references_settle_or_contradict,
    executor::a_host_ends_only_its_own_leases,
    executor::checkpoint_three_keeps_one_input_and_honours_a_cancellation,
    executor::the_key_retention_is_kept_from_the_first_request_and_warned_once,
    executor::a_cancellation_lets_a_running_handler_finish_and_starts_nothing_new,
    executor::recovery_never_finishes_on_a_checkpoint_that_moved,
    actions::operator_actions_are_idempotent_and_guarded,
    actions::a_manual_receipt_releases_dependents,
    concurrency::concurrent_claims_take_each_step_exactly_once,
    concurrency::concurrent_workers_run_dependent_steps_exactly_once,
    concurrency::finishes_written_together_are_fenced_one_by_one,
    concurrency::concurrent_admissions_of_one_key_create_one_workflow,
    concurrency::concurrent_reuse_of_an_expired_key_creates_one_workflow,
    concurrency::many_admissions_at_once_each_get_their_own_answer,
    concurrency::concurrent_timeline_appends_number_without_gaps,
    concurrency::concurrent_operator_actions_under_one_key_act_once,
    concurrency::operator_actions_race_the_release_of_their_step,
    wakeups::next_due_names_the_earliest_retry_time_or_lease_expiry,
    wakeups::admissions_wake_the_hosts_that_watch,
    wakeups::component_bytes_are_kept_once_per_digest,
    wakeups::the_registry_activates_rolls_back_and_keeps_its_history,
    wakeups::activations_need_a_passing_verdict_once_the_database_requires_it,
    wakeups::the_latest_verification_of_each_component_is_kept,
    sessions::console_sessions_are_found_by_digest_until_they_expire_or_end,
    outbox::notifications_are_claimed_once_settled_by_their_holder_and_pruned,
    settings::the_environment_is_recorded_once_and_moved_only_when_adopted,
);

/// A SQLite path is a file name, not a URL: `?`, `#` and `%` in it name the file.
#[tokio::test]
async fn a_sqlite_path_with_url_characters_names_its_file() {
    use docket::store::ReadStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("odd?mode=ro#x%20.db");
    let store = docket::store::sqlite::SqliteStore::open(&path)
        .await
        .unwrap();
    assert!(
        store
            .list_workflows(&docket::store::WorkflowFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(path.exists(), "the file is not where the path says");
}

/// PostgreSQL alone: the embedded store's writer rolls a failing batch back whole (every
/// caller retries), see `store::sqlite::writer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_finish_that_fails_in_a_batch_fails_alone() {
    backends::with_postgres(concurrency::a_finish_that_fails_in_a_batch_fails_alone).await;
}
