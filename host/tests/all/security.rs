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

/// A document delivery admitted under `key`, once it has settled (completed, in review or
/// failed).
async fn settled_delivery(host: &HostProcess, key: &str, title: &str) -> Value {
    let (status, created) = host
        .submit(
            "document-delivery",
            key,
            crate::host_process::document(title),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap();
    host.wait_for(
        id,
        &["completed", "needs_review", "failed"],
        std::time::Duration::from_secs(30),
    )
    .await
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

    // The test clock cannot be moved past what the store can hold.
    let (status, body) = send(
        &host,
        post.clone(),
        "/v1/_test/clock",
        &[],
        Some(json!({"advance_ms": u64::MAX / 2}).to_string().into_bytes()),
    )
    .await;
    assert_eq!(status, 400, "{body}");

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

/// A paused host with the [`ROLES`] tokens and a provider of the test's own.
async fn roles_host() -> (docket::sim::RunningSim, HostProcess) {
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
    (sim, host)
}

/// Roles: the registry and policies are the deployer's to change, and operators' and
/// deployers' to read; clients see neither. A keyed change answers a repeat as it did.
#[tokio::test(flavor = "multi_thread")]
async fn roles_separate_clients_operators_and_deployers() {
    let (_sim, host) = roles_host().await;
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

/// The role matrix over the workflow endpoints: submitting and reading by key need
/// `client`; listing and reading need `client` (own) or `operator` (all); a deployer-only
/// token touches no workflow (`403`, not an empty list), and an operator-only token submits
/// nothing.
#[tokio::test(flavor = "multi_thread")]
async fn the_role_matrix_holds_for_workflows() {
    let (_sim, host) = roles_host().await;
    let bearer = |t: &str| format!("Bearer {t}-token-0123456789");
    let (client, operator, deployer) = (bearer("client"), bearer("operator"), bearer("deployer"));
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    let intent = json!({"workflow": "document-delivery", "input": {"title": "Roles", "recipient": "r@example.com", "body": "b"}})
        .to_string()
        .into_bytes();
    let submit = |who: &str, key: &'static str| {
        let who = who.to_string();
        let body = intent.clone();
        let (host, post) = (&host, post.clone());
        async move {
            send(
                host,
                post,
                "/v1/intents",
                &[("authorization", who.as_str()), ("idempotency-key", key)],
                Some(body),
            )
            .await
        }
    };
    for who in [&operator, &deployer] {
        let (got, body) = submit(who, "roles-1").await;
        assert_eq!(got, 403, "{who}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("client"),
            "{body}"
        );
    }
    let (got, created) = submit(&client, "roles-1").await;
    assert_eq!(got, 201, "{created}");
    let id = created["workflow_id"].as_str().unwrap();
    for (path, who, expect) in [
        ("/v1/workflows".to_string(), &deployer, 403),
        (format!("/v1/workflows/{id}"), &deployer, 403),
        (format!("/v1/workflows/{id}/timeline"), &deployer, 403),
        (
            "/v1/intents/roles-1?workflow=document-delivery".to_string(),
            &deployer,
            403,
        ),
        (
            "/v1/intents/roles-1?workflow=document-delivery".to_string(),
            &client,
            200,
        ),
        ("/v1/workflows".to_string(), &client, 200),
        (format!("/v1/workflows/{id}"), &client, 200),
        ("/v1/workflows".to_string(), &operator, 200),
        (format!("/v1/workflows/{id}"), &operator, 200),
    ] {
        let (got, body) = send(&host, get.clone(), &path, &[("authorization", who)], None).await;
        assert_eq!(got, expect, "{who} {path}: {body}");
    }
    let (got, body) = send(
        &host,
        post.clone(),
        &format!("/v1/workflows/{id}/cancel"),
        &[
            ("authorization", deployer.as_str()),
            ("idempotency-key", "c-1"),
        ],
        Some(json!({"reason": "not mine"}).to_string().into_bytes()),
    )
    .await;
    assert_eq!(got, 403, "{body}");
}

/// `docket serve` with `config`, expected to refuse to start: its exit status and log.
fn refused_start(config: &str) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let workflows = crate::host_process::repo_root().join("workflows");
    let path = dir.path().join("docket.toml");
    std::fs::write(
        &path,
        format!(
            "workflows = {:?}\n{config}",
            workflows.display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .args(["--db", &dir.path().join("docket.db").display().to_string()])
        .env("DOCKET_CACHE_DIR", dir.path().join("cache"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

/// The built-in simulator never stands in for a real provider: a host with tokens, or in
/// another environment than development, whose definitions need `http-delivery` without an
/// allowance refuses to start and names the section to add.
#[tokio::test(flavor = "multi_thread")]
async fn the_simulator_never_stands_in_for_a_provider_outside_development() {
    for config in [
        "[[tokens]]\ntoken = \"operator-token-0123456789\"\nsubject = \"ops\"\nrole = \"operator\"\n",
        "environment = \"production\"\n",
    ] {
        let (status, log) = refused_start(config);
        assert!(!status.success(), "{config}: {log}");
        assert!(
            log.contains("no [adapters.http-delivery] section"),
            "{config}: {log}"
        );
        assert!(!log.contains("built-in provider simulator at"), "{log}");
    }
}

/// In development mode the simulator stands in, says so, keeps an operator's own
/// `provider_token`, and has no fault endpoint without `--test-controls`.
#[tokio::test(flavor = "multi_thread")]
async fn the_development_simulator_keeps_a_configured_secret_and_hides_its_faults() {
    let host = HostProcess::start(HostOptions {
        without_test_controls: true,
        config: "[secrets]\nvalues = { provider_token = \"my-own-provider-token\" }\n".into(),
        ..HostOptions::default()
    })
    .await;
    assert!(
        host.log_text().contains("development mode"),
        "{}",
        host.log_text()
    );
    let faults = reqwest::Client::new()
        .post(format!("{}/v1/_faults", host.sim_url))
        .json(&json!({"lose_next": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(faults.status().as_u16(), 404, "no fault endpoint");
    // The simulator took the operator's token rather than replacing it with its own.
    let wf = settled_delivery(&host, "own-token", "Own").await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let with = |token: &str| {
        reqwest::Client::new()
            .get(format!("{}/v1/deliveries?client_reference=x", host.sim_url))
            .bearer_auth(token.to_string())
            .send()
    };
    assert_eq!(
        with("docket-sim-token").await.unwrap().status().as_u16(),
        401
    );
    assert_ne!(
        with("my-own-provider-token")
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    // Its world is the provider's record, not a public page: the token is needed, and it
    // answers only to loopback names.
    let world = |token: Option<&str>, host_header: Option<&str>| {
        let mut r = reqwest::Client::new().get(format!("{}/v1/_world", host.sim_url));
        if let Some(t) = token {
            r = r.bearer_auth(t.to_string());
        }
        if let Some(h) = host_header {
            r = r.header("host", h.to_string());
        }
        r.send()
    };
    assert_eq!(world(None, None).await.unwrap().status().as_u16(), 401);
    assert_eq!(
        world(Some("my-own-provider-token"), None)
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        world(Some("my-own-provider-token"), Some("rebound.example"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        421
    );
}

/// A step claimed on a host without the adapter's allowance (its definition was deployed
/// by another host) is blocked `missing_allowance`; nothing is sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_on_a_host_without_the_allowance_is_blocked() {
    let database = crate::postgres::TestDatabase::create().await;
    let sim = docket::sim::ProviderSim::start(
        docket::sim::SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let admitting = HostProcess::start(HostOptions {
        db: Some(database.url.clone()),
        provider: Some(sim.base_url()),
        config: "host_id = \"admitting\"\n".into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let running = HostProcess::start(HostOptions {
        db: Some(database.url.clone()),
        config: format!("host_id = \"bare\"\n{ROLES}"),
        no_workflow_files: true,
        no_provider: true,
        ..HostOptions::default()
    })
    .await;
    let wf = settled_delivery(&admitting, "bare-1", "Bare").await;
    let deliver = &wf["steps"][2];
    assert_eq!(deliver["state"], "blocked", "{wf:#}");
    assert_eq!(deliver["blocked"]["reason"], "missing_allowance", "{wf:#}");
    assert!(
        deliver["blocked"]["message"]
            .as_str()
            .unwrap()
            .contains("[adapters.http-delivery]"),
        "{wf:#}"
    );
    assert!(sim.sim().world().is_empty(), "nothing was sent");
    drop(running);
    database.drop_now().await;
}

/// What a deployer may do is bounded by the host: uploads over HTTP can be turned off,
/// activation can require a passing `docket adapter verify` verdict, and an allowance can
/// be pinned to component digests so a version uploaded under the name gets none of it.
#[tokio::test(flavor = "multi_thread")]
async fn a_deployer_is_bounded_by_the_hosts_rules() {
    let post = reqwest::Method::POST;
    let v2 = std::fs::read(docket::guests::path("http-delivery-2").unwrap()).unwrap();
    let key = |k: &'static str| vec![("idempotency-key", k)];

    // No uploads over HTTP.
    let host = HostProcess::start(HostOptions {
        config: "api_uploads = false\n".into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let (status, body) = send(
        &host,
        post.clone(),
        "/v1/adapters",
        &key("u-1"),
        Some(v2.clone()),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("api_uploads = false")
    );
    drop(host);

    // Only verified versions are activated.
    let host = HostProcess::start(HostOptions {
        config: "require_verified = true\n".into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let (status, body) = send(
        &host,
        post.clone(),
        "/v1/adapters",
        &key("u-1"),
        Some(v2.clone()),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let activate = json!({"version": "2.0.0"}).to_string().into_bytes();
    let path = "/v1/adapters/http-delivery/activate";
    let (status, body) = send(
        &host,
        post.clone(),
        path,
        &key("a-1"),
        Some(activate.clone()),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("adapter verify"),
        "{body}"
    );
    let db = host.path().join("docket.db").display().to_string();
    let verified = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["adapter", "verify", "http-delivery-2", "--db", &db])
        .output()
        .unwrap();
    assert!(
        verified.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
    let (status, body) = send(
        &host,
        post.clone(),
        path,
        &key("a-2"),
        Some(activate.clone()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    drop(host);

    // An allowance pinned to other digests: the step is blocked, nothing is sent, and the
    // unpinned version cannot be activated.
    let sim = docket::sim::ProviderSim::start(
        docket::sim::SimConfig::new(PROVIDER_TOKEN),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let base = sim.base_url();
    let pinned = format!("sha256:{}", "0".repeat(64));
    let host = HostProcess::start(HostOptions {
        config: format!(
            "[secrets]\nvalues = {{ provider_token = {PROVIDER_TOKEN:?} }}\n[adapters.http-delivery]\nallow_hosts = [{base:?}]\nallow_secrets = [\"provider_token\"]\nsettings = {{ base_url = {base:?} }}\ndigests = [{pinned:?}]\n"
        ),
        ..HostOptions::default()
    })
    .await;
    let wf = settled_delivery(&host, "pinned", "Pinned").await;
    let deliver = &wf["steps"][2];
    assert_eq!(deliver["blocked"]["reason"], "missing_allowance", "{wf:#}");
    assert!(
        deliver["blocked"]["message"]
            .as_str()
            .unwrap()
            .contains("pinned"),
        "{wf:#}"
    );
    assert!(sim.sim().world().is_empty());
    let (status, _) = send(&host, post.clone(), "/v1/adapters", &key("u-1"), Some(v2)).await;
    assert_eq!(status, 201);
    let (status, body) = send(&host, post.clone(), path, &key("a-1"), Some(activate)).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pinned"),
        "{body}"
    );
}

/// Repeated bad tokens from one client are slowed — its further failures are `429`, over
/// the API and at the console's sign-in — while a good token from the same address is
/// answered normally; the console's pages can be framed by no other site.
#[tokio::test(flavor = "multi_thread")]
async fn bad_tokens_are_slowed_and_the_console_cannot_be_framed() {
    let host = HostProcess::start(HostOptions {
        config: ROLES.into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let get = reqwest::Method::GET;
    let r = reqwest::get(format!("{}/console/sign-in", host.url))
        .await
        .unwrap();
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    let good = "Bearer operator-token-0123456789";
    let r = reqwest::Client::new()
        .get(format!("{}/v1/workflows", host.url))
        .header("authorization", good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    for i in 0..10 {
        let (status, body) = send(
            &host,
            get.clone(),
            "/v1/workflows",
            &[("authorization", &format!("Bearer guess-{i:016}"))],
            None,
        )
        .await;
        assert_eq!(status, 401, "{body}");
    }
    // The eleventh failure from this address is slowed...
    let (status, body) = send(
        &host,
        get.clone(),
        "/v1/workflows",
        &[("authorization", "Bearer guess-once-more")],
        None,
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_requests");
    // ...but a valid token from the same address is answered normally: behind one proxy
    // or NAT, nobody's guesses lock the others out.
    let r = reqwest::Client::new()
        .get(format!("{}/v1/workflows", host.url))
        .header("authorization", good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_redirects
        .post(format!("{}/console/sign-in", host.url))
        .form(&[("token", "operator-token-0123456789")])
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_redirection() || r.status().is_success(),
        "{}",
        r.status()
    );
    let r = no_redirects
        .post(format!("{}/console/sign-in", host.url))
        .form(&[("token", "still-guessing-0123456789")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
}

/// SIGHUP reads the configuration again: a rotated token works and the old one is refused,
/// with no restart; a configuration that does not load changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn sighup_rotates_tokens_without_a_restart() {
    let host = HostProcess::start(HostOptions {
        config: ROLES.into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let status_with = |token: &'static str| {
        let url = format!("{}/v1/workflows", host.url);
        async move {
            reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let (old, new) = ("operator-token-0123456789", "rotated-operator-token-0123");
    assert_eq!(status_with(old).await, 200);
    assert_eq!(status_with(new).await, 401);
    let path = host.path().join("docket.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    // A broken file first: refused, and the tokens in force stay.
    std::fs::write(&path, format!("{text}\nthis is not toml")).unwrap();
    host.hangup();
    host.wait_for_log("was not reloaded", std::time::Duration::from_secs(10))
        .await;
    assert_eq!(status_with(old).await, 200);
    std::fs::write(&path, text.replace(old, new)).unwrap();
    host.hangup();
    crate::wait::until(
        "the rotated token to be in force",
        std::time::Duration::from_secs(10),
        || async {
            match (status_with(new).await, status_with(old).await) {
                (200, 401) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// One request over TLS to `port`, trusting only `cert_der`; the raw response.
async fn https(port: u16, cert_der: &[u8], request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(cert_der.to_vec()))
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // The server may close without a TLS close_notify once it answered.
    let _ = tls.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// `[tls]` serves the API and the console over HTTPS to a client that trusts the
/// certificate, and nothing in plain HTTP; over TLS the console's session cookie is
/// `__Host-` and `Secure`.
#[tokio::test(flavor = "multi_thread")]
async fn the_host_serves_https_with_its_certificate() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let host = HostProcess::start(HostOptions {
        config: format!("[tls]\ncert = {cert_path:?}\nkey = {key_path:?}\n"),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let port: u16 = host.url.rsplit(':').next().unwrap().parse().unwrap();
    let der = cert.cert.der().to_vec();
    let answer = https(
        port,
        &der,
        &format!(
            "GET /v1/workflows HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let body = "token=";
    let answer = https(
        port,
        &der,
        &format!(
            "POST /console/sign-in HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    let cookie = answer
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {answer}"));
    assert!(
        cookie.contains("__Host-docket_console=") && cookie.contains("Secure"),
        "{cookie}"
    );
    // The CLI speaks HTTPS to the host: with the host's CA it submits and reads; without
    // it, the certificate is refused and nothing is sent.
    let cli = |args: &[&str], ca: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_docket"));
        command
            .args(args)
            .args(["--server", &format!("https://localhost:{port}")]);
        if ca {
            command.args(["--ca-file", cert_path.to_str().unwrap()]);
        }
        command.env_remove("DOCKET_CA_FILE").output().unwrap()
    };
    let input = r#"{"title": "Over HTTPS", "recipient": "reader@example.com", "body": "Hi"}"#;
    let submit = [
        "submit",
        "--workflow",
        "document-delivery",
        "--key",
        "cli-over-https",
        "--input",
        input,
    ];
    let refused = cli(&submit, false);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(said.contains("cannot reach"), "{said}");
    let out = cli(&submit, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = created["workflow_id"].as_str().unwrap();
    let status = cli(&["status", id], true);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    // Plain HTTP on the TLS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/v1/workflows"))
        .timeout(std::time::Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}

/// The listener holds at most `[limits] max_connections` connections: with one held open,
/// the next waits until it closes.
#[tokio::test(flavor = "multi_thread")]
async fn the_listener_holds_at_most_max_connections() {
    let host = HostProcess::start(HostOptions {
        config: "[limits]\nmax_connections = 1\n".into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let addr = host.url.trim_start_matches("http://").to_string();
    let held = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let waiting = reqwest::Client::new()
        .get(format!("{}/v1/workflows", host.url))
        .timeout(std::time::Duration::from_millis(1500))
        .send()
        .await;
    assert!(waiting.is_err(), "answered past the limit: {waiting:?}");
    drop(held);
    crate::wait::until(
        "the freed slot to serve the next connection",
        std::time::Duration::from_secs(10),
        || async {
            match reqwest::get(format!("{}/v1/workflows", host.url)).await {
                Ok(r) if r.status().is_success() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// The read deadline the slow-client tests configure (`[limits] header_read_timeout` or
/// `body_read_timeout`).
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// How late past [`READ_DEADLINE`] a loaded machine may close a connection.
const DEADLINE_SLACK: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a slow client waits for the server before giving up itself: well past the
/// deadline and its slack, so a server that closes late fails the bound, not this wait.
const CLIENT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(8);

/// That a connection a slow client opened at `opened` was closed because of the read
/// deadline: not before it, and not much after.
#[track_caller]
fn closed_by_the_deadline(what: &str, opened: std::time::Instant) {
    let waited = opened.elapsed();
    assert!(
        waited >= READ_DEADLINE,
        "{what}: closed after {waited:?}, before the {READ_DEADLINE:?} deadline"
    );
    assert!(
        waited < READ_DEADLINE + DEADLINE_SLACK,
        "{what}: closed only after {waited:?}, for a {READ_DEADLINE:?} deadline"
    );
}

/// A client that trickles a request's headers is disconnected after `[limits]
/// header_read_timeout`, and the connection slot it held serves the next client.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_too_slow_with_its_headers_is_disconnected() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = HostProcess::start(HostOptions {
        config: format!(
            "[limits]\nmax_connections = 1\nheader_read_timeout = \"{}ms\"\n",
            READ_DEADLINE.as_millis()
        ),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let addr = host.url.trim_start_matches("http://").to_string();
    // Before the connection exists, so the server's deadline cannot start earlier.
    let opened = std::time::Instant::now();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let trickle = async {
        // A byte every 200 ms: the headers would take 9 s, past the client's patience.
        for byte in b"GET /v1/workflows HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " {
            if slow.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let mut rest = Vec::new();
        // The server closes the connection: the read ends (or fails on a reset).
        let _ = slow.read_to_end(&mut rest).await;
        rest
    };
    let rest = tokio::time::timeout(CLIENT_PATIENCE, trickle)
        .await
        .expect("the server kept a connection whose headers never ended");
    closed_by_the_deadline("headers", opened);
    assert!(
        !String::from_utf8_lossy(&rest).contains("200 OK"),
        "a request without its headers was answered"
    );
    let r = reqwest::get(format!("{}/v1/workflows", host.url))
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

/// SIGHUP puts new secret values and allowances in force for the attempts that start
/// afterwards: once the provider token is rotated in the configuration (and not at the
/// provider), the next delivery is refused as unauthorized; once the allowance is pinned to
/// another digest, the next is blocked.
#[tokio::test(flavor = "multi_thread")]
async fn sighup_rotates_secrets_and_allowances_for_the_next_attempts() {
    let host = HostProcess::start(HostOptions {
        config: "[secrets]\nvalues = { provider_token = \"first-provider-token\" }\n".into(),
        ..HostOptions::default()
    })
    .await;
    let before = settled_delivery(&host, "before-rotation", "Before").await;
    assert_eq!(before["state"], "completed");
    let path = host.path().join("docket.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("first-provider-token", "second-provider-token"),
    )
    .unwrap();
    host.hangup();
    host.wait_for_log("reloaded", std::time::Duration::from_secs(10))
        .await;
    let wf = settled_delivery(&host, "after-rotation", "After").await;
    assert_ne!(wf["state"], "completed", "{wf:#}");
    assert_eq!(
        host.world().await.len(),
        1,
        "the provider refused the new token"
    );

    // The allowances are reloaded too: an allowance for the adapter pinned to another
    // digest covers no loaded version, and the next delivery is blocked before it is sent.
    let pinned = format!("sha256:{}", "0".repeat(64));
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!(
            "{text}\n[adapters.http-delivery]\nallow_hosts = [\"http://127.0.0.1:9\"]\nallow_secrets = [\"provider_token\"]\ndigests = [{pinned:?}]\n"
        ),
    )
    .unwrap();
    host.hangup();
    crate::wait::until(
        "the second reload",
        std::time::Duration::from_secs(10),
        || async {
            match host.log_text().matches("the allowances of").count() {
                n if n >= 2 => Ok(()),
                n => Err(format!("{n} reloads logged")),
            }
        },
    )
    .await;
    let wf = settled_delivery(&host, "after-pinning", "Pinned").await;
    let deliver = &wf["steps"][2];
    assert_eq!(deliver["blocked"]["reason"], "missing_allowance", "{wf:#}");
    assert_eq!(host.world().await.len(), 1, "nothing more was sent");
}

/// An open host (no tokens) keeps its metrics listener on loopback too, and that listener
/// answers only to loopback names, as the API does.
#[tokio::test(flavor = "multi_thread")]
async fn an_open_hosts_metrics_listener_stays_on_loopback_names() {
    let (status, log) = refused_start("metrics_listen = \"0.0.0.0:0\"\n");
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("refusing to serve metrics on 0.0.0.0:0"),
        "{log}"
    );

    let port = crate::host_process::free_port();
    let host = HostProcess::start(HostOptions {
        config: format!("metrics_listen = \"127.0.0.1:{port}\"\n"),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let rebound = client
        .get(&url)
        .header("host", "rebound.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status().as_u16(), 421);
    let own = client.get(&url).send().await.unwrap();
    assert_eq!(own.status().as_u16(), 200);
    drop(host);
}

/// A client that sends a request's headers and then trickles its body — at the console's
/// sign-in, anonymous — gets its error once `[limits] body_read_timeout` has passed, and
/// the one connection slot serves the next client.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_too_slow_to_arrive_frees_its_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = HostProcess::start(HostOptions {
        config: format!(
            "[limits]\nmax_connections = 1\nbody_read_timeout = \"{}ms\"\n",
            READ_DEADLINE.as_millis()
        ),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let addr = host.url.trim_start_matches("http://").to_string();
    for path in ["/console/sign-in", "/v1/intents"] {
        // Before the connection exists, so the server's deadline cannot start earlier.
        let opened = std::time::Instant::now();
        let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
        slow.write_all(
            format!(
                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: slow\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken="
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(CLIENT_PATIENCE, slow.read_to_end(&mut answer)).await;
        assert!(
            read.is_ok(),
            "{path}: the server kept a connection whose body never came"
        );
        closed_by_the_deadline(path, opened);
        let text = String::from_utf8_lossy(&answer);
        assert!(!text.starts_with("HTTP/1.1 2"), "{path}: {text}");
    }
    let r = reqwest::get(format!("{}/v1/workflows", host.url))
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

/// One address holds at most `[limits] max_connections_per_client` connections: a third is
/// closed at once while two are held, and served once one of them closes.
#[tokio::test(flavor = "multi_thread")]
async fn one_client_address_holds_at_most_its_share_of_connections() {
    use tokio::io::AsyncReadExt;
    let host = HostProcess::start(HostOptions {
        config: "[limits]\nmax_connections = 8\nmax_connections_per_client = 2\n".into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let addr = host.url.trim_start_matches("http://").to_string();
    let first = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let _second = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut buf = [0u8; 16];
    let closed = tokio::time::timeout(std::time::Duration::from_secs(5), third.read(&mut buf))
        .await
        .expect("the third connection was neither closed nor served");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    drop(first);
    crate::wait::until(
        "a freed share to serve",
        std::time::Duration::from_secs(5),
        || async {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap();
            match client
                .get(format!("{}/v1/workflows", host.url))
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// In production only verified adapter versions run, on every path: the example version
/// is not activated at start-up without a verdict, a step that needs it is `blocked`
/// (`unverified_component`) with nothing sent, `docket adapter activate` is refused as the
/// API is; once `docket adapter verify` passes, the CLI activates it and a retry delivers.
#[tokio::test(flavor = "multi_thread")]
async fn production_runs_only_verified_adapter_versions_on_every_path() {
    // A production host gets a provider of the test's own, with its allowances.
    let host = HostProcess::start(HostOptions {
        config: "environment = \"production\"\n".into(),
        ..HostOptions::default()
    })
    .await;
    let wf = settled_delivery(&host, "unverified", "Unverified").await;
    let deliver = &wf["steps"][2];
    assert_eq!(deliver["state"], "blocked", "{wf:#}");
    assert_eq!(
        deliver["blocked"]["reason"], "unverified_component",
        "{wf:#}"
    );
    assert!(
        deliver["blocked"]["message"]
            .as_str()
            .unwrap()
            .contains("docket adapter verify"),
        "{wf:#}"
    );
    assert_eq!(
        wf["steps"][1]["state"], "succeeded",
        "handlers are pure: {wf:#}"
    );
    assert!(host.world().await.is_empty());

    let db = host.path().join("docket.db").display().to_string();
    let docket = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = docket(&["adapter", "activate", "http-delivery@1.0.0", "--db", &db]);
    assert!(
        !ok && text.contains("no passing `docket adapter verify` verdict"),
        "{text}"
    );
    let (ok, text) = docket(&["adapter", "verify", "http-delivery", "--db", &db]);
    assert!(ok, "{text}");
    let (ok, text) = docket(&["adapter", "activate", "http-delivery@1.0.0", "--db", &db]);
    assert!(ok, "{text}");
    let id = wf["workflow_id"].as_str().unwrap();
    // The host takes up the activation within its registry poll; then a retry delivers.
    let retried = crate::wait::until(
        "a retry on the verified version",
        std::time::Duration::from_secs(30),
        || async {
            let key = format!("r-{}", rand::random::<u32>());
            let (status, body) = send(
                &host,
                reqwest::Method::POST,
                &format!("/v1/workflows/{id}/steps/deliver/retry"),
                &[("idempotency-key", key.as_str())],
                Some(b"{}".to_vec()),
            )
            .await;
            if status == 200 && body["state"] == "succeeded" {
                return Ok(body);
            }
            Err(format!("{status} {body}"))
        },
    )
    .await;
    assert_eq!(
        retried["receipt"]["evidence_kind"], "response",
        "{retried:#}"
    );
    assert_eq!(host.world().await.len(), 1);
    // The step's page says the contract it ran under was verified, and how.
    let (client, cookie) = crate::course::console_session(&host).await;
    let page = client
        .get(format!("{}/console/workflows/{id}/steps/deliver", host.url))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("Its contract: <strong>every declared claim held</strong>"),
        "{page}"
    );
    // So does the projection, with each claim's verdict.
    let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
    let contract = &wf["steps"][2]["contract"];
    assert_eq!(contract["component"], "http-delivery", "{wf:#}");
    assert_eq!(contract["verification"], "held", "{wf:#}");
    assert_eq!(contract["verdicts"]["idempotency"], "held", "{wf:#}");
    assert!(contract["verified_by"].is_string(), "{wf:#}");
    assert!(
        wf["steps"][1]["contract"].is_null(),
        "a handler has none: {wf:#}"
    );
}

/// A version active when `require_verified` comes into force keeps running and is shown as
/// grandfathered — never as verified — on the console's adapters page and on the page of
/// a step it ran.
#[tokio::test(flavor = "multi_thread")]
async fn versions_active_when_verification_becomes_required_are_grandfathered() {
    let host = HostProcess::start(HostOptions::default()).await;
    let wf = settled_delivery(&host, "before", "Before").await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let id = wf["workflow_id"].as_str().unwrap().to_string();
    let dir = host.kill();
    let host = HostProcess::start(HostOptions {
        dir: Some(dir),
        config: "require_verified = true\n".into(),
        ..HostOptions::default()
    })
    .await;
    // The grandfathered version still runs.
    let wf = settled_delivery(&host, "after", "After").await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let (client, cookie) = crate::course::console_session(&host).await;
    for path in [
        "/console/adapters".to_string(),
        format!("/console/workflows/{id}/steps/deliver"),
    ] {
        let page = client
            .get(format!("{}{path}", host.url))
            .header("cookie", cookie.clone())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            page.contains("<strong>grandfathered</strong> — never verified"),
            "{path}: {page}"
        );
    }
    let (_, wf) = host.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(
        wf["steps"][2]["contract"]["verification"], "grandfathered",
        "{wf:#}"
    );
}

/// Environment-scoped identities: a database records the environment of the first host on
/// it; a host configured for another is refused until told to adopt its own, which every
/// unfinished workflow is told of. Keys are derived in each workflow's own environment for
/// good: one admitted in staging sends staging's key even after the database moved, and
/// one admitted after the move sends another key for the same workflow shape.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_in_another_environment_is_refused_and_an_adopted_one_keeps_each_key() {
    use docket::intent::{WorkflowId, external_idempotency_key};
    const NAMESPACE: &str = "reference-provider";
    // Staging admits an intent and stops before running it.
    let staging = HostProcess::start(HostOptions {
        config: "environment = \"staging\"\n".into(),
        pause_execution: true,
        ..HostOptions::default()
    })
    .await;
    let (status, created) = staging
        .submit(
            "document-delivery",
            "env-1",
            crate::host_process::document("Staged"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let staged = created["workflow_id"].as_str().unwrap().to_string();
    let dir = staging.kill();

    // The database copied to QA: refused, naming both environments and the way on.
    let config = dir.path().join("refused.toml");
    std::fs::write(
        &config,
        format!(
            "workflows = {:?}\nenvironment = \"qa\"\n{}",
            dir.path().join("workflows").display().to_string(),
            crate::host_process::provider_config("http://127.0.0.1:9")
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .args(["--db", &dir.path().join("docket.db").display().to_string()])
        .env("DOCKET_CACHE_DIR", dir.path().join("components"))
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{log}");
    for needle in [
        "serves environment `staging`",
        "configured for `qa`",
        "--adopt-environment",
    ] {
        assert!(log.contains(needle), "no {needle:?} in: {log}");
    }

    // Told to adopt: it starts, the staged workflow is told and runs under staging's key.
    let qa = HostProcess::start(HostOptions {
        config: "environment = \"qa\"\n".into(),
        dir: Some(dir),
        args: vec!["--adopt-environment".into()],
        ..HostOptions::default()
    })
    .await;
    let wf = qa
        .wait_for(
            &staged,
            &["completed", "needs_review", "failed"],
            std::time::Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let timeline = qa.timeline_text(&staged).await;
    assert!(
        timeline.contains("adopted this database for environment `qa` (it was `staging`)"),
        "{timeline}"
    );
    let (status, created) = qa
        .submit(
            "document-delivery",
            "env-2",
            crate::host_process::document("In QA"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let later = created["workflow_id"].as_str().unwrap().to_string();
    let wf = qa
        .wait_for(
            &later,
            &["completed", "needs_review", "failed"],
            std::time::Duration::from_secs(30),
        )
        .await;
    assert_eq!(wf["state"], "completed", "{wf:#}");
    let world = qa.world().await;
    let sent: Vec<&str> = world
        .iter()
        .map(|d| d["client_reference"].as_str().unwrap())
        .collect();
    let key = |id: &str, env: &str| {
        external_idempotency_key(&WorkflowId(id.to_string()), "deliver", NAMESPACE, Some(env))
    };
    assert_eq!(
        sent,
        [key(&staged, "staging"), key(&later, "qa")],
        "{world:#?}"
    );
    assert!(!qa.timeline_text(&later).await.contains("adopted"));
}
