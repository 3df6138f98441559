//! Loading and linking: refusals name what was wrong; caches avoid repeated work.

use crate::common::{grant, load, runtime, settings};
use docket::runtime::{LoadError, Runtime, RuntimeConfig, World};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread")]
async fn an_import_outside_docket_is_refused_at_load_by_name() {
    let rt = runtime();
    let path = docket::guests::path("hostile-import").unwrap();
    let err = rt
        .load_file(path.as_ref())
        .await
        .err()
        .expect("must be refused");
    assert!(
        matches!(&err, LoadError::UnknownImport { import } if import.starts_with("evil:spy/exfiltrate")),
        "{err}"
    );
    assert!(err.to_string().contains("evil:spy/exfiltrate"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_docket_import_that_is_not_granted_is_refused_by_name() {
    let rt = runtime();
    // The hostile adapter imports `secrets` and `wasi:http`; grant neither.
    let hostile = load(&rt, "hostile").await;
    let err = rt
        .prepare(&hostile, &grant(&[], &[]), &settings(&[]))
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(matches!(err, LoadError::ImportNotGranted { .. }), "{text}");
    assert!(
        text.contains("docket:plugin/secrets") || text.contains("wasi:http/"),
        "{text}"
    );

    // Secrets granted, HTTP still not: now the refusal names wasi:http.
    let err = rt
        .prepare(&hostile, &grant(&[], &["api_token"]), &settings(&[]))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("wasi:http/"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn declared_needs_beyond_the_grant_are_refused_before_running() {
    let rt = runtime();
    let delivery = load(&rt, "http-delivery").await;
    let base = settings(&[("base_url", "http://127.0.0.1:9")]);
    // Right secret, wrong host.
    let err = rt
        .prepare(
            &delivery,
            &grant(&["http://127.0.0.1:10"], &["provider_token"]),
            &base,
        )
        .err()
        .expect("refused");
    assert!(matches!(err, LoadError::ExceedsGrant { .. }), "{err}");
    assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
    // Right host, no secret.
    let err = rt
        .prepare(&delivery, &grant(&["http://127.0.0.1:9"], &[]), &base)
        .err()
        .expect("refused");
    assert!(
        err.to_string().contains("provider_token") || err.to_string().contains("secrets"),
        "{err}"
    );
    // No base_url setting at all.
    let err = rt
        .prepare(
            &delivery,
            &grant(&["http://127.0.0.1:9"], &["provider_token"]),
            &settings(&[]),
        )
        .err()
        .expect("refused");
    assert!(err.to_string().contains("base_url"), "{err}");
    // Everything granted.
    rt.prepare(
        &delivery,
        &grant(&["http://127.0.0.1:9"], &["provider_token"]),
        &base,
    )
    .expect("granted");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_bytes_give_clear_errors() {
    let rt = runtime();
    let err = rt.load(b"hello, world").await.err().unwrap();
    assert!(matches!(err, LoadError::InvalidBytes { .. }), "{err}");
    assert!(
        err.to_string().contains("not a WebAssembly binary"),
        "{err}"
    );

    let core_module = b"\0asm\x01\0\0\0";
    let err = rt.load(core_module).await.err().unwrap();
    assert!(matches!(err, LoadError::CoreModule), "{err}");
    assert!(
        err.to_string()
            .contains("core WebAssembly module, not a component"),
        "{err}"
    );

    // A valid, empty component: it implements neither world.
    let empty_component = b"\0asm\x0d\0\x01\0";
    let err = rt.load(empty_component).await.err().unwrap();
    assert!(matches!(err, LoadError::UnknownWorld { .. }), "{err}");

    let mut truncated = std::fs::read(docket::guests::path("noop").unwrap()).unwrap();
    truncated.truncate(truncated.len() / 2);
    let err = rt.load(&truncated).await.err().unwrap();
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_component_of_the_wrong_world_is_named() {
    let rt = runtime();
    let handler = load(&rt, "render-document").await;
    let err = handler.expect_world(World::Adapter).err().unwrap();
    let text = err.to_string();
    assert!(
        text.contains("`adapter` world") && text.contains("`handler` world"),
        "{text}"
    );
    handler.expect_world(World::Handler).unwrap();
    load(&rt, "noop")
        .await
        .expect_world(World::Adapter)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn compiled_components_are_cached_on_disk_and_linkings_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let path = docket::guests::path("noop").unwrap();
    let first = Runtime::new(config.clone()).unwrap();
    let a = first.load_file(path.as_ref()).await.unwrap();
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let hex = a.digest.strip_prefix("sha256:").unwrap();
    assert!(
        files[0]
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(hex)
    );
    let written = std::fs::metadata(&files[0]).unwrap().modified().unwrap();

    // A restarted host loads the compiled artifact instead of compiling again.
    let second = Runtime::new(config).unwrap();
    let b = second.load_file(path.as_ref()).await.unwrap();
    assert_eq!(a.digest, b.digest);
    assert_eq!(
        std::fs::metadata(&files[0]).unwrap().modified().unwrap(),
        written
    );

    let g = grant(&[], &[]);
    let p1 = second.prepare(&b, &g, &settings(&[])).unwrap();
    let p2 = second.prepare(&b, &g, &settings(&[])).unwrap();
    assert!(
        Arc::ptr_eq(&p1, &p2),
        "InstancePre is cached per (digest, grant)"
    );
}
