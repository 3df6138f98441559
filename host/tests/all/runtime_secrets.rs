//! A secret reaches the plugin that is granted it, and nothing the host writes down.

use crate::common::{env, grant, load, runtime, settings};
use docket::contract::{EffectError, EffectRequest};
use docket::runtime::CallLimits;
use std::io::Write;
use std::sync::{Arc, Mutex};

const SECRET: &str = "s3cr3t-Value-9f8e7d";

/// Collects every formatted host log line.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// A current-thread runtime keeps every host log line of the call on this thread's subscriber.
#[tokio::test(flavor = "current_thread")]
async fn a_leaking_plugin_cannot_get_its_secret_written_down() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let rt = runtime();
    let hostile = load(&rt, "hostile").await;
    let prepared = rt
        .prepare(
            &hostile,
            &grant(&["http://127.0.0.1:9"], &["api_token"]),
            &settings(&[]),
        )
        .unwrap();
    let request = EffectRequest {
        idempotency_key: "k".into(),
        input: r#"{"do": "leak-secret"}"#.into(),
        attempt: 1,
    };
    let report = rt
        .invoke(
            &prepared,
            env(settings(&[]), &[("api_token", SECRET)]),
            CallLimits::default(),
            &request,
        )
        .await;

    // The plugin received the value: it tried to return it, and the host redacted it.
    let message = match report.outcome {
        Ok(Err(EffectError::Rejected { message, .. })) => message,
        other => panic!("expected the plugin's rejection, got {other:?}"),
    };
    assert!(!message.contains(SECRET), "{message}");
    assert!(message.contains("[redacted:api_token]"), "{message}");

    // Its log line and its stderr line were redacted too.
    assert!(report.log.len() >= 2, "{:?}", report.log);
    for line in &report.log {
        assert!(!line.message.contains(SECRET), "{line:?}");
    }
    assert!(
        report
            .log
            .iter()
            .any(|l| l.message.contains("[redacted:api_token]"))
    );

    let host_logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        host_logs.contains("leaking api_token="),
        "host logs should carry the plugin's line: {host_logs}"
    );
    assert!(
        !host_logs.contains(SECRET),
        "the secret reached a host log line: {host_logs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn only_granted_secret_names_resolve() {
    let rt = runtime();
    let hostile = load(&rt, "hostile").await;
    // The grant holds a different name than the one the plugin asks for (`api_token`), so the
    // contract check refuses it before it runs.
    let err = rt
        .prepare(
            &hostile,
            &grant(&["http://127.0.0.1:9"], &["other"]),
            &settings(&[]),
        )
        .err()
        .expect("refused");
    assert!(err.to_string().contains("api_token"), "{err}");
}
