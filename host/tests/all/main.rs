//! docket's integration tests, one binary, grouped by layer.
//!
//! Every test here runs real components built from `adapters/` by the build script, real
//! HTTP on loopback and real processes; nothing is mocked.
//!
//! One binary, because linking one (wasmtime, sqlx, axum and all) dominates a test build:
//! the store conformance suite, the HTTP API's contract, the console's pages and the golden
//! definition errors are modules here, not test crates of their own.

/// Instantiates each listed case `async fn case(db: Option<String>)` once per store, as
/// `sqlite::<case>` (`None`: a SQLite file) and `postgres::<case>` (a database of its own).
macro_rules! on_both_stores {
    ($($case:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $case() {
                    super::$case(None).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $case() {
                    let database = crate::postgres::TestDatabase::create().await;
                    super::$case(Some(database.url.clone())).await;
                    database.drop_now().await;
                }
            )+
        }
    };
}

mod adoption;
mod api;
mod approvals;
mod batches;
mod budgets;
mod cli_adapter;
mod cli_demo;
mod common;
mod console;
mod console_page;
mod course;
mod crash_matrix;
mod evidence;
mod governance;
mod host_e2e;
mod host_postgres;
#[path = "../support/host_process.rs"]
mod host_process;
mod hostile_soak;
mod many_hosts;
mod migration;
mod notifications;
mod openapi_check;
mod operations;
mod operator_actions;
#[path = "../support/test_database.rs"]
mod postgres;
mod recovery_scenarios;
mod registry;
mod runtime_contracts;
mod runtime_http_delivery;
mod runtime_load;
mod runtime_sandbox;
mod runtime_secrets;
mod scenarios;
mod security;
mod source_rules;
mod store_conformance;
mod supervision;
mod upgrade;
mod upgrade_fixtures;
#[path = "../support/wait.rs"]
mod wait;
mod workflow_ui;
