//! The host's defences against the browser's ambient authority and for least authority,
//! against a real `docket serve`: in open mode a page that rebinds its name to loopback or
//! posts from another site is refused before anything acts; every `POST` names itself with
//! an `Idempotency-Key`; tokens hold roles, and the registry and policies are the
//! deployer's.

use crate::host_process::{HostOptions, HostProcess, PROVIDER_TOKEN};
use serde_json::{Value, json};

async fn send(
    host: &HostProcess,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> (u16, Value) {
    let mut r = reqwest::Client::new().request(method, format!("{}{path}", host.url));
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r.body(b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn intent(key: &str) -> Vec<u8> {
    json!({"workflow": "document-delivery", "input": crate::host_process::document(key)})
        .to_string()
        .into_bytes()
}

/// Open mode: a `Host` that is not loopback is `421`; a state-changing request from
/// another site is `403` and changes nothing; the host's own pages and non-browser clients
/// pass; a component upload without a key is refused.
#[tokio::test(flavor = "multi_thread")]
async fn open_mode_refuses_rebound_names_and_requests_from_other_sites() {
    let host = HostProcess::start(HostOptions {
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    let (status, body) = send(
        &host,
        get.clone(),
        "/v1/workflows",
        &[("host", "rebound.example:8080")],
        None,
    )
    .await;
    assert_eq!(status, 421, "{body}");
    assert_eq!(body["error"]["code"], "misdirected");
    let (status, page) = send(
        &host,
        get.clone(),
        "/console/workflows",
        &[("host", "rebound.example")],
        None,
    )
    .await;
    assert_eq!(status, 421, "{page}");

    let own = host.url.trim_start_matches("http://").to_string();
    for (headers, expect) in [
        (vec![("origin", "https://evil.example")], 403),
        (vec![("origin", "null")], 403),
        (vec![("sec-fetch-site", "cross-site")], 403),
        (
            vec![
                ("origin", format!("http://{own}").leak() as &str),
                ("sec-fetch-site", "same-origin"),
            ],
            201,
        ),
    ] {
        let mut all = headers.clone();
        all.push(("idempotency-key", "from-a-page"));
        // Bodies stay JSON whatever the Content-Type: a form post is no way around.
        all.push(("content-type", "text/plain"));
        let (status, body) = send(
            &host,
            post.clone(),
            "/v1/intents",
            &all,
            Some(intent("page")),
        )
        .await;
        assert_eq!(status, expect, "{headers:?}: {body}");
        if expect == 403 {
            assert_eq!(body["error"]["code"], "forbidden");
        }
    }
    // Only the same-origin request made a workflow.
    let (_, listed) = send(&host, get.clone(), "/v1/workflows", &[], None).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "{listed}");

    // A component upload from another site never reaches the registry.
    let v2 = std::fs::read(docket::guests::path("http-delivery-2").unwrap()).unwrap();
    let (status, _) = send(
        &host,
        post.clone(),
        "/v1/adapters",
        &[("origin", "https://evil.example"), ("idempotency-key", "x")],
        Some(v2.clone()),
    )
    .await;
    assert_eq!(status, 403);
    let (status, body) = send(&host, post.clone(), "/v1/adapters", &[], Some(v2.clone())).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "missing_parameter");
    let (_, registry) = send(&host, get.clone(), "/v1/adapters", &[], None).await;
    let delivery = registry["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "http-delivery")
        .unwrap()
        .clone();
    assert_eq!(
        delivery["versions"].as_array().unwrap().len(),
        1,
        "{delivery:#}"
    );

    // The console's sign-in and sign-out are checked the same way.
    for path in ["/console/sign-in", "/console/sign-out"] {
        let r = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .post(format!("{}{path}", host.url))
            .header("origin", "https://evil.example")
            .form(&[("token", "")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403, "{path}");
        assert!(r.headers().get("set-cookie").is_none(), "{path}");
    }
}

const ROLES: &str = r#"
[[tokens]]
token = "client-token-0123456789"
subject = "team-a"
role = "client"
[[tokens]]
token = "operator-token-0123456789"
subject = "alice"
role = "operator"
[[tokens]]
token = "deployer-token-0123456789"
subject = "release-bot"
role = "deployer"
[[tokens]]
token = "both-token-0123456789ab"
subject = "bob"
roles = ["operator", "deployer"]
"#;

/// Roles: the registry and policies are the deployer's to change, and operators' and
/// deployers' to read; clients see neither. A keyed change answers a repeat as it did.
#[tokio::test(flavor = "multi_thread")]
async fn roles_separate_clients_operators_and_deployers() {
    let sim = docket::sim::ProviderSim::start(
        docket::sim::SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let host = HostProcess::start(HostOptions {
        provider: Some(sim.base_url()),
        config: ROLES.into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let bearer = |t: &str| format!("Bearer {t}-token-0123456789");
    let (client, operator, deployer) = (bearer("client"), bearer("operator"), bearer("deployer"));
    let both = "Bearer both-token-0123456789ab".to_string();
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    for (who, status) in [
        (&client, 403),
        (&operator, 200),
        (&deployer, 200),
        (&both, 200),
    ] {
        for path in ["/v1/adapters", "/v1/policies"] {
            let (got, body) = send(&host, get.clone(), path, &[("authorization", who)], None).await;
            assert_eq!(got, status, "{who} {path}: {body}");
        }
    }
    let v2 = std::fs::read(docket::guests::path("http-delivery-2").unwrap()).unwrap();
    let policy = json!({"document": "[[rules]]\neffect = \"allow\"\n"})
        .to_string()
        .into_bytes();
    let activate = json!({"version": "2.0.0"}).to_string().into_bytes();
    for who in [&client, &operator] {
        for (path, body) in [
            ("/v1/adapters", v2.clone()),
            ("/v1/policies", policy.clone()),
            ("/v1/adapters/http-delivery/activate", activate.clone()),
        ] {
            let (got, answer) = send(
                &host,
                post.clone(),
                path,
                &[("authorization", who), ("idempotency-key", "k-1")],
                Some(body),
            )
            .await;
            assert_eq!(got, 403, "{who} {path}: {answer}");
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("deployer"),
                "{answer}"
            );
        }
    }
    // The deployer deploys and activates; a repeat of a key answers the same, another body
    // under it is a conflict.
    let as_deployer = |key: &'static str| {
        vec![
            ("authorization", deployer.as_str()),
            ("idempotency-key", key),
        ]
    };
    let (got, deployed) = send(
        &host,
        post.clone(),
        "/v1/adapters",
        &as_deployer("d-1"),
        Some(v2.clone()),
    )
    .await;
    assert_eq!(got, 201, "{deployed}");
    let (got, again) = send(
        &host,
        post.clone(),
        "/v1/adapters",
        &as_deployer("d-1"),
        Some(v2.clone()),
    )
    .await;
    assert_eq!((got, &again), (201, &deployed));
    let (got, conflict) = send(
        &host,
        post.clone(),
        "/v1/adapters",
        &as_deployer("d-1"),
        Some(b"other bytes".to_vec()),
    )
    .await;
    assert_eq!(got, 409, "{conflict}");
    assert_eq!(conflict["error"]["code"], "key_conflict");
    let (got, active) = send(
        &host,
        post.clone(),
        "/v1/adapters/http-delivery/activate",
        &as_deployer("a-1"),
        Some(activate.clone()),
    )
    .await;
    assert_eq!(got, 200, "{active}");
    assert_eq!(active["active_version"], "2.0.0");
    let (got, v1) = send(
        &host,
        post.clone(),
        "/v1/policies",
        &as_deployer("p-1"),
        Some(policy.clone()),
    )
    .await;
    assert_eq!(got, 201, "{v1}");
    // An operator and deployer in one token may do both.
    let (got, _) = send(
        &host,
        post.clone(),
        "/v1/adapters/http-delivery/rollback",
        &[("authorization", both.as_str()), ("idempotency-key", "r-1")],
        Some(Vec::new()),
    )
    .await;
    assert_eq!(got, 200);
}
