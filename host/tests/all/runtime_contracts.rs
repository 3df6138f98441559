//! `describe()` of every example adapter and variant round-trips into the host's types.

use crate::common::{load, runtime};
use docket::contract::{
    CompensationClaim, Contract, DeclaredCapabilities, HandlerContract, IdempotencyClaim,
    QueryClaim,
};
use docket::runtime::ComponentKind;

fn delivery(name: &str, idempotent: bool, query: bool, compensation: bool) -> Contract {
    Contract {
        name: name.into(),
        version: "1.0.0".into(),
        idempotency: IdempotencyClaim {
            supported: idempotent,
            retention_seconds: if idempotent { 86_400 } else { 0 },
            namespace: "reference-provider".into(),
        },
        query: QueryClaim {
            supported: query,
            visibility_window_ms: if query { 5_000 } else { 0 },
        },
        compensation: CompensationClaim {
            supported: compensation,
        },
        capabilities: DeclaredCapabilities {
            outbound_hosts: vec!["$base_url".into()],
            secrets: vec!["provider_token".into()],
        },
        // Every delivery variant reads the provider's events.
        observes: true,
        batch: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_adapter_declares_the_contract_it_is_built_for() {
    let rt = runtime();
    let expected = [
        ("http-delivery", delivery("http-delivery", true, true, true)),
        (
            "http-delivery-query-only",
            delivery("http-delivery-query-only", false, true, true),
        ),
        (
            "http-delivery-fire-and-forget",
            delivery("http-delivery-fire-and-forget", false, false, false),
        ),
        // The lying variant declares exactly what the honest one does.
        (
            "http-delivery-lying",
            delivery("http-delivery-lying", true, true, true),
        ),
    ];
    let mut digests = std::collections::BTreeSet::new();
    for (component, want) in expected {
        let loaded = load(&rt, component).await;
        let ComponentKind::Adapter { contract } = &loaded.kind else {
            panic!("{component} is not an adapter")
        };
        let mut got = contract.clone();
        // Namespaces and retention of non-idempotent variants are informational; compare claims.
        if !want.idempotency.supported {
            got.idempotency.retention_seconds = 0;
            got.idempotency.namespace = want.idempotency.namespace.clone();
        }
        if !want.query.supported {
            got.query.visibility_window_ms = 0;
        }
        assert_eq!(got, want, "{component}");
        // Through JSON and back, unchanged.
        let json = serde_json::to_string(contract).unwrap();
        assert_eq!(&serde_json::from_str::<Contract>(&json).unwrap(), contract);
        assert!(
            digests.insert(loaded.digest.clone()),
            "{component} shares a digest with another variant"
        );
    }

    let noop = load(&rt, "noop").await;
    let contract = noop.contract().expect("noop is an adapter");
    assert_eq!(contract.name, "noop");
    assert!(
        contract.capabilities.outbound_hosts.is_empty() && contract.capabilities.secrets.is_empty()
    );
    let json = serde_json::to_string(contract).unwrap();
    assert_eq!(&serde_json::from_str::<Contract>(&json).unwrap(), contract);

    let hostile = load(&rt, "hostile").await;
    assert_eq!(
        hostile.contract().unwrap().capabilities.secrets,
        vec!["api_token".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn handlers_describe_themselves() {
    let rt = runtime();
    for name in ["validate-document", "render-document"] {
        let loaded = load(&rt, name).await;
        match &loaded.kind {
            ComponentKind::Handler { contract } => {
                assert_eq!(contract.name, name);
                let json = serde_json::to_string(contract).unwrap();
                assert_eq!(
                    &serde_json::from_str::<HandlerContract>(&json).unwrap(),
                    contract
                );
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}
