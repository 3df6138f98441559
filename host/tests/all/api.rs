//! The HTTP API's admission and read contract, over real HTTP on loopback.
//!
//! Each case serves the router on 127.0.0.1:0 with its own database and a deployed
//! definition, and talks to it with reqwest. Every case runs twice: on a SQLite file
//! (`sqlite::<case>`) and on a PostgreSQL database of its own (`postgres::<case>`, through
//! `DOCKET_TEST_POSTGRES`; see `scripts/test.sh`). No scheduler runs: where a test needs a
//! workflow to move, it claims and finishes steps through the executor store, as the
//! scheduler would.

mod admission;
mod common;
mod reads;

/// Instantiates each listed case once per backend, as `sqlite::<case>` and `postgres::<case>`.
macro_rules! on_both_backends {
    ($($module:ident :: $case:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::api::common::on(crate::api::common::BackendKind::Sqlite, crate::api::$module::$case()).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::api::common::on(crate::api::common::BackendKind::Postgres, crate::api::$module::$case()).await;
                }
            )+
        }
    };
}

on_both_backends!(
    admission::a_new_key_creates_a_workflow_and_an_equivalent_resubmission_replays_it,
    admission::a_key_reused_with_another_input_conflicts_and_changes_nothing,
    admission::malformed_requests_are_refused_in_the_documented_order,
    admission::a_member_named_twice_is_refused_on_every_json_body,
    admission::a_quoted_key_is_the_same_key,
    admission::an_unknown_workflow_is_not_found,
    admission::a_body_over_the_limit_is_too_large,
    admission::an_input_against_the_schema_is_unprocessable_with_pointers,
    admission::concurrent_submissions_of_one_key_create_one_workflow,
    admission::a_key_is_retained_while_the_workflow_runs_and_for_the_retention_after_it_ends,
    reads::keys_are_scoped_per_subject_and_clients_see_only_their_own,
    reads::unknown_or_missing_tokens_are_unauthorized,
    reads::intents_are_read_back_by_key,
    reads::lists_filter_and_paginate_newest_first,
    reads::the_clock_control_exists_only_with_test_controls,
    reads::unknown_paths_and_methods_answer_json_errors,
);
