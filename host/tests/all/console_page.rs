//! The console's pages served in-process: the workflow page of a long story (50 attempts,
//! more than 200 timeline events) shows the latest 50 events with a link to older ones and
//! folds the attempts; the list puts the review queue first, filters and paginates;
//! sessions live in the database, so every host on it knows them.

// Shared with the console's render benchmark, which includes it from there.
#[path = "../console_page/fixture.rs"]
mod fixture;

use tower::ServiceExt;

#[tokio::test(flavor = "multi_thread")]
async fn a_long_story_shows_the_latest_fifty_events_and_folds_its_attempts() {
    let (app, id, cookie, _dir) = fixture::long_story().await;
    let path = format!("/console/workflows/{}", id.as_str());
    let (status, page) = fixture::get(&app, &cookie, &path).await;
    assert_eq!(status, 200, "{page}");
    let rows = page.matches("<tr class=\"event ").count();
    assert_eq!(rows, 50, "the page shows {rows} events");

    // The total is over 200; the first shown is the 50th from the end.
    let (_, all) = fixture::get(
        &app,
        &cookie,
        &format!("/v1/workflows/{}/timeline?limit=500", id.as_str()),
    )
    .await;
    let all: serde_json::Value = serde_json::from_str(&all).unwrap();
    let seqs: Vec<u64> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.len() > 200, "only {} events", seqs.len());
    let first_shown = seqs[seqs.len() - 50];
    assert!(page.contains(&format!(">{first_shown}</td>")));
    assert!(!page.contains(&format!(">{}</td>", first_shown - 1)));

    // A link to the older events, which pages back.
    let older = format!("{path}?events_before={first_shown}");
    assert!(
        page.contains(&older.replace('&', "&amp;")),
        "no link to older events"
    );
    let (status, older_page) = fixture::get(&app, &cookie, &older).await;
    assert_eq!(status, 200);
    assert_eq!(older_page.matches("<tr class=\"event ").count(), 50);
    assert!(older_page.contains(&format!(">{}</td>", first_shown - 1)));

    // Attempts are folded: one closed <details> per step, holding all 50.
    assert!(
        page.contains(
            "<details class=\"attempts\"><summary>Attempts of Keep trying (50)</summary>"
        ),
        "attempts are not folded"
    );
    assert!(!page.contains("<details class=\"attempts\" open"));
    assert_eq!(page.matches("busy (attempt ").count(), 50);
    // Milestones in words, and the next action a person must take.
    let milestones = page
        .split("<h2>Milestones</h2>")
        .nth(1)
        .and_then(|rest| rest.split("<h2>").next())
        .unwrap();
    assert!(
        milestones.contains("Work done") && !milestones.contains('%'),
        "{milestones}"
    );
    assert!(page.contains("A person must decide"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_list_puts_review_first_then_filters_and_pages_newest_first() {
    let (app, stuck, cookie, _dir) = fixture::long_story_and(60).await;
    let ids = |page: &str| -> Vec<String> {
        page.split("<a href=\"/console/workflows/wf_")
            .skip(1)
            .map(|rest| format!("wf_{}", rest.split('"').next().unwrap()))
            .collect()
    };

    // Review first, then everything newest first, 50 to a page.
    let (status, page) = fixture::get(&app, &cookie, "/console/workflows").await;
    assert_eq!(status, 200);
    let review_at = page.find("Needs review (1)").expect("no review queue");
    let all_at = page.find("<h1>Workflows</h1>").unwrap();
    assert!(review_at < all_at);
    let listed = ids(&page[all_at..]);
    assert_eq!(listed.len(), 50);
    let mut sorted = listed.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(listed, sorted, "not newest first");
    assert!(
        !listed.contains(&stuck.as_str().to_string()),
        "the oldest is on page 2"
    );
    let next = page
        .split("href=\"")
        .find(|h| h.starts_with("/console/workflows?cursor="))
        .and_then(|h| h.split('"').next())
        .expect("no link to older workflows")
        .replace("&amp;", "&");
    let (_, second) = fixture::get(&app, &cookie, &next).await;
    let rest = ids(&second[second.find("<h1>Workflows</h1>").unwrap()..]);
    assert_eq!(rest.len(), 11, "60 fresh and the long story: {rest:?}");
    assert_eq!(rest.last().unwrap(), stuck.as_str());
    assert!(!second.contains("Older workflows"));

    // By state, by definition, by age.
    let (_, review) = fixture::get(&app, &cookie, "/console/workflows?state=needs_review").await;
    let body = &review[review.find("<h1>Workflows</h1>").unwrap()..];
    assert_eq!(ids(body), [stuck.as_str().to_string()]);
    let (_, none) = fixture::get(&app, &cookie, "/console/workflows?workflow=other").await;
    assert!(none.contains("No workflows match."));
    let (_, recent) = fixture::get(&app, &cookie, "/console/workflows?age=1h").await;
    let body = &recent[recent.find("<h1>Workflows</h1>").unwrap()..];
    assert!(
        !body.contains(stuck.as_str()),
        "two hours old is not within the last hour"
    );
    let (status, bad) = fixture::get(&app, &cookie, "/console/workflows?state=sleeping").await;
    assert_eq!(status, 400);
    assert!(bad.contains("sleeping"), "the refusal names the bad value");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_host_on_the_database_knows_a_session_until_it_ends() {
    let (a, _, cookie, dir) = fixture::long_story().await;
    let b = another_host(dir.path(), docket::access::Auth::open()).await;
    // Signed in on one host, known to another (or to the same one after a restart).
    let (status, page) = fixture::get(&b, &cookie, "/console/workflows").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Keep trying") || page.contains("persistent"));
    // No cookie, or one that was never issued: to the sign-in page.
    let (status, _) = fixture::get(&b, "", "/console/workflows").await;
    assert_eq!(status, 303);
    let (status, _) = fixture::get(&b, "docket_console=forged", "/console/workflows").await;
    assert_eq!(status, 303);
    // The database holds the cookie's digest, never the cookie.
    let value = cookie.split_once('=').unwrap().1;
    let bytes = std::fs::read(dir.path().join("docket.db")).unwrap();
    let wal = std::fs::read(dir.path().join("docket.db-wal")).unwrap_or_default();
    for file in [&bytes, &wal] {
        assert!(
            !file.windows(value.len()).any(|w| w == value.as_bytes()),
            "the cookie's value is stored"
        );
    }

    // A host whose tokens no longer make this subject an operator does not honour it.
    let strict = another_host(
        dir.path(),
        docket::access::Auth::with_tokens([(
            "op-token".to_string(),
            docket::access::Principal::new("alice", docket::access::Role::Operator),
        )]),
    )
    .await;
    let (status, _) = fixture::get(&strict, &cookie, "/console/workflows").await;
    assert_eq!(status, 303);

    // Signing out on one host ends the session on all of them.
    let (status, location) = post(&a, &cookie, "/console/sign-out", "").await;
    assert_eq!((status, location.as_str()), (303, "/console/sign-in"));
    for host in [&a, &b] {
        let (status, _) = fixture::get(host, &cookie, "/console/workflows").await;
        assert_eq!(status, 303);
    }
}

/// Another host on the database in `dir`: its own store, definitions and console, with
/// the tokens of `auth`.
pub async fn another_host(dir: &std::path::Path, auth: docket::access::Auth) -> axum::Router {
    let store = docket::store::sqlite::SqliteStore::open(&dir.join("docket.db"))
        .await
        .unwrap();
    let deployments = std::sync::Arc::new(docket::catalog::Deployments::new(store.clone()));
    let mut ctx =
        docket::context::Context::new(store, deployments, docket::clock::SystemClock::new());
    ctx.test_controls = false;
    ctx.auth = auth;
    let ctx = std::sync::Arc::new(ctx);
    docket::console::router(ctx.clone()).merge(docket::api::shared_router(ctx))
}

/// `POST path` with the session cookie and a form body; returns status and `Location`.
pub async fn post(app: &axum::Router, cookie: &str, path: &str, form: &str) -> (u16, String) {
    let r = app
        .clone()
        .oneshot(
            axum::http::Request::post(path)
                .header(axum::http::header::COOKIE, cookie)
                .header(
                    axum::http::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(axum::body::Body::from(form.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    let location = r
        .headers()
        .get(axum::http::header::LOCATION)
        .map(|l| l.to_str().unwrap().to_string())
        .unwrap_or_default();
    (r.status().as_u16(), location)
}
