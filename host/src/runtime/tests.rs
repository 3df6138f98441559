//! The runtime with a built plugin: what the sandbox shows a guest of the host.

use super::{CallEnv, CallLimits, Runtime, RuntimeConfig};
use crate::capabilities::{Grant, SecretSource};
use crate::clock::ManualClock;
use crate::contract::EffectRequest;
use crate::wait;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A runtime with the unit tests' compiled-component cache, for `max_instances` calls.
fn cached_runtime(max_instances: u32) -> Runtime {
    let cache =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-unit-component-cache");
    Runtime::new(RuntimeConfig {
        cache_dir: Some(cache),
        max_instances,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// The hostile test plugin, loaded and linked.
async fn hostile(rt: &Runtime) -> Arc<super::Prepared> {
    let path = crate::guests::path("hostile").expect("the hostile test plugin is built");
    let component = rt.load_file(std::path::Path::new(path)).await.unwrap();
    rt.prepare(
        &component,
        // The hostile plugin imports outbound HTTP; a loopback host it never calls.
        &Grant::new(
            ["http://127.0.0.1:9".parse().unwrap()],
            ["api_token".to_string()],
        ),
        &BTreeMap::new(),
    )
    .unwrap()
}

/// Waits until `n` of the pool's instances are in use: the calls driven beside this wait
/// have started.
async fn pool_in_use(rt: &Runtime, n: u64) {
    wait::until(
        "the calls to take their instances",
        Duration::from_secs(20),
        || async {
            match rt.instances_in_use() {
                used if used >= n => Ok(()),
                used => Err(format!("{used} of {n} instances in use")),
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_guest_reads_the_hosts_clock_as_its_wall_clock() {
    let rt = cached_runtime(RuntimeConfig::default().max_instances);
    let prepared = hostile(&rt).await;
    // A host clock far from the machine's: 2001-09-09T01:46:40Z.
    let clock = ManualClock::new(1_000_000_000_000);
    clock.advance(1_234);
    let env = CallEnv {
        settings: Arc::new(BTreeMap::new()),
        secrets: Arc::new(SecretSource::from_pairs([("api_token", "tok-123456")])),
        clock: clock.clone(),
        label: "clock-test".into(),
    };
    let request = EffectRequest {
        idempotency_key: "k".into(),
        input: r#"{"do": "now"}"#.into(),
        attempt: 1,
    };
    let report = rt
        .invoke(
            &prepared,
            env,
            CallLimits {
                timeout: Duration::from_secs(10),
            },
            &request,
        )
        .await;
    let receipt = report.outcome.unwrap().unwrap();
    let output: serde_json::Value = serde_json::from_str(&receipt.output).unwrap();
    assert_eq!(output["now_ms"], 1_000_000_001_234u64, "{output}");
}

/// An upload's `describe()` never takes the instance a call needs, nor a call the one an
/// upload needs: with room for one call and that call running, a component still loads.
#[tokio::test]
async fn describing_an_upload_does_not_compete_with_calls_for_instances() {
    let rt = cached_runtime(1);
    let prepared = hostile(&rt).await;
    let env = CallEnv {
        settings: Arc::new(BTreeMap::new()),
        secrets: Arc::new(SecretSource::default()),
        clock: ManualClock::new(0),
        label: "spinning".into(),
    };
    let spinning = EffectRequest {
        idempotency_key: "k".into(),
        input: r#"{"do": "loop"}"#.into(),
        attempt: 1,
    };
    let call = rt.invoke(
        &prepared,
        env,
        CallLimits {
            timeout: Duration::from_secs(20),
        },
        &spinning,
    );
    let noop = crate::guests::path("noop").expect("the noop test plugin is built");
    let load = async {
        // The call takes its instance first.
        pool_in_use(&rt, 1).await;
        rt.load_file(std::path::Path::new(noop)).await
    };
    tokio::select! {
        _ = call => panic!("the spinning call ended before the upload was described"),
        loaded = load => {
            let loaded = loaded.expect("a component loads while the only call slot is busy");
            assert_eq!(loaded.name(), "noop");
        }
    }
}

/// A call past the pool's instances fails as the host's lack of room — nothing of the plugin
/// ran — which the scheduler tells apart from a plugin that cannot start.
#[tokio::test]
async fn a_call_past_the_pools_room_fails_as_capacity_not_as_the_plugin() {
    let rt = cached_runtime(1);
    let prepared = hostile(&rt).await;
    let env = || CallEnv {
        settings: Arc::new(BTreeMap::new()),
        secrets: Arc::new(SecretSource::default()),
        clock: ManualClock::new(0),
        label: "capacity".into(),
    };
    let request = |mode: &str| EffectRequest {
        idempotency_key: "k".into(),
        input: format!(r#"{{"do": "{mode}"}}"#),
        attempt: 1,
    };
    let limits = || CallLimits {
        timeout: Duration::from_secs(20),
    };
    let spin = request("loop");
    // The call's instance and the two kept for describing uploads, all spinning.
    let spinning = async {
        tokio::join!(
            rt.invoke(&prepared, env(), limits(), &spin),
            rt.invoke(&prepared, env(), limits(), &spin),
            rt.invoke(&prepared, env(), limits(), &spin),
        )
    };
    let ok = request("ok");
    let one_more = async {
        pool_in_use(&rt, rt.instance_capacity()).await;
        rt.invoke(&prepared, env(), limits(), &ok).await
    };
    tokio::select! {
        _ = spinning => panic!("the spinning calls ended before the next call was refused"),
        report = one_more => match report.outcome {
            Err(super::CallFailure::Capacity { message }) => {
                assert!(message.contains("concurrent limit"), "{message}");
            }
            other => panic!("expected the host's lack of room, got {other:?}"),
        },
    }
}

/// A component that only imports an empty instance under `name`.
fn component_importing(name: &str) -> Vec<u8> {
    use wasm_encoder::{
        Component, ComponentImportSection, ComponentTypeRef, ComponentTypeSection, InstanceType,
    };
    let mut types = ComponentTypeSection::new();
    types.instance(&InstanceType::new());
    let mut imports = ComponentImportSection::new();
    imports.import(name, ComponentTypeRef::Instance(0));
    let mut component = Component::new();
    component.section(&types).section(&imports);
    component.finish()
}

#[tokio::test]
async fn a_component_built_for_the_previous_contract_is_refused_naming_both_versions() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let bytes = component_importing("docket:plugin/types@0.1.0");
    let Err(err) = rt.load(&bytes).await else {
        panic!("a 0.1.0 component was loaded");
    };
    let message = err.to_string();
    for want in [
        "built against docket:plugin@0.1.0",
        "`docket:plugin/types@0.1.0`",
        "rebuild it against `wit/docket.wit` (package docket:plugin@0.3.0)",
        "compensation-request",
    ] {
        assert!(message.contains(want), "missing {want:?} in: {message}");
    }

    let bytes = component_importing("docket:plugin/log");
    let err = rt.load(&bytes).await.err().expect("refused").to_string();
    assert!(
        err.contains("built against an unversioned docket:plugin"),
        "{err}"
    );
}

#[test]
fn the_bindings_version_is_the_wit_packages() {
    let wit = include_str!("../../../wit/docket.wit");
    let package = format!("package docket:plugin@{};", super::PLUGIN_PACKAGE_VERSION);
    assert!(wit.lines().any(|l| l == package), "no `{package}` line");
}

/// `forget` leaves nothing of a component behind: neither its compiled form nor any form
/// linked under a grant (a deployer could otherwise pin compiled code in memory).
#[tokio::test]
async fn forget_drops_the_linked_forms_too() {
    let rt = cached_runtime(4);
    let prepared = hostile(&rt).await;
    let digest = prepared.component.digest.clone();
    drop(prepared);
    let linked = |rt: &Runtime| {
        rt.inner
            .prepared
            .lock()
            .unwrap()
            .keys()
            .filter(|(d, _)| *d == digest)
            .count()
    };
    assert_eq!(linked(&rt), 1);
    rt.forget(&digest);
    assert!(!rt.is_loaded(&digest));
    assert_eq!(linked(&rt), 0);
}

/// What the compiler is given is bounded before it starts: a component with a function
/// body over 1 MiB, or over 50,000 functions, is refused without compiling.
#[tokio::test]
async fn an_oversized_component_is_refused_before_compiling() {
    use wasm_encoder::{
        CodeSection, Component, Function, FunctionSection, Instruction, Module, ModuleSection,
        TypeSection,
    };
    let component = |functions: u32, body_bytes: usize| {
        let mut types = TypeSection::new();
        types.ty().function([], []);
        let mut declared = FunctionSection::new();
        let mut code = CodeSection::new();
        for _ in 0..functions {
            declared.function(0);
            let mut f = Function::new([]);
            for _ in 0..body_bytes {
                f.instruction(&Instruction::Nop);
            }
            f.instruction(&Instruction::End);
            code.function(&f);
        }
        let mut module = Module::new();
        module.section(&types).section(&declared).section(&code);
        let mut c = Component::new();
        c.section(&ModuleSection(&module));
        c.finish()
    };
    let rt = cached_runtime(4);
    for (bytes, expect) in [
        (
            component(1, super::load::MAX_FUNCTION_BYTES + 1),
            "has a body of",
        ),
        (
            component(super::load::MAX_FUNCTIONS as u32 + 1, 1),
            "more than 50000 functions",
        ),
    ] {
        let err = match rt.load(&bytes).await {
            Ok(_) => panic!("an oversized component was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("too large to compile") && err.contains(expect),
            "{err}"
        );
    }
}

/// A component built against `docket:plugin@0.2.0` loads and runs as it did: its contract
/// (which neither observes nor batches), `invoke` (its log through the 0.2.0 `log`, and its
/// `unavailable` without a retry-after), `query` and `compensate`, all in the current types.
#[tokio::test]
async fn a_component_built_against_0_2_0_keeps_working() {
    use crate::contract::{CompensationRequest, EffectError, EffectStatus, Lookup, PluginReceipt};
    let rt = cached_runtime(4);
    let path = crate::guests::path("legacy-0-2").expect("the 0.2.0 test plugin is built");
    let component = rt.load_file(std::path::Path::new(path)).await.unwrap();
    let contract = component.contract().expect("an adapter").clone();
    assert_eq!(contract.name, "legacy-0-2");
    assert!(contract.idempotency.supported && contract.compensation.supported);
    let prepared = rt
        .prepare(&component, &Grant::none(), &BTreeMap::new())
        .unwrap();
    let env = || CallEnv {
        settings: Arc::new(BTreeMap::new()),
        secrets: Arc::new(SecretSource::default()),
        clock: ManualClock::new(1_000),
        label: "legacy".into(),
    };
    let limits = CallLimits {
        timeout: Duration::from_secs(10),
    };
    let request = |input: &str| EffectRequest {
        idempotency_key: "k-1".into(),
        input: input.into(),
        attempt: 1,
    };
    let report = rt.invoke(&prepared, env(), limits, &request("{}")).await;
    let receipt = report.outcome.unwrap().unwrap();
    assert_eq!(receipt.external_reference, "legacy-1");
    assert_eq!(receipt.output, r#"{"key":"k-1"}"#);
    assert!(
        report
            .log
            .iter()
            .any(|l| l.message.contains("invoked with {}")),
        "{:?}",
        report.log
    );
    let report = rt
        .invoke(
            &prepared,
            env(),
            limits,
            &request(r#"{"unavailable": true}"#),
        )
        .await;
    assert_eq!(
        report.outcome.unwrap().unwrap_err(),
        EffectError::Unavailable {
            message: "try again later".into(),
            retry_after_ms: None
        }
    );
    let report = rt.query(&prepared, env(), limits, "k-1").await;
    let Lookup::Found { status, .. } = report.outcome.unwrap().unwrap() else {
        panic!("not found")
    };
    assert_eq!(status, EffectStatus::InEffect);
    let report = rt
        .compensate(
            &prepared,
            env(),
            limits,
            &CompensationRequest {
                idempotency_key: "k-1-undo".into(),
                input: "{}".into(),
                original_receipt: PluginReceipt {
                    external_reference: "legacy-1".into(),
                    output: "{}".into(),
                },
                attempt: 1,
            },
        )
        .await;
    assert_eq!(
        report.outcome.unwrap().unwrap().external_reference,
        "undo-legacy-1"
    );
}

/// `observe` reads a provider's delivery: the reference provider's `delivery.accepted`
/// event is an observation of an effect in effect, named by its id and the key docket sent;
/// an event of another type is unrecognized; a component that exports no `observer` (one
/// built against 0.2.0) is not asked.
#[tokio::test]
async fn an_observing_adapter_reads_its_providers_events() {
    use crate::contract::{EffectStatus, Inbound, ObserveError};
    let rt = cached_runtime(4);
    let path = crate::guests::path("http-delivery").expect("built");
    let component = rt.load_file(std::path::Path::new(path)).await.unwrap();
    assert!(component.contract().unwrap().observes);
    let prepared = rt
        .prepare(
            &component,
            &Grant::new(
                ["http://127.0.0.1:9".parse().unwrap()],
                ["provider_token".to_string()],
            ),
            &BTreeMap::from([("base_url".to_string(), "http://127.0.0.1:9".to_string())]),
        )
        .unwrap();
    let env = || CallEnv {
        settings: Arc::new(BTreeMap::new()),
        secrets: Arc::new(SecretSource::default()),
        clock: ManualClock::new(1_000),
        label: "observe".into(),
    };
    let limits = CallLimits {
        timeout: Duration::from_secs(10),
    };
    let event = |body: serde_json::Value| Inbound {
        method: "POST".into(),
        path: "/v1/evidence/http-delivery".into(),
        headers: vec![("webhook-id".into(), "evt_1".into())],
        body: body.to_string().into_bytes(),
    };
    let accepted = event(serde_json::json!({
        "id": "evt_1", "type": "delivery.accepted", "occurred_at": "2026-12-06T00:00:00.000Z",
        "data": {"id": "dlv_7", "client_reference": "dk-abc", "recipient": "a@example.com",
                 "status": "accepted"}
    }));
    let report = rt.observe(&prepared, env(), limits, &accepted).await;
    let found = report.outcome.unwrap().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].external_reference.as_deref(), Some("dlv_7"));
    assert_eq!(found[0].idempotency_key.as_deref(), Some("dk-abc"));
    assert_eq!(found[0].event_id.as_deref(), Some("evt_1"));
    assert_eq!(found[0].status, EffectStatus::InEffect);
    assert_eq!(found[0].provider_status, "accepted");
    let output: serde_json::Value =
        serde_json::from_str(found[0].output.as_deref().unwrap()).unwrap();
    assert_eq!(output["id"], "dlv_7");
    let cancelled = event(serde_json::json!({
        "id": "evt_2", "type": "delivery.cancelled",
        "data": {"id": "dlv_7", "client_reference": "dk-abc", "status": "cancelled"}
    }));
    let found = rt.observe(&prepared, env(), limits, &cancelled).await;
    assert_eq!(
        found.outcome.unwrap().unwrap()[0].status,
        EffectStatus::Reversed
    );
    let other = event(serde_json::json!({"id": "evt_3", "type": "invoice.paid", "data": {}}));
    let report = rt.observe(&prepared, env(), limits, &other).await;
    assert!(
        matches!(
            report.outcome.unwrap(),
            Err(ObserveError::Unrecognized { .. })
        ),
        "an event of another type is unrecognized"
    );
    let report = rt
        .observe(
            &prepared,
            env(),
            limits,
            &event(serde_json::json!("not an event")),
        )
        .await;
    assert!(matches!(
        report.outcome.unwrap(),
        Err(ObserveError::Malformed { .. })
    ));

    let legacy = crate::guests::path("legacy-0-2").expect("built");
    let legacy = rt.load_file(std::path::Path::new(legacy)).await.unwrap();
    assert!(!legacy.contract().unwrap().observes);
    let legacy = rt
        .prepare(&legacy, &Grant::none(), &BTreeMap::new())
        .unwrap();
    assert!(
        rt.observe(&legacy, env(), limits, &accepted)
            .await
            .outcome
            .is_err()
    );
}
