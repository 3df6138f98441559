//! The `http-delivery` adapter against a real loopback provider speaking the reference
//! protocol: every answer maps to the right typed result.

use crate::common::{env, grant, load, runtime, settings};
use docket::contract::{
    CompensationRequest, EffectError, EffectRequest, EffectStatus, Lookup, PluginReceipt,
};
use docket::runtime::{CallLimits, CallReport, Prepared, Runtime};
use docket::sim::{ProviderSim, RunningSim, SimConfig};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "provider-token-1";

struct Fixture {
    rt: Runtime,
    sim: RunningSim,
    adapter: Arc<Prepared>,
}

async fn fixture(component: &str) -> Fixture {
    let sim = ProviderSim::start(SimConfig::new(TOKEN), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let rt = runtime();
    let loaded = load(&rt, component).await;
    let adapter = rt
        .prepare(
            &loaded,
            &grant(&[&sim.base_url()], &["provider_token"]),
            &settings(&[("base_url", &sim.base_url())]),
        )
        .unwrap();
    Fixture { rt, sim, adapter }
}

impl Fixture {
    async fn invoke_with_token(
        &self,
        key: &str,
        input: &Value,
        token: &str,
    ) -> Result<PluginReceipt, EffectError> {
        let request = EffectRequest {
            idempotency_key: key.into(),
            input: input.to_string(),
            attempt: 1,
        };
        let env = env(
            settings(&[("base_url", &self.sim.base_url()), ("timeout_ms", "2000")]),
            &[("provider_token", token)],
        );
        let report = self
            .rt
            .invoke(&self.adapter, env, CallLimits::default(), &request)
            .await;
        outcome(report)
    }

    async fn invoke(&self, key: &str, input: &Value) -> Result<PluginReceipt, EffectError> {
        self.invoke_with_token(key, input, TOKEN).await
    }

    async fn query(&self, key: &str) -> Result<Lookup, EffectError> {
        let env = env(
            settings(&[("base_url", &self.sim.base_url())]),
            &[("provider_token", TOKEN)],
        );
        outcome(
            self.rt
                .query(&self.adapter, env, CallLimits::default(), key)
                .await,
        )
    }

    fn faults(&self, patch: Value) {
        self.sim.sim().set_faults(patch).unwrap();
    }

    fn deliveries(&self) -> usize {
        self.sim.sim().world().len()
    }
}

fn outcome<T: std::fmt::Debug>(
    report: CallReport<Result<T, EffectError>>,
) -> Result<T, EffectError> {
    report
        .outcome
        .unwrap_or_else(|f| panic!("the call itself failed: {f}; log: {:?}", report.log))
}

fn document(recipient: &str) -> Value {
    json!({"recipient": recipient, "document": "Hello", "document_digest": "sha256:abc"})
}

#[tokio::test(flavor = "multi_thread")]
async fn created_and_replayed_map_to_receipts() {
    let f = fixture("http-delivery").await;
    let first = f
        .invoke("key-1", &document("a@example.com"))
        .await
        .expect("201");
    assert_eq!(first.external_reference, "dlv_1");
    // Same key, same body: the provider replays (200), nothing new is created.
    let second = f
        .invoke("key-1", &document("a@example.com"))
        .await
        .expect("200");
    assert_eq!(second.external_reference, "dlv_1");
    let output: Value = serde_json::from_str(&second.output).unwrap();
    assert_eq!(output["replayed"], true, "{output}");
    assert_eq!(f.deliveries(), 1);
    // The key reached the provider as the client reference.
    assert_eq!(f.sim.sim().world()[0].client_reference, "key-1");
}

#[tokio::test(flavor = "multi_thread")]
async fn key_reused_with_another_body_is_an_idempotency_conflict() {
    let f = fixture("http-delivery").await;
    f.invoke("key-1", &document("a@example.com")).await.unwrap();
    let err = f
        .invoke("key-1", &document("b@example.com"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EffectError::IdempotencyConflict { .. }),
        "{err:?}"
    );
    assert_eq!(f.deliveries(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn permanent_and_credential_refusals() {
    let f = fixture("http-delivery").await;
    let err = f
        .invoke("key-422", &document("no-at-sign"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EffectError::Rejected { code, .. } if code == "invalid_recipient"),
        "{err:?}"
    );
    let err = f
        .invoke_with_token("key-401", &document("a@example.com"), "wrong")
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::Unauthorized { .. }), "{err:?}");
    assert_eq!(f.deliveries(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limit_and_unavailable_are_retryable_with_their_delays() {
    let f = fixture("http-delivery").await;
    f.faults(json!({"rate_limit_next": 1, "retry_after_s": 7}));
    let err = f
        .invoke("key-429", &document("a@example.com"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EffectError::RateLimited {
                retry_after_ms: 7000,
                ..
            }
        ),
        "{err:?}"
    );
    f.faults(json!({"unavailable_next": 1}));
    let err = f
        .invoke("key-503", &document("a@example.com"))
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::Unavailable { .. }), "{err:?}");
    assert_eq!(f.deliveries(), 0);
    // And then it goes through.
    f.invoke("key-503", &document("a@example.com"))
        .await
        .expect("201 after 503");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_connection_after_commit_is_outcome_unknown_and_query_finds_it() {
    let f = fixture("http-delivery").await;
    f.faults(json!({"lose_next": 1}));
    let err = f
        .invoke("key-lost", &document("a@example.com"))
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::OutcomeUnknown { .. }), "{err:?}");
    // The provider did commit it: the uncertainty was real.
    assert_eq!(f.deliveries(), 1);
    match f.query("key-lost").await.unwrap() {
        Lookup::Found {
            receipt,
            status,
            provider_status,
        } => {
            assert_eq!(receipt.external_reference, "dlv_1");
            assert_eq!(status, EffectStatus::InEffect);
            assert_eq!(provider_status, "accepted");
        }
        Lookup::Absent => panic!("lookup should find the delivery"),
    }
    assert_eq!(f.query("never-sent").await.unwrap(), Lookup::Absent);
    // A same-key retry is deduplicated by the provider.
    f.invoke("key-lost", &document("a@example.com"))
        .await
        .unwrap();
    assert_eq!(f.deliveries(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn connection_refused_is_not_sent() {
    let f = fixture("http-delivery").await;
    // Grant and point at a port where nothing listens.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let loaded = load(&f.rt, "http-delivery").await;
    let adapter =
        f.rt.prepare(
            &loaded,
            &grant(&[&url], &["provider_token"]),
            &settings(&[("base_url", &url)]),
        )
        .unwrap();
    let request = EffectRequest {
        idempotency_key: "k".into(),
        input: document("a@example.com").to_string(),
        attempt: 1,
    };
    let env = env(
        settings(&[("base_url", &url)]),
        &[("provider_token", TOKEN)],
    );
    let report =
        f.rt.invoke(
            &adapter,
            env,
            CallLimits {
                timeout: Duration::from_secs(10),
            },
            &request,
        )
        .await;
    let err = outcome(report).unwrap_err();
    assert!(matches!(err, EffectError::NotSent { .. }), "{err:?}");
}

impl Fixture {
    async fn compensate(
        &self,
        key: &str,
        original: &PluginReceipt,
    ) -> Result<PluginReceipt, EffectError> {
        let request = CompensationRequest {
            idempotency_key: key.into(),
            input: document("a@example.com").to_string(),
            original_receipt: original.clone(),
            attempt: 1,
        };
        let env = env(
            settings(&[("base_url", &self.sim.base_url()), ("timeout_ms", "2000")]),
            &[("provider_token", TOKEN)],
        );
        outcome(
            self.rt
                .compensate(&self.adapter, env, CallLimits::default(), &request)
                .await,
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn compensate_cancels_the_delivery() {
    let f = fixture("http-delivery").await;
    let receipt = f.invoke("key-c", &document("a@example.com")).await.unwrap();
    let cancelled = f
        .compensate("key-c.compensate", &receipt)
        .await
        .expect("cancelled");
    assert_eq!(cancelled.external_reference, "dlv_1");
    let world = serde_json::to_value(f.sim.sim().world()).unwrap();
    assert_eq!(world[0]["status"], "cancelled", "{world}");
    // The lookup of the original reference now says the effect was reversed.
    match f.query("key-c").await.unwrap() {
        Lookup::Found {
            status,
            provider_status,
            ..
        } => {
            assert_eq!(status, EffectStatus::Reversed);
            assert_eq!(provider_status, "cancelled");
        }
        Lookup::Absent => panic!("lookup should find the delivery"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn compensation_answers_map_like_invoke() {
    let f = fixture("http-delivery").await;
    let receipt = f.invoke("key-m", &document("a@example.com")).await.unwrap();
    // Refused before acting: retryable, nothing cancelled.
    f.faults(json!({"unavailable_next_cancel": 1}));
    let err = f
        .compensate("key-m.compensate", &receipt)
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::Unavailable { .. }), "{err:?}");
    assert_eq!(f.sim.sim().world()[0].cancelled_at, None);
    // Acted on, answer lost: outcome unknown, and the cancel did happen.
    f.faults(json!({"lose_next_cancel": 1}));
    let err = f
        .compensate("key-m.compensate", &receipt)
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::OutcomeUnknown { .. }), "{err:?}");
    let recorded = &f.sim.sim().world()[0];
    assert!(recorded.cancelled_at.is_some(), "{recorded:?}");
    assert_eq!(recorded.cancel_requests, 2);
    // An effect the provider does not know cannot be reversed.
    let unknown = PluginReceipt {
        external_reference: "dlv_404".into(),
        output: "{}".into(),
    };
    let err = f
        .compensate("key-x.compensate", &unknown)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EffectError::Rejected { code, .. } if code == "unknown_delivery"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lying_variant_never_sends_the_key_header() {
    let f = fixture("http-delivery-lying").await;
    f.invoke("key-l", &document("a@example.com")).await.unwrap();
    f.invoke("key-l", &document("a@example.com")).await.unwrap();
    // Without the Idempotency-Key header the provider cannot deduplicate.
    assert_eq!(f.deliveries(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_to_one_provider_reuse_a_kept_alive_connection_and_a_broken_one_is_not_reused() {
    let f = fixture("http-delivery").await;
    for n in 0..5 {
        f.invoke(&format!("kept-{n}"), &document("a@example.com"))
            .await
            .unwrap();
    }
    // Five calls, each in its own instance, one after the other: one connection.
    assert_eq!(
        f.sim.sim().connections(),
        1,
        "connections for 5 sequential calls"
    );
    // A connection the provider broke after committing is not used again: the lost answer
    // is outcome unknown, and the next request goes out once, on a new connection.
    f.faults(json!({"lose_next": 1}));
    let err = f
        .invoke("kept-lost", &document("a@example.com"))
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::OutcomeUnknown { .. }), "{err:?}");
    f.invoke("kept-after", &document("a@example.com"))
        .await
        .unwrap();
    assert_eq!(
        f.deliveries(),
        7,
        "every request created exactly one delivery"
    );
    assert_eq!(f.sim.sim().connections(), 2);
    // A connection left idle is closed after a few seconds, not kept open for ever.
    assert_eq!(f.sim.sim().open_connections(), 1);
    crate::wait::until(
        "the idle connection to close",
        Duration::from_secs(15),
        || async {
            match f.sim.sim().open_connections() {
                0 => Ok(()),
                n => Err(format!("{n} open")),
            }
        },
    )
    .await;
}

/// Least authority per action: the component is linked for what its actions need together,
/// and each call reaches only its own action's grant.
#[tokio::test(flavor = "multi_thread")]
async fn each_action_reaches_only_its_own_grant() {
    use docket::capabilities::ActionGrants;
    use docket::runtime::LoadError;
    let sim = ProviderSim::start(SimConfig::new(TOKEN), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let rt = runtime();
    let loaded = load(&rt, "http-delivery").await;
    let base = settings(&[("base_url", &sim.base_url())]);
    // `invoke` may deliver; `query` may reach the provider but not read its token;
    // `compensate` may reach nothing at all.
    let grants = ActionGrants {
        invoke: grant(&[&sim.base_url()], &["provider_token"]),
        query: grant(&[&sim.base_url()], &[]),
        compensate: grant(&[], &[]),
    };
    let adapter = rt.prepare_actions(&loaded, &grants, &base).unwrap();
    let f = Fixture { rt, sim, adapter };

    let receipt = f
        .invoke("least-1", &document("a@example.com"))
        .await
        .expect("invoke runs under its own grant");
    assert_eq!(f.deliveries(), 1);

    let env_with_token = || {
        env(
            settings(&[("base_url", &f.sim.base_url()), ("timeout_ms", "2000")]),
            &[("provider_token", TOKEN)],
        )
    };
    // The token is in the host's secret source, but not in `query`'s grant.
    let report =
        f.rt.query(
            &f.adapter,
            env_with_token(),
            CallLimits::default(),
            "least-1",
        )
        .await;
    let refused = format!("{:?} {:?}", report.outcome, report.log);
    assert!(
        !matches!(report.outcome, Ok(Ok(Lookup::Found { .. }))),
        "a query without the token must not find anything: {refused}"
    );
    assert!(
        refused.contains("provider_token") && refused.contains("not granted"),
        "the refusal names the secret: {refused}"
    );

    // `compensate` may reach no host: its request is refused by the host, nothing cancelled.
    let request = CompensationRequest {
        idempotency_key: "least-1.compensate".into(),
        input: document("a@example.com").to_string(),
        original_receipt: receipt.clone(),
        attempt: 1,
    };
    let report =
        f.rt.compensate(
            &f.adapter,
            env_with_token(),
            CallLimits::default(),
            &request,
        )
        .await;
    assert!(
        !matches!(report.outcome, Ok(Ok(_))),
        "compensate must not succeed beyond its grant: {:?}",
        report.outcome
    );
    assert_eq!(f.sim.sim().world()[0].cancelled_at, None);

    // The union is what the declared needs are checked against: the token granted to no
    // action at all refuses the component before any call.
    let none_has_the_token = ActionGrants {
        invoke: grant(&[&f.sim.base_url()], &[]),
        query: grant(&[&f.sim.base_url()], &[]),
        compensate: grant(&[], &[]),
    };
    match f.rt.prepare_actions(&loaded, &none_has_the_token, &base) {
        Err(e @ (LoadError::ImportNotGranted { .. } | LoadError::ExceedsGrant { .. })) => {
            assert!(e.to_string().contains("secret"), "{e}")
        }
        other => panic!("expected a refusal, got {:?}", other.err()),
    }
    // …and a token granted to `query` alone satisfies it.
    let query_only = ActionGrants {
        invoke: grant(&[&f.sim.base_url()], &[]),
        query: grant(&[&f.sim.base_url()], &["provider_token"]),
        compensate: grant(&[], &[]),
    };
    f.rt.prepare_actions(&loaded, &query_only, &base).unwrap();
}

impl Fixture {
    async fn invoke_batch(&self, items: &[(&str, Value)]) -> docket::runtime::BatchAnswer {
        let request = docket::contract::BatchRequest {
            batch_key: "batch-1".into(),
            items: items
                .iter()
                .map(|(key, input)| docket::contract::BatchItem {
                    idempotency_key: key.to_string(),
                    input: input.to_string(),
                })
                .collect(),
            attempt: 1,
        };
        let env = env(
            settings(&[("base_url", &self.sim.base_url()), ("timeout_ms", "2000")]),
            &[("provider_token", TOKEN)],
        );
        let report = self
            .rt
            .invoke_batch(&self.adapter, env, CallLimits::default(), &request)
            .await;
        report
            .outcome
            .unwrap_or_else(|f| panic!("the call itself failed: {f}; log: {:?}", report.log))
    }
}

/// Version 1.1.0 sends a batch in one bulk create: each item its own delivery under its own
/// key, answered on its own — taken, refused, or not taken by a provider that accepts part
/// of a batch; a lost answer leaves every item uncertain, and the same batch again replays
/// what was taken, one delivery per item.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_is_one_call_with_an_answer_per_item() {
    let f = fixture("http-delivery-batching").await;
    assert_eq!(f.adapter.component.contract().unwrap().batch, Some(100));
    let items = [
        ("k1", document("a@example.com")),
        ("k2", document("nobody")),
        ("k3", json!({"not": "a delivery"})),
        ("k4", document("b@example.com")),
    ];
    f.faults(json!({"item_unavailable_next": 1}));
    let answers = f.invoke_batch(&items).await.expect("a batch answer");
    assert_eq!(answers.len(), 4);
    assert!(
        matches!(&answers[0], Err(EffectError::Unavailable { .. })),
        "{answers:?}"
    );
    assert!(
        matches!(&answers[1], Err(EffectError::Rejected { code, .. }) if code == "invalid_recipient"),
        "{answers:?}"
    );
    assert!(
        matches!(&answers[2], Err(EffectError::Rejected { code, .. }) if code == "invalid_input"),
        "{answers:?}"
    );
    assert_eq!(answers[3].as_ref().unwrap().external_reference, "dlv_1");
    assert_eq!(f.deliveries(), 1);

    f.faults(json!({"lose_next": 1}));
    let lost = f.invoke_batch(&items).await;
    assert!(
        matches!(lost, Err(EffectError::OutcomeUnknown { .. })),
        "{lost:?}"
    );
    assert_eq!(
        f.deliveries(),
        2,
        "the lost batch created the item not taken before"
    );
    let again = f.invoke_batch(&items).await.expect("a batch answer");
    for (i, answer) in again.iter().enumerate().filter(|(i, _)| [0, 3].contains(i)) {
        let receipt = answer
            .as_ref()
            .unwrap_or_else(|e| panic!("item {i}: {e:?}"));
        let output: Value = serde_json::from_str(&receipt.output).unwrap();
        assert_eq!(output["replayed"], true, "item {i}: {output}");
    }
    assert_eq!(f.deliveries(), 2);
    let references: Vec<String> = f
        .sim
        .sim()
        .world()
        .iter()
        .map(|d| d.client_reference.clone())
        .collect();
    assert_eq!(references, ["k4", "k1"]);
    // An adapter without `batcher` has no batch call.
    let plain = fixture("http-delivery").await;
    let report = plain
        .rt
        .invoke_batch(
            &plain.adapter,
            env(settings(&[]), &[]),
            CallLimits::default(),
            &docket::contract::BatchRequest {
                batch_key: "b".into(),
                items: vec![],
                attempt: 1,
            },
        )
        .await;
    assert!(report.outcome.is_err(), "{:?}", report.outcome);
}
